//! One address served by every node of the real cluster: `manifests/examples/
//! l2-active-active.yaml` applied, a Service of its pool, and the client's connections
//! to it split over the four nodes, each node's kube-proxy doing the DNAT of the
//! connections its buckets let in ([`ActiveActive`]).

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use super::{NODES, T, check, diagnose, first_v4, wait_ingress};
use crate::demo::{Timeline, kubectl_ferrolb};
use ferrolb_cluster::{Cluster, ferrolb};
use ferrolb_lab::{Error, Lab, addressing, client, wait};

/// The speakers' metrics port (manifests/base/speaker.yaml, hostNetwork).
const SPEAKER_METRICS: u16 = 9121;
/// Connections the client opens to the address.
pub const CONNECTIONS: usize = 400;

/// The active-active Service on the real cluster.
#[derive(Debug)]
pub struct ActiveActive {
    /// Its address.
    pub address: IpAddr,
    /// Each node's buckets of it, as its speaker's metrics say.
    pub buckets: BTreeMap<String, f64>,
    /// The nodes `kubectl ferrolb status` lists as serving it.
    pub status_nodes: Vec<String>,
    /// Of the client's [`CONNECTIONS`] connections, how many each node's kube-proxy
    /// DNATed (its nat rule's packet counter: one per connection).
    pub split: BTreeMap<String, u64>,
}

/// The Service `web-aa` of the pool `lan-shared`, policy Cluster (every node may carry it).
fn service() -> String {
    "apiVersion: v1\nkind: Service\nmetadata:\n  name: web-aa\n  namespace: default\n  annotations:\n    \
     ferrolb.io/address-pool: lan-shared\nspec:\n  type: LoadBalancer\n  selector: {app: web}\n  \
     ports: [{port: 80, targetPort: 8080, protocol: TCP}]\n"
        .to_owned()
}

/// Connections kube-proxy DNATed to `address` on node `i`: the packets of its nat rules
/// for the address (the nat table sees a connection's first packet only).
fn dnat_count(lab: &Lab, i: usize, address: IpAddr) -> Result<u64, Error> {
    let nat = lab.node(i).exec(&["iptables-save", "-c", "-t", "nat"])?;
    let needle = format!("-A KUBE-SERVICES -d {address}/32 ");
    Ok(nat
        .lines()
        .filter(|l| l.contains(&needle))
        .filter_map(|l| l.strip_prefix('[')?.split(':').next()?.parse::<u64>().ok())
        .sum())
}

/// Each node's buckets of `address` from its speaker's metrics.
fn buckets(lab: &Lab, address: IpAddr) -> Result<BTreeMap<String, f64>, Error> {
    let sample = format!("ferrolb_l2_active_active_buckets{{address=\"{address}\"}}");
    let mut out = BTreeMap::new();
    for i in 1..=NODES {
        let at = SocketAddr::new(addressing::node_ip(i), SPEAKER_METRICS);
        let body = client::http_get(lab.client(), at, "/metrics", Duration::from_secs(2))?;
        out.insert(addressing::node_name(i), client::metric_sample(&body, &sample).unwrap_or(0.0));
    }
    Ok(out)
}

/// What each node's bucket filter holds, its speaker's log about it and about the
/// membership view it spreads buckets by (heartbeats, elections), and the path.
fn why(lab: &Lab, cluster: &Cluster, address: IpAddr) -> String {
    let mut out = diagnose(lab, cluster, address);
    for i in 1..=NODES {
        let ns = lab.node(i);
        let tables = ns.exec(&["nft", "list", "ruleset"]).unwrap_or_else(|e| e.to_string());
        let fdb = ns.exec(&["bridge", "fdb", "show", "dev", "eth0"]).unwrap_or_else(|e| e.to_string());
        out.push_str(&format!("node{i}: nft list ruleset:\n{tables}\nbridge fdb show dev eth0:\n{fdb}\n"));
    }
    let pods =
        cluster.kubectl(&["get", "pods", "-n", ferrolb::NAMESPACE, "-l", super::SPEAKERS, "-o", "name"]);
    for pod in pods.unwrap_or_default().lines() {
        let logs = cluster.kubectl(&["logs", "-n", ferrolb::NAMESPACE, pod]).unwrap_or_default();
        let about = ["active-active", "heartbeat", "membership changed", "L2: this node"];
        for line in logs.lines().filter(|l| about.iter().any(|a| l.contains(a))) {
            out.push_str(&format!("{pod}: {line}\n"));
        }
    }
    out
}

/// Applies the example and the Service; the client's connections land on every node.
pub(super) fn active_active(t: &Timeline, lab: &Lab, cluster: &Cluster) -> Result<ActiveActive, Error> {
    let example = ferrolb::manifests_dir().join("examples").join("l2-active-active.yaml");
    cluster.kubectl(&["apply", "-f", &example.display().to_string()])?;
    cluster.kubectl_stdin(&["apply", "-f", "-"], &service())?;
    let address = first_v4(&wait_ingress(cluster, "web-aa")?)?;
    t.say(format!(
        "kubectl apply: manifests/examples/l2-active-active.yaml (pool lan-shared, mode: ActiveActive) and \
         Service web-aa of it: {address}"
    ));
    let share = 256.0 / NODES as f64;
    let buckets = wait::until_value(
        &format!("every speaker owning its share of the buckets of {address}"),
        T,
        || buckets(lab, address),
        |b| b.len() == NODES && b.values().all(|n| (n - share).abs() <= 1.0),
    )?;
    t.say(format!("speakers' ferrolb_l2_active_active_buckets{{address=\"{address}\"}}: {buckets:?}"));
    let status = wait::until("kubectl ferrolb status: web-aa served by every node", T, || {
        let out = kubectl_ferrolb(cluster, &["status", "-n", "default"])?;
        let row = out.lines().find(|l| l.split_whitespace().next() == Some("web-aa")).map(str::to_owned);
        Ok(row.filter(|r| (1..=NODES).all(|i| r.contains(&addressing::node_name(i)))).map(|_| out))
    })?;
    println!("--- kubectl ferrolb status -n default ---\n{status}");
    let row = status.lines().find(|l| l.starts_with("web-aa")).unwrap_or_default();
    let status_nodes: Vec<String> =
        (1..=NODES).map(addressing::node_name).filter(|n| row.contains(n.as_str())).collect();

    let before: Vec<u64> = (1..=NODES).map(|i| dnat_count(lab, i, address)).collect::<Result<_, _>>()?;
    for k in 0..CONNECTIONS {
        let body =
            client::http_get(lab.client(), SocketAddr::new(address, 80), "/metrics", Duration::from_secs(5))
                .map_err(|e| {
                    Error::Check(format!(
                        "connection {k} to {address}:80: {e}\n{}",
                        why(lab, cluster, address)
                    ))
                })?;
        check(body.contains("ferrolb_build_info"), || {
            format!("connection {k}: {address}:80/metrics: {body}")
        })?;
    }
    let mut split = BTreeMap::new();
    for i in 1..=NODES {
        split.insert(addressing::node_name(i), dnat_count(lab, i, address)? - before[i - 1]);
    }
    t.say(format!(
        "client → http://{address}/metrics {CONNECTIONS} times, all answered; connections each node's \
         kube-proxy DNATed after its bucket filter: {split:?}"
    ));
    Ok(ActiveActive { address, buckets, status_nodes, split })
}
