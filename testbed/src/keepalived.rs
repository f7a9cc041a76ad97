//! keepalived (VRRP) on lab nodes: the L2 failover baseline ferrolb is measured against.

use std::fmt::Write as _;
use std::net::IpAddr;

use crate::netns::Netns;
use crate::process::{Proc, Spawn};
use crate::{Error, Lab};

/// One VRRP instance holding one VIP.
#[derive(Debug, Clone)]
pub struct VrrpSpec {
    /// The virtual address.
    pub vip: IpAddr,
    /// Interface it lives on.
    pub interface: String,
    /// VRRP router id (1..=255), shared by all nodes of the instance.
    pub vrid: u8,
    /// This node's priority (higher wins).
    pub priority: u8,
    /// Advertisement interval in seconds (keepalived's default: 1).
    pub advert_int: f32,
    /// Health-check command: a failing check lowers this node out of the election.
    pub check: Option<HealthCheck>,
}

/// A `vrrp_script` tracked by the instance.
#[derive(Debug, Clone)]
pub struct HealthCheck {
    /// Command run by keepalived (as root).
    pub script: String,
    /// Seconds between runs.
    pub interval: u32,
    /// Consecutive failures before the node is considered faulty.
    pub fall: u32,
    /// Consecutive successes before it is healthy again.
    pub rise: u32,
}

impl VrrpSpec {
    /// keepalived's defaults: advert_int 1 s, which makes a backup take over after
    /// 3 × advert_int + skew ≈ 3.6 s.
    pub fn defaults(vip: IpAddr, priority: u8) -> Self {
        VrrpSpec { vip, interface: "eth0".into(), vrid: 51, priority, advert_int: 1.0, check: None }
    }
}

/// A keepalived daemon (VRRP only) in a node namespace.
#[derive(Debug)]
pub struct Keepalived {
    proc: Proc,
}

impl Keepalived {
    /// Starts keepalived in `ns`; `name` names its files in the lab directory.
    pub fn start(lab: &Lab, ns: &Netns, name: &str, spec: &VrrpSpec) -> Result<Self, Error> {
        let dir = lab.subdir(name)?;
        let conf = dir.join("keepalived.conf");
        std::fs::write(&conf, config(name, spec))?;
        let p = |f: &str| dir.join(f).to_string_lossy().into_owned();
        let proc = lab.spawn(
            ns,
            Spawn::new(
                name,
                &[
                    "keepalived",
                    "--dont-fork",
                    "--log-console",
                    "--log-detail",
                    "--vrrp",
                    "-f",
                    &conf.to_string_lossy(),
                    "-p",
                    &p("keepalived.pid"),
                    "-r",
                    &p("vrrp.pid"),
                    "-c",
                    &p("checkers.pid"),
                ],
            ),
        )?;
        Ok(Keepalived { proc })
    }

    /// The supervised process.
    pub fn process(&mut self) -> &mut Proc {
        &mut self.proc
    }
}

/// The generated keepalived.conf.
pub fn config(name: &str, spec: &VrrpSpec) -> String {
    let mut c = String::new();
    let _ =
        writeln!(c, "global_defs {{\n  router_id {name}\n  script_user root\n  enable_script_security\n}}");
    if let Some(h) = &spec.check {
        let _ = writeln!(
            c,
            "vrrp_script health {{\n  script \"{}\"\n  interval {}\n  fall {}\n  rise {}\n}}",
            h.script, h.interval, h.fall, h.rise
        );
    }
    let len = if spec.vip.is_ipv4() { 32 } else { 128 };
    let _ = writeln!(c, "vrrp_instance vip {{");
    let _ = writeln!(c, "  state BACKUP\n  interface {}\n  virtual_router_id {}", spec.interface, spec.vrid);
    let _ = writeln!(c, "  priority {}\n  advert_int {}", spec.priority, spec.advert_int);
    let _ = writeln!(c, "  virtual_ipaddress {{\n    {}/{len} dev {}\n  }}", spec.vip, spec.interface);
    if spec.check.is_some() {
        c.push_str("  track_script {\n    health\n  }\n");
    }
    c.push_str("}\n");
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_has_the_vip_priority_and_check() {
        let mut s = VrrpSpec::defaults("192.0.2.200".parse().unwrap(), 150);
        s.check = Some(HealthCheck { script: "/bin/true".into(), interval: 1, fall: 3, rise: 1 });
        let c = config("node1", &s);
        assert!(c.contains("192.0.2.200/32 dev eth0"), "{c}");
        assert!(c.contains("priority 150"));
        assert!(c.contains("advert_int 1"));
        assert!(c.contains("track_script"));
    }
}
