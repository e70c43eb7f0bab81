//! A global allocator that counts the live heap bytes, for the tests that
//! check memory stays flat. Each test binary installs it:
//! `#[global_allocator] static GLOBAL: live_heap::Counting = live_heap::Counting;`.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};

/// The system allocator, counting.
pub struct Counting;

/// Bytes allocated and not yet freed.
static LIVE: AtomicIsize = AtomicIsize::new(0);

/// Bytes allocated and not yet freed, now.
pub fn live() -> isize {
    LIVE.load(Ordering::Relaxed)
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        unsafe { System.dealloc(ptr, layout) }
    }
}

/// Prints the live heap `before` and `after` (what `label` sent between)
/// and asserts it stayed flat: within 64 KiB, slack for the allocator's
/// own bookkeeping, far below what a table growing with the input keeps.
pub fn assert_flat(label: &str, before: isize, after: isize) {
    let growth = after - before;
    println!(
        "{label}: live heap {} KiB before, {} KiB after ({growth:+} bytes)",
        before / 1024,
        after / 1024
    );
    assert!(growth.abs() < 64 * 1024, "{label}: grew by {growth} bytes");
}
