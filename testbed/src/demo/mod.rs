//! The demo: a lab with a real router and a real Kubernetes control plane; ferrolb
//! installed from `manifests/` with kubectl, its controller assigning the Services'
//! addresses, its speakers announcing them into the router and on the LAN, a client
//! reaching them, the L2 owner killed — narrated as a timeline.

pub mod kubelets;

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use ferrolb_bench::failover;
use ferrolb_cluster::{Cluster, ClusterConfig, ferrolb};
use ferrolb_lab::client::{self, HttpServer, ProbeStream};
use ferrolb_lab::routers::{self, Bird, Router, RouterSpec};
use ferrolb_lab::speaker::yaml;
use ferrolb_lab::{Error, Lab, LabConfig, addressing, wait};

/// Prints `[  1.234s] message` lines relative to the demo's start.
#[derive(Debug)]
pub struct Timeline {
    start: Instant,
}

impl Timeline {
    /// Starts the clock.
    pub fn new() -> Self {
        Timeline { start: Instant::now() }
    }

    /// Prints one event.
    pub fn say(&self, msg: impl AsRef<str>) {
        println!("[{:>7.3}s] {}", self.start.elapsed().as_secs_f64(), msg.as_ref());
    }
}

impl Default for Timeline {
    fn default() -> Self {
        Self::new()
    }
}

/// Runs `kubectl ferrolb ARGS` (the plugin's debug build) against the cluster.
pub fn kubectl_ferrolb(cluster: &Cluster, args: &[&str]) -> Result<String, Error> {
    let plugin = ferrolb_lab::binary::workspace("kubectl-ferrolb", "debug")?;
    let mut cmd = std::process::Command::new(&plugin);
    cmd.arg("--kubeconfig").arg(cluster.kubeconfig()).args(args);
    ferrolb_lab::netns::run(&mut cmd)
}

/// The configuration an operator applies after the manifests: a BGP pool announced to
/// the router over IPv4 and IPv6 sessions, an L2 pool answered by ARP/NDP.
fn configuration() -> String {
    let peer = |name: &str, addr: IpAddr, family: &str| {
        yaml::peer(
            name,
            addressing::NODE_ASN,
            addressing::ROUTER_ASN,
            addr,
            &[&format!("addressFamilies: [{family}]")],
        )
    };
    let lan = [
        format!("{}-{}", addressing::L2_POOL_V4.0, addressing::L2_POOL_V4.1),
        format!("{}-{}", addressing::L2_POOL_V6.0, addressing::L2_POOL_V6.1),
    ];
    let lan: Vec<&str> = lan.iter().map(String::as_str).collect();
    yaml::stream(&[
        yaml::pool("public", &[addressing::BGP_POOL_V4, "2001:db8:3::/120"]),
        yaml::pool("lan", &lan),
        peer("router-v4", addressing::ROUTER_V4.into(), "ipv4-unicast"),
        peer("router-v6", addressing::ROUTER_V6.into(), "ipv6-unicast"),
        yaml::bgp_advertisement("public", &["ipAddressPools: [public]"]),
        yaml::l2_advertisement("lan", &["ipAddressPools: [lan]"]),
    ])
}

/// The user's workload: two dual-stack LoadBalancer Services asking for their
/// addresses, and a pod behind them on each node (the testbed is their kubelet).
fn workload(bgp: [IpAddr; 2], l2: [IpAddr; 2]) -> String {
    let service = |name: &str, pool: &str, ips: [IpAddr; 2]| {
        format!(
            "apiVersion: v1\nkind: Service\nmetadata:\n  name: {name}\n  namespace: default\n  annotations:\n    \
             ferrolb.io/address-pool: {pool}\n    ferrolb.io/loadBalancerIPs: \"{},{}\"\nspec:\n  type: LoadBalancer\n  \
             ipFamilyPolicy: RequireDualStack\n  selector: {{app: web}}\n  ports: [{{port: 80, protocol: TCP}}]\n",
            ips[0], ips[1]
        )
    };
    let pod = |i: usize| {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: web-{i}, namespace: default, labels: {{app: web}}}}\nspec:\n  \
             nodeName: {}\n  containers: [{{name: web, image: example.invalid/web}}]\n",
            addressing::node_name(i)
        )
    };
    yaml::stream(&[service("web-bgp", "public", bgp), service("web-l2", "lan", l2), pod(1), pod(2)])
}

/// Runs the demo; returns an error (and tears the lab down) if any step fails.
pub fn run() -> Result<(), Error> {
    let t = Timeline::new();
    let lab = Lab::up(LabConfig::nodes(2))?;
    t.say(format!(
        "lab {} up: router r1, node1, node2, client (addresses in testbed/lab/src/addressing.rs)",
        lab.id()
    ));
    let bird = Bird::start(&lab, &RouterSpec::default())?;
    t.say("BIRD 2 listening on r1 for neighbours in 192.0.2.0/24 and 2001:db8::/64 (AS 64512)");
    let cluster = Cluster::start(&lab, &ClusterConfig::default())?;
    let version: serde_json::Value = serde_json::from_str(&cluster.kubectl(&["get", "--raw", "/version"])?)
        .map_err(|e| Error::Parse(format!("/version: {e}")))?;
    let version = version["gitVersion"].as_str().unwrap_or("?").to_string();
    t.say(format!(
        "real control plane up: etcd, kube-apiserver {version} on node1, kube-controller-manager; \
         node1 and node2 registered"
    ));
    ferrolb_cluster::helm::install(&cluster, &[])?;
    t.say(
        "helm install ferrolb manifests/helm/ferrolb --namespace ferrolb-system --create-namespace: \
         CRDs Established, RBAC, the admission policy",
    );
    cluster.kubectl_stdin(&["apply", "-f", "-"], &configuration())?;
    t.say("kubectl apply: IPAddressPools public (BGP) and lan (L2), BGPPeers router-v4 and router-v6");

    let (vip4, vip6) = (addressing::bgp_vip_v4(10), addressing::bgp_vip_v6(0x10));
    let l2v4: IpAddr = addressing::L2_POOL_V4.0.parse().map_err(|e| Error::Parse(format!("{e}")))?;
    // An IPv6 address with the same elected owner, so the failover moves both.
    let names = [addressing::node_name(1), addressing::node_name(2)];
    let elect = |v: IpAddr| ferrolb_proto::election::owner(v, names.iter().map(String::as_str));
    let l2v6 = (0x200..=0x250)
        .map(|n| IpAddr::from([0x2001, 0xdb8, 0, 0, 0, 0, 0, n]))
        .find(|v| elect(*v) == elect(l2v4))
        .ok_or_else(|| Error::Parse("no IPv6 address of the L2 pool shares the IPv4 owner".into()))?;
    let mut servers = Vec::new();
    for i in 1..=2 {
        let node = lab.node(i);
        // As kube-proxy would: every node accepts every service address.
        for v in [vip4, vip6, l2v4, l2v6] {
            lab.add_vip_on_lo(node, v)?;
        }
        for v in [vip4, l2v4] {
            servers.push(HttpServer::start(node, SocketAddr::new(v, 80), &format!("hello from node{i}\n"))?);
        }
    }
    let _controller = ferrolb::start_controller(&lab, &cluster, 1, "ferrolb-controller", &[])?;
    let mut speakers = Vec::new();
    for i in 1..=2 {
        speakers.push(Some(ferrolb::start_speaker(&lab, &cluster, i, "ferrolb-speaker", None)?));
    }
    t.say("ferrolb-controller on node1, ferrolb-speaker on node1 and node2, each with its ServiceAccount's token");
    cluster.kubectl_stdin(&["apply", "-f", "-"], &workload([vip4, vip6], [l2v4, l2v6]))?;
    t.say("kubectl apply: Services web-bgp and web-l2 (dual-stack), a pod of app=web on each node");
    let addressed = |svc: &str| {
        let ips = cluster
            .kubectl(&["get", "svc", svc, "-o", "jsonpath={.status.loadBalancer.ingress[*].ip}"])
            .unwrap_or_default();
        Ok((ips.split_whitespace().count() == 2).then_some(ips))
    };
    for svc in ["web-bgp", "web-l2"] {
        let ips = wait::until(&format!("{svc} addressed"), Duration::from_secs(30), || addressed(svc))?;
        t.say(format!("ferrolb-controller assigned {svc}: {ips}"));
    }
    println!("\n--- kubectl get svc -o wide ---\n{}", cluster.kubectl(&["get", "svc", "-o", "wide"])?);

    let peers: Vec<IpAddr> =
        (1..=2).flat_map(|i| [addressing::node_v4(i).into(), addressing::node_v6(i).into()]).collect();
    routers::wait_established(&bird, &peers, Duration::from_secs(30))?;
    t.say(format!("router: {} sessions Established", peers.len()));
    let hops4: Vec<IpAddr> = (1..=2).map(|i| addressing::node_v4(i).into()).collect();
    let hops6: Vec<IpAddr> = (1..=2).map(|i| addressing::node_v6(i).into()).collect();
    routers::wait_kernel_route(lab.router(), &format!("{vip4}/32"), &hops4, Duration::from_secs(20))?;
    routers::wait_kernel_route(lab.router(), &format!("{vip6}/128"), &hops6, Duration::from_secs(20))?;
    println!("\n--- router RIB (birdc show route) ---");
    for p in bird.rib()? {
        println!(
            "  {:<22} via {:<16} as-path {:?}",
            p.prefix,
            p.next_hop.map(|a| a.to_string()).unwrap_or_default(),
            p.as_path
        );
    }
    println!("--- router kernel table ---");
    for r in bird.kernel_routes()?.iter().filter(|r| r.protocol == "bird") {
        println!("  {:<22} ECMP via {:?}", r.prefix, r.via);
    }
    println!();
    t.say("router kernel has ECMP routes to both nodes");
    wait::until("every ServiceAnnouncement", Duration::from_secs(30), || {
        let names = cluster.kubectl(&["get", "serviceannouncements", "-o", "name"])?;
        Ok((names.lines().count() >= 3).then_some(()))
    })?;
    println!(
        "--- kubectl get serviceannouncements ---\n{}",
        cluster.kubectl(&["get", "serviceannouncements"])?
    );
    // The operator's view of the same: the kubectl plugin (plugin/README.md).
    let ferrolb_cli = |args: &[&str]| kubectl_ferrolb(&cluster, args);
    let status =
        wait::until("kubectl ferrolb status: both Services announced", Duration::from_secs(30), || {
            let out = ferrolb_cli(&["status", "-A"])?;
            let announced = |svc: &str, proto: &str| {
                out.lines().any(|l| {
                    l.split_whitespace().take(5).collect::<Vec<_>>().ends_with(&[proto]) && l.contains(svc)
                })
            };
            Ok((announced("web-bgp", "BGP") && announced("web-l2", "L2")).then_some(out))
        })?;
    println!("--- kubectl ferrolb status -A ---\n{status}");
    println!("--- kubectl ferrolb pools ---\n{}", ferrolb_cli(&["pools"])?);

    let body = client::http_get(lab.client(), SocketAddr::new(vip4, 80), "/", Duration::from_secs(5))?;
    t.say(format!("client → http://{vip4}/ through the router: {}", body.trim()));
    reach(&t, &lab, vip6)?;

    // L2: the client resolves the addresses on its LAN to the elected owner's MAC.
    let mut owners = Vec::new();
    for v in [l2v4, l2v6] {
        let o = wait::until(&format!("an owner answering {v}"), Duration::from_secs(30), || {
            let _ = lab.client().exec_output(&["ping", "-c", "1", "-W", "1", &v.to_string()]);
            failover::owner(&lab, v)
        })?;
        t.say(format!("client resolves {v} to node{o} ({}), the elected owner", addressing::node_mac(o)));
        owners.push(o);
    }
    let body = fetch(&t, &lab, l2v4)?;
    t.say(format!("client → http://{l2v4}/ on the LAN: {}", body.trim()));

    let victim = owners[0];
    let survivor = 3 - victim;
    let probes = [
        ProbeStream::start(lab.client(), l2v4, Duration::from_millis(10))?,
        ProbeStream::start(lab.client(), l2v6, Duration::from_millis(10))?,
    ];
    std::thread::sleep(Duration::from_millis(500));
    // The node dies as a whole: the client's outage runs from the link cut, as in
    // `bench failover --failure link`.
    lab.node(victim).ip(&["link", "set", "eth0", "down"])?;
    if let Some(s) = speakers.get_mut(victim - 1).and_then(Option::take) {
        drop(s); // SIGKILL
    }
    t.say(format!("node{victim} dies: its LAN link cut, its speaker SIGKILLed"));
    for v in [l2v4, l2v6] {
        client::wait_neighbour_mac(
            lab.client(),
            "eth0",
            v,
            &addressing::node_mac(survivor),
            Duration::from_secs(30),
        )?;
        t.say(format!("client now resolves {v} to node{survivor} (gratuitous ARP / unsolicited NA)"));
    }
    std::thread::sleep(Duration::from_millis(300));
    for (v, p) in [l2v4, l2v6].into_iter().zip(probes) {
        let r = p.stop(Duration::from_millis(100));
        t.say(format!(
            "client pinging {v} every 10 ms: {} sent, {} lost, longest outage {:.0} ms",
            r.sent,
            r.lost(),
            r.max_outage().as_secs_f64() * 1000.0
        ));
        if r.received == 0 {
            return Err(Error::Parse(format!("client could not reach {v}")));
        }
    }
    let body = fetch(&t, &lab, l2v4)?;
    t.say(format!("client → http://{l2v4}/ after the failover: {}", body.trim()));
    reach(&t, &lab, l2v6)?;
    drop(speakers);
    drop(servers);
    drop(cluster);
    drop(lab);
    t.say("lab torn down");
    Ok(())
}

/// Fetches `http://addr/` from the client, up to three attempts. A connection opened
/// while the client's neighbour entry moves (a takeover, or a membership flap on a
/// starved machine) can be reset; a real client retries, so the demo does too and says
/// so. The last failure prints the speakers' logs, which name every ownership change.
fn fetch(t: &Timeline, lab: &Lab, addr: IpAddr) -> Result<String, Error> {
    let mut attempt = 1;
    loop {
        match client::http_get(lab.client(), SocketAddr::new(addr, 80), "/", Duration::from_secs(5)) {
            Ok(body) => return Ok(body),
            Err(e) if attempt < 3 => {
                t.say(format!("client → http://{addr}/ attempt {attempt} failed ({e}); retrying"));
                attempt += 1;
                std::thread::sleep(Duration::from_millis(200));
            }
            Err(e) => {
                println!("--- lab logs ---\n{}", lab.logs(40));
                return Err(e);
            }
        }
    }
}

/// Pings `addr` every 10 ms for half a second; fails when nothing answers.
fn reach(t: &Timeline, lab: &Lab, addr: IpAddr) -> Result<(), Error> {
    let probe = ProbeStream::start(lab.client(), addr, Duration::from_millis(10))?;
    std::thread::sleep(Duration::from_millis(500));
    let r = probe.stop(Duration::from_millis(100));
    t.say(format!("client pings {addr} every 10 ms: {} sent, {} answered", r.sent, r.received));
    if r.received == 0 {
        return Err(Error::Parse(format!("client could not reach {addr}")));
    }
    Ok(())
}
