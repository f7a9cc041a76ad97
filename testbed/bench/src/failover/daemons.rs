//! Each system's daemons on every node of a lab — ferrolb speakers from a static file,
//! or keepalived — started, SIGKILLed and restarted, and each VIP's home among them.

use std::net::IpAddr;

use ferrolb_lab::keepalived::{Keepalived, VrrpSpec};
use ferrolb_lab::speaker::{self, Speaker, yaml};
use ferrolb_lab::{Error, Lab, addressing};

/// One system's daemons, node i's at index i - 1.
#[derive(Debug)]
pub(super) enum Daemons {
    Ferrolb(Vec<Speaker>),
    Keepalived(Vec<Keepalived>),
}

impl Daemons {
    /// SIGKILLs node `i`'s daemon (keepalived: with its children).
    pub(super) fn kill(&mut self, i: usize) {
        let at = i.saturating_sub(1);
        match self {
            Daemons::Ferrolb(s) => s.get_mut(at).into_iter().for_each(Speaker::kill),
            Daemons::Keepalived(k) => k.get_mut(at).into_iter().for_each(Keepalived::kill_all),
        }
    }

    /// Starts node `i`'s daemon again.
    pub(super) fn restart(&mut self, lab: &Lab, i: usize) -> Result<(), Error> {
        let at = i.saturating_sub(1);
        match self {
            Daemons::Ferrolb(s) => s.get_mut(at).map_or(Ok(()), Speaker::restart),
            Daemons::Keepalived(k) => k.get_mut(at).map_or(Ok(()), |k| k.restart(lab)),
        }
    }
}

/// The ferrolb speakers' static file: the nodes, the L2 pool, one L2Advertisement,
/// one Service holding `vips`.
fn ferrolb_file(nodes: &[usize], vips: &[IpAddr]) -> String {
    let pool = [
        format!("{}-{}", addressing::L2_POOL_V4.0, addressing::L2_POOL_V4.1),
        format!("{}-{}", addressing::L2_POOL_V6.0, addressing::L2_POOL_V6.1),
    ];
    let pool: Vec<&str> = pool.iter().map(String::as_str).collect();
    let mut objects: Vec<String> = nodes.iter().map(|i| yaml::node(*i)).collect();
    objects.extend([
        yaml::pool("lan", &pool),
        yaml::l2_advertisement("lan", &["ipAddressPools: [lan]"]),
        yaml::service("web", vips),
    ]);
    yaml::stream(&objects)
}

/// A VIP and the node that holds it when nothing fails.
pub(super) type Homed = (IpAddr, usize);

/// ferrolb speakers on every node of `lab` (membership defaults, 1 s handover grace),
/// the newest build, each run by `wrapper` (none: as it is); each VIP's home is the node
/// ferrolb's election picks.
pub(super) fn start_ferrolb(
    lab: &Lab,
    vips: &[IpAddr],
    wrapper: &[&str],
) -> Result<(Daemons, Vec<Homed>), Error> {
    let bin = ferrolb_lab::binary::newest("ferrolb-speaker")?;
    let key = speaker::write_membership_key(lab, "bench-failover-key")?.display().to_string();
    let nodes: Vec<usize> = (1..=lab.nodes().len()).collect();
    let file = ferrolb_file(&nodes, vips);
    for n in lab.nodes() {
        for vip in vips {
            lab.add_vip_on_lo(n, *vip)?;
        }
    }
    let flags = ["--membership-key-file", key.as_str()];
    let speakers = nodes
        .iter()
        .map(|i| Speaker::start_wrapped(lab, *i, &file, wrapper, &bin, &flags, &[]))
        .collect::<Result<_, _>>()?;
    let homes = vips.iter().map(|v| (*v, addressing::owner(*v, &nodes))).collect();
    Ok((Daemons::Ferrolb(speakers), homes))
}

/// keepalived on every node of `lab`, one instance per VIP (`spec(vip, priority)`),
/// node i at priority 150 − 50 (i − 1): node1 is every VIP's home.
pub(super) fn start_keepalived(
    lab: &Lab,
    vips: &[IpAddr],
    spec: impl Fn(IpAddr, u8) -> VrrpSpec,
) -> Result<(Daemons, Vec<Homed>), Error> {
    let mut daemons = Vec::new();
    for i in 1..=lab.nodes().len() {
        let priority = u8::try_from(150usize.saturating_sub(50 * (i - 1)).max(1)).unwrap_or(1);
        let specs: Vec<VrrpSpec> = vips.iter().map(|v| spec(*v, priority)).collect();
        daemons.push(Keepalived::start_instances(lab, lab.node(i), &format!("keepalived-node{i}"), &specs)?);
    }
    Ok((Daemons::Keepalived(daemons), vips.iter().map(|v| (*v, 1)).collect()))
}
