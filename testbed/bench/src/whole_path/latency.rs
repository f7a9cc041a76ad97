//! Step 1: Services created one after another, each timed from the create call's return
//! to its address in `status.loadBalancer` and to its /32 in BIRD's RIB, with where the
//! time goes from the apiserver audit log.

use std::collections::HashMap;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Service;
use kube::api::Api;

use super::observe::{Observed, RibPoller, Seen};
use super::{
    Audited, BIRD_POLL, GOAL_P50, GOAL_P99, PER_SERVICE, audit, bird_socket, create, micros, service_account,
    service_name, unix_us, us_between,
};
use crate::builds::percentiles;
use crate::ms;
use ferrolb_cluster::{Cluster, ferrolb};
use ferrolb_lab::{Error, Lab};

/// Creates `n` Services one at a time, each waiting for its route before the next, and
/// prints the latencies.
pub(super) fn created_to_route(
    lab: &Lab,
    cluster: &Cluster,
    rt: &tokio::runtime::Runtime,
    api: &Api<Service>,
    seen: &mut Seen,
    tx: mpsc::Sender<Observed>,
    n: usize,
) -> Result<(), Error> {
    println!(
        "\n1. Service created → address assigned → route in the router's RIB ({n} Services, one after another)"
    );
    let poller = RibPoller::start(&bird_socket(lab), tx)?;
    let mut samples: Vec<Sample> = Vec::new();
    let mut missed = Vec::new();
    for i in 0..n {
        let name = service_name(i);
        rt.block_on(create(api, &name))?;
        let (created, created_us) = (Instant::now(), unix_us());
        match seen.wait_route(&name, PER_SERVICE) {
            Some((ingress, route)) => {
                samples.push(Sample { name, created, created_us, ingress: ingress - created, route })
            }
            None => missed.push(name),
        }
    }
    let stats = poller.stop();
    let ingress: Vec<Duration> = samples.iter().map(|s| s.ingress).collect();
    let route: Vec<Duration> = samples.iter().map(|s| s.route.saturating_duration_since(s.created)).collect();
    println!(
        "   the clock starts when the create call returns (admin client on the host, through the testbed's loopback forwarder)"
    );
    println!(
        "   BIRD's RIB polled over its control socket every {} ms ({} polls, {:.1} ms each on average): a RIB time is late by up to ~{:.0} ms",
        BIRD_POLL.as_millis(),
        stats.polls,
        ms(stats.mean()),
        ms(BIRD_POLL + stats.mean())
    );
    println!("   {:<34} {:>8} {:>8} {:>8} {:>8}   goal", "", "p50", "p90", "p99", "max");
    let goal = format!("p50 < {} ms, p99 < {} ms", GOAL_P50.as_millis(), GOAL_P99.as_millis());
    print_row("created → status.loadBalancer set", &ingress, &goal);
    print_row("created → /32 in BIRD's RIB", &route, &goal);
    if !missed.is_empty() {
        println!("   {} Services not routed within {PER_SERVICE:?}: {:?}", missed.len(), missed);
    }
    breakdown(cluster, &samples);
    Ok(())
}

/// One Service of step 1.
#[derive(Debug)]
struct Sample {
    name: String,
    created: Instant,
    created_us: i64,
    ingress: Duration,
    route: Instant,
}

/// Where the time of step 1 goes, from the audit log's server-side timestamps.
fn breakdown(cluster: &Cluster, samples: &[Sample]) {
    let user = service_account(ferrolb::CONTROLLER_SA);
    let mut first_patch: HashMap<&str, &Audited> = HashMap::new();
    let audited = audit(cluster, 0, &user, 0);
    for a in &audited {
        if a.verb == "patch" && a.resource == "services/status" {
            first_patch.entry(a.name.as_str()).or_insert(a);
        }
    }
    let (mut to_write, mut write, mut after, mut watch) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for s in samples {
        let Some(p) = first_patch.get(s.name.as_str()) else { continue };
        let route_us = s.created_us + micros(s.route.saturating_duration_since(s.created));
        to_write.push(us_between(s.created_us, p.received_us));
        write.push(us_between(p.received_us, p.done_us));
        after.push(us_between(p.done_us, route_us));
        watch.push(us_between(p.done_us, s.created_us + micros(s.ingress)));
    }
    if to_write.is_empty() {
        println!("   (no status write of the controller found in the audit log: no breakdown)");
        return;
    }
    println!("   where the time goes (server-side times from the audit log, same clock):");
    println!("   {:<34} {:>8} {:>8} {:>8} {:>8}", "", "p50", "p90", "p99", "max");
    print_row("created → controller's status write", &to_write, "(watch, queue, IPAM, request)");
    print_row("status write at the apiserver", &write, "(received → answered: etcd)");
    print_row("status written → seen by a watch", &watch, "(the bench's own watch)");
    print_row("status written → /32 in BIRD", &after, "(speaker's watch, plan, UPDATE, BIRD, poll)");
}

fn print_row(what: &str, xs: &[Duration], note: &str) {
    match percentiles(xs) {
        Some([p50, p90, p99, max]) => println!(
            "   {what:<34} {:>5.0} ms {:>5.0} ms {:>5.0} ms {:>5.0} ms   {note}",
            ms(p50),
            ms(p90),
            ms(p99),
            ms(max)
        ),
        None => println!("   {what:<34} no samples"),
    }
}
