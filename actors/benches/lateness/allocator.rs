//! The bench's global allocator: the system's by default, as a program that embeds
//! sundial has, or mimalloc set up as the `sundial` binary sets it up when
//! `SUNDIAL_BENCH_ALLOCATOR=mimalloc`. Both schedulers measured in a run share it.
//!
//! With `SUNDIAL_BENCH_COUNT_ALLOCATIONS=1` it also counts allocations (one shared atomic
//! increment each, so only in runs that report them: `allocations per fire` in the
//! bench's output).
//!
//! The choice is made once, at the process's first allocation (before `main`, on one
//! thread), from the environment read without allocating, so nothing is ever freed by the
//! allocator that did not allocate it.

#![allow(unsafe_code)] // A global allocator is unsafe by contract.

use std::alloc::{GlobalAlloc, Layout, System};
use std::ffi::CStr;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};

use sundial_actors::allocator::Allocator as Mimalloc;

/// The variable that chooses mimalloc.
pub(crate) const VARIABLE: &str = "SUNDIAL_BENCH_ALLOCATOR";

const UNDECIDED: u8 = 0;
const SYSTEM: u8 = 1;
const MIMALLOC: u8 = 2;
/// Added to the allocator's value when allocations are counted.
const COUNTED: u8 = 4;

static CHOICE: AtomicU8 = AtomicU8::new(UNDECIDED);
static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

/// The system allocator or mimalloc, chosen by [`VARIABLE`].
pub(crate) struct BenchAllocator;

/// The choice, made at the first call.
#[inline]
fn choice() -> u8 {
    match CHOICE.load(Ordering::Relaxed) {
        UNDECIDED => decide(),
        choice => choice,
    }
}

/// Whether this process runs on mimalloc.
pub(crate) fn is_mimalloc() -> bool {
    choice() & MIMALLOC != 0
}

/// Allocations so far, when counted.
pub(crate) fn allocations() -> Option<u64> {
    (choice() & COUNTED != 0).then(|| ALLOCATIONS.load(Ordering::Relaxed))
}

/// Which allocator serves this allocation, counting it when asked.
#[inline]
fn mimalloc_counting() -> bool {
    let choice = choice();
    if choice & COUNTED != 0 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
    }
    choice & MIMALLOC != 0
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
fn decide() -> u8 {
    let variable = |name: &CStr| {
        // SAFETY: a NUL-terminated name; getenv neither allocates nor keeps the pointer,
        // and the environment is not changed by this process before `main`.
        let value = unsafe { libc::getenv(name.as_ptr()) };
        // SAFETY: a non-null result of getenv is a NUL-terminated string.
        (!value.is_null()).then(|| unsafe { CStr::from_ptr(value) })
    };
    let mut choice = if variable(c"SUNDIAL_BENCH_ALLOCATOR") == Some(c"mimalloc") { MIMALLOC } else { SYSTEM };
    if variable(c"SUNDIAL_BENCH_COUNT_ALLOCATIONS") == Some(c"1") {
        choice |= COUNTED;
    }
    CHOICE.store(choice, Ordering::Relaxed);
    choice
}

// SAFETY: every call goes to one allocator for the whole process (see the module docs),
// which upholds `GlobalAlloc`'s contract itself.
unsafe impl GlobalAlloc for BenchAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract, passed on.
        unsafe {
            if mimalloc_counting() {
                Mimalloc {}.alloc(layout)
            } else {
                System.alloc(layout)
            }
        }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract, passed on.
        unsafe {
            if mimalloc_counting() {
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
            if mimalloc_counting() {
                Mimalloc {}.realloc(ptr, layout, new_size)
            } else {
                System.realloc(ptr, layout, new_size)
            }
        }
    }
}
