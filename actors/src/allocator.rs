//! The allocator the `sundial` binary runs on, and how it is set up.
//!
//! A node's store and run bookkeeping are mostly small allocations, which mimalloc serves
//! at about half the system allocator's cost. One default does not suit a scheduler:
//! mimalloc returns memory to the system once it has been free for one second, so the
//! next use of it takes page faults and the kernel zeroes the pages again. Cron loads free
//! a second's runs and allocate the next second's a moment later: at 100,000 fires/s for
//! 20 s (the lateness bench) the default cost 300,000 page faults and about a fifth of the
//! node's CPU per fire. [`configure`] returns memory only after ten seconds unused (as
//! jemalloc's default decay does): a node's steady working set stays mapped, and memory
//! freed after a peak still goes back to the system.
//!
//! On Linux it also turns transparent huge pages off for the process (mimalloc asks for
//! them on its heap, and its first arena is mapped before `main`, so the process-wide
//! `PR_SET_THP_DISABLE` is the switch that covers it). With them, the first touch of each
//! 2 MiB of new heap faults in a whole huge page, zeroed (and compacted for) at once on
//! whichever thread allocated (a run starting, a store transaction), and returning a
//! freed part of one splits it. At 10,000 fires/s (the lateness bench, five runs each way)
//! a node spent 52 µs of CPU per fire with them and 48 µs without; latency-sensitive
//! services commonly turn them off for the same reason.

/// The global allocator of the `sundial` binary and of the benchmarks that measure it.
pub type Allocator = mimalloc::MiMalloc;

/// `mi_option_purge_delay` in mimalloc's option enum (the same index in mimalloc 2 and 3;
/// `libmimalloc-sys` does not name it).
const PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// How long memory stays free before mimalloc returns it to the system, in milliseconds.
const PURGE_DELAY_MS: std::ffi::c_long = 10_000;

/// Sets up mimalloc for a node and, on Linux, turns transparent huge pages off for the
/// whole process (see the module docs). Call it first thing in `main`, before other
/// threads start: mimalloc's options are plain integers.
pub fn configure() {
    // SAFETY: sets one integer option of mimalloc, which every build of it has; no other
    // thread is running yet (the caller's contract), so nothing reads it concurrently.
    #[allow(unsafe_code)]
    unsafe {
        libmimalloc_sys::mi_option_set(PURGE_DELAY, PURGE_DELAY_MS);
    }
    // Refused only by kernels before 3.15, which then keep huge pages: a cost, not a fault.
    #[cfg(target_os = "linux")]
    let _ = nix::sys::prctl::set_thp_disable(true);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn purge_delay() -> std::ffi::c_long {
        // SAFETY: reads an integer option.
        #[allow(unsafe_code)]
        unsafe {
            libmimalloc_sys::mi_option_get(PURGE_DELAY)
        }
    }

    #[test]
    fn memory_is_returned_after_ten_seconds_unused_and_huge_pages_are_off() {
        assert_eq!(purge_delay(), 1_000, "mimalloc 3's default purge delay (so index {PURGE_DELAY} is that option)");
        configure();
        assert_eq!(purge_delay(), PURGE_DELAY_MS);
        #[cfg(target_os = "linux")]
        assert_eq!(nix::sys::prctl::get_thp_disable(), Ok(true));
    }
}
