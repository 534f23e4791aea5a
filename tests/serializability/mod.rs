//! The serializability check of `Kv` engines: proptest scripts of interleaved
//! transactions, run on an engine, and an independent model that judges what each
//! transaction saw and whether each conflict had a cause. `tests/kv_model.rs` runs it on
//! `MemoryKv`, `tests/kv_postgres.rs` on `PgKv`.
//!
//! What is checked:
//! - every read, snapshot or not, is the store as of the transaction's read version plus
//!   the transaction's own earlier writes;
//! - every committed transaction's serializable reads are also what it would have read
//!   just before its commit (no write it depended on slipped in between: no missed
//!   conflict);
//! - every transaction refused with a conflict (1020) had read something a transaction
//!   committed after its read version wrote (no invented conflict);
//! - commit versions follow commit order and lie after the committer's read version.

#![allow(dead_code)] // Each including test binary uses what it needs.

use std::collections::BTreeMap;
use std::time::Duration;

use proptest::prelude::*;
use sundial::kv::{AtomicOp, Kv, KvError, KvTransaction, RangeRequest};
use sundial::time::ManualClock;

type Key = Vec<u8>;
type Value = Vec<u8>;
pub(crate) type Map = BTreeMap<Key, Value>;

/// Keys `k0`..`k7`; range bounds may also be `k8` (past the last) or the bare prefix.
fn key(i: u8) -> Key {
    vec![b'k', b'0' + i]
}

fn bound(i: u8) -> Key {
    if i == 0 {
        vec![b'k']
    } else {
        key(i - 1)
    }
}

#[derive(Debug, Clone)]
pub(crate) enum Op {
    Get {
        key: Key,
        snapshot: bool,
    },
    /// Several keys read together (`get_many`).
    GetMany {
        keys: Vec<Key>,
        snapshot: bool,
    },
    Range {
        begin: Key,
        end: Key,
        limit: Option<usize>,
        reverse: bool,
        snapshot: bool,
    },
    /// Forward ranges read together (`get_ranges`): mostly ascending and disjoint, as a
    /// poll cycle reads its shards, sometimes in any order.
    Ranges {
        ranges: Vec<(Key, Key, Option<usize>)>,
        snapshot: bool,
    },
    Set {
        key: Key,
        value: Value,
    },
    Clear {
        key: Key,
    },
    ClearRange {
        begin: Key,
        end: Key,
    },
    Add {
        key: Key,
        param: Value,
    },
}

#[derive(Debug, Clone)]
pub(crate) enum Step {
    Begin,
    /// An operation in the open transaction picked by the index.
    Do(prop::sample::Index, Op),
    Commit(prop::sample::Index),
    /// Microseconds pass.
    Wait(u64),
    /// The store is told to keep the keys from this bound on apart (`Kv::split_hint`):
    /// nothing anyone reads may change.
    Split(u8),
}

fn op() -> impl Strategy<Value = Op> {
    let key = (0u8..8).prop_map(key);
    let range = (0u8..10, 0u8..10).prop_map(|(a, b)| (bound(a.min(b)), bound(a.max(b))));
    let value = prop::collection::vec(any::<u8>(), 1..3);
    prop_oneof![
        3 => (key.clone(), any::<bool>()).prop_map(|(key, snapshot)| Op::Get { key, snapshot }),
        1 => (prop::collection::vec(key.clone(), 1..4), any::<bool>())
            .prop_map(|(keys, snapshot)| Op::GetMany { keys, snapshot }),
        3 => (range.clone(), prop::option::of(1usize..4), any::<bool>(), any::<bool>()).prop_map(
            |((begin, end), limit, reverse, snapshot)| Op::Range { begin, end, limit, reverse, snapshot }
        ),
        2 => (prop::collection::vec((0u8..10, prop::option::of(1usize..3)), 2..7), any::<bool>(), any::<bool>())
            .prop_map(|(mut bounds, ascending, snapshot)| {
                if ascending {
                    bounds.sort();
                }
                let ranges = bounds.chunks(2).filter(|pair| pair.len() == 2).map(|pair| (bound(pair[0].0), bound(pair[1].0), pair[0].1)).collect();
                Op::Ranges { ranges, snapshot }
            }),
        3 => (key.clone(), value.clone()).prop_map(|(key, value)| Op::Set { key, value }),
        1 => key.clone().prop_map(|key| Op::Clear { key }),
        1 => range.prop_map(|(begin, end)| Op::ClearRange { begin, end }),
        1 => (key, value).prop_map(|(key, param)| Op::Add { key, param }),
    ]
}

pub(crate) fn script() -> impl Strategy<Value = Vec<Step>> {
    let step = prop_oneof![
        2 => Just(Step::Begin),
        6 => (any::<prop::sample::Index>(), op()).prop_map(|(i, op)| Step::Do(i, op)),
        2 => any::<prop::sample::Index>().prop_map(Step::Commit),
        1 => (0u64..2_000).prop_map(Step::Wait),
        1 => (0u8..10).prop_map(Step::Split),
    ];
    prop::collection::vec(step, 1..80)
}

/// A range read's pairs as the model keeps them.
fn owned(pairs: Vec<sundial::kv::KvPair>) -> Vec<(Key, Value)> {
    pairs.into_iter().map(|(key, value)| (key.into_vec(), value.into_vec())).collect()
}

/// What a read returned.
#[derive(Debug, Clone, PartialEq)]
enum Seen {
    Value(Option<Value>),
    Values(Vec<Option<Value>>),
    Pairs(Vec<(Key, Value)>, bool),
    Ranges(Vec<(Vec<(Key, Value)>, bool)>),
}

/// One transaction's history.
#[derive(Debug, Default)]
pub(crate) struct Record {
    read_version: i64,
    ops: Vec<(Op, Option<Seen>)>,
    /// Its commit version, or the error code of a failed commit.
    outcome: Option<Result<i64, i32>>,
    /// How many transactions had committed when it tried to.
    committed_before: usize,
}

/// FoundationDB's add: the existing value resized to the operand's length, then a
/// little-endian sum with wraparound.
fn add(existing: Option<&Value>, param: &[u8]) -> Value {
    let mut out = existing.cloned().unwrap_or_default();
    out.resize(param.len(), 0);
    let mut carry = 0u16;
    for (byte, p) in out.iter_mut().zip(param) {
        let sum = u16::from(*byte) + u16::from(*p) + carry;
        *byte = (sum & 0xff) as u8;
        carry = sum >> 8;
    }
    out
}

fn apply(map: &mut Map, op: &Op) {
    match op {
        Op::Set { key, value } => {
            map.insert(key.clone(), value.clone());
        }
        Op::Clear { key } => {
            map.remove(key);
        }
        Op::ClearRange { begin, end } => {
            let doomed: Vec<Key> = map.range(begin.clone()..end.clone()).map(|(k, _)| k.clone()).collect();
            for k in doomed {
                map.remove(&k);
            }
        }
        Op::Add { key, param } => {
            let sum = add(map.get(key), param);
            map.insert(key.clone(), sum);
        }
        Op::Get { .. } | Op::GetMany { .. } | Op::Range { .. } | Op::Ranges { .. } => {}
    }
}

fn read(map: &Map, op: &Op) -> Option<Seen> {
    match op {
        Op::Get { key, .. } => Some(Seen::Value(map.get(key).cloned())),
        Op::GetMany { keys, .. } => Some(Seen::Values(keys.iter().map(|k| map.get(k).cloned()).collect())),
        Op::Range { begin, end, limit, reverse, .. } => {
            if begin >= end {
                return Some(Seen::Pairs(Vec::new(), false));
            }
            let mut ordered: Vec<(Key, Value)> =
                map.range(begin.clone()..end.clone()).map(|(k, v)| (k.clone(), v.clone())).collect();
            if *reverse {
                ordered.reverse();
            }
            let limit = limit.unwrap_or(usize::MAX);
            let more = ordered.len() > limit;
            ordered.truncate(limit);
            Some(Seen::Pairs(ordered, more))
        }
        Op::Ranges { ranges, snapshot } => {
            let parts = ranges.iter().map(|(begin, end, limit)| {
                let one = Op::Range {
                    begin: begin.clone(),
                    end: end.clone(),
                    limit: *limit,
                    reverse: false,
                    snapshot: *snapshot,
                };
                match read(map, &one) {
                    Some(Seen::Pairs(pairs, more)) => (pairs, more),
                    _ => unreachable!("a range read"),
                }
            });
            Some(Seen::Ranges(parts.collect()))
        }
        _ => None,
    }
}

/// The range of one key, `[key, key\0)`.
fn point(key: &Key) -> (Key, Key) {
    let mut end = key.clone();
    end.push(0);
    (key.clone(), end)
}

/// The keys a write touches, as a range `[begin, end)`.
fn written(op: &Op) -> Option<(Key, Key)> {
    match op {
        Op::Set { key, .. } | Op::Clear { key } | Op::Add { key, .. } => Some(point(key)),
        Op::ClearRange { begin, end } => Some((begin.clone(), end.clone())),
        Op::Get { .. } | Op::GetMany { .. } | Op::Range { .. } | Op::Ranges { .. } => None,
    }
}

/// The ranges a serializable read depends on: a read cut short by its limit only up to
/// its last key.
fn read_ranges(op: &Op, seen: &Seen) -> Vec<(Key, Key)> {
    match (op, seen) {
        (Op::Get { key, snapshot: false }, _) => vec![point(key)],
        (Op::GetMany { keys, snapshot: false }, _) => keys.iter().map(point).collect(),
        (Op::Range { begin, end, reverse, snapshot: false, .. }, Seen::Pairs(pairs, more)) => {
            let range = match (more, pairs.last()) {
                (true, Some((last, _))) if *reverse => (last.clone(), end.clone()),
                (true, Some((last, _))) => (begin.clone(), point(last).1),
                _ => (begin.clone(), end.clone()),
            };
            vec![range]
        }
        (Op::Ranges { ranges, snapshot: false }, Seen::Ranges(parts)) => ranges
            .iter()
            .zip(parts)
            .flat_map(|((begin, end, limit), (pairs, more))| {
                let one = Op::Range {
                    begin: begin.clone(),
                    end: end.clone(),
                    limit: *limit,
                    reverse: false,
                    snapshot: false,
                };
                read_ranges(&one, &Seen::Pairs(pairs.clone(), *more))
            })
            .filter(|(begin, end)| begin < end)
            .collect(),
        _ => Vec::new(),
    }
}

fn overlaps(a: &(Key, Key), b: &(Key, Key)) -> bool {
    a.0 < b.1 && b.0 < a.1
}

/// Runs `script` on `kv` (an empty store whose clock is `clock`): the initial pairs and
/// what each transaction saw.
pub(crate) async fn run_script<K: Kv>(kv: &K, clock: &ManualClock, script: &[Step]) -> (Map, Vec<Record>) {
    let initial: Map = (0..8u8).filter(|i| i % 3 != 0).map(|i| (key(i), vec![i])).collect();
    let setup = kv.create_transaction().unwrap();
    for (k, v) in &initial {
        setup.set(k, v);
    }
    setup.commit().await.unwrap();

    let mut records: Vec<Record> = Vec::new();
    let mut open: Vec<(usize, K::Transaction)> = Vec::new();
    let mut committed = 0;
    for step in script {
        match step {
            Step::Begin => {
                let txn = kv.create_transaction().unwrap();
                let read_version = txn.read_version().await.unwrap();
                records.push(Record { read_version, ..Record::default() });
                open.push((records.len() - 1, txn));
            }
            Step::Do(which, op) if !open.is_empty() => {
                let (id, txn) = &open[which.index(open.len())];
                let seen = match op {
                    Op::Get { key, snapshot } => Some(Seen::Value(txn.get(key, *snapshot).await.unwrap())),
                    Op::GetMany { keys, snapshot } => Some(Seen::Values(txn.get_many(keys, *snapshot).await.unwrap())),
                    Op::Range { begin, end, limit, reverse, snapshot } => {
                        let mut request = RangeRequest::new(begin.clone(), end.clone());
                        if let Some(limit) = limit {
                            request = request.limit(*limit);
                        }
                        if *reverse {
                            request = request.reversed();
                        }
                        let result = txn.get_range(&request, *snapshot).await.unwrap();
                        Some(Seen::Pairs(owned(result.pairs), result.more))
                    }
                    Op::Ranges { ranges, snapshot } => {
                        let requests: Vec<RangeRequest> = ranges
                            .iter()
                            .map(|(begin, end, limit)| {
                                let request = RangeRequest::new(begin.clone(), end.clone());
                                match limit {
                                    Some(limit) => request.limit(*limit),
                                    None => request,
                                }
                            })
                            .collect();
                        let results = txn.get_ranges(&requests, *snapshot).await.unwrap();
                        Some(Seen::Ranges(results.into_iter().map(|r| (owned(r.pairs), r.more)).collect()))
                    }
                    Op::Set { key, value } => {
                        txn.set(key, value);
                        None
                    }
                    Op::Clear { key } => {
                        txn.clear(key);
                        None
                    }
                    Op::ClearRange { begin, end } => {
                        txn.clear_range(begin, end);
                        None
                    }
                    Op::Add { key, param } => {
                        txn.atomic_op(key, param, AtomicOp::Add);
                        None
                    }
                };
                records[*id].ops.push((op.clone(), seen));
            }
            Step::Commit(which) if !open.is_empty() => {
                let (id, txn) = open.remove(which.index(open.len()));
                records[id].committed_before = committed;
                let outcome = txn.commit().await.map(|info| info.version).map_err(|e: KvError| e.code());
                committed += usize::from(outcome.is_ok());
                records[id].outcome = Some(outcome);
            }
            Step::Wait(micros) => clock.advance(Duration::from_micros(*micros)),
            Step::Split(at) => kv.split_hint(&[bound(*at)]),
            Step::Do(..) | Step::Commit(_) => {}
        }
    }
    (initial, records)
}

/// The store after the committed transactions of `commits` (in commit order) up to
/// and including version `version`.
fn state_at(initial: &Map, commits: &[&Record], version: i64) -> Map {
    let mut map = initial.clone();
    for record in commits.iter().take_while(|r| matches!(r.outcome, Some(Ok(v)) if v <= version)) {
        for (op, _) in &record.ops {
            apply(&mut map, op);
        }
    }
    map
}

/// Replays `record`'s operations on `map`; `agrees(op, seen, model)` judges each read.
fn replay(map: &mut Map, record: &Record, agrees: impl Fn(&Op, &Seen, &Seen) -> bool) -> Result<(), String> {
    for (op, seen) in &record.ops {
        if let (Some(seen), Some(model)) = (seen, read(map, op)) {
            if !agrees(op, seen, &model) {
                return Err(format!("{op:?} saw {seen:?}, the model says {model:?}"));
            }
        }
        apply(map, op);
    }
    Ok(())
}

/// Whether a serializable read `seen` still holds in `model`: a snapshot read never
/// needs to, and a range read cut short by its limit depends on nothing past its last key.
fn still_holds(op: &Op, seen: &Seen, model: &Seen) -> bool {
    match (op, seen, model) {
        (
            Op::Get { snapshot: true, .. }
            | Op::GetMany { snapshot: true, .. }
            | Op::Range { snapshot: true, .. }
            | Op::Ranges { snapshot: true, .. },
            _,
            _,
        ) => true,
        (Op::Range { .. }, Seen::Pairs(pairs, true), Seen::Pairs(now, _)) => pairs == now,
        (Op::Ranges { .. }, Seen::Ranges(parts), Seen::Ranges(now)) => parts.iter().zip(now).all(
            |((pairs, more), (now_pairs, now_more))| {
                if *more {
                    pairs == now_pairs
                } else {
                    (pairs, more) == (now_pairs, now_more)
                }
            },
        ),
        _ => seen == model,
    }
}

pub(crate) fn check(initial: &Map, records: &[Record]) -> Result<(), TestCaseError> {
    // Read-only transactions commit without a version of their own (nothing to order).
    let writes = |r: &Record| r.ops.iter().any(|(op, _)| written(op).is_some_and(|(b, e)| b < e));
    let mut commits: Vec<&Record> = records.iter().filter(|r| matches!(r.outcome, Some(Ok(_))) && writes(r)).collect();
    commits.sort_by_key(|r| r.committed_before);
    let versions: Vec<i64> = commits.iter().filter_map(|r| r.outcome.and_then(Result::ok)).collect();
    prop_assert!(versions.windows(2).all(|w| w[0] < w[1]), "commit versions out of commit order: {versions:?}");
    for record in records {
        // Reads at the read version, with the transaction's own writes.
        let mut view = state_at(initial, &commits, record.read_version);
        replay(&mut view, record, |_, seen, model| seen == model)
            .map_err(|e| TestCaseError::fail(format!("read version: {e}")))?;
        match record.outcome {
            Some(Ok(version)) if writes(record) => {
                prop_assert!(version > record.read_version);
                // Serializable reads still hold just before the commit.
                let mut before = state_at(initial, &commits, version - 1);
                replay(&mut before, record, still_holds)
                    .map_err(|e| TestCaseError::fail(format!("missed conflict, commit at {version}: {e}")))?;
            }
            Some(Err(KvError::NOT_COMMITTED)) => {
                // Some transaction committed since its read version wrote what it read.
                let reads: Vec<(Key, Key)> = record
                    .ops
                    .iter()
                    .filter_map(|(op, seen)| Some(read_ranges(op, seen.as_ref()?)))
                    .flatten()
                    .collect();
                let cause = commits.iter().take_while(|c| c.committed_before < record.committed_before).any(|c| {
                    matches!(c.outcome, Some(Ok(v)) if v > record.read_version)
                        && c.ops.iter().filter_map(|(op, _)| written(op)).any(|w| reads.iter().any(|r| overlaps(r, &w)))
                });
                prop_assert!(cause, "a conflict without a cause: {record:?}");
            }
            Some(Err(code)) => prop_assert!(false, "commit failed with {code}: {record:?}"),
            Some(Ok(_)) | None => {}
        }
    }
    Ok(())
}
