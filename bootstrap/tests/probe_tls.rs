//! The health prober against a real HTTPS endpoint on 127.0.0.1 in a namespace, whose
//! certificate (like kubeadm's) names `kubernetes` but not 127.0.0.1.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test fails by panicking

use ferrolb_api::HealthCheck;
use ferrolb_bootstrap::health::{ProbeError, Prober};
use ferrolb_lab::https::{HealthServer, TestCa};
use ferrolb_lab::netns::{Netns, TempNetns};

fn probe_in(ns: &Netns, hc: HealthCheck) -> Result<(), String> {
    ns.run(move || {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async move {
            let p = Prober::new(&hc, "kubernetes").map_err(|e| e.to_string())?;
            p.probe().await.map_err(|e| match e {
                ProbeError::Status(s) => format!("status {s}"),
                other => other.to_string(),
            })
        })
    })
    .unwrap()
}

#[test]
fn verifies_the_apiserver_against_the_cluster_ca() {
    ferrolb_lab::lab::check_prerequisites().unwrap();
    let ns = TempNetns::create(&format!("flb{}x97-probe", std::process::id())).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new().unwrap();
    ca.write(dir.path()).unwrap();
    let other = TestCa::new().unwrap();
    std::fs::write(dir.path().join("other.crt"), other.cert_pem()).unwrap();
    let server = HealthServer::start(
        &ns,
        "127.0.0.1:6443".parse().unwrap(),
        &ca,
        &["kubernetes", "kubernetes.default.svc", "10.96.0.1"],
    )
    .unwrap();
    let hc = |ca_file: &str, insecure: bool| HealthCheck {
        url: "https://127.0.0.1:6443/readyz".into(),
        ca_file: dir.path().join(ca_file).display().to_string(),
        insecure_skip_verify: insecure,
        ..HealthCheck::default()
    };

    assert_eq!(probe_in(&ns, hc("ca.crt", false)), Ok(()));
    server.set_healthy(false);
    assert_eq!(probe_in(&ns, hc("ca.crt", false)), Err("status 503".into()));
    server.set_healthy(true);

    // A certificate from another CA is refused...
    let e = probe_in(&ns, hc("other.crt", false)).unwrap_err();
    assert!(e.contains("certificate"), "{e}");
    // ...unless verification is skipped, which only loopback URLs may do.
    assert_eq!(probe_in(&ns, hc("other.crt", true)), Ok(()));
    // A missing CA file is named.
    let e = probe_in(&ns, hc("missing.crt", false)).unwrap_err();
    assert!(e.contains("missing.crt"), "{e}");
    // A CA that appears later (kubeadm init writes it after the static pod started) is
    // picked up by the same prober.
    let late = hc("late.crt", false);
    let (ca_src, ca_dst) = (dir.path().join("ca.crt"), dir.path().join("late.crt"));
    let (before, after) = ns
        .run(move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            rt.block_on(async move {
                let p = Prober::new(&late, "kubernetes").unwrap();
                let before = p.probe().await.map_err(|e| e.to_string());
                std::fs::copy(ca_src, ca_dst).unwrap();
                (before, p.probe().await.map_err(|e| e.to_string()))
            })
        })
        .unwrap();
    assert!(before.as_ref().is_err_and(|e| e.contains("late.crt")), "{before:?}");
    assert_eq!(after, Ok(()));
    // Nothing listening: a clear failure, not a hang.
    let mut closed = hc("ca.crt", false);
    closed.url = "https://127.0.0.1:6444/readyz".into();
    assert!(probe_in(&ns, closed).is_err());
    assert!(server.requests() >= 4);
}
