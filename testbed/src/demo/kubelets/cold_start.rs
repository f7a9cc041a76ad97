//! Power loss of the whole lab and its cold start from the disks alone: the time to each
//! milestone, from the VIP's return to the client reaching every Service again.

use std::net::IpAddr;
use std::time::{Duration, Instant, SystemTime};

use super::{
    NODES, SPEAKERS, T, WORKER, check, first_v4, holders, kubectl_json, reach, running_and_ready,
    wait_ingress, worker_apiserver_peers,
};
use crate::demo::Timeline;
use ferrolb_cluster::{Cluster, ferrolb};
use ferrolb_lab::{Error, Lab, addressing, wait};

/// The controller pods' label selector.
const CONTROLLERS: &str = "app.kubernetes.io/component=controller";

/// Unix microseconds now.
fn now_us() -> i64 {
    let d = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
    i64::try_from(d.as_micros()).unwrap_or(i64::MAX)
}

/// Whether every pod the selector picks in `ns` has all its containers started after
/// `since_us` (Unix µs) and is Ready: started by the kubelets after the cold start.
fn pods_restarted_ready(cluster: &Cluster, ns: &str, selector: &str, want: usize, since_us: i64) -> bool {
    let Ok(pods) = kubectl_json(cluster, &["get", "pods", "-n", ns, "-l", selector]) else {
        return false;
    };
    let items = pods["items"].as_array().cloned().unwrap_or_default();
    items.len() == want
        && items.iter().all(|p| {
            running_and_ready(p)
                && p["status"]["containerStatuses"].as_array().is_some_and(|cs| {
                    cs.iter().all(|c| {
                        c["state"]["running"]["startedAt"]
                            .as_str()
                            .and_then(ferrolb_cluster::audit::rfc3339_us)
                            // startedAt has whole seconds.
                            .is_some_and(|t| t + 1_000_000 > since_us)
                    })
                })
        })
}

/// Power loss of the whole lab and its cold start; returns each milestone's time.
pub(super) fn cold_start(
    t: &Timeline,
    lab: &Lab,
    cluster: &mut Cluster,
    addresses: &[IpAddr],
) -> Result<Vec<(String, Duration)>, Error> {
    let ns = ferrolb::NAMESPACE;
    let name = addressing::node_name(WORKER);
    let vip_port = format!("{}:{}", ferrolb_cluster::VIP_V4, ferrolb_cluster::APISERVER_PORT);
    cluster.power_off(lab);
    check(holders(lab).is_empty(), || "the VIP survived the power-off".into())?;
    t.say("power off: every process of the cluster SIGKILLed, mounts, cgroups and the VIP gone; disks kept");
    let since_us = now_us();
    let t0 = Instant::now();
    let mut milestones = Vec::new();
    let mut milestone = |what: String| {
        t.say(format!("cold start: {what} after {:.1} s", t0.elapsed().as_secs_f64()));
        milestones.push((what, t0.elapsed()));
    };
    cluster.power_on()?;
    milestone("every process started".into());
    wait::until_value("the VIP after the cold start", T, || Ok(holders(lab)), |h| h.len() == 1)?;
    milestone("VIP up from the checkpoints".into());
    wait::until(&format!("{name} renewing its Lease through the VIP after the cold start"), T, || {
        let renew = cluster
            .kubectl(&["get", "lease", "-n", "kube-node-lease", &name, "-o", "jsonpath={.spec.renewTime}"])
            .ok();
        Ok(renew.as_deref().and_then(ferrolb_cluster::audit::rfc3339_us).filter(|t| *t > since_us))
    })?;
    milestone(format!("{name} registered (Lease renewed) through the VIP"));
    let peers = worker_apiserver_peers(lab)?;
    check(peers.iter().all(|p| *p == vip_port), || format!("{name}: {peers:?}"))?;
    wait::until_holds("the speakers restarted and Ready", T, || {
        pods_restarted_ready(cluster, ns, SPEAKERS, NODES, since_us)
    })?;
    milestone(format!("{NODES} speakers Ready"));
    wait::until_holds("the controllers restarted and Ready", T, || {
        pods_restarted_ready(cluster, ns, CONTROLLERS, 2, since_us)
    })?;
    milestone("2 controllers Ready".into());
    let examples = ferrolb::manifests_dir().join("examples");
    let cold =
        std::fs::read_to_string(examples.join("service.yaml"))?.replace("name: web\n", "name: web-cold\n");
    cluster.kubectl_stdin(&["apply", "-f", "-"], &cold)?;
    let cold_ingress = wait_ingress(cluster, "web-cold")?;
    milestone(format!("a new Service got {cold_ingress}"));
    for a in addresses.iter().copied().chain([first_v4(&cold_ingress)?]) {
        reach(lab, cluster, a, " after the cold start")?;
        milestone(format!("the client reached {a}:80"));
    }
    Ok(milestones)
}
