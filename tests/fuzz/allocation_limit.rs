//! The allocator of every fuzz target (each includes this file as `mod
//! allocation_limit`): one allocation over 256 MiB, the memory a hostile
//! bundle must be served in, aborts the run, so libFuzzer keeps the input
//! as a crash. (libFuzzer's own `-malloc_limit_mb` needs a sanitizer's
//! malloc hooks; the targets build without a sanitizer.)

use std::alloc::{GlobalAlloc, Layout, System};

/// The largest allocation a target may make.
pub const LIMIT: usize = 256 << 20;

struct Limited;

fn check(size: usize) {
    if size > LIMIT {
        // (No allocation here: the message is a fixed string.)
        eprintln!("allocation_limit: one allocation over 256 MiB; aborting");
        std::process::abort();
    }
}

// SAFETY: every call is passed on to the system allocator unchanged, after
// a size check that aborts.
unsafe impl GlobalAlloc for Limited {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        check(layout.size());
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        check(layout.size());
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        check(new_size);
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Limited = Limited;
