//! What BIRD and the API show: every Service addressed, routed via every speaker and
//! announced (ServiceAnnouncements), every endpoint ready; and the time from a Service's
//! create request to its route in BIRD.

use std::collections::{BTreeSet, HashMap};
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use kube::api::{ListParams, ObjectMeta};

use super::workload::{self, Workload};
use super::{Latency, SPEAKERS, Stages, requests, speaker_ips};
use crate::bird_ctl::BirdCtl;
use ferrolb_cluster::ferrolb;
use ferrolb_cluster::load::{Call, Window, now_us};
use ferrolb_lab::routers::bird::parse_routes;
use ferrolb_lab::wait::until_value_every;
use ferrolb_lab::{Error, Lab, kubeapi};

/// The user the bench creates Services as (the admin's client certificate).
const ADMIN: &str = "kubernetes-admin";
/// How often BIRD is polled while timing a route.
const BIRD_POLL: Duration = Duration::from_millis(5);
/// Longest wait for one Service's route while timing.
const PER_SERVICE: Duration = Duration::from_secs(30);
/// Longest wait for the timed Services' lines in the audit log once they are routed.
const AUDIT_WAIT: Duration = Duration::from_secs(10);
/// How often the API and BIRD's whole RIB are read while waiting for convergence: every
/// second, and less often as they grow (each read lists every Service, EndpointSlice and
/// ServiceAnnouncement: at 50 000 Services, every 10 s), so the bench's own reads do not
/// hold back the apiserver it waits for.
fn converge_poll(services: usize) -> Duration {
    Duration::from_secs(1).max(Duration::from_micros(200) * u32::try_from(services).unwrap_or(u32::MAX))
}

/// Where [`ferrolb_lab::routers::Bird::start`] puts BIRD's control socket.
pub(super) fn bird_socket(lab: &Lab) -> PathBuf {
    lab.dir().join("bird").join("bird.ctl")
}

/// How far the cluster is from serving every Service of the bench.
#[derive(Debug, Default)]
pub(super) struct Progress {
    services: usize,
    addressed: usize,
    routed: usize,
    announcements: usize,
    ready_endpoints: usize,
    /// Services not routed via every speaker (addressed or not).
    pub(super) unrouted: Vec<String>,
}

/// Reads the Services, ServiceAnnouncements and EndpointSlices of the bench, and
/// BIRD's RIB.
pub(super) fn progress(work: &Workload<'_>, ctl: &mut BirdCtl) -> Result<Progress, Error> {
    let list_err = |what: &str, e: kube::Error| Error::Parse(format!("listing {what}: {e}"));
    let lp = ListParams::default();
    let services = work.rt.block_on(work.services.list(&lp)).map_err(|e| list_err("Services", e))?;
    let announcements = work
        .rt
        .block_on(work.announcements.list_metadata(&lp))
        .map_err(|e| list_err("ServiceAnnouncements", e))?;
    let slices = work.rt.block_on(work.slices.list(&lp)).map_err(|e| list_err("EndpointSlices", e))?;
    let benchs = |m: &ObjectMeta| workload::is_benchs(m.namespace.as_deref());
    let services: Vec<_> = services.items.into_iter().filter(|s| benchs(&s.metadata)).collect();
    let rib = next_hops(&ctl.command("show route all")?);
    let speakers: BTreeSet<IpAddr> = speaker_ips().into_iter().collect();
    let mut p = Progress { services: services.len(), ..Progress::default() };
    for svc in &services {
        let ips: Vec<IpAddr> = kubeapi::ingress_ips(svc).iter().filter_map(|s| s.parse().ok()).collect();
        if !ips.is_empty() {
            p.addressed += 1;
        }
        let routed =
            !ips.is_empty() && ips.iter().all(|ip| rib.get(ip).is_some_and(|hops| speakers.is_subset(hops)));
        if routed {
            p.routed += 1;
        } else {
            p.unrouted.push(svc.metadata.name.clone().unwrap_or_default());
        }
    }
    p.announcements = announcements.items.iter().filter(|a| benchs(&a.metadata)).count();
    p.ready_endpoints = slices
        .items
        .iter()
        .filter(|s| benchs(&s.metadata))
        .flat_map(|s| &s.endpoints)
        .filter(|e| e.conditions.as_ref().and_then(|c| c.ready) == Some(true))
        .count();
    Ok(p)
}

/// Waits until `services` Services are addressed and routed via every speaker, each
/// speaker announced each one (a ServiceAnnouncement), and every pod behind them is a
/// ready endpoint.
pub(super) fn wait_converged(
    work: &Workload<'_>,
    ctl: &mut BirdCtl,
    services: usize,
    timeout: Duration,
) -> Result<(), Error> {
    let what = format!(
        "{services} Services addressed, routed via {SPEAKERS} speakers and announced, {} ready endpoints",
        services * work.pods_per_service
    );
    until_value_every(
        &what,
        timeout,
        converge_poll(services),
        || progress(work, ctl),
        |p| {
            p.services == services
                && p.addressed == services
                && p.routed == services
                && p.announcements == SPEAKERS * services
                && p.ready_endpoints == services * work.pods_per_service
        },
    )?;
    Ok(())
}

/// Waits until BIRD holds at least `n` routes from `speaker`.
pub(super) fn wait_routes_from(
    ctl: &mut BirdCtl,
    speaker: IpAddr,
    n: usize,
    timeout: Duration,
) -> Result<(), Error> {
    until_value_every(
        &format!("{n} routes from {speaker} in BIRD"),
        timeout,
        Duration::from_millis(250),
        || {
            let text = ctl.command("show route all")?;
            Ok(parse_routes(&text).iter().filter(|p| p.next_hop == Some(speaker)).count())
        },
        |got| *got >= n,
    )?;
    Ok(())
}

/// Creates `n` Services one after another (their pods first), each timed from its create
/// request to its prefix's first path in BIRD (`show route count`, as `bench bgp-scale`
/// polls it) before the next; and, from the audit log (same clock), to the controller's
/// status write.
pub(super) fn created_to_route(work: &Workload<'_>, ctl: &mut BirdCtl, n: usize) -> Result<Latency, Error> {
    let window = Window::open(work.cluster);
    let mut out = Latency::default();
    let mut created: Vec<(String, i64)> = Vec::new();
    for j in 1..=n {
        let name = format!("late-{j:05}");
        work.create_pods(&name)?;
        let before = ctl.route_count()?;
        let (t, t_us) = (Instant::now(), now_us());
        work.create_service(&name)?;
        // One Service at a time, nothing else changing: one more network is its route.
        let routed = loop {
            if ctl.route_count()? > before {
                break Some(t.elapsed());
            }
            if t.elapsed() > PER_SERVICE {
                break None;
            }
            std::thread::sleep(BIRD_POLL);
        };
        match routed {
            Some(d) => {
                out.samples.push(d);
                created.push((name, t_us));
            }
            None => out.missed.push(name),
        }
    }
    // The status write precedes the route, but the apiserver writes a request's audit line
    // after it answered (and the log may end mid-line): read until every routed Service
    // shows both, or AUDIT_WAIT passed.
    let users = [requests::user_of(ferrolb::CONTROLLER_SA), ADMIN.to_owned()];
    let deadline = Instant::now() + AUDIT_WAIT;
    out.stages = loop {
        let calls = window.calls(&[&users[0], &users[1]], now_us());
        let stages = split(&calls, &users[0], &created, &out.samples);
        if stages.len() == created.len() || Instant::now() > deadline {
            break stages;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    Ok(out)
}

/// Where each timed Service's route time went, for those whose create (by the admin)
/// and status write (by `controller`) are among `calls`.
pub(super) fn split(
    calls: &[Call],
    controller: &str,
    created: &[(String, i64)],
    routes: &[Duration],
) -> Vec<Stages> {
    let find = |user: &str, verb: &str, resource: &str, name: &str| {
        calls
            .iter()
            .map(|c| &c.request)
            .find(|r| r.user == user && r.verb == verb && r.resource == resource && r.name == name)
            .and_then(|r| Some((r.received_us?, r.stage_us?)))
    };
    let mut out = Vec::new();
    for ((name, t_us), route) in created.iter().zip(routes) {
        let create = find(ADMIN, "create", "services", name);
        let write = find(controller, "patch", "services/status", name);
        if let (Some((_, created)), Some((received, written))) = (create, write) {
            let us = |from: i64, to: i64| Duration::from_micros(u64::try_from(to - from).unwrap_or(0));
            let answered = us(*t_us, written);
            out.push(Stages {
                create: us(*t_us, created),
                controller: us(created, received),
                status_write: us(received, written),
                speaker: route.saturating_sub(answered),
            });
        }
    }
    out
}

/// Each prefix's next hops, by address, from `show route all`.
fn next_hops(text: &str) -> HashMap<IpAddr, BTreeSet<IpAddr>> {
    let mut out: HashMap<IpAddr, BTreeSet<IpAddr>> = HashMap::new();
    for p in parse_routes(text) {
        let Some(addr) = p.prefix.split('/').next().and_then(|a| a.parse::<IpAddr>().ok()) else { continue };
        let hops = out.entry(addr).or_default();
        hops.extend(p.next_hop);
    }
    out
}
