//! Faults a test puts on a running control plane: an apiserver signalled, killed and
//! restarted; the whole lab's power cut and restored.

use std::time::Duration;

use nix::sys::signal::Signal;

use super::apiserver::{probe_ready, wait_ready};
use super::{Cluster, VIP_V4};
use ferrolb_lab::process::{Proc, Supervised};
use ferrolb_lab::{Error, Lab};

impl Cluster {
    /// Sends `sig` to apiserver `i` (SIGSTOP / SIGCONT / SIGKILL …).
    pub fn signal_apiserver(&mut self, i: usize, sig: Signal) {
        if let Some(Some(p)) = self.apiservers.get_mut(i - 1) {
            p.signal(sig);
        }
    }

    /// Kills apiserver `i` (SIGKILL) and reaps it.
    pub fn kill_apiserver(&mut self, i: usize) {
        if let Some(slot) = self.apiservers.get_mut(i - 1)
            && let Some(mut p) = slot.take()
        {
            p.kill();
        }
    }

    /// Starts apiserver `i` again (after [`Cluster::kill_apiserver`]) and waits for its `/readyz`.
    pub fn restart_apiserver(&mut self, i: usize) -> Result<(), Error> {
        self.kill_apiserver(i);
        let (ns, spec) = &self.apiserver_specs[i - 1];
        self.apiservers[i - 1] = Some(Proc::start(ns, &self.log_dir, spec)?);
        wait_ready(&self.rt, &self.direct[i - 1], &self.paths, Duration::from_secs(120))
    }

    /// Whether apiserver `i` answers `/readyz` with `ok` now.
    pub fn apiserver_ready(&self, i: usize) -> bool {
        probe_ready(&self.rt, &self.direct[i - 1], &self.paths).unwrap_or(false)
    }

    /// Power loss of the whole lab: SIGKILL to every kubelet, kube-proxy, containerd and
    /// container, the scheduler, the controller-manager, every apiserver and etcd; what a
    /// reboot clears goes (mounts, cgroups, containerd state, addresses added at runtime
    /// such as the VIP). Disks stay: etcd's data, images, kubelet roots, static pods,
    /// checkpoints, the PKI.
    pub fn power_off(&mut self, lab: &Lab) {
        for n in &mut self.real_nodes {
            n.power_off();
        }
        if let Some(s) = &mut self.scheduler {
            s.kill();
        }
        self.controller_manager.kill();
        for i in 1..=self.control_planes {
            self.kill_apiserver(i);
        }
        self.etcd.kill();
        for ns in lab.nodes() {
            let _ = ns.ip(&["addr", "del", &format!("{VIP_V4}/32"), "dev", "eth0"]);
        }
    }

    /// Cold start after [`Cluster::power_off`]: etcd, every apiserver, the
    /// controller-manager, the scheduler, and every node's containerd, kubelet and
    /// kube-proxy, started one after the other without waiting for any to be ready.
    pub fn power_on(&mut self) -> Result<(), Error> {
        let cp1 = self.apiserver_specs[0].0.clone();
        self.etcd = Proc::start(&cp1, &self.log_dir, &self.etcd_spec)?;
        for (i, (ns, spec)) in self.apiserver_specs.iter().enumerate() {
            self.apiservers[i] = Some(Proc::start(ns, &self.log_dir, spec)?);
        }
        self.controller_manager = Supervised::start(&cp1, &self.log_dir, &self.cm_spec)?;
        if let Some(spec) = &self.scheduler_spec {
            self.scheduler = Some(Supervised::start(&cp1, &self.log_dir, spec)?);
        }
        for n in &mut self.real_nodes {
            n.boot()?;
        }
        Ok(())
    }
}
