//! `bench apiserver-failover`: the outage a client of the apiserver VIP sees when the
//! owner's apiserver dies, for ferrolb-bootstrap (L2) and for keepalived with a
//! `vrrp_script` probing the same `/readyz`, in the same run.
//!
//! Each system runs in its own three-node lab; every node has a stand-in apiserver
//! ([`HealthServer`], HTTPS on port 6443 with a test CA). The client GETs
//! `https://VIP:6443/readyz` every 10 ms, each attempt in its own thread, and the
//! outage is the longest run without a `200`. The owner's apiserver "dies" by closing
//! its listening socket (connections refused), as a crashed apiserver does; it comes
//! back after each trial and the VIP is allowed to settle before the next one; each
//! death falls at a random point of the health-check interval.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use super::Summary;
use ferrolb_lab::https::{HealthServer, HttpsProbe, TestCa};
use ferrolb_lab::keepalived::{HealthCheck, Keepalived, VrrpSpec};
use ferrolb_lab::process::{Proc, Spawn};
use ferrolb_lab::{Error, Lab, LabConfig, addressing, wait};

/// The VIP both systems hold (the first L2 VIP of the plan).
const VIP: &str = "192.0.2.200";
/// Members in each lab.
const NODES: usize = 3;
/// Client attempt interval.
const PROBE_EVERY: Duration = Duration::from_millis(10);

/// What the bench runs with.
#[derive(Debug, Clone, Copy)]
pub struct Params {
    /// Trials per system.
    pub trials: usize,
    /// Health check interval (ferrolb's `healthCheck.interval`; keepalived's script
    /// interval, in whole seconds, at least 1).
    pub interval: Duration,
    /// Consecutive failures before a member counts as unhealthy (`failureThreshold`;
    /// keepalived's `fall`).
    pub failure_threshold: u32,
}

impl Params {
    /// The goal for a move: failureThreshold × interval + 500 ms.
    pub fn bound(&self) -> Duration {
        self.interval * self.failure_threshold + Duration::from_millis(500)
    }
}

/// The most recently built `ferrolb-bootstrap` (release or debug), or
/// `$FERROLB_BOOTSTRAP_BIN`.
pub fn bootstrap_binary() -> Result<PathBuf, Error> {
    ferrolb_lab::binary::newest("ferrolb-bootstrap")
}

/// The node holding `vip` on eth0, if exactly one does.
fn holder(lab: &Lab, vip: IpAddr) -> Result<Option<usize>, Error> {
    let mut holders = Vec::new();
    for i in 1..=lab.nodes().len() {
        let out = lab.node(i).ip(&["-o", "addr", "show", "dev", "eth0"])?;
        if out.contains(&format!(" {vip}/32")) {
            holders.push(i);
        }
    }
    Ok(if holders.len() == 1 { holders.first().copied() } else { None })
}

/// Stand-in apiservers on every node, healthy, answering with the node's name.
fn apiservers(lab: &Lab, ca: &TestCa) -> Result<Vec<HealthServer>, Error> {
    let bind: SocketAddr = SocketAddr::new(IpAddr::from([0u16; 8]), 6443);
    (1..=lab.nodes().len())
        .map(|i| {
            HealthServer::start_marked(
                lab.node(i),
                bind,
                ca,
                &["kubernetes", "10.96.0.1"],
                &addressing::node_name(i),
            )
        })
        .collect()
}

/// A pseudo-random duration in `[0, max)` from the clock's nanoseconds.
fn jitter(max: Duration) -> Duration {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::from(d.subsec_nanos()) ^ d.as_secs().wrapping_mul(0x9e37_79b9))
        .unwrap_or(0);
    let max = u64::try_from(max.as_nanos()).unwrap_or(u64::MAX).max(1);
    Duration::from_nanos(nanos % max)
}

/// One trial: the client probes the VIP, the owner's apiserver dies at a random phase
/// of the health checks (`phase` wide), the client's attempts succeed again (through
/// the new owner); returns (old owner, outage).
fn trial(
    lab: &Lab,
    ca: &TestCa,
    api: &[HealthServer],
    vip: IpAddr,
    phase: Duration,
) -> Result<(usize, Duration), Error> {
    let owner = wait::until("one VIP owner", Duration::from_secs(30), || holder(lab, vip))?;
    let probe = HttpsProbe::start(
        lab.client(),
        SocketAddr::new(vip, 6443),
        "/readyz",
        ca,
        "kubernetes",
        PROBE_EVERY,
    )?;
    wait::until("the client reaching the VIP", Duration::from_secs(10), || {
        Ok((probe.counts().1 >= 20).then_some(()))
    })?;
    // Without this the death would fall at the same point of the health check schedule
    // every trial (the settling is paced by it) and the figures would not spread.
    std::thread::sleep(jitter(phase));
    let died = Instant::now();
    if let Some(a) = api.get(owner - 1) {
        a.set_running(false);
    }
    let back = wait::until("the client served again", Duration::from_secs(60), || {
        Ok((probe.successes_since(died + Duration::from_millis(50)) >= 20).then_some(()))
    });
    let outage = probe.stop(Duration::from_millis(1500));
    if let Some(a) = api.get(owner - 1) {
        a.set_running(true);
    }
    back?;
    Ok((owner, outage))
}

/// Waits until `want` holds the VIP and has for `settle`.
fn settle(lab: &Lab, vip: IpAddr, want: usize, settle: Duration) -> Result<(), Error> {
    wait::until_value(
        "the VIP back at its preferred owner",
        Duration::from_secs(60),
        || holder(lab, vip),
        |h| *h == Some(want),
    )?;
    std::thread::sleep(settle);
    Ok(())
}

/// ferrolb-bootstrap (L2) on three nodes.
pub fn ferrolb(p: &Params) -> Result<Vec<Duration>, Error> {
    let vip: IpAddr = VIP.parse().map_err(|e| Error::Parse(format!("{e}")))?;
    let lab = Lab::up(LabConfig::nodes(NODES))?;
    let bin = bootstrap_binary()?;
    println!("  ferrolb-bootstrap binary: {}", bin.display());
    let ca = TestCa::new()?;
    let api = apiservers(&lab, &ca)?;
    let members = ferrolb_lab::speaker::yaml::vip_members(NODES);
    let timeout = p.interval.min(Duration::from_secs(1));
    let mut procs: Vec<Proc> = Vec::new();
    for i in 1..=NODES {
        let dir = lab.subdir(&format!("bootstrap{i}"))?;
        ca.write(&dir)?;
        let key = dir.join("membership.key");
        std::fs::write(&key, "bench-apiserver-failover-membership-key\n")?;
        let cp = dir.join("checkpoint.yaml");
        std::fs::write(
            &cp,
            format!(
                "apiVersion: ferrolb.io/v1alpha1
kind: ControlPlaneVIP
metadata: {{name: apiserver}}
spec:
  address: {VIP}
  mode: L2
  interface: eth0
  membershipKeyFile: {key}
  members:
{members}  healthCheck:
    url: https://127.0.0.1:6443/readyz
    interval: {interval}ms
    timeout: {timeout}ms
    failureThreshold: {threshold}
    caFile: {ca}
",
                key = key.display(),
                interval = p.interval.as_millis(),
                timeout = timeout.as_millis(),
                threshold = p.failure_threshold,
                ca = dir.join("ca.crt").display(),
            ),
        )?;
        let (cp, node) = (cp.display().to_string(), addressing::node_name(i));
        let bin = bin.display().to_string();
        let argv = [bin.as_str(), "run", "--checkpoint", &cp, "--node-name", &node];
        procs.push(lab.spawn(lab.node(i), Spawn::new(format!("bootstrap-{node}"), &argv))?);
    }
    let names: Vec<String> = (1..=NODES).map(addressing::node_name).collect();
    let winner = ferrolb_proto::election::owner(vip, names.iter().map(String::as_str))
        .and_then(|w| (1..=NODES).find(|i| addressing::node_name(*i) == w))
        .ok_or_else(|| Error::Parse("no election winner".into()))?;
    let phase = p.interval;
    let mut outages = Vec::new();
    for t in 0..p.trials {
        settle(&lab, vip, winner, Duration::from_secs(2))?;
        let (owner, o) = trial(&lab, &ca, &api, vip, phase)?;
        println!(
            "  ferrolb trial {:>2}: node{owner}'s apiserver died, outage {:>6.0} ms",
            t + 1,
            super::ms(o)
        );
        outages.push(o);
    }
    drop(procs);
    Ok(outages)
}

/// keepalived (VRRP, advert_int 1 s) on three nodes, priorities 150 / 100 / 50, each
/// tracking a `vrrp_script` that GETs the same `/readyz` with curl (`fall` = the
/// failure threshold, `rise` 2 as ferrolb's success threshold).
pub fn keepalived(p: &Params) -> Result<Vec<Duration>, Error> {
    let vip: IpAddr = VIP.parse().map_err(|e| Error::Parse(format!("{e}")))?;
    let lab = Lab::up(LabConfig::nodes(NODES))?;
    let ca = TestCa::new()?;
    let api = apiservers(&lab, &ca)?;
    let interval = u32::try_from(p.interval.as_secs()).unwrap_or(u32::MAX).max(1);
    let mut daemons = Vec::new();
    for (i, priority) in [(1usize, 150u8), (2, 100), (3, 50)] {
        let dir = lab.subdir(&format!("keepalived-ca-node{i}"))?;
        ca.write(&dir)?;
        let mut spec = VrrpSpec::defaults(vip, priority);
        spec.check = Some(HealthCheck {
            script: format!(
                "/usr/bin/curl -sf -o /dev/null --max-time 1 --cacert {} --resolve kubernetes:6443:127.0.0.1 https://kubernetes:6443/readyz",
                dir.join("ca.crt").display()
            ),
            interval,
            fall: p.failure_threshold,
            rise: 2,
        });
        daemons.push(Keepalived::start(&lab, lab.node(i), &format!("keepalived-node{i}"), &spec)?);
    }
    let phase = Duration::from_secs(u64::from(interval));
    let mut outages = Vec::new();
    for t in 0..p.trials {
        // Preemption puts the VIP back on node1 once its check rises again.
        settle(&lab, vip, 1, Duration::from_secs(3))?;
        let (owner, o) = trial(&lab, &ca, &api, vip, phase)?;
        println!(
            "  keepalived trial {:>2}: node{owner}'s apiserver died, outage {:>6.0} ms",
            t + 1,
            super::ms(o)
        );
        outages.push(o);
    }
    drop(daemons);
    Ok(outages)
}

/// Runs both systems and prints the table.
pub fn run(p: &Params) -> Result<(), Error> {
    println!(
        "bench apiserver-failover: the VIP owner's apiserver dies (connections refused); the client GETs \
         https://{VIP}:6443/readyz every {} ms; {} trials per system",
        PROBE_EVERY.as_millis(),
        p.trials
    );
    println!(
        "health check: interval {} ms, failure threshold {} (keepalived: script interval {} s, fall {}, rise 2)",
        p.interval.as_millis(),
        p.failure_threshold,
        p.interval.as_secs().max(1),
        p.failure_threshold
    );
    let results = [
        ("ferrolb-bootstrap (L2, SWIM + ARP)", ferrolb(p)?),
        ("keepalived (VRRP + vrrp_script)", keepalived(p)?),
    ];
    println!("\n{:<36} client-visible outage", "system");
    for (system, outages) in &results {
        match Summary::of(outages) {
            Some(s) => println!("{system:<36} {s}"),
            None => println!("{system:<36} no trials"),
        }
    }
    println!(
        "{:<36} {:>7.0} ms (failureThreshold × interval + 500 ms)",
        "theoretical bound",
        super::ms(p.bound())
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bound_is_threshold_times_interval_plus_half_a_second() {
        let p = Params { trials: 1, interval: Duration::from_secs(1), failure_threshold: 3 };
        assert_eq!(p.bound(), Duration::from_millis(3500));
    }
}
