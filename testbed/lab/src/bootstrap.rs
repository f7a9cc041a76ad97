//! ferrolb-bootstrap in lab nodes: its checkpoint files, a stand-in for the local
//! apiserver's health endpoint (HTTPS on 127.0.0.1:6443 with a test CA, switched between
//! healthy and unhealthy by the test) and the process.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use crate::https::{HealthServer, TestCa};
use crate::process::{Proc, Spawn};
use crate::speaker::yaml;
use crate::{Error, Lab};

/// The names of kubeadm's apiserver serving certificate that matter here (no 127.0.0.1).
pub const APISERVER_NAMES: &[&str] = &["kubernetes", "10.96.0.1"];

/// The health endpoint every checkpoint of [`checkpoint`] probes by default.
pub const READYZ: &str = "https://127.0.0.1:6443/readyz";

/// The debug binary (testbed/test.sh builds it first).
pub fn binary() -> Result<PathBuf, Error> {
    crate::binary::workspace("ferrolb-bootstrap", "debug")
}

/// Node `node`'s files: the test CA and a checkpoint whose ControlPlaneVIP has
/// `spec_extra` (indented spec lines), every lab node as a member and a health check of
/// `url` every 200 ms, followed by `objects` (more documents, `---` first).
pub fn checkpoint(
    lab: &Lab,
    node: usize,
    ca: &TestCa,
    spec_extra: &str,
    objects: &str,
    url: &str,
) -> Result<PathBuf, Error> {
    let dir = lab.subdir(&format!("bootstrap{node}"))?;
    ca.write(&dir)?;
    let members = yaml::vip_members(lab.nodes().len());
    let text = format!(
        "apiVersion: ferrolb.io/v1alpha1
kind: ControlPlaneVIP
metadata: {{name: apiserver}}
spec:
{spec_extra}  members:
{members}  healthCheck:
    url: {url}
    interval: 200ms
    timeout: 1s
    failureThreshold: 2
    caFile: {ca}
{objects}",
        ca = dir.join("ca.crt").display()
    );
    let path = dir.join("checkpoint.yaml");
    std::fs::write(&path, text)?;
    Ok(path)
}

/// L2 checkpoints for every node of the lab (one shared membership key) for `vip` on
/// eth0, probing `url`.
pub fn l2_checkpoints(lab: &Lab, ca: &TestCa, vip: &str, url: &str) -> Result<Vec<PathBuf>, Error> {
    (1..=lab.nodes().len())
        .map(|i| l2_checkpoint(lab, i, ca, vip, url, "lab-membership-key-0123456789abcdef\n"))
        .collect()
}

/// Node `i`'s L2 checkpoint for `vip` on eth0, probing `url`, its membership key `key`
/// (in [`key_file`]).
pub fn l2_checkpoint(
    lab: &Lab,
    i: usize,
    ca: &TestCa,
    vip: &str,
    url: &str,
    key: &str,
) -> Result<PathBuf, Error> {
    let file = key_file(lab, i)?;
    std::fs::write(&file, key)?;
    let extra = format!(
        "  address: \"{vip}\"\n  mode: L2\n  interface: eth0\n  membershipKeyFile: {}\n",
        file.display()
    );
    checkpoint(lab, i, ca, &extra, "", url)
}

/// Node `i`'s membership key file.
pub fn key_file(lab: &Lab, i: usize) -> Result<PathBuf, Error> {
    Ok(lab.subdir(&format!("bootstrap{i}"))?.join("membership.key"))
}

/// Starts node `i`'s stand-in apiserver health endpoint on 127.0.0.1:6443 (healthy).
pub fn apiserver(lab: &Lab, i: usize, ca: &TestCa) -> Result<HealthServer, Error> {
    // Like kubeadm's serving certificate: no 127.0.0.1 among the names.
    HealthServer::start(lab.node(i), SocketAddr::from(([127, 0, 0, 1], 6443)), ca, APISERVER_NAMES)
}

/// Starts `ferrolb-bootstrap run` on node `i` from `checkpoint` with `extra` arguments;
/// `run` tells the log files of successive runs apart.
pub fn start(lab: &Lab, i: usize, checkpoint: &Path, extra: &[&str], run: usize) -> Result<Proc, Error> {
    start_with_env(lab, i, checkpoint, extra, run, &[])
}

/// [`start`] with `env` set (a test's override of the one setting it is about).
pub fn start_with_env(
    lab: &Lab,
    i: usize,
    checkpoint: &Path,
    extra: &[&str],
    run: usize,
    env: &[(&str, &str)],
) -> Result<Proc, Error> {
    let bin = binary()?;
    let bin = bin.display().to_string();
    let cp = checkpoint.display().to_string();
    let node = crate::addressing::node_name(i);
    let mut argv = vec![bin.as_str(), "run", "--checkpoint", &cp, "--node-name", &node];
    argv.extend_from_slice(extra);
    let mut spec =
        Spawn::new(format!("bootstrap-node{i}-{run}"), &argv).env("RUST_LOG", "info,ferrolb_speaker=debug");
    for (k, v) in env {
        spec = spec.env(k, v);
    }
    lab.spawn(lab.node(i), spec)
}
