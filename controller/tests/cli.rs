//! The binary: flags, one-line errors, and a clean exit 0 on SIGTERM.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_ferrolb-controller");

#[test]
fn help_and_version() {
    let out = Command::new(BIN).arg("--help").output().unwrap();
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    for flag in
        ["--kubeconfig", "--lb-class", "--metrics-addr", "--leader-elect", "--log-format", "--namespace"]
    {
        assert!(help.contains(flag), "{flag} missing from --help:\n{help}");
    }
    let out = Command::new(BIN).arg("--version").output().unwrap();
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        // Version and git revision (buildinfo/build.rs; testbed/tests/version.rs checks the latter).
        format!("ferrolb-controller {}", env!("FERROLB_VERSION"))
    );
}

fn one_line_error(args: &[&str]) -> String {
    let out = Command::new(BIN).args(args).env_remove("RUST_LOG").output().unwrap();
    assert!(!out.status.success(), "{args:?} should fail");
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(err.trim_end().lines().count(), 1, "one line for {args:?}, got:\n{err}");
    err
}

#[test]
fn bad_config_is_one_clear_line() {
    let e = one_line_error(&["--metrics-addr", "not-an-address"]);
    assert!(e.contains("--metrics-addr") && e.contains("not-an-address"), "{e}");
    let e = one_line_error(&["--log-format", "xml"]);
    assert!(e.contains("--log-format"), "{e}");
    let e = one_line_error(&["--metrics-addr", "0.0.0.0:0", "--kubeconfig", "/nonexistent/kubeconfig"]);
    assert!(e.contains("--kubeconfig /nonexistent/kubeconfig"), "{e}");
}

/// Runs in a private network namespace (`unshare -n`, loopback down): the apiserver in the
/// kubeconfig is unreachable and nothing leaves the namespace. SIGTERM must exit 0.
#[test]
fn sigterm_exits_zero() {
    let dir = std::env::temp_dir().join(format!("ferrolb-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let kubeconfig = dir.join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {server: 'https://127.0.0.1:6443'}\n\
         users:\n- name: u\n  user: {token: t}\ncontexts:\n- name: x\n  context: {cluster: c, user: u}\ncurrent-context: x\n",
    )
    .unwrap();
    let mut child = Command::new("unshare")
        .args(["-n", BIN, "--metrics-addr", "0.0.0.0:7472", "--log-format", "json", "--kubeconfig"])
        .arg(&kubeconfig)
        .env("RUST_LOG", "info")
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let started = lines.by_ref().map_while(Result::ok).find(|l| l.contains("starting"));
    let line = started.expect("a start log line");
    let json: serde_json::Value = serde_json::from_str(&line).expect("--log-format json logs JSON");
    assert_eq!(json["fields"]["lb_class"], "ferrolb.io/lb");
    // `unshare` execs the binary, so the child's pid is the controller's.
    let status = Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap();
    assert!(status.success());
    std::thread::spawn(move || lines.for_each(drop));
    let code = child.wait().unwrap();
    assert_eq!(code.code(), Some(0), "exit code after SIGTERM");
    let _ = std::fs::remove_dir_all(&dir);
}
