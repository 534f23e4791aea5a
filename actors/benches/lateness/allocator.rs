//! The bench's global allocator: the system's by default, as a program that embeds
//! sundial has, or mimalloc set up as the `sundial` binary sets it up when
//! `SUNDIAL_BENCH_ALLOCATOR=mimalloc`. Both schedulers measured in a run share it.
//!
//! The choice is made once, at the process's first allocation (before `main`, on one
//! thread), from the environment read without allocating, so nothing is ever freed by the
//! allocator that did not allocate it.

#![allow(unsafe_code)] // A global allocator is unsafe by contract.

use std::alloc::{GlobalAlloc, Layout, System};
use std::ffi::CStr;
use std::sync::atomic::{AtomicU8, Ordering};

use sundial_actors::allocator::Allocator as Mimalloc;

/// The variable that chooses mimalloc.
pub(crate) const VARIABLE: &str = "SUNDIAL_BENCH_ALLOCATOR";

const UNDECIDED: u8 = 0;
const SYSTEM: u8 = 1;
const MIMALLOC: u8 = 2;

static CHOICE: AtomicU8 = AtomicU8::new(UNDECIDED);

/// The system allocator or mimalloc, chosen by [`VARIABLE`].
pub(crate) struct BenchAllocator;

/// Whether this process runs on mimalloc.
pub(crate) fn is_mimalloc() -> bool {
    match CHOICE.load(Ordering::Relaxed) {
        SYSTEM => false,
        MIMALLOC => true,
        _ => decide(),
    }
}

/// Its name, for the bench's output.
pub(crate) fn name() -> &'static str {
    if is_mimalloc() {
        "mimalloc"
    } else {
        "the system allocator"
    }
}

#[cold]
fn decide() -> bool {
    // SAFETY: a NUL-terminated name; getenv neither allocates nor keeps the pointer, and
    // the environment is not changed by this process before `main`.
    let value = unsafe { libc::getenv(c"SUNDIAL_BENCH_ALLOCATOR".as_ptr()) };
    // SAFETY: a non-null result of getenv is a NUL-terminated string.
    let mimalloc = !value.is_null() && unsafe { CStr::from_ptr(value) } == c"mimalloc";
    CHOICE.store(if mimalloc { MIMALLOC } else { SYSTEM }, Ordering::Relaxed);
    mimalloc
}

// SAFETY: every call goes to one allocator for the whole process (see the module docs),
// which upholds `GlobalAlloc`'s contract itself.
unsafe impl GlobalAlloc for BenchAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract, passed on.
        unsafe {
            if is_mimalloc() {
                Mimalloc {}.alloc(layout)
            } else {
                System.alloc(layout)
            }
        }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract, passed on.
        unsafe {
            if is_mimalloc() {
                Mimalloc {}.alloc_zeroed(layout)
            } else {
                System.alloc_zeroed(layout)
            }
        }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract, passed on; `ptr` came from the same allocator.
        unsafe {
            if is_mimalloc() {
                Mimalloc {}.dealloc(ptr, layout)
            } else {
                System.dealloc(ptr, layout)
            }
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller's contract, passed on; `ptr` came from the same allocator.
        unsafe {
            if is_mimalloc() {
                Mimalloc {}.realloc(ptr, layout, new_size)
            } else {
                System.realloc(ptr, layout, new_size)
            }
        }
    }
}
