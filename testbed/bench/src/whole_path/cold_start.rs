//! Step 2: with `--existing` Services holding addresses, the controller stopped and
//! started again: time to ready, to every Service reconciled, and the writes it made.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Service;
use kube::api::Api;

use super::observe::peer_state;
use super::{
    Audited, Builds, GOAL_CONTROLLER, GOAL_CONTROLLER_RSS_MIB, GOAL_RSS_SERVICES, IN_FLIGHT, Seen, T, WORKER,
    audit, audit_len, create, field, is_write, log_time, service_account, service_name, unix_us, us_between,
    wait_log,
};
use crate::bird_ctl::BirdCtl;
use crate::builds::{CLOCK_TICKS, cpu_ticks};
use crate::{mib, ms, peak_rss, rss};
use ferrolb_cluster::{Cluster, ferrolb};
use ferrolb_lab::process::Proc;
use ferrolb_lab::{Error, Lab, addressing, client, wait};

/// Tops the Services up to `total` with bounded parallel creates, then waits until every
/// one has its address and its route.
pub(super) fn make_existing(
    lab: &Lab,
    rt: &tokio::runtime::Runtime,
    api: &Api<Service>,
    seen: &mut Seen,
    ctl: &mut BirdCtl,
    from: usize,
    total: usize,
) -> Result<(), Error> {
    println!("\n2. Controller cold start with {total} Services holding addresses");
    let t = Instant::now();
    let cpu = CpuMeter::start(lab);
    let names: Vec<String> = (from..total).map(service_name).collect();
    rt.block_on(
        futures::stream::iter(names.iter().map(|n| create(api, n)))
            .buffer_unordered(IN_FLIGHT)
            .try_collect::<Vec<()>>(),
    )?;
    let created = t.elapsed();
    let budget = T + Duration::from_millis(20) * u32::try_from(total).unwrap_or(u32::MAX);
    seen.wait_addressed(total, budget)?;
    let addressed = t.elapsed();
    let node = addressing::node_ip(WORKER);
    wait::until_value(
        &format!("{total} routes from {node} in BIRD"),
        budget,
        || Ok(peer_state(&ctl.command("show protocols all")?, node).map_or(0, |s| s.imported)),
        |n| *n >= total,
    )?;
    let routed = t.elapsed();
    let rate = names.len() as f64 / created.as_secs_f64().max(1e-3);
    println!(
        "   made: {} Services created ({IN_FLIGHT} requests in flight) in {:.1} s ({rate:.0}/s); all {total} addressed after {:.1} s, all {total} routes in BIRD after {:.1} s",
        names.len(),
        created.as_secs_f64(),
        addressed.as_secs_f64(),
        routed.as_secs_f64()
    );
    cpu.print(routed);
    Ok(())
}

/// CPU time of every process of the lab (and of this driver) over a stretch of the bench.
struct CpuMeter {
    start: BTreeMap<i32, (String, u64)>,
}

impl CpuMeter {
    fn start(lab: &Lab) -> Self {
        CpuMeter { start: Self::sample(lab) }
    }

    /// pid → (program, utime + stime in clock ticks).
    fn sample(lab: &Lab) -> BTreeMap<i32, (String, u64)> {
        let me = i32::try_from(std::process::id()).unwrap_or(0);
        lab.all()
            .into_iter()
            .flat_map(|ns| ns.pids())
            .chain([me])
            .filter_map(|pid| Some((pid, (program(pid, me)?, cpu_ticks(pid)?))))
            .collect()
    }

    /// Prints the CPU each program used since [`CpuMeter::start`], busiest first.
    fn print(&self, wall: Duration) {
        let now = Self::sample_pids(self.start.keys().copied());
        let mut by_program: BTreeMap<&str, u64> = BTreeMap::new();
        for (pid, (name, before)) in &self.start {
            if let Some(after) = now.get(pid) {
                *by_program.entry(name.as_str()).or_default() += after.saturating_sub(*before);
            }
        }
        let mut rows: Vec<(&str, u64)> = by_program.into_iter().filter(|(_, t)| *t > 0).collect();
        rows.sort_by_key(|r| std::cmp::Reverse(r.1));
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
        let secs = |ticks: u64| ticks as f64 / CLOCK_TICKS as f64;
        let all: u64 = rows.iter().map(|(_, t)| t).sum();
        println!(
            "   CPU meanwhile: {:.0} s of {:.0} s available on {cores:.0} CPUs ({:.0}% busy)",
            secs(all),
            wall.as_secs_f64() * cores,
            100.0 * secs(all) / (wall.as_secs_f64() * cores).max(1e-3)
        );
        for (name, t) in rows {
            println!("     {name:<40} {:>6.1} s", secs(t));
        }
    }

    fn sample_pids(pids: impl Iterator<Item = i32>) -> BTreeMap<i32, u64> {
        pids.filter_map(|p| Some((p, cpu_ticks(p)?))).collect()
    }
}

/// The program a process runs: its argv[0]'s file name, the command of the multicall
/// control-plane binary, or this driver.
fn program(pid: i32, me: i32) -> Option<String> {
    if pid == me {
        return Some("ferrolb-testbed (this bench's driver)".into());
    }
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let mut args = cmdline.split(|b| *b == 0).map(|a| String::from_utf8_lossy(a).into_owned());
    let argv0 = args.next()?;
    let name = Path::new(&argv0).file_name()?.to_string_lossy().into_owned();
    Some(if name == "ferrolb-kube" { args.next().unwrap_or(name) } else { name })
}

/// The controller's log line once its state is rebuilt and it starts allocating.
pub(crate) const REBUILT: &str = "state rebuilt from the API";

/// Stops the controller (SIGTERM) and starts it again; prints how long it takes to be
/// ready and to reconcile every Service, and the writes it makes meanwhile.
pub(super) fn controller_cold_start(
    lab: &Lab,
    cluster: &Cluster,
    builds: &Builds,
    controller: &mut Proc,
    conf: &Path,
    total: usize,
) -> Result<(), Error> {
    let stopped = controller.terminate(Duration::from_secs(10));
    let how = match stopped {
        Some(s) if s.success() => "SIGTERM, exited 0 after releasing its Lease".to_string(),
        Some(s) => format!("SIGTERM, exited with {s}"),
        None => "SIGTERM, still running after 10 s: killed".to_string(),
    };
    if stopped.is_none() {
        controller.kill();
    }
    let offset = audit_len(cluster);
    let (start, start_us) = (Instant::now(), unix_us());
    *controller = builds.start_controller(lab, conf, WORKER, "controller-restarted")?;
    wait_log(controller, REBUILT, T)?;
    let log = controller.logs();
    let since = |needle: &str| log_time(&log, needle).map(|t| us_between(start_us, t));
    let ready = since(REBUILT);
    let leader = since("became leader");
    let replayed =
        log.lines().find(|l| l.contains("replayed Service status")).and_then(|l| field(l, "services"));

    // Every Service reconciled once since the start (a relist queues them all).
    let metrics = SocketAddr::new(addressing::node_ip(WORKER), ferrolb::CONTROLLER_METRICS_PORT);
    wait::until_value(
        "the restarted controller to reconcile every Service",
        T,
        || reconciles(lab, metrics),
        |n| *n >= total as u64,
    )?;
    let reconciled = start.elapsed();
    let reconciled_us = unix_us();
    let (peak, resident) = (peak_rss(controller.pid()), rss(controller.pid()));
    // Proof the audit log covers the time after the last reconcile: a Lease renewal
    // received after it (the leader renews every lease duration / 5).
    let user = service_account(ferrolb::CONTROLLER_SA);
    let renewal = wait::until("a Lease renewal after the last reconcile in the audit log", T, || {
        Ok(audit(cluster, offset, &user, reconciled_us)
            .into_iter()
            .any(|a| a.resource == "leases" && is_write(&a.verb))
            .then_some(()))
    });
    let window = start.elapsed();
    let writes: Vec<Audited> =
        audit(cluster, offset, &user, start_us).into_iter().filter(|a| is_write(&a.verb)).collect();
    let (lease, other): (Vec<&Audited>, Vec<&Audited>) = writes.iter().partition(|a| a.resource == "leases");

    println!("   stopped with {how}; started again at once (same token, same node)");
    println!(
        "   readiness from the log line \"{REBUILT}\": /readyz answers 200 already while a replica waits for the Lease"
    );
    let goal = format!("goal < {} s", GOAL_CONTROLLER.as_secs());
    match ready {
        Some(d) => println!(
            "   {:<58} {:>7.0} ms   {goal}",
            "process start → ready (state rebuilt, allocating)",
            ms(d)
        ),
        None => println!("   process start → ready: no timestamp on the log line"),
    }
    if let Some(d) = leader {
        println!("   {:<58} {:>7.0} ms", "  of which: process start → leader (Lease acquired)", ms(d));
    }
    println!(
        "   {:<58} {:>7.0} ms   (ferrolb_controller_reconciles_total, polled every {} ms)",
        "process start → every Service reconciled once",
        ms(reconciled),
        wait::POLL.as_millis()
    );
    if let Some(n) = replayed {
        println!("   Services replayed from status at start: {n}");
    }
    match (peak, resident) {
        (Some(peak), Some(now)) => println!(
            "   {:<58} {:>7.1} MiB   goal < {GOAL_CONTROLLER_RSS_MIB:.0} MiB at {GOAL_RSS_SERVICES} Services (VmHWM; VmRSS then {:.1} MiB)",
            "controller peak RSS, start → every Service reconciled",
            mib(peak),
            mib(now)
        ),
        _ => println!("   controller peak RSS: /proc/{}/status unreadable", controller.pid()),
    }
    let watched = format!("{:.1} s", window.as_secs_f64());
    match renewal {
        Ok(()) => println!(
            "   writes by {user} in the {watched} after the start (apiserver audit log): {} (goal 0), besides {} to its Lease (acquire and renewals)",
            other.len(),
            lease.len()
        ),
        Err(e) => println!(
            "   writes by {user} in the {watched} after the start: {} (goal 0) besides {} to its Lease — the audit log may be incomplete: {e}",
            other.len(),
            lease.len()
        ),
    }
    let mut kinds: BTreeMap<(String, String), usize> = BTreeMap::new();
    for a in &other {
        *kinds.entry((a.verb.clone(), a.resource.clone())).or_default() += 1;
    }
    for ((verb, resource), n) in kinds {
        println!("     {n:>6} {verb} {resource}");
    }
    Ok(())
}

/// `ferrolb_controller_reconciles_total` from the controller's metrics, read from the
/// client namespace (on the LAN).
pub(crate) fn reconciles(lab: &Lab, addr: SocketAddr) -> Result<u64, Error> {
    let text = client::http_get(lab.client(), addr, "/metrics", Duration::from_secs(2))?;
    client::metric_sample(&text, "ferrolb_controller_reconciles_total")
        .map(|v| v as u64)
        .ok_or_else(|| Error::Parse("no ferrolb_controller_reconciles_total in /metrics".into()))
}
