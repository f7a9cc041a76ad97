//! The apiserver VIP from `ferrolb-bootstrap` static pods on real kubelets (#17 point 3),
//! set up as bootstrap/README.md tells an operator: a shared membership key, a
//! ControlPlaneVIP file, `checkpoint init` on each control-plane node (before its kubelet
//! starts: the static pod needs no apiserver), and the pod printed by
//! `ferrolb-bootstrap manifest` dropped into the node's static pod directory.
//!
//! The lab's disk is shared: `<lab>/etc-ferrolb` stands in for each node's
//! `/etc/ferrolb` (the pod mounts it), with the node's own files in a subdirectory.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::node::RealNode;
use super::{APISERVER_PORT, Paths, VIP_V4};
use ferrolb_lab::{Error, addressing, binary};

/// `https://<VIP>:6443`: the only apiserver address the workers' kubelets know.
pub fn vip_server() -> String {
    format!("https://{VIP_V4}:{APISERVER_PORT}")
}

/// The bootstrap side of a lab: where its files go and which image its pods run.
#[derive(Debug, Clone)]
pub struct Bootstrap {
    bin: PathBuf,
    etc: PathBuf,
    members: usize,
    image: String,
}

impl Bootstrap {
    /// Bootstrap for control-plane nodes `1..=members`, its pods running `image` (already
    /// imported into their containerd); files under `etc` (created).
    pub fn new(etc: &Path, members: usize, image: &str) -> Result<Self, Error> {
        std::fs::create_dir_all(etc)?;
        let bin = binary::workspace("ferrolb-bootstrap", "debug")?;
        Ok(Bootstrap { bin, etc: etc.to_owned(), members, image: image.to_owned() })
    }

    /// The shared membership key file.
    pub fn key_file(&self) -> PathBuf {
        self.etc.join("bootstrap-membership.key")
    }

    /// The ControlPlaneVIP file `checkpoint init --from` reads (also applied to the cluster).
    pub fn vip_file(&self) -> PathBuf {
        self.etc.join("controlplanevip.yaml")
    }

    /// Node `i`'s checkpoint.
    pub fn checkpoint(&self, i: usize) -> PathBuf {
        self.etc.join(addressing::node_name(i)).join("checkpoint.yaml")
    }

    /// Writes the key (README: 32 random bytes) and the ControlPlaneVIP (the lab's
    /// addresses, default health URL https://127.0.0.1:6443/readyz, the cluster CA) once,
    /// then node `i`'s checkpoint and refresh credentials from the cluster CA.
    pub fn checkpoint_init(&self, i: usize, paths: &Paths) -> Result<(), Error> {
        if !self.key_file().exists() {
            let mut raw = [0u8; 32];
            std::fs::File::open("/dev/urandom")?.read_exact(&mut raw)?;
            let key: String = raw.iter().map(|b| format!("{b:02x}")).collect();
            std::fs::write(self.key_file(), format!("{key}\n"))?;
            std::fs::write(self.vip_file(), self.controlplanevip_yaml(&paths.ca_cert()))?;
        }
        let checkpoint = self.checkpoint(i);
        if let Some(dir) = checkpoint.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let path = |p: &Path| p.display().to_string();
        self.cli(&[
            "checkpoint",
            "init",
            "--checkpoint",
            &path(&checkpoint),
            "--from",
            &path(&self.vip_file()),
            "--node-name",
            &addressing::node_name(i),
            "--ca-file",
            &path(&paths.ca_cert()),
            "--ca-key",
            &path(&paths.ca_key()),
        ])?;
        Ok(())
    }

    /// `ferrolb-bootstrap manifest` for node `i`: the lab's paths and image.
    pub fn static_pod(&self, i: usize, paths: &Paths) -> Result<String, Error> {
        let path = |p: &Path| p.display().to_string();
        self.cli(&[
            "manifest",
            "--image",
            &self.image,
            "--checkpoint",
            &path(&self.checkpoint(i)),
            "--config-dir",
            &path(&self.etc),
            "--ca-file",
            &path(&paths.ca_cert()),
        ])
    }

    /// Drops node `i`'s static pod into its kubelet's static pod directory (written
    /// aside and renamed: the kubelet never reads half a manifest).
    pub fn install_static_pod(&self, i: usize, node: &RealNode, paths: &Paths) -> Result<(), Error> {
        let tmp = node.paths().dir.join("ferrolb-bootstrap.yaml.tmp");
        std::fs::write(&tmp, self.static_pod(i, paths)?)?;
        std::fs::rename(&tmp, node.static_pod_path().join("ferrolb-bootstrap.yaml"))?;
        Ok(())
    }

    /// `ferrolb-bootstrap checkpoint rbac`: the refresh credentials' read-only RBAC.
    pub fn rbac(&self) -> Result<String, Error> {
        self.cli(&["checkpoint", "rbac"])
    }

    fn controlplanevip_yaml(&self, ca: &Path) -> String {
        let members: String = (1..=self.members)
            .map(|i| {
                format!("  - {{name: {}, address: {}}}\n", addressing::node_name(i), addressing::node_v4(i))
            })
            .collect();
        format!(
            "apiVersion: ferrolb.io/v1alpha1
kind: ControlPlaneVIP
metadata:
  name: apiserver
spec:
  address: {VIP_V4}
  port: {APISERVER_PORT}
  mode: L2
  members:
{members}  membershipPort: 7947
  membershipKeyFile: {key}
  healthCheck:
    interval: 1s
    timeout: 1s
    failureThreshold: 3
    caFile: {ca}
",
            key = self.key_file().display(),
            ca = ca.display(),
        )
    }

    fn cli(&self, args: &[&str]) -> Result<String, Error> {
        let mut cmd = Command::new(&self.bin);
        cmd.args(args).env_remove("NODE_NAME");
        ferrolb_lab::netns::run(&mut cmd)
    }
}
