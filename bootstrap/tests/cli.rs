//! The binary's command line: help, version, manifest with no flags, checkpoint init.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test fails by panicking

use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Output};

use ferrolb_bootstrap::checkpoint;

fn bin(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ferrolb-bootstrap")).args(args).env_remove("NODE_NAME").output().unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn help_and_version() {
    for args in
        [&["--help"][..], &["run", "--help"], &["manifest", "--help"], &["checkpoint", "init", "--help"]]
    {
        let o = bin(args);
        assert!(o.status.success(), "{args:?}: {}", stderr(&o));
        assert!(String::from_utf8_lossy(&o.stdout).contains("--log-format"), "{args:?}");
    }
    let o = bin(&["--version"]);
    assert_eq!(
        String::from_utf8_lossy(&o.stdout).trim(),
        // Version and git revision (buildinfo/build.rs; testbed/tests/version.rs checks the latter).
        format!("ferrolb-bootstrap {}", env!("FERROLB_VERSION"))
    );
    assert!(!bin(&["--log-format", "xml", "manifest"]).status.success());
}

#[test]
fn manifest_works_with_no_flags_and_is_a_pod() {
    let o = bin(&["manifest"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_saphyr::from_str(&String::from_utf8_lossy(&o.stdout)).unwrap();
    let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(v).unwrap();
    let c = &pod.spec.unwrap().containers[0];
    let caps = c.security_context.as_ref().unwrap().capabilities.as_ref().unwrap();
    assert_eq!(caps.add.as_deref(), Some(&["NET_ADMIN".to_string(), "NET_RAW".to_string()][..]));
    let o = bin(&["manifest", "--image", "registry.example/ferrolb-bootstrap:dev"]);
    assert!(String::from_utf8_lossy(&o.stdout).contains("image: registry.example/ferrolb-bootstrap:dev"));
}

fn test_ca(dir: &std::path::Path) {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut p = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    p.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    p.distinguished_name.push(rcgen::DnType::CommonName, "kubernetes");
    std::fs::write(dir.join("ca.crt"), p.self_signed(&key).unwrap().pem()).unwrap();
    std::fs::write(dir.join("ca.key"), key.serialize_pem()).unwrap();
}

#[test]
fn checkpoint_init_from_flags_writes_a_checkpoint_and_credentials() {
    let dir = tempfile::tempdir().unwrap();
    test_ca(dir.path());
    let cp = dir.path().join("bootstrap/checkpoint.yaml");
    let ca = dir.path().join("ca.crt").display().to_string();
    let key = dir.path().join("ca.key").display().to_string();
    let cps = cp.display().to_string();
    let base = [
        "checkpoint",
        "init",
        "--checkpoint",
        &cps,
        "--mode",
        "BGP",
        "--member",
        "cp1=192.0.2.11",
        "--member",
        "cp2=192.0.2.12",
        "--bgp-peer",
        "router-a=192.0.2.1",
        "--community",
        "64512:100",
        "--ca-file",
        &ca,
        "--ca-key",
        &key,
        "--node-name",
        "cp1",
    ];
    let mut args = base.to_vec();
    args.extend(["--address", "203.0.113.100"]);
    let o = bin(&args);
    assert!(o.status.success(), "{}", stderr(&o));
    let c = checkpoint::load(&cp).unwrap();
    assert_eq!(c.vip().spec.address, "203.0.113.100");
    assert_eq!(c.vip().spec.members.len(), 2);
    assert_eq!(c.config.peers.len(), 1);
    let kc = dir.path().join("bootstrap/bootstrap.kubeconfig");
    assert_eq!(std::fs::metadata(&kc).unwrap().permissions().mode() & 0o777, 0o600);
    assert!(std::fs::read_to_string(&kc).unwrap().contains("tls-server-name: \"kubernetes\""));

    // Again with another address: the first checkpoint is kept as .prev.
    let mut args = base.to_vec();
    args.extend(["--address", "203.0.113.101"]);
    assert!(bin(&args).status.success());
    assert_eq!(checkpoint::load(&cp).unwrap().vip().spec.address, "203.0.113.101");
    assert_eq!(
        checkpoint::load_one(&checkpoint::prev_path(&cp)).unwrap().vip().spec.address,
        "203.0.113.100"
    );
}

#[test]
fn checkpoint_init_from_a_file_keeps_only_what_the_vip_refers_to() {
    let dir = tempfile::tempdir().unwrap();
    let objects = dir.path().join("objects.yaml");
    std::fs::write(
        &objects,
        "apiVersion: ferrolb.io/v1alpha1
kind: BGPPeer
metadata: {name: router-a}
spec: {myASN: 64513, peerASN: 64512, peerAddress: 192.0.2.1}
---
apiVersion: ferrolb.io/v1alpha1
kind: BGPPeer
metadata: {name: elsewhere}
spec: {myASN: 64513, peerASN: 64512, peerAddress: 192.0.2.2}
---
apiVersion: ferrolb.io/v1alpha1
kind: ControlPlaneVIP
metadata: {name: api}
spec:
  address: 203.0.113.100
  mode: BGP
  members: [{name: cp1, address: 192.0.2.11}]
  bgp: {peers: [router-a]}
",
    )
    .unwrap();
    let cp = dir.path().join("cp.yaml");
    let o = bin(&[
        "checkpoint",
        "init",
        "--checkpoint",
        cp.to_str().unwrap(),
        "--from",
        objects.to_str().unwrap(),
        "--no-credentials",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let c = checkpoint::load(&cp).unwrap();
    let names: Vec<String> = c.config.peers.iter().map(kube::ResourceExt::name_any).collect();
    assert_eq!(names, vec!["router-a"]);
}

#[test]
fn checkpoint_init_refuses_an_invalid_vip_with_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let cp = dir.path().join("cp.yaml");
    let o = bin(&[
        "checkpoint",
        "init",
        "--checkpoint",
        cp.to_str().unwrap(),
        "--address",
        "203.0.113.100",
        "--mode",
        "BGP",
        "--member",
        "cp1=192.0.2.11",
        "--no-credentials",
    ]);
    assert!(!o.status.success());
    let e = stderr(&o);
    assert_eq!(e.lines().count(), 1, "{e}");
    assert!(e.contains("spec.bgp.peers"), "{e}");
    assert!(!cp.exists());
}

/// `run` in L2 mode with a missing or short membership key stops with one line naming
/// spec.membershipKeyFile and the file, never the key. Runs in its own network
/// namespace (the health prober may start before the key is read).
#[test]
fn run_l2_without_a_usable_membership_key_stops_with_one_line() {
    use ferrolb_lab::netns::Netns;
    ferrolb_lab::lab::check_prerequisites().unwrap();
    let ns = Netns::create(&format!("flb{}x96-key", std::process::id())).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let cp = dir.path().join("cp.yaml");
    let key = dir.path().join("membership.key");
    let o = bin(&[
        "checkpoint",
        "init",
        "--checkpoint",
        cp.to_str().unwrap(),
        "--address",
        "192.0.2.200",
        "--interface",
        "lo",
        "--member",
        "cp1=192.0.2.11",
        "--membership-key-file",
        key.to_str().unwrap(),
        "--no-credentials",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let run = || {
        ns.command(env!("CARGO_BIN_EXE_ferrolb-bootstrap"))
            .args(["run", "--checkpoint", cp.to_str().unwrap(), "--node-name", "cp1"])
            .args(["--health-addr", "127.0.0.1:17949"])
            .env_remove("NODE_NAME")
            .output()
            .unwrap()
    };
    let missing = run();
    std::fs::write(&key, "too-short-secret\n").unwrap();
    let short = run();
    let _ = ns.delete();
    for (o, what) in [(missing, "cannot read"), (short, "")] {
        assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
        let all = stderr(&o);
        // Log lines (info) come first; the error is one line of its own.
        let errors: Vec<&str> = all.lines().filter(|l| l.starts_with("ferrolb-bootstrap: ")).collect();
        assert_eq!(errors.len(), 1, "{all}");
        assert!(!all.contains("too-short-secret"), "the key leaked: {all}");
        let e = errors[0];
        assert!(e.contains("spec.membershipKeyFile") && e.contains(key.to_str().unwrap()), "{e}");
        assert!(e.contains(what), "{e}");
    }
}
