//! Randomness and ids from a seeded generator, so a simulation with the same seed makes
//! the same choices and the same run ids.
//!
//! [`Entropy::from_os`] is the one place that reads OS randomness (once, for the seed);
//! everything else derives from a seed.

use chrono::{DateTime, Utc};
use rand_chacha::ChaCha8Rng;
use rand_core::{RngCore, SeedableRng};
use uuid::Uuid;

/// Characters of [`Entropy::alphanumeric`].
const ALPHANUMERIC: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";

/// A seeded random source (ChaCha8: portable and stable across platforms and releases).
#[derive(Debug, Clone)]
pub struct Entropy {
    rng: ChaCha8Rng,
}

impl Entropy {
    /// A generator whose whole output is determined by `seed`.
    pub fn from_seed(seed: u64) -> Self {
        Self { rng: ChaCha8Rng::seed_from_u64(seed) }
    }

    /// A generator seeded from the OS, for production nodes.
    #[allow(clippy::disallowed_methods)] // The one production reader of OS randomness.
    pub fn from_os() -> Self {
        Self { rng: ChaCha8Rng::from_os_rng() }
    }

    /// A new independent generator drawn from this one: derive per-node or per-purpose
    /// streams without sharing state.
    pub fn fork(&mut self) -> Entropy {
        Self::from_seed(self.next_u64())
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.rng.next_u64()
    }

    /// Fills `bytes` with random bytes.
    pub fn fill(&mut self, bytes: &mut [u8]) {
        self.rng.fill_bytes(bytes);
    }

    /// A uniformly random value in `0..bound`; 0 when `bound` is 0.
    pub fn below(&mut self, bound: u64) -> u64 {
        if bound == 0 {
            return 0;
        }
        // Lemire's multiply-shift with rejection: unbiased.
        let threshold = bound.wrapping_neg() % bound;
        loop {
            let product = u128::from(self.next_u64()) * u128::from(bound);
            if (product as u64) >= threshold {
                return (product >> 64) as u64;
            }
        }
    }

    /// `len` random characters from `a-z0-9`, e.g. for node ids and lease tokens.
    pub fn alphanumeric(&mut self, len: usize) -> String {
        (0..len).map(|_| ALPHANUMERIC[self.below(ALPHANUMERIC.len() as u64) as usize] as char).collect()
    }
}

/// Makes run ids: UUID v7 whose timestamp is the injected clock's wall time and whose
/// random part comes from seeded [`Entropy`], so ids sort by creation time and repeat
/// exactly in a simulation.
#[derive(Debug, Clone)]
pub struct RunIdGenerator {
    entropy: Entropy,
}

impl RunIdGenerator {
    /// A generator drawing its random bits from `entropy`.
    pub fn new(entropy: Entropy) -> Self {
        Self { entropy }
    }

    /// A fresh id stamped with `now` (milliseconds; instants before 1970 stamp as 0).
    pub fn next_id(&mut self, now: DateTime<Utc>) -> Uuid {
        let millis = u64::try_from(now.timestamp_millis()).unwrap_or(0);
        let mut random = [0u8; 10];
        self.entropy.fill(&mut random);
        uuid::Builder::from_unix_timestamp_millis(millis, &random).into_uuid()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_stream() {
        let mut a = Entropy::from_seed(7);
        let mut b = Entropy::from_seed(7);
        assert_eq!(a.next_u64(), b.next_u64());
        assert_eq!(a.alphanumeric(8), b.alphanumeric(8));
        assert_ne!(Entropy::from_seed(8).next_u64(), Entropy::from_seed(7).next_u64());
    }

    #[test]
    fn below_stays_in_bounds() {
        let mut e = Entropy::from_seed(1);
        for bound in [1, 2, 3, 10, 36, u64::MAX] {
            for _ in 0..100 {
                assert!(e.below(bound) < bound);
            }
        }
        assert_eq!(e.below(0), 0);
    }

    #[test]
    fn run_ids_are_v7_time_ordered_and_reproducible() {
        let t1 = DateTime::from_timestamp_millis(1_800_000_000_000).unwrap();
        let t2 = DateTime::from_timestamp_millis(1_800_000_000_001).unwrap();
        let mut gen = RunIdGenerator::new(Entropy::from_seed(3));
        let a = gen.next_id(t1);
        let b = gen.next_id(t2);
        assert_eq!(a.get_version_num(), 7);
        assert!(a < b);
        let mut again = RunIdGenerator::new(Entropy::from_seed(3));
        assert_eq!(again.next_id(t1), a);
        let (secs, _) = a.get_timestamp().unwrap().to_unix();
        assert_eq!(secs, 1_800_000_000);
    }
}
