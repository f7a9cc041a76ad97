//! ferrolb speaker: decides which addresses this node announces and announces them
//! by BGP and/or ARP/NDP, driving the protocols of `ferrolb-proto`.
//!
//! Data flow: [`model`] (a plain snapshot, from a static file or the API) →
//! [`plan::plan`] (pure) → announcers ([`announce::bgp`], [`announce::l2`]); [`run`]
//! is the event loop that drives them.
pub mod announce;
pub mod cluster;
pub mod error;
pub mod metrics;
pub mod model;
pub mod plan;
pub mod readiness;
pub mod run;

/// Unit tests count the heap too (`metrics` tests the gauge through it).
#[cfg(test)]
#[global_allocator]
static TEST_ALLOC: ferrolb_runtime::heap::Counting = ferrolb_runtime::heap::Counting;

/// More entries than this (Services, fragments, routes), and a replaced value is freed
/// by [`drop_later`] on a thread of its own.
pub(crate) const LARGE: usize = 1000;

/// Drops `value` on a thread of its own when it holds more than [`LARGE`] `entries`, so
/// freeing the old model or plan of 50k Services (tens of milliseconds) does not delay
/// the new announcements. Small values, or any when no thread can be had, are dropped
/// here.
pub(crate) fn drop_later<T: Send + 'static>(value: T, entries: usize) {
    if entries > LARGE {
        // A failed spawn drops the closure, and `value` with it.
        let _ = std::thread::Builder::new().name("drop".into()).spawn(move || drop(value));
    }
}
