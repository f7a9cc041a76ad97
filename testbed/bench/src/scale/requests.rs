//! The requests ferrolb's components made, from the apiserver audit log: each speaker
//! (told apart by the node its token is bound to) and the controller, by verb and
//! resource.
//!
//! **Periodic requests.** The speaker makes none: it only watches, and writes when its
//! plan changes (ServiceAnnouncements, Events, pod conditions of the readiness gate). The
//! controller, with leader election on (as installed), reads and renews its Lease every
//! lease duration / 5 (`get` and `update` of `leases`, every 3 s with the default 15 s);
//! nothing else. Watches are re-opened when they end (kube's watcher asks for 290 s).

use std::collections::BTreeMap;
use std::time::Duration;

use super::{QUIET, T};
use ferrolb_cluster::load::{Call, Window, now_us};
use ferrolb_cluster::{Cluster, ferrolb};
use ferrolb_lab::Error;
use ferrolb_lab::wait::until_value_every;

/// The resources a speaker watches (and lists once at start), besides its own pods and
/// ServiceAnnouncements (`ferrolb_speaker::cluster::KINDS`).
pub const SPEAKER_WATCHES: [&str; 8] = [
    "nodes",
    "services",
    "endpointslices",
    "ipaddresspools",
    "bgppeers",
    "bgpadvertisements",
    "l2advertisements",
    "bfdprofiles",
];

/// The requests of ferrolb's components over a window.
#[derive(Debug, Clone)]
pub struct Requests {
    /// How long the window was.
    pub window: Duration,
    /// Each request once, as the audit log has them.
    pub calls: Vec<Call>,
}

/// (component, verb, resource) → requests.
pub type Tally = BTreeMap<(String, String, String), usize>;

impl Requests {
    /// `controller`, `speaker <node>` (the node the token is bound to), or the user.
    pub fn who(c: &Call) -> String {
        let user = &c.request.user;
        if *user == user_of(ferrolb::CONTROLLER_SA) {
            "controller".into()
        } else if *user == user_of(ferrolb::SPEAKER_SA) {
            format!("speaker {}", c.request.node.as_deref().unwrap_or("(no node)"))
        } else {
            user.clone()
        }
    }

    /// The requests `keep` keeps, by component, verb and resource.
    pub fn tally(&self, keep: impl Fn(&Call) -> bool) -> Tally {
        let mut out = Tally::new();
        for c in self.calls.iter().filter(|c| keep(c)) {
            *out.entry((Self::who(c), c.request.verb.clone(), c.request.resource.clone())).or_default() += 1;
        }
        out
    }

    /// Lists (their first pages), by component and resource.
    pub fn lists(&self) -> BTreeMap<(String, String), usize> {
        self.by_resource(|c| c.request.verb == "list" && !c.is_later_page())
    }

    /// Later pages of lists, by component and resource.
    pub fn later_pages(&self) -> BTreeMap<(String, String), usize> {
        self.by_resource(Call::is_later_page)
    }

    /// Watches opened, by component and resource.
    pub fn watches(&self) -> BTreeMap<(String, String), usize> {
        self.by_resource(|c| c.request.verb == "watch")
    }

    /// The controller's Lease renewals (reads and writes).
    pub fn lease_renewals(&self) -> usize {
        self.calls.iter().filter(|c| is_lease_renewal(c)).count()
    }

    /// Every request but watches and the controller's Lease renewals: what should be
    /// none at rest.
    pub fn busy(&self) -> Tally {
        self.tally(is_busy)
    }

    /// Requests per second over the window.
    pub fn rate(&self, n: usize) -> f64 {
        n as f64 / self.window.as_secs_f64().max(1e-3)
    }

    fn by_resource(&self, keep: impl Fn(&Call) -> bool) -> BTreeMap<(String, String), usize> {
        let mut out = BTreeMap::new();
        for c in self.calls.iter().filter(|c| keep(c)) {
            *out.entry((Self::who(c), c.request.resource.clone())).or_default() += 1;
        }
        out
    }
}

/// The controller reading or renewing its leader Lease (see the module doc).
pub fn is_lease_renewal(c: &Call) -> bool {
    c.request.user == user_of(ferrolb::CONTROLLER_SA)
        && c.request.resource == "leases"
        && matches!(c.request.verb.as_str(), "get" | "update")
}

/// Neither a watch nor a Lease renewal.
pub fn is_busy(c: &Call) -> bool {
    c.request.verb != "watch" && !is_lease_renewal(c)
}

/// `system:serviceaccount:ferrolb-system:<sa>`.
pub(super) fn user_of(sa: &str) -> String {
    format!("system:serviceaccount:{}:{sa}", ferrolb::NAMESPACE)
}

/// ferrolb's users: the controller's and the speakers' ServiceAccounts.
fn users() -> [String; 2] {
    [user_of(ferrolb::CONTROLLER_SA), user_of(ferrolb::SPEAKER_SA)]
}

/// Written by anyone, it reaches every speaker as a watch event: Nodes, Services and
/// EndpointSlices (and their status). At rest nobody writes them.
pub fn writes_watched(c: &Call) -> bool {
    let kind = c.request.resource.split('/').next().unwrap_or_default();
    c.is_write() && matches!(kind, "nodes" | "services" | "endpointslices")
}

/// A write of a Node's status: a kubelet's heartbeat (kwok's, for fake Nodes), at least
/// every 5 minutes for each Node (kwok: 600-610 s). Every speaker of an L2 cluster receives
/// each one, so in `--l2` runs they never stop for [`QUIET`] once they began.
pub fn is_heartbeat(c: &Call) -> bool {
    c.is_write() && c.request.resource == "nodes/status"
}

/// Waits until, for [`QUIET`] (counting from now: what came before does not matter),
/// ferrolb has sent nothing but watches and Lease renewals and nobody else has written
/// what the speakers watch ([`writes_watched`]: e.g. kube-controller-manager's TTL
/// controller annotating a thousand new Nodes at 20 writes a second) — but for Nodes'
/// status ([`is_heartbeat`]), which never stops in a live cluster.
pub(super) fn wait_quiet(cluster: &Cluster, timeout: Duration) -> Result<(), Error> {
    let window = Window::open(cluster);
    let ours = users();
    let quiet_us = i64::try_from(QUIET.as_micros()).unwrap_or(i64::MAX);
    until_value_every(
        &format!(
            "{QUIET:?} with nothing from ferrolb but watches and Lease renewals, and no write of Nodes, Services or EndpointSlices"
        ),
        timeout,
        Duration::from_millis(250),
        || {
            let now = now_us();
            let last = window
                .calls(&[], now)
                .iter()
                .filter(|c| {
                    if ours.contains(&c.request.user) {
                        is_busy(c)
                    } else {
                        writes_watched(c) && !is_heartbeat(c)
                    }
                })
                .filter_map(|c| c.request.received_us)
                .max()
                .unwrap_or(window.from_us());
            Ok(now - last)
        },
        |idle_us| *idle_us >= quiet_us,
    )?;
    Ok(())
}

/// Writes by others than ferrolb to what the speakers watch ([`writes_watched`]), by
/// user, verb and resource: read after [`close`].
pub(super) fn others_writes(window: &Window, end_us: i64) -> Tally {
    let ours = users();
    let calls: Vec<Call> = window
        .calls(&[], end_us)
        .into_iter()
        .filter(|c| !ours.contains(&c.request.user) && writes_watched(c))
        .collect();
    Requests { window: Duration::ZERO, calls }.tally(|_| true)
}

/// The requests of `window` received before `end_us`, read once the audit log shows a
/// Lease renewal received after `end_us`: the log then holds every request of the
/// window that completed (the renewal comes every 3 s).
pub(crate) fn close(window: &Window, end_us: i64) -> Result<Requests, Error> {
    let controller = user_of(ferrolb::CONTROLLER_SA);
    until_value_every(
        "a Lease renewal in the audit log after the window",
        T,
        Duration::from_millis(250),
        || {
            Ok(window
                .calls(&[&controller], i64::MAX)
                .iter()
                .any(|c| is_lease_renewal(c) && c.request.received_us >= Some(end_us)))
        },
        |seen| *seen,
    )?;
    let users = users();
    let users: Vec<&str> = users.iter().map(String::as_str).collect();
    let window_len = Duration::from_micros(u64::try_from(end_us - window.from_us()).unwrap_or(0));
    Ok(Requests { window: window_len, calls: window.calls(&users, end_us) })
}
