//! Goal: `MemoryKv`'s transactions are serializable in commit order and conflict only for
//! a reason, under any interleaving of reads (point and range, limited, reversed,
//! snapshot or not), writes, clears, range clears and atomic adds, wherever the store was
//! told to split its keys: what FoundationDB guarantees and what every store algorithm
//! leans on.
//!
//! Method: proptest draws a script of steps (begin a transaction, do an operation in an
//! open one, commit one, let time pass) on a small keyspace and records what each
//! transaction saw. An independent model (a sorted map, replayed commit by commit) then
//! checks that:
//! - every read, snapshot or not, is the store as of the transaction's read version plus
//!   the transaction's own earlier writes;
//! - every committed transaction's serializable reads are also what it would have read
//!   just before its commit (no write it depended on slipped in between: no missed
//!   conflict);
//! - every transaction refused with a conflict (1020) had read something a transaction
//!   committed after its read version wrote (no invented conflict);
//! - commit versions follow commit order and lie after the committer's read version.

mod serializability;

use std::sync::Arc;

use proptest::prelude::*;
use sundial::kv::memory::MemoryKv;
use sundial::time::{from_micros, ManualClock};

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn transactions_are_serializable_and_conflict_only_for_a_reason(script in serializability::script()) {
        let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let clock = ManualClock::new(from_micros(1_800_000_000_000_000).unwrap());
        let kv = MemoryKv::new(Arc::new(clock.clone()));
        let (initial, records) = runtime.block_on(serializability::run_script(&kv, &clock, &script));
        serializability::check(&initial, &records)?;
    }
}
