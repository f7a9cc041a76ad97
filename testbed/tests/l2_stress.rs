//! The L2 failure detector as users get it, on saturated cores: three speakers with the
//! shipped heartbeat defaults (5 ms beats, 20 ms of silence on a quiet network), while
//! stress-ng keeps every core of the machine busy with CPU, I/O and memory workers (all
//! lab nodes are namespaces of this one host, beside the debug builds' own load). No
//! owner may move and no ARP request may be answered by two MACs; then, the stress still
//! on, a cut link of the addresses' home must still move them within a second.
//!
//! The same runs with the speakers denied any real-time budget (RLIMIT_RTPRIO 0, no
//! CAP_SYS_NICE: their heartbeat thread at normal priority), as some container runtimes
//! run them. The soak and sampling are `bench l2-soak`'s ([`l2_soak::observe`]).
//!
//! Needs `target/debug/ferrolb-speaker` (testbed/test.sh builds it first) and stress-ng.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test fails by panicking

use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use ferrolb_bench::failover::{self, Bed, Family, System};
use ferrolb_bench::l2_soak::{self, Soaked, Stress};
use ferrolb_lab::process::strip_ansi;
use ferrolb_lab::speaker::WITHOUT_REALTIME;
use ferrolb_lab::wait;

/// Both tests take every core: one at a time.
static CORES: Mutex<()> = Mutex::new(());

const T: Duration = Duration::from_secs(30);

/// Link cuts of the home after the soak, under the same stress.
const CUTS: usize = 5;

/// What a successor logs when it suspects a silent owner.
const SUSPECTED: &str = "membership: no heartbeat from";

/// What a speaker logs when the host's pressure (PSI) stretches its heartbeat silence.
const STRETCHED: &str = "heartbeat silence stretched";

/// What a successor logs when it starts watching an owner's beats.
const WATCHING: &str = "membership: hearing heartbeats from";

/// The silence each successor allows, from its `WATCHING` lines.
fn allowed_silences(bed: &Bed) -> Vec<String> {
    let logs: Vec<String> = bed.speaker_logs().iter().map(|l| strip_ansi(l)).collect();
    let lines = logs.iter().flat_map(|l| l.lines()).filter(|l| l.contains(WATCHING));
    lines
        .filter_map(|l| l.split_whitespace().find_map(|f| f.strip_prefix("silence=")))
        .map(str::to_owned)
        .collect()
}

/// Starts a three-node bed (speakers run by `wrapper`) and waits until every successor
/// hears its owner's beats: without them the soak would prove nothing.
fn bed(wrapper: &[&str]) -> Bed {
    let vips = failover::vips(&Family::ALL);
    let bed = Bed::up_wrapped(System::Ferrolb, 3, &vips, wrapper).unwrap();
    wait::until_holds("a successor hearing its owner's heartbeats", T, || {
        bed.speaker_logs().iter().any(|l| l.contains(WATCHING))
    })
    .unwrap();
    bed
}

/// Checks the soak: no owner change, no ARP request answered twice, no suspicion logged,
/// and every speaker stretched its heartbeat silence for the host's pressure.
fn assert_nothing_moved(bed: &Bed, soaked: &Soaked, logs: &[String]) {
    l2_soak::print_changes(bed, soaked);
    let suspicions: usize = logs.iter().map(|l| l.matches(SUSPECTED).count()).sum();
    println!(
        "{:.0} s under stress: {} owner changes, {} of {} ARP samples answered by two MACs, {suspicions} suspicions",
        soaked.seconds,
        soaked.owner_changes(),
        soaked.answered_twice(),
        soaked.arp_samples()
    );
    let all = logs.join("\n---\n");
    assert_eq!(soaked.owner_changes(), 0, "false failovers under stress\n{all}");
    assert_eq!(soaked.answered_twice(), 0, "two owners at once under stress\n{all}");
    assert!(soaked.arp_samples() > 0, "the ARP sampler ran");
    assert_eq!(suspicions, 0, "a false suspicion under stress\n{all}");
    // The stress is what the kernel reports: every speaker allowed more silence.
    assert!(logs.iter().all(|l| l.contains(STRETCHED)), "a speaker never saw the host's pressure\n{all}");
}

/// Shipped defaults, 60 s of saturated cores: nothing moves; five link cuts of the home
/// under the same stress each move every address (the failover times are printed).
#[test]
fn saturated_cores_move_nothing_and_a_cut_link_moves_everything() {
    let _cores = CORES.lock().unwrap_or_else(PoisonError::into_inner);
    let mut bed = bed(&[]);
    // Owners at real-time priority send regular beats: the configured silence (20 ms),
    // or a little more on a host busy at that moment; never the largest.
    let silences = allowed_silences(&bed);
    assert!(!silences.is_empty() && silences.iter().all(|s| s != "250ms"), "{silences:?}");
    let soak = Duration::from_secs(60);
    let stress = Stress::start(soak + Duration::from_secs(90)).unwrap();
    let mut soaked = l2_soak::observe(&bed, soak).unwrap();
    let logs = bed.speaker_logs();
    soaked.failovers = l2_soak::link_cuts(&mut bed, CUTS).unwrap();
    drop(stress);
    l2_soak::print_table(std::slice::from_ref(&soaked));
    assert_nothing_moved(&bed, &soaked, &logs);
    // The silence each successor allowed its owner before it took over.
    for line in bed.speaker_logs().iter().flat_map(|l| l.lines()).filter(|l| l.contains(SUSPECTED)) {
        println!("  {line}");
    }
    let f = soaked.failover_summary();
    println!("link cut of the home under stress, {} trials × VIPs: {f:?}", soaked.failovers.len());
    let f = f.unwrap_or_else(|| panic!("a link cut was never followed: {:?}", soaked.failovers));
    assert!(f.max < Duration::from_secs(1), "failover took {f}");
}

/// No real-time priority (RLIMIT_RTPRIO 0, no CAP_SYS_NICE): the heartbeat thread runs at
/// normal priority among the stress workers, says so in its beats, and nothing moves in
/// 30 s.
#[test]
fn without_realtime_priority_saturated_cores_move_nothing() {
    let _cores = CORES.lock().unwrap_or_else(PoisonError::into_inner);
    let bed = bed(WITHOUT_REALTIME);
    // The case meant: every speaker's heartbeat thread was refused real-time and nice -20.
    wait::until_holds("every speaker refused a real-time heartbeat", T, || {
        bed.speaker_logs().iter().all(|l| l.contains("cannot run the L2 heartbeat at real-time priority"))
    })
    .unwrap();
    // Each owner says its beats may come late, so its successors allow it the largest
    // silence from its first beat on.
    let silences = allowed_silences(&bed);
    assert!(!silences.is_empty() && silences.iter().all(|s| s == "250ms"), "{silences:?}");
    let stress = Stress::start(Duration::from_secs(60)).unwrap();
    let soaked = l2_soak::observe(&bed, Duration::from_secs(30)).unwrap();
    drop(stress);
    l2_soak::print_table(std::slice::from_ref(&soaked));
    assert_nothing_moved(&bed, &soaked, &bed.speaker_logs());
}
