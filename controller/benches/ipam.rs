//! Allocation cost and memory for 10k and 100k Services from a /16 plus a /112.
//!
//! `cargo bench -p ferrolb-controller --bench ipam` prints one-shot figures (CPU time per
//! allocation, heap peak and retained heap) and then runs criterion on the same workloads.

// A counting GlobalAlloc needs `unsafe impl`; it only forwards to System and counts bytes.
#![allow(unsafe_code)]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use criterion::{BatchSize, Criterion, Throughput};
use ferrolb_controller::ipam::{
    Allocator, Family, FamilyPolicy, PoolSpec, Protocol, ServiceKey, ServiceRequest,
};

struct Counting;

static CURRENT: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

fn grew(n: usize) {
    let now = CURRENT.fetch_add(n, Ordering::Relaxed) + n;
    PEAK.fetch_max(now, Ordering::Relaxed);
}

// SAFETY: every method forwards unchanged to `System`, which upholds the GlobalAlloc
// contract; the only addition is relaxed atomic byte counting, which cannot allocate.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: same contract as our caller's.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: same contract as our caller's.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as our caller's.
        unsafe { System.dealloc(ptr, layout) };
        CURRENT.fetch_sub(layout.size(), Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: same contract as our caller's.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            CURRENT.fetch_sub(layout.size(), Ordering::Relaxed);
            grew(new_size);
        }
        p
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// CPU time of this thread in ns (first field of schedstat), immune to the other
/// engineers' load on the shared cores.
fn thread_cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

fn vm_hwm() -> String {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM"))
                .map(|l| l.split_whitespace().skip(1).collect::<Vec<_>>().join(" "))
        })
        .unwrap_or_else(|| "?".into())
}

fn pools() -> Allocator {
    let mut a = Allocator::new();
    a.set_pool(PoolSpec::new(
        "bench",
        vec!["198.18.0.0/16".parse().unwrap(), "2001:db8::/112".parse().unwrap()],
    ));
    a
}

#[derive(Clone, Copy)]
enum Workload {
    /// Every Service RequireDualStack with its own pair of addresses.
    DualStack,
    /// RequireDualStack, two Services per sharing key on different ports.
    DualStackShared,
    /// SingleStack, alternating IPv4 and IPv6.
    SingleStack,
}

impl Workload {
    fn name(self) -> &'static str {
        match self {
            Workload::DualStack => "dual-stack",
            Workload::DualStackShared => "dual-stack, 2 per sharing key",
            Workload::SingleStack => "single-stack, alternating families",
        }
    }
}

fn requests(n: usize, w: Workload) -> Vec<ServiceRequest> {
    (0..n)
        .map(|i| {
            let mut r = ServiceRequest::new(format!("ns{}", i % 100), format!("svc{i}"));
            r.ports = vec![(Protocol::Tcp, 80 + (i % 2) as u16)];
            r.created = i as i64;
            r.families = match w {
                Workload::DualStack => FamilyPolicy::RequireDualStack(Family::V4),
                Workload::DualStackShared => {
                    r.sharing_key = Some(format!("k{}", i / 2));
                    FamilyPolicy::RequireDualStack(Family::V4)
                }
                Workload::SingleStack if i % 2 == 0 => FamilyPolicy::SingleStack(Family::V4),
                Workload::SingleStack => FamilyPolicy::SingleStack(Family::V6),
            };
            r
        })
        .collect()
}

fn allocate_all(a: &mut Allocator, reqs: Vec<ServiceRequest>) {
    for r in reqs {
        black_box(a.allocate(r).unwrap());
    }
}

fn one_shot(n: usize, w: Workload) {
    let reqs = requests(n, w);
    let mut a = pools();
    let base = CURRENT.load(Ordering::Relaxed);
    PEAK.store(base, Ordering::Relaxed);
    let cpu = thread_cpu_ns();
    allocate_all(&mut a, reqs);
    let cpu = thread_cpu_ns() - cpu;
    let peak = PEAK.load(Ordering::Relaxed) - base;
    let live = CURRENT.load(Ordering::Relaxed).saturating_sub(base);
    let s = a.pool_stats("bench").unwrap();
    println!(
        "{n:>6} services, {:<36} {:>8.1} ms CPU, {:>6.0} ns/alloc; heap peak +{:.1} MiB, held {:.1} MiB ({:.0} B/service); v4 {}/{} v6 {}/{} assigned",
        w.name(),
        cpu as f64 / 1e6,
        cpu as f64 / n as f64,
        peak as f64 / 1048576.0,
        live as f64 / 1048576.0,
        live as f64 / n as f64,
        s.v4.assigned,
        s.v4.capacity,
        s.v6.assigned,
        s.v6.capacity,
    );
    // Releasing everything must hand every address back.
    let keys: Vec<ServiceKey> = a.services().map(|(k, _)| k.clone()).collect();
    let cpu = thread_cpu_ns();
    for k in &keys {
        a.release(k);
    }
    let cpu = thread_cpu_ns() - cpu;
    let s = a.pool_stats("bench").unwrap();
    assert_eq!((s.v4.assigned, s.v6.assigned), (0, 0));
    println!(
        "{:>6} releases{:<38}{:>8.1} ms CPU, {:>6.0} ns/release",
        n,
        "",
        cpu as f64 / 1e6,
        cpu as f64 / n as f64
    );
}

/// Same work from a /112 and from a /64, and from a pool fragmented into 32k free holes:
/// the cost per allocation must not follow the pool size.
fn pool_size_independence() {
    let v6 = |n: usize| -> Vec<ServiceRequest> {
        requests(n, Workload::SingleStack)
            .into_iter()
            .map(|mut r| {
                r.families = FamilyPolicy::SingleStack(Family::V6);
                r
            })
            .collect()
    };
    for cidr in ["2001:db8::/112", "2001:db8::/64", "2001:db8::/32"] {
        let mut a = Allocator::new();
        a.set_pool(PoolSpec::new("v6", vec![cidr.parse().unwrap()]));
        let cpu = thread_cpu_ns();
        allocate_all(&mut a, v6(50_000));
        let cpu = thread_cpu_ns() - cpu;
        let s = a.pool_stats("v6").unwrap().v6;
        println!(
            "{:>6} services from {cidr:<14} {:>28}{:>8.1} ms CPU, {:>6.0} ns/alloc; available {}",
            50_000,
            "",
            cpu as f64 / 1e6,
            cpu as f64 / 50_000.0,
            s.available
        );
    }
    // Fill a /16, free every other address, then allocate into the 32,768 holes.
    let mut a = Allocator::new();
    a.set_pool(PoolSpec::new("v4", vec!["198.18.0.0/16".parse().unwrap()]));
    let reqs = requests(65_536, Workload::SingleStack)
        .into_iter()
        .map(|mut r| {
            r.families = FamilyPolicy::SingleStack(Family::V4);
            r
        })
        .collect::<Vec<_>>();
    allocate_all(&mut a, reqs.clone());
    for r in reqs.iter().step_by(2) {
        a.release(&r.key);
    }
    let refill: Vec<ServiceRequest> = reqs
        .iter()
        .step_by(2)
        .map(|r| {
            let mut r = r.clone();
            r.key = ServiceKey::new(r.key.namespace(), format!("{}-again", r.key.name()));
            r
        })
        .collect();
    let n = refill.len();
    let cpu = thread_cpu_ns();
    allocate_all(&mut a, refill);
    let cpu = thread_cpu_ns() - cpu;
    println!(
        "{n:>6} services into a /16 with {n} one-address holes {:>9}{:>8.1} ms CPU, {:>6.0} ns/alloc",
        "",
        cpu as f64 / 1e6,
        cpu as f64 / n as f64
    );
}

fn main() {
    println!("one-shot (thread CPU time from /proc/thread-self/schedstat, heap from a counting allocator):");
    for (n, w) in [
        (10_000, Workload::DualStack),
        (10_000, Workload::DualStackShared),
        (65_536, Workload::DualStack),
        (100_000, Workload::DualStackShared),
        (100_000, Workload::SingleStack),
    ] {
        one_shot(n, w);
    }
    pool_size_independence();
    println!("process VmHWM after one-shot runs: {}", vm_hwm());

    let mut c = Criterion::default()
        .configure_from_args()
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(5));
    let mut g = c.benchmark_group("ipam/allocate");
    for (n, w, id) in [
        (10_000, Workload::DualStack, "10k-dual-stack"),
        (100_000, Workload::DualStackShared, "100k-dual-stack-shared"),
        (100_000, Workload::SingleStack, "100k-single-stack"),
    ] {
        g.throughput(Throughput::Elements(n as u64));
        let reqs = requests(n, w);
        g.bench_function(id, |b| {
            b.iter_batched(
                || (pools(), reqs.clone()),
                |(mut a, reqs)| {
                    allocate_all(&mut a, reqs);
                    a
                },
                BatchSize::PerIteration,
            )
        });
    }
    g.finish();
    c.final_summary();
}
