//! The speaker DaemonSet's rolling upgrade to a second image under the client's TCP
//! connection probes and ARP requests ([`Upgrade`]).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::install::BACKEND_CONFIG;
use super::{IMAGE_NEXT, NODES, SPEAKERS, T, check, kubectl_json, running_and_ready};
use crate::demo::Timeline;
use ferrolb_cluster::{Cluster, ferrolb, helm};
use ferrolb_lab::client::{ArpProbes, ArpReport, ProbeReport, ProbeStream};
use ferrolb_lab::{Error, Lab, addressing, netns, wait};

/// Interval of the client's connection probes during the upgrade.
pub const PROBE: Duration = Duration::from_millis(10);
/// Interval of the probes of the active-active Service (fewer: three streams and the
/// backend share two cores).
pub const AA_PROBE: Duration = Duration::from_millis(30);
/// A probe whose handshake takes longer is lost (a SYN the kernel must resend).
const PROBE_TIMEOUT: Duration = Duration::from_millis(900);
/// Interval of the client's ARP requests for the L2 Service during the upgrade.
pub const ARP_PROBE: Duration = Duration::from_millis(10);

/// How many sender addresses take turns asking: an answer up to `ARP_PROBE ×
/// ARP_SENDERS` (500 ms) late still counts for its request.
pub const ARP_SENDERS: u8 = 50;

/// A speaker pod: its name, its node, the image of its running container.
pub type SpeakerPod = (String, String, String);

/// The speaker DaemonSet rolled from [`IMAGE`](super::IMAGE) to [`IMAGE_NEXT`] by the real DaemonSet
/// controller, with the client's TCP connection probes running all along.
#[derive(Debug)]
pub struct Upgrade {
    /// `helm upgrade` to `kubectl rollout status` done.
    pub took: Duration,
    /// The speaker pods before (name, node, image).
    pub before: Vec<SpeakerPod>,
    /// The speaker pods after, each Ready.
    pub after: Vec<SpeakerPod>,
    /// The L2 Service's address and its probes.
    pub l2: (IpAddr, ProbeReport),
    /// The client's ARP requests for the L2 Service's address: a new client resolving
    /// it at any moment of the upgrade.
    pub arp: ArpReport,
    /// The BGP Service's address and its probes.
    pub bgp: (IpAddr, ProbeReport),
    /// The active-active Service's address and its probes.
    pub active_active: (IpAddr, ProbeReport),
    /// SYNs the backend pod's kernel dropped for a full accept queue while the probes
    /// ran: a probe lost there was lost by the backend, not the load balancer.
    pub backend_overflows: u64,
}

/// `TcpExt ListenOverflows` of the backend pods' network namespaces, read from the host
/// through each backend process (`/proc/PID/net/netstat` is its namespace's), summed
/// over namespaces.
fn backend_listen_overflows() -> u64 {
    let mut by_netns = std::collections::BTreeMap::new();
    for pid in std::fs::read_dir("/proc").into_iter().flatten().flatten().map(|e| e.path()) {
        let is_backend = std::fs::read(pid.join("cmdline"))
            .is_ok_and(|c| c.split(|b| *b == 0).any(|arg| arg == BACKEND_CONFIG.as_bytes()));
        if !is_backend {
            continue;
        }
        if let (Ok(ns), Ok(netstat)) =
            (std::fs::read_link(pid.join("ns/net")), std::fs::read_to_string(pid.join("net/netstat")))
        {
            by_netns.insert(ns, netns::tcp_ext(&netstat, "ListenOverflows").unwrap_or(0));
        }
    }
    by_netns.values().sum()
}

/// The speaker pods by node, and whether all are Ready.
fn speaker_pods(cluster: &Cluster) -> Result<(Vec<SpeakerPod>, bool), Error> {
    let pods = kubectl_json(cluster, &["get", "pods", "-n", ferrolb::NAMESPACE, "-l", SPEAKERS])?;
    let items = pods["items"].as_array().cloned().unwrap_or_default();
    let ready = items.iter().all(running_and_ready);
    let mut out: Vec<SpeakerPod> = items
        .iter()
        .map(|p| {
            let s = |v: &Value| v.as_str().unwrap_or_default().to_owned();
            (
                s(&p["metadata"]["name"]),
                s(&p["spec"]["nodeName"]),
                s(&p["status"]["containerStatuses"][0]["image"]),
            )
        })
        .collect();
    out.sort_by(|a, b| a.1.cmp(&b.1));
    Ok((out, ready))
}

/// The speaker DaemonSet rolled to [`IMAGE_NEXT`] under the client's probes.
pub(super) fn upgrade(
    t: &Timeline,
    lab: &Lab,
    cluster: &Cluster,
    l2: IpAddr,
    bgp: IpAddr,
    aa: IpAddr,
) -> Result<Upgrade, Error> {
    let overflows_before = backend_listen_overflows();
    let streams_started = Instant::now();
    let probes = [(l2, PROBE), (bgp, PROBE), (aa, AA_PROBE)]
        .map(|(a, every)| ProbeStream::connect(lab.client(), SocketAddr::new(a, 80), every, PROBE_TIMEOUT));
    let [l2_probe, bgp_probe, aa_probe] = probes;
    let (l2_probe, bgp_probe, aa_probe) = (l2_probe?, bgp_probe?, aa_probe?);
    for p in [&l2_probe, &bgp_probe, &aa_probe] {
        p.wait_answered(100, T)?;
    }
    // Unused LAN addresses (the client's is .100, the nodes' .11-.19, the L2 pool .200-).
    let senders: Vec<Ipv4Addr> = (0..ARP_SENDERS).map(|k| Ipv4Addr::new(192, 0, 2, 150 + k)).collect();
    let IpAddr::V4(l2_v4) = l2 else { return Err(Error::Check(format!("{l2} is not IPv4"))) };
    let arp = ArpProbes::start(lab.client(), "eth0", l2_v4, ARP_PROBE, &senders)?;
    t.say(format!(
        "client: a TCP connection to {l2}:80 and to {bgp}:80 every {} ms, to {aa}:80 every {} ms, an ARP request for {l2} every {} ms \
         (an answer up to {} ms late counts)",
        PROBE.as_millis(),
        AA_PROBE.as_millis(),
        ARP_PROBE.as_millis(),
        (ARP_PROBE * u32::from(ARP_SENDERS)).as_millis()
    ));
    let (before, _) = speaker_pods(cluster)?;
    let ns = ferrolb::NAMESPACE;
    let started = Instant::now();
    // What a Helm user runs: every value kept, the new tag. The DaemonSet controller
    // then replaces the speakers one node at a time (and the controllers roll too).
    let next_tag = IMAGE_NEXT.rsplit_once(':').map_or(IMAGE_NEXT, |(_, tag)| tag);
    let set = format!("image.tag={next_tag}");
    helm::upgrade(cluster, &[&set])?;
    t.say(format!(
        "helm upgrade ferrolb manifests/helm/ferrolb --reuse-values --set {set} ({:.1} s into the client's streams)",
        (started - streams_started).as_secs_f64()
    ));
    cluster.kubectl(&["-n", ns, "rollout", "status", "daemonset/ferrolb-speaker", "--timeout=600s"])?;
    let took = started.elapsed();
    t.say(format!(
        "kubectl rollout status: the DaemonSet controller replaced {NODES} speakers in {:.1} s",
        took.as_secs_f64()
    ));
    let after = wait::until_value(
        "every new speaker Ready",
        T,
        || speaker_pods(cluster),
        |(pods, ready)| *ready && pods.len() == NODES && pods.iter().all(|p| p.2.ends_with(IMAGE_NEXT)),
    )?
    .0;
    check(after.iter().all(|p| before.iter().all(|b| b.0 != p.0)), || {
        format!("speaker pods not replaced: before {before:?}, after {after:?}")
    })?;
    for p in [&l2_probe, &bgp_probe, &aa_probe] {
        p.wait_answered(100, T)?;
    }
    let arp = arp.stop()?;
    let owners: Vec<String> = arp
        .owners
        .iter()
        .map(|mac| {
            (1..=NODES).find(|i| addressing::node_mac(*i) == *mac).map_or(mac.clone(), addressing::node_name)
        })
        .collect();
    t.say(format!(
        "client ARP for {l2} during the upgrade: {} requests, {} unanswered {:?}, {} answered by two nodes \
         (handovers); owners {}",
        arp.sent,
        arp.unanswered.len(),
        arp.unanswered,
        arp.answered_twice,
        owners.join(" → ")
    ));
    for (pod, node, _) in &after {
        let logs = cluster.kubectl(&["logs", "-n", ns, pod]).unwrap_or_default();
        for line in logs.lines().filter(|l| l.contains("L2:") || l.contains("membership")) {
            println!("  {node} {}", line.trim());
        }
    }
    let l2_report = l2_probe.stop(Duration::ZERO);
    let bgp_report = bgp_probe.stop(Duration::ZERO);
    let aa_report = aa_probe.stop(Duration::ZERO);
    let backend_overflows = backend_listen_overflows().saturating_sub(overflows_before);
    for (a, r) in [(l2, &l2_report), (bgp, &bgp_report), (aa, &aa_report)] {
        t.say(format!(
            "client → {a}:80 during the upgrade: {} connections, {} failed, longest outage {:.0} ms; \
             failed at {:?} s of the stream",
            r.sent,
            r.lost(),
            r.max_outage().as_secs_f64() * 1000.0,
            r.gaps.iter().map(|g| (g.at.as_secs_f64() * 10.0).round() / 10.0).collect::<Vec<_>>()
        ));
    }
    t.say(format!(
        "the backend pod's kernel dropped {backend_overflows} SYNs for a full accept queue meanwhile"
    ));
    Ok(Upgrade {
        took,
        before,
        after,
        l2: (l2, l2_report),
        arp,
        bgp: (bgp, bgp_report),
        active_active: (aa, aa_report),
        backend_overflows,
    })
}
