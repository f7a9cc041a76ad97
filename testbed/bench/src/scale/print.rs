//! The figures as tables, beside the goals.

use crate::builds::percentiles;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use super::requests::{SPEAKER_WATCHES, Tally, is_busy};
use super::traffic::{Received, max_speaker};
use super::{Figures, QUIET, Requests, SPEAKERS, Stages, goals};
use crate::mib;

impl Figures {
    /// Prints one size's figures.
    pub fn print(&self) {
        let s = self.size;
        println!(
            "  {} fake Nodes (kwok) and {SPEAKERS} real ones, each running a speaker (BGP to BIRD), the controller on node{SPEAKERS}",
            s.nodes
        );
        if s.l2 {
            println!(
                "  and an L2Advertisement (of a pool no Service uses): every speaker watches every Node"
            );
        }
        println!(
            "  {} LoadBalancer Services (policy Cluster) with {} fake pods each, then {} created one at a time and 1 for the change",
            s.services,
            self.pods_per_service,
            self.latency.samples.len() + self.latency.missed.len()
        );
        for b in &self.builds {
            println!("  {b}");
        }
        println!(
            "  up in {:.1} s; pods and Services created in {:.1} s; at rest {:.1} s after the first create",
            self.setup.cluster_up.as_secs_f64(),
            self.setup.created.as_secs_f64(),
            self.setup.settled.as_secs_f64()
        );
        self.print_rest();
        self.print_latency();
        self.print_change();
        self.print_restart();
        if self.unrouted.is_empty() {
            println!("\n  every Service routed via every speaker at the end");
        } else {
            println!("\n  NOT routed via every speaker at the end: {:?}", self.unrouted);
        }
    }

    fn print_rest(&self) {
        let r = &self.rest.requests;
        println!(
            "\n  1. apiserver requests at rest over {:.0} s (audit log, each request once)   goal: ≈ 0/s, watches only",
            r.window.as_secs_f64()
        );
        let renewals = r.tally(super::requests::is_lease_renewal);
        for ((who, verb, resource), n) in &renewals {
            println!(
                "     {who:<16} {verb:<7} {resource:<24} {n:>5}  {:>5.2}/s  leader election: the Lease read and renewed every 3 s",
                r.rate(*n)
            );
        }
        let busy = r.busy();
        print_tally(&busy, Some(r));
        let n: usize = busy.values().sum();
        println!("     besides watches and Lease renewals: {n} requests ({:.2}/s)", r.rate(n));
        let others: usize = self.rest.others.values().sum();
        println!(
            "     writes by others to Nodes, Services, EndpointSlices meanwhile (watch events for every speaker): {others}"
        );
        print_tally(&self.rest.others, None);
        let watches = r.watches();
        if watches.is_empty() {
            println!("     watches opened: none");
        } else {
            let w: Vec<String> = watches.iter().map(|((who, res), n)| format!("{who} {res} {n}")).collect();
            println!("     watches opened (one ended, re-opened): {}", w.join(", "));
        }
        println!(
            "     {:<16} {:>9} {:>20} {:>10}  {:>24}   goal at 5 000 nodes and 10 000 Services: speaker RSS < {:.0} MiB, CPU ≈ 0",
            "process",
            "RSS",
            "(anonymous / file)",
            "live heap",
            "CPU over the window",
            goals::SPEAKER_RSS_MIB
        );
        for p in &self.rest.processes {
            let rss = p.rss.map_or("—".into(), |b| format!("{:.1} MiB", mib(b)));
            let split =
                p.rss_split.map_or(String::new(), |(a, f)| format!("({:.1} / {:.1})", mib(a), mib(f)));
            let cpu = p.cpu.map_or("—".into(), |c| {
                format!("{:.2} s ({:.2} % of a core)", c.as_secs_f64(), 100.0 * share(c, r.window))
            });
            let heap = p.heap.map_or(String::new(), |b| format!("{:.1} MiB", mib(b)));
            println!("     {:<16} {rss:>9} {split:>20} {heap:>10}  {cpu:>24}", p.who);
        }
        println!("     received from the apiserver over the window (ferrolb_kube_client_*):");
        print_received(&self.rest.received, Some(r.window));
    }

    fn print_latency(&self) {
        let l = &self.latency;
        println!(
            "\n  2. Service created → route in BIRD: {} Services one after another at rest (clock from the create request; BIRD polled every 5 ms)",
            l.samples.len() + l.missed.len()
        );
        match spread(&l.samples) {
            Some(s) => println!(
                "     {s}   goal p99 < {:.0} ms{}",
                goals::ROUTE_P99_MS,
                if l.samples.len() < 100 { " (fewer than 100 samples: p99 is the maximum)" } else { "" }
            ),
            None => println!("     no sample"),
        }
        type Part = fn(&Stages) -> Duration;
        let parts: [(&str, Part); 4] = [
            ("the create request → its response (the apiserver, etcd)", |s| s.create),
            ("→ the controller's status write received (watch, controller)", |s| s.controller),
            ("that write, received → answered", |s| s.status_write),
            ("→ the route in BIRD (watch, speakers' plan, BGP)", |s| s.speaker),
        ];
        if !l.stages.is_empty() {
            println!(
                "     where it went (audit log, {} Services; percentiles of each part alone):",
                l.stages.len()
            );
        }
        let after: Vec<Duration> = l.stages.iter().map(Stages::after_create).collect();
        if let Some(s) = spread(&after) {
            println!("     ferrolb's part, the create's answer → the route: {s}");
        }
        for (what, part) in parts {
            if let Some(s) = spread(&l.stages.iter().map(part).collect::<Vec<_>>()) {
                println!("       {what:<64} {s}");
            }
        }
        for (who, r) in &l.replans {
            match r.and_then(|r| Some((r, r.mean()?))) {
                Some((r, mean)) => println!(
                    "     {who}: {} plans meanwhile, {} ms each on average (ferrolb_speaker_replan_seconds)",
                    r.count,
                    crate::fmt_ms(mean)
                ),
                None => println!("     {who}: no plan measured (ferrolb_speaker_replan_seconds)"),
            }
        }
        if !l.missed.is_empty() {
            println!("     not routed within 30 s: {:?}", l.missed);
        }
    }

    fn print_change(&self) {
        println!(
            "\n  3. one Service change: ferrolb's requests from the change until it was quiet for {} s   goal: no list, no relist, no per-node write",
            QUIET.as_secs()
        );
        for (what, r) in [
            ("ports of svc-00001 patched (80 → 8080)", &self.port_change),
            ("one Service created (its pods before)", &self.new_service),
        ] {
            let busy = r.busy();
            let n: usize = busy.values().sum();
            println!(
                "     {what}: {n} requests besides watches and Lease renewals ({} of these){}",
                r.lease_renewals(),
                if n == 0 { "" } else { ":" }
            );
            print_tally(&busy, None);
            let lists: usize = r.lists().values().sum();
            if lists > 0 {
                println!("       of which {lists} lists");
            }
        }
        for (what, received) in [
            ("ports patched", &self.port_change_received),
            ("one Service created", &self.new_service_received),
        ] {
            println!("     received from the apiserver for {what}:");
            print_received(received, None);
        }
        let per_speaker: Vec<String> = self
            .new_service
            .tally(|c| c.is_write() && c.request.node.is_some())
            .iter()
            .map(|((who, verb, res), n)| format!("{who} {verb} {res} {n}"))
            .collect();
        if !per_speaker.is_empty() {
            println!(
                "     per-node writes for one Service created (they grow with the nodes running a speaker): {}",
                per_speaker.join(", ")
            );
        }
    }

    fn print_restart(&self) {
        let r = &self.restart;
        println!(
            "\n  4. rolling restart of every speaker (SIGTERM, started again, its routes back in BIRD before the next), {:.1} s until at rest   goal: ≤ 1 list per speaker per kind",
            r.took.as_secs_f64()
        );
        let lists = r.requests.lists();
        let pages = r.requests.later_pages();
        let mut rows: Vec<String> = SPEAKER_WATCHES.iter().map(|s| (*s).to_string()).collect();
        let others: BTreeSet<String> =
            lists.keys().map(|(_, res)| res.clone()).filter(|res| !rows.contains(res)).collect();
        rows.extend(others);
        let mut header = format!("     {:<24}", "lists (+ later pages)");
        for who in &r.speakers {
            header.push_str(&format!(" {who:>16}"));
        }
        println!("{header}");
        for res in &rows {
            let mut line = format!("     {res:<24}");
            for who in &r.speakers {
                let key = (who.clone(), res.clone());
                let n = lists.get(&key).copied().unwrap_or(0);
                let cell = match pages.get(&key) {
                    Some(p) => format!("{n} (+{p})"),
                    None => n.to_string(),
                };
                line.push_str(&format!(" {cell:>16}"));
            }
            println!("{line}");
        }
        let by_others: Vec<String> = lists
            .iter()
            .filter(|((who, _), _)| !r.speakers.contains(who))
            .map(|((who, res), n)| format!("{who} {res} {n}"))
            .collect();
        if !by_others.is_empty() {
            println!("     lists by others meanwhile: {}", by_others.join(", "));
        }
        println!("     received from the apiserver (a restarted speaker from its start):");
        print_received(&r.received, None);
        let lists: Vec<String> = r
            .uncompressed
            .iter()
            .map(|(res, raw)| {
                let got = max_speaker(&r.received, |x| x.list_bytes_by.get(res).copied().unwrap_or(0));
                format!(
                    "{res} {:.1} KiB (all of them: {:.1} KiB uncompressed)",
                    kib(got.unwrap_or(0)),
                    kib(*raw)
                )
            })
            .collect();
        println!("     a speaker's largest lists, as received: {}", lists.join(", "));
        let other = r.requests.tally(|c| is_busy(c) && c.request.verb != "list");
        let n: usize = other.values().sum();
        println!(
            "     requests besides lists, watches and Lease renewals: {n}{}",
            if n == 0 { "" } else { ":" }
        );
        print_tally(&other, None);
    }
}

/// `p50 … ms  p90 … ms  p99 … ms  max … ms` of `samples`; None without one.
fn spread(samples: &[Duration]) -> Option<String> {
    let [p50, p90, p99, max] = percentiles(samples)?;
    let ms = crate::fmt_ms;
    Some(format!("p50 {} ms  p90 {} ms  p99 {} ms  max {} ms", ms(p50), ms(p90), ms(p99), ms(max)))
}

/// One size's line of the summary, in the units it is shown in.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Row {
    pub(super) nodes: usize,
    pub(super) services: usize,
    /// Measured with an L2Advertisement ([`super::Size::l2`]): every speaker watching
    /// every Node.
    #[serde(default)]
    pub(super) l2: bool,
    /// Fake pods behind each Service.
    pub(super) pods: usize,
    /// Requests a second at rest besides watches and Lease renewals.
    pub(super) rest_rate: f64,
    /// Lists for the two changes.
    pub(super) change_lists: usize,
    /// Writes for one Service created, every component together.
    pub(super) writes: usize,
    /// The most lists of one kind by one speaker over the rolling restart.
    pub(super) restart_lists: usize,
    /// The larger speaker's RSS and live heap, MiB.
    pub(super) rss: Option<f64>,
    pub(super) heap: Option<f64>,
    /// The busier speaker's CPU over the rest window, % of a core.
    pub(super) cpu: Option<f64>,
    /// The controller's RSS and live heap, MiB.
    pub(super) controller: Option<f64>,
    #[serde(default)]
    pub(super) controller_heap: Option<f64>,
    /// Service created → route, p50 and p99, ms.
    pub(super) route: Option<(f64, f64)>,
    /// The create's answer at the apiserver → route (ferrolb's part), p50 and p99, ms.
    #[serde(default)]
    pub(super) after_create: Option<(f64, f64)>,
    /// Services timed to their routes.
    #[serde(default)]
    pub(super) timed: Option<usize>,
    /// The slower speaker's mean plan meanwhile (`ferrolb_speaker_replan_seconds`), ms.
    #[serde(default)]
    pub(super) replan: Option<f64>,
    /// What the busiest speaker received from the apiserver ([`Traffic`]; runs before
    /// its counters have none).
    #[serde(default)]
    pub(super) traffic: Option<Traffic>,
}

/// What one speaker received from the apiserver, the busier one in each window.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Traffic {
    /// At rest: watch events a second and KiB a second.
    pub(super) rest_events: f64,
    pub(super) rest_kib: f64,
    /// For one Service created: watch events and KiB.
    pub(super) new_events: u64,
    pub(super) new_kib: f64,
    /// For one Service's ports patched: watch events and KiB.
    pub(super) port_events: u64,
    pub(super) port_kib: f64,
    /// From its restart until at rest (its lists, mostly), MiB.
    pub(super) restart_mib: f64,
}

impl Traffic {
    fn of(f: &Figures) -> Option<Traffic> {
        let rest = &f.rest.received;
        let secs = f.rest.requests.window.as_secs_f64().max(1e-3);
        Some(Traffic {
            rest_events: max_speaker(rest, |r| r.events)? as f64 / secs,
            rest_kib: kib(max_speaker(rest, Received::bytes)?) / secs,
            new_events: max_speaker(&f.new_service_received, |r| r.events)?,
            new_kib: kib(max_speaker(&f.new_service_received, Received::bytes)?),
            port_events: max_speaker(&f.port_change_received, |r| r.events)?,
            port_kib: kib(max_speaker(&f.port_change_received, Received::bytes)?),
            restart_mib: mib(max_speaker(&f.restart.received, Received::bytes)?),
        })
    }

    /// The columns of the traffic table, after the size: per speaker, then what every
    /// node's speaker together receives for one Service created and for a rollout.
    pub(super) fn cells(&self, nodes: usize) -> [String; 8] {
        let all = (nodes + SPEAKERS) as f64;
        [
            format!("{:.2}", self.rest_events),
            format!("{:.2}", self.rest_kib),
            self.new_events.to_string(),
            format!("{:.1}", self.new_kib),
            self.port_events.to_string(),
            format!("{:.1}", self.port_kib),
            format!("{:.1}", self.restart_mib),
            format!("{:.1} MiB / {:.1} GiB", self.new_kib * all / 1024.0, self.restart_mib * all / 1024.0),
        ]
    }
}

impl Row {
    /// The fake Nodes, marked when every speaker watched every Node.
    pub(super) fn nodes_cell(&self) -> String {
        if self.l2 { format!("{} (L2)", self.nodes) } else { self.nodes.to_string() }
    }

    pub(super) fn of(f: &Figures) -> Row {
        let rest = f.rest.requests.busy().values().sum::<usize>();
        let speakers: Vec<&super::Process> =
            f.rest.processes.iter().filter(|p| p.who.starts_with("speaker")).collect();
        let controller = f.rest.processes.iter().find(|p| p.who == "controller");
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        Row {
            nodes: f.size.nodes,
            services: f.size.services,
            l2: f.size.l2,
            pods: f.pods_per_service,
            rest_rate: f.rest.requests.rate(rest),
            change_lists: [&f.port_change, &f.new_service]
                .iter()
                .map(|r| r.lists().values().sum::<usize>())
                .sum(),
            writes: f.new_service.calls.iter().filter(|c| c.is_write() && is_busy(c)).count(),
            restart_lists: f.restart.requests.lists().values().copied().max().unwrap_or(0),
            rss: speakers.iter().filter_map(|p| p.rss).max().map(mib),
            heap: speakers.iter().filter_map(|p| p.heap).max().map(mib),
            cpu: speakers
                .iter()
                .filter_map(|p| p.cpu)
                .max()
                .map(|c| 100.0 * share(c, f.rest.requests.window)),
            controller: controller.and_then(|p| p.rss).map(mib),
            controller_heap: controller.and_then(|p| p.heap).map(mib),
            route: percentiles(&f.latency.samples).map(|[p50, _, p99, _]| (ms(p50), ms(p99))),
            after_create: percentiles(&f.latency.stages.iter().map(Stages::after_create).collect::<Vec<_>>())
                .map(|[p50, _, p99, _]| (ms(p50), ms(p99))),
            timed: Some(f.latency.samples.len()),
            replan: f.latency.replans.iter().filter_map(|(_, r)| r.as_ref()?.mean()).max().map(ms),
            traffic: Traffic::of(f),
        }
    }

    /// The columns after the size, as shown in both tables.
    pub(super) fn cells(&self) -> [String; 12] {
        let one = |v: Option<f64>| v.map_or("—".into(), |v| format!("{v:.1}"));
        [
            format!("{:.2}", self.rest_rate),
            self.change_lists.to_string(),
            self.writes.to_string(),
            self.restart_lists.to_string(),
            one(self.rss),
            one(self.heap),
            self.cpu.map_or("—".into(), |c| format!("{c:.2}")),
            match (self.controller, self.controller_heap) {
                (Some(rss), Some(heap)) => format!("{rss:.1} ({heap:.1})"),
                (rss, _) => one(rss),
            },
            self.route.map_or("—".into(), |(p50, p99)| format!("{p50:.0} / {p99:.0}")),
            self.after_create.map_or("—".into(), |(p50, p99)| format!("{p50:.0} / {p99:.0}")),
            self.timed.map_or("—".into(), |n| n.to_string()),
            self.replan.map_or("—".into(), crate::fmt_millis),
        ]
    }
}

/// The sizes side by side.
pub(super) fn summary(all: &[Figures]) {
    if all.is_empty() {
        return;
    }
    println!("\n=== bench scale: summary ===");
    println!(
        "  {:>6} {:>8} {:>10} {:>8} {:>8} {:>9} {:>9} {:>9} {:>10} {:>12} {:>15} {:>12} {:>5} {:>8}",
        "fake",
        "",
        "at rest",
        "change",
        "new Svc",
        "restart",
        "speaker",
        "speaker",
        "speaker",
        "controller",
        "created → route",
        "after create",
        "timed",
        "speaker"
    );
    println!(
        "  {:>6} {:>8} {:>10} {:>8} {:>8} {:>9} {:>9} {:>9} {:>10} {:>12} {:>15} {:>12} {:>5} {:>8}",
        "Nodes",
        "Services",
        "req/s (a)",
        "lists",
        "writes",
        "lists (b)",
        "RSS MiB",
        "heap MiB",
        "CPU % (c)",
        "RSS (heap)",
        "p50 / p99 ms",
        "p50/p99 (e)",
        "Svcs",
        "plan ms (d)"
    );
    for row in all.iter().map(Row::of) {
        let [rate, lists, writes, restart, rss, heap, cpu, controller, route, after, timed, replan] =
            row.cells();
        println!(
            "  {:>6} {:>8} {rate:>10} {lists:>8} {writes:>8} {restart:>9} {rss:>9} {heap:>9} {cpu:>10} {controller:>12} {route:>15} {after:>12} {timed:>5} {replan:>8}",
            row.nodes_cell(),
            row.services
        );
    }
    println!("  (a) besides watches and the controller's Lease renewals; goal ≈ 0");
    println!("  (b) the most lists of one kind by one speaker; goal ≤ 1");
    println!("  (c) of one core, the busier speaker, over the rest window; goal ≈ 0");
    println!(
        "  (d) the slower speaker's mean plan while the Services were timed to their routes (ferrolb_speaker_replan_seconds)"
    );
    println!(
        "  (e) ferrolb's part of the route: from the create's answer at the apiserver (audit log) to the route; the rest is the create itself"
    );
    println!(
        "  goals: no list per change; speaker RSS < {:.0} MiB at 5 000 nodes and 10 000 Services; p99 < {:.0} ms",
        goals::SPEAKER_RSS_MIB,
        goals::ROUTE_P99_MS
    );
    println!("  new Svc writes: by the controller and every speaker together, for one Service created");
    println!(
        "  speaker RSS and heap: the larger speaker's at the end of the rest window; heap = ferrolb_speaker_heap_bytes (live allocations)"
    );
    println!(
        "\n  what the busier speaker received from the apiserver (ferrolb_kube_client_*), and every node's speaker together:"
    );
    println!(
        "  {:>6} {:>8} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10}  × every node: new Svc / rollout",
        "Nodes",
        "Services",
        "rest ev/s",
        "rest KiB/s",
        "new Svc ev",
        "new KiB",
        "ports ev",
        "ports KiB",
        "restart MiB"
    );
    for row in all.iter().map(Row::of) {
        let Some(t) = row.traffic else { continue };
        let [re, rk, ne, nk, pe, pk, rm, all] = t.cells(row.nodes);
        println!(
            "  {:>6} {:>8} {re:>10} {rk:>10} {ne:>10} {nk:>10} {pe:>10} {pk:>10} {rm:>10}  {all}",
            row.nodes_cell(),
            row.services
        );
    }
}

/// What each component received: watch events and bytes, the rest of the bytes (and
/// rates over `window` when given).
fn print_received(received: &BTreeMap<String, Received>, window: Option<Duration>) {
    if received.is_empty() {
        println!("       (no component's metrics could be read)");
    }
    for (who, r) in received {
        match window.map(|w| w.as_secs_f64().max(1e-3)) {
            Some(s) => println!(
                "       {who:<16} {:>8} watch events ({:.2}/s), {:>10.1} KiB of them ({:.2} KiB/s), {:>10.1} KiB other answers",
                r.events,
                r.events as f64 / s,
                kib(r.watch_bytes),
                kib(r.watch_bytes) / s,
                kib(r.other_bytes)
            ),
            None => println!(
                "       {who:<16} {:>8} watch events, {:>10.1} KiB of them, {:>10.1} KiB other answers (lists, gets, writes)",
                r.events,
                kib(r.watch_bytes),
                kib(r.other_bytes)
            ),
        }
        let by: Vec<String> = r.changes_by.iter().map(|(res, n)| format!("{res} {n}")).collect();
        println!(
            "       {:<16} of the events, {} bookmarks; changes by resource: {}",
            "",
            r.bookmarks,
            if by.is_empty() { "none".to_owned() } else { by.join(", ") }
        );
    }
}

/// Rows of a tally: component, verb, resource, count (and rate over `per` when given).
fn print_tally(t: &Tally, per: Option<&Requests>) {
    for ((who, verb, resource), n) in t {
        match per {
            Some(r) => println!("     {who:<16} {verb:<7} {resource:<24} {n:>5}  {:>5.2}/s", r.rate(*n)),
            None => println!("       {who:<16} {verb:<7} {resource:<24} {n:>5}"),
        }
    }
}

/// The share of `window` that `cpu` is.
fn share(cpu: Duration, window: Duration) -> f64 {
    cpu.as_secs_f64() / window.as_secs_f64().max(1e-3)
}

/// Bytes in KiB.
fn kib(bytes: u64) -> f64 {
    bytes as f64 / 1024.0
}
