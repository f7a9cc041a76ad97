//! End to end: the binary refreshes its checkpoint from a "local apiserver" (the fake
//! apiserver served over HTTPS on 127.0.0.1:6443 in a network namespace, certificate for
//! `kubernetes` only, like kubeadm's) with the credentials `checkpoint init` made, and
//! restarts its announcement when the ControlPlaneVIP changes.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test fails by panicking

mod common;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use common::{OneMember, on_d0};
use ferrolb_api::{ControlPlaneVip, Object};
use ferrolb_fakeapi::FakeApiServer;
use ferrolb_lab::https::TestCa;
use ferrolb_lab::netns::{self, Netns};
use ferrolb_lab::process::{Proc, Spawn};
use ferrolb_lab::wait;
use http_body_util::BodyExt;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use nix::sys::signal::Signal;

/// Serves `server` over HTTPS on 127.0.0.1:6443 inside `ns`; creates the checkpoint's
/// objects first, then patches the VIP address when told.
fn serve_fake_apiserver(
    ns: &Netns,
    ca: &TestCa,
    checkpoint: &Path,
) -> tokio::sync::mpsc::UnboundedSender<String> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let (cert, key) = ca.serving_cert(&["kubernetes", "10.96.0.1"]).unwrap();
    let certs: Vec<CertificateDer<'static>> =
        CertificateDer::pem_slice_iter(cert.as_bytes()).collect::<Result<_, _>>().unwrap();
    let key = PrivateKeyDer::from_pem_slice(key.as_bytes()).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .unwrap();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let objects = ferrolb_api::read_stream(checkpoint).unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let path = ns.path();
    std::thread::spawn(move || {
        netns::enter(&path).unwrap();
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
        rt.block_on(async move {
            let (client, server) = FakeApiServer::new().client();
            for (kind, plural) in [
                ("ControlPlaneVIP", "controlplanevips"),
                ("BGPPeer", "bgppeers"),
                ("BFDProfile", "bfdprofiles"),
            ] {
                server.register_ferrolb_kind(kind, plural, true).unwrap();
            }
            let vips: Api<ControlPlaneVip> = Api::all(client.clone());
            for (_, o) in objects.objects {
                if let Object::ControlPlaneVip(v) = o {
                    vips.create(&PostParams::default(), &v).await.unwrap();
                }
            }
            let listener = tokio::net::TcpListener::bind("127.0.0.1:6443").await.unwrap();
            ready_tx.send(()).unwrap();
            let svc = server.service();
            tokio::spawn(async move {
                while let Some(address) = rx.recv().await {
                    vips.patch(
                        "apiserver",
                        &PatchParams::default(),
                        &Patch::Merge(serde_json::json!({"spec": {"address": address}})),
                    )
                    .await
                    .unwrap();
                }
            });
            loop {
                let Ok((tcp, _)) = listener.accept().await else { continue };
                let acceptor = acceptor.clone();
                let svc = svc.clone();
                tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(tcp).await else { return };
                    let service =
                        hyper::service::service_fn(move |req: http::Request<hyper::body::Incoming>| {
                            let svc = svc.clone();
                            async move {
                                let (parts, body) = req.into_parts();
                                let bytes = body.collect().await.map(|b| b.to_bytes()).unwrap_or_default();
                                let req = http::Request::from_parts(parts, kube::client::Body::from(bytes));
                                tower::ServiceExt::oneshot(svc, req).await
                            }
                        });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(tls), service)
                        .await;
                });
            }
        });
    });
    ready_rx.recv_timeout(Duration::from_secs(10)).unwrap();
    tx
}

/// How long a wait may take (a bound, not a speed check).
const T: Duration = Duration::from_secs(30);

#[test]
fn the_binary_refreshes_its_checkpoint_and_moves_to_the_new_vip() {
    let bed = OneMember::new("96-e2e");
    let (ns, dir, ca) = (&bed.ns, &bed.dir, &bed.ca);
    let cp = dir.path().join("bootstrap/checkpoint.yaml");
    let bin = env!("CARGO_BIN_EXE_ferrolb-bootstrap");
    let cps = cp.display().to_string();
    let ca_key = dir.path().join("ca.key").display().to_string();
    // L2 runs the real membership (alone here) and ARP/NDP announcer.
    bed.init_checkpoint(&cps, &["--ca-key", &ca_key, "--node-name", "node1"]);
    let set_address = serve_fake_apiserver(ns, ca, &cp);

    let spec = Spawn::new("bootstrap", &[bin, "run", "--checkpoint", &cps, "--node-name", "node1"])
        .env("RUST_LOG", "info,ferrolb_bootstrap=debug");
    let mut p = Proc::start(ns, dir.path(), &spec).unwrap();
    wait::until_holds("the VIP on d0", T, || on_d0(ns, "192.0.2.200")).unwrap();

    let first = std::fs::read_to_string(&cp).unwrap();
    set_address.send("192.0.2.201".into()).unwrap();
    wait::until_holds("the refreshed checkpoint", T, || {
        std::fs::read_to_string(&cp).is_ok_and(|t| t.contains("192.0.2.201"))
    })
    .unwrap();
    assert_eq!(std::fs::read_to_string(ferrolb_bootstrap::checkpoint::prev_path(&cp)).unwrap(), first);
    wait::until_holds("the new VIP on d0 and the old one gone", T, || {
        on_d0(ns, "192.0.2.201") && !on_d0(ns, "192.0.2.200")
    })
    .unwrap();
    assert!(p.logs().contains("checkpoint changed"), "{}", p.logs());
    // The metrics say so too: a second checkpoint generation, at least one refresh.
    let metrics = || {
        let addr = "127.0.0.1:7949".parse().unwrap();
        ferrolb_lab::client::http_get(ns, addr, "/metrics", Duration::from_secs(2)).unwrap_or_default()
    };
    wait::until_holds("checkpoint generation 2 in the metrics", T, || {
        let m = metrics();
        m.lines().any(|l| l == "ferrolb_bootstrap_checkpoint_generation 2")
            && m.lines()
                .any(|l| l.starts_with("ferrolb_bootstrap_checkpoint_refreshes_total ") && !l.ends_with(" 0"))
            && m.lines().any(|l| l == "ferrolb_bootstrap_vip_owned 1")
    })
    .unwrap();
    // The client certificate `checkpoint init` made (a year) is exported and not warned about.
    let now =
        i64::try_from(SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap().as_secs()).unwrap();
    let expiry: i64 = metrics()
        .lines()
        .find_map(|l| l.strip_prefix("ferrolb_bootstrap_client_certificate_expiry_timestamp_seconds "))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    assert!((now + 364 * 86_400..now + 366 * 86_400).contains(&expiry), "expiry {expiry}, now {now}");
    assert!(!p.logs().contains("certificate expires soon"), "{}", p.logs());

    p.signal(Signal::SIGTERM);
    let status = p.wait_exit(Duration::from_secs(20)).expect("no exit on SIGTERM");
    assert!(status.success(), "{status:?}\n{}", p.logs());
    assert!(!on_d0(ns, "192.0.2.201"), "the VIP stayed after SIGTERM");
}
