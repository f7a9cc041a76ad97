//! The speaker's allocator: the system's, counting the bytes of live allocations so
//! `ferrolb_speaker_heap_bytes` costs one atomic load per scrape. glibc's `mallinfo2`,
//! used before, walks every free chunk of every arena under the arena locks: about 100 ms
//! of CPU per scrape after a 50k-Service file was replaced, stalling allocations meanwhile.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

static IN_USE: AtomicUsize = AtomicUsize::new(0);

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
            IN_USE.fetch_add(layout.size(), Ordering::Relaxed);
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded as is (see the impl).
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            IN_USE.fetch_add(layout.size(), Ordering::Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded as is (see the impl).
        unsafe { System.dealloc(ptr, layout) };
        IN_USE.fetch_sub(layout.size(), Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: forwarded as is (see the impl).
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            // On failure the old block stays allocated and counted.
            IN_USE.fetch_add(new_size, Ordering::Relaxed);
            IN_USE.fetch_sub(layout.size(), Ordering::Relaxed);
        }
        p
    }
}

/// Bytes held by live allocations, when [`Counting`] is the global allocator (None in
/// benches and other crates' tests, which run on the plain system allocator).
pub fn in_use() -> Option<u64> {
    match IN_USE.load(Ordering::Relaxed) {
        0 => None,
        n => u64::try_from(n).ok(),
    }
}

/// Unit tests count too (`metrics` tests the gauge through it).
#[cfg(test)]
#[global_allocator]
static TEST_ALLOC: Counting = Counting;
