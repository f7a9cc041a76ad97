//! A paused leader's write that lands late, on the real control plane (kube-apiserver
//! v1.37, etcd): two controller replicas on one Lease, the leader's link to the apiserver
//! through a delaying proxy. The leader decides an address for Service `s` and sends the
//! status write; the proxy holds it on the wire while the leader's term ends and the
//! standby takes over, someone changes `s`, and the new leader gives the old leader's
//! address to another Service. Released, the old write reaches the apiserver and is
//! refused (409, in the audit log): no write of the old term lands after the new term's
//! first, the stale address never lands on `s`, and after churn no address is held twice.
//!
//! Needs root, `target/kube/current/ferrolb-kube` and the debug `ferrolb-controller`.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test fails by panicking

use std::collections::BTreeMap;
use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use ferrolb_cluster::{Cluster, ClusterConfig, ferrolb};
use ferrolb_lab::addressing::node_ip as v4;
use ferrolb_lab::kubeapi::{Objects, ingress_ips as ingress};
use ferrolb_lab::netns::Netns;
use ferrolb_lab::process::{Proc, strip_ansi};
use ferrolb_lab::{Lab, LabConfig, wait};
use k8s_openapi::api::core::v1::Service;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

const T: Duration = Duration::from_secs(60);
/// Short, so that the takeover comes within seconds (renew deadline 4 s).
const LEASE: &str = "6s";
const POOL: &str = "198.51.100.0/29";
/// The pool's first address: what the old leader picks for `s`, and the new one for `t`.
const FIRST: &str = "198.51.100.0";
/// What `s` asks for once changed.
const ASKED: &str = "198.51.100.5";

// ---------------------------------------------------------------------------------------
// The delaying link.

/// A TCP proxy in front of the apiserver that can hold what its clients send, as a slow
/// link or a paused sender would. It cannot read the TLS it carries, so it holds by TLS
/// record: a new connection's handshake goes through (ClientHello, then the client's
/// Finished, its first `application_data` record in TLS 1.3) and only the records after
/// it are held. Held bytes are read from the client at once — they left it — and reach
/// the apiserver on release even if the client has gone, whose answer is then drained.
struct DelayingLink {
    addr: SocketAddr,
    held: Arc<AtomicBool>,
}

/// TLS record content types: alert, and application data (in TLS 1.3 also the
/// encrypted handshake and alerts).
const ALERT: u8 = 21;
const APPLICATION_DATA: u8 = 23;
const POLL: Duration = Duration::from_millis(20);
/// How long the answer to what a gone client sent is waited for.
const DRAIN: Duration = Duration::from_secs(10);

impl DelayingLink {
    /// Listens on 127.0.0.1 (a name the apiserver's certificate holds) inside `ns`, and
    /// connects to `upstream` from inside `ns`.
    fn start(ns: &Netns, upstream: SocketAddr) -> Self {
        let listener = ns.run(|| TcpListener::bind("127.0.0.1:0")).unwrap().unwrap();
        let addr = listener.local_addr().unwrap();
        let held = Arc::new(AtomicBool::new(false));
        let (ns, flag) = (ns.clone(), held.clone());
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                let server = ns.run(move || TcpStream::connect(upstream)).unwrap();
                if let Ok(server) = server {
                    let held = flag.clone();
                    std::thread::spawn(move || splice(client, server, &held));
                }
            }
        });
        DelayingLink { addr, held }
    }

    fn hold(&self, held: bool) {
        self.held.store(held, Ordering::SeqCst);
    }
}

/// Client → server with holding; server → client plain, on a second thread. Bytes go
/// through in whole TLS records, so that what is held always starts at a record.
fn splice(client: TcpStream, mut server: TcpStream, held: &AtomicBool) {
    let client_gone = Arc::new(AtomicBool::new(false));
    let down = {
        let (from, to, gone) =
            (server.try_clone().unwrap(), client.try_clone().unwrap(), client_gone.clone());
        std::thread::spawn(move || downstream(from, to, &gone))
    };
    let mut client = client;
    client.set_read_timeout(Some(POLL)).unwrap();
    let (mut inbox, mut through_handshake) = (Vec::<u8>::new(), false);
    let mut buf = [0u8; 16 * 1024];
    loop {
        let open = match client.read(&mut buf) {
            Ok(0) => false,
            Ok(n) => {
                inbox.extend_from_slice(&buf[..n]);
                true
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => true,
            Err(_) => false,
        };
        let whole = records(&inbox);
        let end = if !through_handshake {
            // The handshake goes through as it comes, held or not.
            match whole.iter().find(|r| r.0 == APPLICATION_DATA) {
                Some(finished) => {
                    through_handshake = true;
                    finished.2
                }
                None => whole.last().map_or(0, |r| r.2),
            }
        } else if !held.load(Ordering::SeqCst) {
            whole.last().map_or(0, |r| r.2)
        } else {
            0
        };
        if server.write_all(&inbox[..end]).is_err() {
            break;
        }
        inbox.drain(..end);
        if !open {
            client_gone.store(true, Ordering::SeqCst);
            while held.load(Ordering::SeqCst) {
                std::thread::sleep(POLL);
            }
            // What the client sent as it closed is not sent on: a paused sender never
            // sent it, and the apiserver cancels a request whose client said goodbye.
            let mut whole = records(&inbox);
            while whole.last().is_some_and(|r| is_close_notify(r.0, r.2 - r.1)) {
                whole.pop();
            }
            let _ = server.write_all(&inbox[..whole.last().map_or(0, |r| r.2)]);
            break;
        }
    }
    // The server side stays open until the apiserver has answered: closing it first
    // could cancel the request the client sent before it went.
    let _ = down.join();
    let _ = server.shutdown(Shutdown::Both);
}

/// Whether a record of this type and size (header included) is a TLS alert such as
/// close_notify: in TLS 1.3 an encrypted alert is an application_data record of 24 bytes
/// (2 bytes of alert, 1 of inner type, a 16-byte tag), in TLS 1.2 an alert record.
fn is_close_notify(kind: u8, size: usize) -> bool {
    kind == ALERT || (kind == APPLICATION_DATA && size == 5 + 2 + 1 + 16)
}

/// Copies the apiserver's answers to the client; once the client is gone, drains them for
/// up to [`DRAIN`] so that its last request is carried out.
fn downstream(mut from: TcpStream, mut to: TcpStream, client_gone: &AtomicBool) {
    from.set_read_timeout(Some(POLL)).unwrap();
    let mut buf = [0u8; 16 * 1024];
    let mut gone_since: Option<Instant> = None;
    loop {
        if client_gone.load(Ordering::SeqCst) {
            let since = *gone_since.get_or_insert_with(Instant::now);
            if since.elapsed() > DRAIN {
                break;
            }
        }
        match from.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                // A gone client's answer is read and dropped.
                let _ = to.write_all(&buf[..n]);
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(_) => break,
        }
    }
    let _ = to.shutdown(Shutdown::Both);
}

/// The whole TLS records at the start of `bytes`: (content type, start, end).
fn records(bytes: &[u8]) -> Vec<(u8, usize, usize)> {
    let mut out = Vec::new();
    let mut at = 0;
    while bytes.len() >= at + 5 {
        let len = usize::from(u16::from_be_bytes([bytes[at + 3], bytes[at + 4]]));
        let end = at + 5 + len;
        if bytes.len() < end {
            break;
        }
        out.push((bytes[at], at, end));
        at = end;
    }
    out
}

// ---------------------------------------------------------------------------------------
// What the apiserver's audit log says about the Service writes.

/// One completed write to a Service, from the audit log.
#[derive(Debug, Clone)]
struct ServiceWrite {
    source: String,
    verb: String,
    resource: String,
    name: String,
    code: u16,
    received_us: i64,
    completed_us: i64,
}

/// The controller ServiceAccount's completed writes to Services, from the raw audit log
/// (the testbed's reader does not keep `sourceIPs`, which tell the two replicas apart).
fn service_writes(cluster: &Cluster) -> Vec<ServiceWrite> {
    let user = format!("system:serviceaccount:{}:{}", ferrolb::NAMESPACE, ferrolb::CONTROLLER_SA);
    let text = std::fs::read_to_string(cluster.paths().audit_log(1)).unwrap_or_default();
    let ts = |v: &Value| v.as_str().and_then(ferrolb_cluster::audit::rfc3339_us).unwrap_or(0);
    text.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["stage"] == "ResponseComplete" && e["user"]["username"] == user.as_str())
        .filter(|e| e["objectRef"]["resource"] == "services")
        .filter(|e| matches!(e["verb"].as_str(), Some("patch" | "update" | "create" | "delete")))
        .map(|e| ServiceWrite {
            source: e["sourceIPs"][0].as_str().unwrap_or_default().to_owned(),
            verb: e["verb"].as_str().unwrap_or_default().to_owned(),
            resource: match e["objectRef"]["subresource"].as_str() {
                Some(sub) => format!("services/{sub}"),
                None => "services".into(),
            },
            name: e["objectRef"]["name"].as_str().unwrap_or_default().to_owned(),
            code: e["responseStatus"]["code"].as_u64().and_then(|c| u16::try_from(c).ok()).unwrap_or(0),
            received_us: ts(&e["requestReceivedTimestamp"]),
            completed_us: ts(&e["stageTimestamp"]),
        })
        .collect()
}

// ---------------------------------------------------------------------------------------

fn logs(p: &Proc) -> String {
    strip_ansi(&p.logs())
}

fn addresses_of(cluster: &Cluster, services: &Api<Service>, name: &str) -> Vec<String> {
    cluster.block_on(services.get(name)).map(|s| ingress(&s)).unwrap_or_default()
}

fn wait_addresses(cluster: &Cluster, services: &Api<Service>, name: &str) -> Vec<String> {
    wait::until(&format!("an address for Service {name}"), T, || {
        let ips = addresses_of(cluster, services, name);
        Ok((!ips.is_empty()).then_some(ips))
    })
    .unwrap()
}

fn lb_service(name: &str) -> Service {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"type": "LoadBalancer", "ports": [{"port": 80, "protocol": "TCP"}]},
    }))
    .unwrap()
}

#[test]
fn a_paused_leaders_write_that_lands_after_the_new_leaders_is_refused() {
    let lab = Lab::up(LabConfig::nodes(2)).unwrap();
    let cluster = Cluster::start(&lab, &ClusterConfig::default()).unwrap();
    ferrolb::install(&cluster, "l2").unwrap();
    cluster
        .apply(&json!({
            "apiVersion": "ferrolb.io/v1alpha1", "kind": "IPAddressPool",
            "metadata": {"name": "lan"}, "spec": {"addresses": [POOL]},
        }))
        .unwrap();
    let c = cluster.client();
    let services: Api<Service> = Api::namespaced(c.clone(), "default");

    // The old leader on node 1 talks through the link; the new one on node 2 directly.
    let upstream: SocketAddr = cluster.lab_server(1).trim_start_matches("https://").parse().unwrap();
    let link = DelayingLink::start(lab.node(1), upstream);
    let through_link = cluster
        .token_kubeconfig_for(ferrolb::NAMESPACE, ferrolb::CONTROLLER_SA, &format!("https://{}", link.addr))
        .unwrap();
    let bin = ferrolb_lab::binary::workspace("ferrolb-controller", "debug").unwrap();
    let flags = ["--lease-duration", LEASE];
    // kube_client=debug: the client logs each request as it sends it ("requesting").
    let spawn = ferrolb::controller_spawn(&bin, &through_link, 1, "ctrl-a", &flags)
        .env("RUST_LOG", "info,ferrolb_controller=debug,kube_client=debug");
    let old = lab.spawn(lab.node(1), spawn).unwrap();
    wait::until("ctrl-a leads", T, || Ok(logs(&old).contains("state rebuilt from the API").then_some(())))
        .unwrap();
    let new = ferrolb::start_controller(&lab, &cluster, 2, "ctrl-b", &flags).unwrap();
    wait::until("ctrl-b stands by", T, || {
        Ok(logs(&new).contains("waiting for the leader lease").then_some(()))
    })
    .unwrap();

    link.hold(true);
    cluster.block_on(services.create(&PostParams::default(), &lb_service("s"))).unwrap();
    wait::until("ctrl-a sends its status write for s", T, || {
        let sent = logs(&old)
            .lines()
            .any(|l| l.contains("requesting") && l.contains("PATCH") && l.contains("/services/s/status"));
        Ok(sent.then_some(()))
    })
    .unwrap();
    let wants = json!({"spec": {"loadBalancerIP": ASKED}});
    cluster.block_on(services.patch("s", &PatchParams::default(), &Patch::Merge(&wants))).unwrap();
    wait::until("ctrl-b takes over", T, || Ok(logs(&new).contains("became leader").then_some(()))).unwrap();
    wait::until("ctrl-b gives s the address it asks for", T, || {
        Ok((addresses_of(&cluster, &services, "s") == [ASKED]).then_some(()))
    })
    .unwrap();
    cluster.block_on(services.create(&PostParams::default(), &lb_service("t"))).unwrap();
    assert_eq!(
        wait_addresses(&cluster, &services, "t"),
        [FIRST],
        "the address ctrl-a picked for s is t's now"
    );

    link.hold(false);
    let (old_ip, new_ip) = (v4(1).to_string(), v4(2).to_string());
    let stale = wait::until("ctrl-a's held status write reaches the apiserver", T, || {
        Ok(service_writes(&cluster)
            .into_iter()
            .find(|w| w.source == old_ip && w.resource == "services/status" && w.name == "s"))
    })
    .unwrap();
    let writes = service_writes(&cluster);
    let first_new = writes.iter().filter(|w| w.source == new_ip).map(|w| w.received_us).min().unwrap();
    println!("ctrl-a's held write: {stale:?}; ctrl-b's first Service write at {first_new}");
    assert!(stale.received_us > first_new, "the held write did not reach the apiserver after ctrl-b's first");
    assert_eq!(stale.code, 409, "ctrl-a's write, decided from s before ctrl-b wrote it, was not refused");
    let late: Vec<&ServiceWrite> = writes
        .iter()
        .filter(|w| w.source == old_ip && (200..300).contains(&w.code) && w.completed_us > first_new)
        .collect();
    assert!(late.is_empty(), "writes of the old term landed after the new term's first: {late:#?}");
    assert_eq!(addresses_of(&cluster, &services, "s"), [ASKED]);

    // Churn under the new leader; then every address is held once.
    for i in 0..3 {
        cluster.block_on(services.create(&PostParams::default(), &lb_service(&format!("c{i}")))).unwrap();
    }
    cluster.block_on(services.delete("t", &DeleteParams::default())).unwrap();
    cluster.block_on(services.create(&PostParams::default(), &lb_service("c3"))).unwrap();
    for i in 0..4 {
        wait_addresses(&cluster, &services, &format!("c{i}"));
    }
    let mut holders = BTreeMap::new();
    for s in cluster.block_on(services.list(&ListParams::default())).unwrap().items {
        for ip in ingress(&s) {
            let name = s.metadata.name.clone().unwrap();
            if let Some(other) = holders.insert(ip.clone(), name.clone()) {
                panic!("{ip} is held by both {other} and {name}");
            }
        }
    }
    assert_eq!(holders.len(), 5, "s and c0..c3, one address each: {holders:?}");
    // Nobody but the new leader wrote Services during the churn: a refusal of one of its
    // writes would be one decided from a version its own next write had superseded.
    let writes = service_writes(&cluster);
    let verbs: Vec<String> =
        writes.iter().map(|w| format!("{} {} {} {}", w.source, w.verb, w.name, w.code)).collect();
    println!("Service writes of the controllers: {verbs:#?}");
    assert!(!writes.iter().any(|w| w.source == new_ip && w.code == 409), "{verbs:#?}");
    drop((old, new));
}
