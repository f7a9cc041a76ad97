//! What the speaker is started with, in each mode.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use ferrolb_proto::membership::HeartbeatConfig;
use tokio::sync::mpsc;

use super::input::Recorded;
use crate::plan::Plan;

/// Options of both modes.
#[derive(Debug, Clone)]
pub struct Options {
    /// This node's name (`--node-name`).
    pub node_name: String,
    /// loadBalancerClass served besides "none".
    pub lb_class: String,
    /// Membership bind address (`--membership-bind`); default `0.0.0.0:7946` (or `[::]:7946`
    /// when this node has IPv6 InternalIPs only).
    pub membership_bind: Option<SocketAddr>,
    /// Membership key file (`--membership-key-file`), needed where L2Advertisements
    /// exist; in Kubernetes mode the Secret `ferrolb-membership` is read instead when
    /// this is absent.
    pub membership_key_file: Option<PathBuf>,
    /// `--drain-max-delay`: the longest a prefix stays announced as draining
    /// (GRACEFUL_SHUTDOWN) before it is withdrawn even though its cause lingers.
    pub drain_max_delay: Duration,
    /// `--drain-on-shutdown`: on SIGTERM, how long every prefix stays announced as
    /// draining before the sessions close (at most `drain_max_delay`).
    pub drain_on_shutdown: Duration,
    /// L2 heartbeats (`--l2-heartbeat-interval`, `--l2-heartbeat-misses`).
    pub heartbeat: HeartbeatConfig,
}

impl Options {
    /// What node `node_name` runs with when no flag says otherwise: class
    /// `ferrolb.io/lb`, membership on its default address with the key from the Secret,
    /// the default drains and heartbeats.
    pub fn defaults(node_name: &str) -> Self {
        Options {
            node_name: node_name.into(),
            lb_class: crate::model::DEFAULT_LB_CLASS.into(),
            membership_bind: None,
            membership_key_file: None,
            drain_max_delay: DEFAULT_DRAIN_MAX_DELAY,
            drain_on_shutdown: DEFAULT_DRAIN_ON_SHUTDOWN,
            heartbeat: HeartbeatConfig::default(),
        }
    }
}

/// Options of Kubernetes mode.
#[derive(Debug, Clone)]
pub struct KubeOptions {
    /// What both modes share.
    pub options: Options,
    /// The speaker's namespace (`--namespace`): where Secret `ferrolb-membership` is.
    pub namespace: String,
    /// Every new plan is sent here (tests and embedding programs follow it).
    pub plans: Option<mpsc::UnboundedSender<Plan>>,
    /// Every input the event loop processes is sent here, to replay the run
    /// ([`super::replay`]).
    pub record: Option<mpsc::UnboundedSender<Recorded>>,
}

/// Options of static mode.
#[derive(Debug, Clone)]
pub struct StaticOptions {
    /// What both modes share.
    pub options: Options,
    /// The static file (`--static`).
    pub file: PathBuf,
}

/// Default of `--drain-max-delay`.
pub const DEFAULT_DRAIN_MAX_DELAY: Duration = Duration::from_secs(30);
/// Default of `--drain-on-shutdown`.
pub const DEFAULT_DRAIN_ON_SHUTDOWN: Duration = Duration::from_secs(5);
