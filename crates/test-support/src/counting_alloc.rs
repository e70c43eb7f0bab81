//! A global allocator that counts allocations, for the tests that check a
//! path allocates nothing (one test per binary, so no other test allocates
//! while it counts). Each test binary installs it:
//! `#[global_allocator] static GLOBAL: counting_alloc::Counting = counting_alloc::Counting;`.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

/// Allocations made so far by the whole test binary.
pub static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);

/// The system allocator, counting each allocation in [`ALLOCATIONS`].
pub struct Counting;

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
}
