//! The allocator of the speaker and the controller: the system's, counting the bytes of
//! live allocations so their heap gauges (`ferrolb_speaker_heap_bytes`,
//! `ferrolb_controller_heap_bytes`) cost one atomic load per scrape. glibc's `mallinfo2`,
//! used before, walks every free chunk of every arena under the arena locks: about 100 ms
//! of CPU per scrape after a 50k-Service file was replaced, stalling allocations meanwhile.
//! What RSS holds beyond the gauge is the allocator's free memory and the binary's text.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

/// Live bytes, striped over cache lines: threads allocating at once (the parse threads
/// of a static file) would otherwise fight over one line on every malloc and free, and
/// parsing 50k Services took twice as long. A stripe may go "negative" (wrapping) when
/// a block is freed by another thread than allocated it; the sum is exact.
#[repr(align(128))]
struct Stripe(AtomicUsize);

const STRIPES: usize = 16;
static IN_USE: [Stripe; STRIPES] = [const { Stripe(AtomicUsize::new(0)) }; STRIPES];
static NEXT_STRIPE: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// This thread's stripe, handed out in turn on first use.
    static MY_STRIPE: std::cell::Cell<usize> = const { std::cell::Cell::new(usize::MAX) };
}

fn stripe() -> &'static AtomicUsize {
    let i = MY_STRIPE
        .try_with(|s| {
            if s.get() == usize::MAX {
                s.set(NEXT_STRIPE.fetch_add(1, Ordering::Relaxed) % STRIPES);
            }
            s.get()
        })
        // A thread being torn down: any stripe will do.
        .unwrap_or(0);
    &IN_USE[i].0
}

fn add(n: usize) {
    stripe().fetch_add(n, Ordering::Relaxed);
}

fn sub(n: usize) {
    stripe().fetch_sub(n, Ordering::Relaxed);
}

/// The system allocator, counting (install with `#[global_allocator]`).
pub struct Counting;

// SAFETY: every call goes to `System` with the caller's arguments unchanged; the
// counter only observes sizes.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded as is (see the impl).
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            add(layout.size());
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded as is (see the impl).
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            add(layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded as is (see the impl).
        unsafe { System.dealloc(ptr, layout) };
        sub(layout.size());
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: forwarded as is (see the impl).
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            // On failure the old block stays allocated and counted.
            add(new_size);
            sub(layout.size());
        }
        p
    }
}

/// Bytes held by live allocations, when [`Counting`] is the global allocator (None in
/// benches and tests that run on the plain system allocator).
pub fn in_use() -> Option<u64> {
    let sum = IN_USE.iter().fold(0usize, |sum, s| sum.wrapping_add(s.0.load(Ordering::Relaxed)));
    match sum {
        0 => None,
        n => u64::try_from(n).ok(),
    }
}

/// This crate's unit tests count (the binaries install [`Counting`] themselves).
#[cfg(test)]
#[global_allocator]
static TEST_ALLOC: Counting = Counting;

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    #[test]
    fn live_allocations_are_counted_until_freed() {
        // Other tests' threads allocate and free meanwhile: a margin of 16 MiB either way.
        const BLOCK: u64 = 64 << 20;
        const MARGIN: u64 = 48 << 20;
        let before = super::in_use().unwrap();
        let block = vec![1u8; BLOCK as usize];
        let held = super::in_use().unwrap();
        assert!(held >= before + MARGIN, "{before} -> {held}");
        assert_eq!(block.iter().map(|&b| u64::from(b)).sum::<u64>(), BLOCK);
        drop(block);
        let after = super::in_use().unwrap();
        assert!(after + MARGIN <= held, "{held} -> {after}");
    }
}
