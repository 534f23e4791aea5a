//! A transaction's client side, as FoundationDB's client keeps it: the writes it buffers
//! until commit (point sets and clears, range clears, atomic operations, versionstamped
//! keys and values), what its reads see of them (read-your-writes), and the read and
//! write conflict ranges its commit is checked with. Every [`Kv`](super::Kv) engine built
//! here shares it: [`MemoryKv`](super::memory::MemoryKv) resolves reads against its
//! versions in memory, [`PgKv`](super::postgres::PgKv) against rows fetched from
//! PostgreSQL; both send the same buffered writes to their commit.

use super::atomic::{self, AtomicOp};
use super::write_set::WriteSet;
use super::{key_after, KvError, KvPair, RangeRequest, RangeResult, Version, KEY_SIZE_MAX, VALUE_SIZE_MAX};

/// A stored key, inline up to 48 bytes (our tuple keys mostly are): B-tree searches then
/// compare keys in contiguous memory instead of chasing one heap pointer per comparison,
/// which keeps lookups cheap in stores of millions of keys.
pub(super) type StoredKey = smallvec::SmallVec<[u8; 48]>;

/// How a watch armed at commit is told that its key changed (or why it never will).
pub(super) type WatchSender = futures_channel::oneshot::Sender<Result<(), KvError>>;

/// The net effect of a transaction on one key.
#[derive(Debug, Clone)]
pub(super) struct Point {
    pub(super) base: Base,
    /// Atomic ops to apply on top of `base`, in order.
    pub(super) ops: Vec<(AtomicOp, Vec<u8>)>,
}

#[derive(Debug, Clone)]
pub(super) enum Base {
    /// The stored value (the transaction depends on it).
    Unchanged,
    Set(Vec<u8>),
    Cleared,
    /// Set with a versionstamp at this offset, filled in at commit.
    Stamped(Vec<u8>, usize),
}

impl Point {
    /// Whether the key's value is fully determined by this transaction.
    pub(super) fn is_independent(&self) -> bool {
        !matches!(self.base, Base::Unchanged)
    }
}

/// Whether range `a` meets `[b_begin, b_end)`.
pub(super) fn overlaps(a: &(Vec<u8>, Vec<u8>), b_begin: &[u8], b_end: &[u8]) -> bool {
    a.0.as_slice() < b_end && b_begin < a.1.as_slice()
}

/// `[begin, end)` minus the given ranges (which may overlap), as disjoint pieces.
pub(super) fn subtract(begin: &[u8], end: &[u8], holes: &[(Vec<u8>, Vec<u8>)]) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut holes: Vec<&(Vec<u8>, Vec<u8>)> = holes.iter().filter(|h| overlaps(h, begin, end)).collect();
    holes.sort();
    let mut pieces = Vec::new();
    let mut cursor = begin.to_vec();
    for (hole_begin, hole_end) in holes {
        if cursor.as_slice() < hole_begin.as_slice() {
            pieces.push((cursor.clone(), hole_begin.clone().min(end.to_vec())));
        }
        if hole_end.as_slice() > cursor.as_slice() {
            cursor = hole_end.clone();
        }
        if cursor.as_slice() >= end {
            return pieces;
        }
    }
    if cursor.as_slice() < end {
        pieces.push((cursor, end.to_vec()));
    }
    pieces
}

/// Merges two streams sorted by key (ascending, or descending when `reverse`), yielding
/// each key once (`a`'s item when both have it).
pub(super) fn merge<'a, T>(
    a: impl Iterator<Item = (&'a [u8], T)>,
    b: impl Iterator<Item = (&'a [u8], T)>,
    reverse: bool,
) -> impl Iterator<Item = (&'a [u8], T)> {
    let mut a = a.peekable();
    let mut b = b.peekable();
    std::iter::from_fn(move || {
        let take_a = match (a.peek(), b.peek()) {
            (None, None) => return None,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (Some((x, _)), Some((y, _))) => {
                if x == y {
                    b.next();
                    true
                } else {
                    (x < y) != reverse
                }
            }
        };
        if take_a {
            a.next()
        } else {
            b.next()
        }
    })
}

/// One transaction's client-side state.
#[derive(Default)]
pub(super) struct Buffer {
    /// Fixed by the first read (or, for a transaction that never read, at commit).
    pub(super) read_version: Option<Version>,
    /// The net effect on each key written by a point operation.
    pub(super) points: WriteSet<StoredKey, Point>,
    /// Range clears, in the order made (point writes made after one are in `points`).
    pub(super) cleared: Vec<(Vec<u8>, Vec<u8>)>,
    /// Versionstamped keys: the key's bytes, the stamp's offset in them, the value.
    pub(super) stamped_keys: Vec<(Vec<u8>, usize, Vec<u8>)>,
    /// Ranges a versionstamped key may land in, which reads refuse until commit.
    pub(super) unreadable: Vec<(Vec<u8>, Vec<u8>)>,
    /// Keys read by serializable point reads (each stands for `[key, key\0)`).
    pub(super) read_points: Vec<StoredKey>,
    /// Other read conflict ranges: serializable range reads and explicit ones.
    pub(super) read_conflicts: Vec<(Vec<u8>, Vec<u8>)>,
    /// Write conflict ranges beyond the written keys: range clears and explicit ones.
    pub(super) write_conflicts: Vec<(Vec<u8>, Vec<u8>)>,
    /// Bytes counted against the transaction size limit, as FDB counts them.
    pub(super) size: usize,
    /// An error from a call that returns nothing, reported at commit.
    pub(super) error: Option<KvError>,
    /// Committed, failed at commit, or handed to a late commit: no longer usable.
    pub(super) finished: bool,
    /// Watches to arm at commit (dropped uncommitted: their futures fail with 1025).
    pub(super) watches: Vec<(Vec<u8>, WatchSender)>,
}

impl Buffer {
    pub(super) fn in_cleared(&self, key: &[u8]) -> bool {
        self.cleared.iter().any(|(b, e)| b.as_slice() <= key && key < e.as_slice())
    }

    pub(super) fn fail_later(&mut self, error: KvError) {
        self.error.get_or_insert(error);
    }

    pub(super) fn check_key(&mut self, key: &[u8]) -> bool {
        if key.len() > KEY_SIZE_MAX {
            self.fail_later(KvError::new(KvError::KEY_TOO_LARGE));
            return false;
        }
        true
    }

    pub(super) fn check_value(&mut self, value: &[u8]) -> bool {
        if value.len() > VALUE_SIZE_MAX {
            self.fail_later(KvError::new(KvError::VALUE_TOO_LARGE));
            return false;
        }
        true
    }

    /// Ranges whose content this transaction fully determines (so reading them adds no
    /// conflict): its range clears and its independently written keys.
    pub(super) fn written_ranges(&self, begin: &[u8], end: &[u8]) -> Vec<(Vec<u8>, Vec<u8>)> {
        let mut ranges: Vec<(Vec<u8>, Vec<u8>)> =
            self.cleared.iter().filter(|r| overlaps(r, begin, end)).cloned().collect();
        ranges.extend(
            self.points
                .range(begin, end)
                .into_iter()
                .filter(|(_, p)| p.is_independent())
                .map(|(k, _)| (k.to_vec(), key_after(k))),
        );
        ranges
    }

    pub(super) fn add_read_conflict(&mut self, begin: &[u8], end: &[u8]) {
        if begin >= end {
            return;
        }
        self.points.settle();
        let written = self.written_ranges(begin, end);
        for piece in subtract(begin, end, &written) {
            self.size += piece.0.len() + piece.1.len();
            self.read_conflicts.push(piece);
        }
    }

    pub(super) fn add_write_conflict(&mut self, begin: &[u8], end: &[u8]) {
        self.size += begin.len() + end.len();
        self.write_conflicts.push((begin.to_vec(), end.to_vec()));
    }

    /// A point write's conflict range `[key, key\0)`: not stored, since commit derives it
    /// from the write set (every written key is in `points` or a cleared range); only its
    /// size counts, as FDB counts it.
    pub(super) fn add_point_write_conflict(&mut self, key: &[u8]) {
        self.size += 2 * key.len() + 1;
    }

    /// The value this transaction sees for `key`, given the stored value at its version.
    pub(super) fn resolve(&self, key: &[u8], stored: Option<&[u8]>) -> Result<Option<Vec<u8>>, KvError> {
        self.resolve_point(self.points.get(key), key, stored)
    }

    /// [`resolve`](Self::resolve) with `key`'s entry in `points` looked up already.
    pub(super) fn resolve_point(
        &self,
        point: Option<&Point>,
        key: &[u8],
        stored: Option<&[u8]>,
    ) -> Result<Option<Vec<u8>>, KvError> {
        let (mut value, ops) = match point {
            Some(point) => {
                let base = match &point.base {
                    Base::Unchanged => stored.map(<[u8]>::to_vec),
                    Base::Set(value) => Some(value.clone()),
                    Base::Cleared => None,
                    Base::Stamped(..) => return Err(KvError::new(KvError::ACCESSED_UNREADABLE)),
                };
                (base, point.ops.as_slice())
            }
            None if self.in_cleared(key) => (None, &[][..]),
            None => (stored.map(<[u8]>::to_vec), &[][..]),
        };
        for (op, param) in ops {
            value = atomic::apply(*op, value.as_deref(), param);
        }
        Ok(value)
    }

    /// Whether nothing this transaction wrote lies in `[begin, end)`: the stored values
    /// are what it reads there.
    pub(super) fn untouched(&mut self, begin: &[u8], end: &[u8]) -> bool {
        self.points.settle();
        self.points.none_in(begin, end) && !self.cleared.iter().any(|r| overlaps(r, begin, end))
    }

    /// Whether `key`'s value as this transaction sees it depends on the stored one (it
    /// did not set or clear the key outright).
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub(super) fn depends_on_store(&self, key: &[u8]) -> bool {
        self.points.get(key).map_or_else(|| !self.in_cleared(key), |point| !point.is_independent())
    }

    /// Adds a serializable point read of `key` to the read conflict set.
    pub(super) fn note_point_read(&mut self, key: &[u8]) {
        self.size += 2 * key.len() + 1;
        self.read_points.push(StoredKey::from_slice(key));
    }

    /// The result of a range read, after registering its conflict range when it is
    /// serializable: a read cut short by its limit conflicts only up to the last key
    /// returned.
    pub(super) fn conflict_on_range(
        &mut self,
        request: &RangeRequest,
        snapshot: bool,
        pairs: Vec<KvPair>,
        more: bool,
    ) -> RangeResult {
        if !snapshot {
            let (begin, end) = (request.begin.as_slice(), request.end.as_slice());
            let (conflict_begin, conflict_end) = match (more, pairs.last()) {
                (true, Some((last, _))) if request.reverse => (last.to_vec(), end.to_vec()),
                (true, Some((last, _))) => (begin.to_vec(), key_after(last)),
                _ => (begin.to_vec(), end.to_vec()),
            };
            self.add_read_conflict(&conflict_begin, &conflict_end);
        }
        RangeResult { pairs, more }
    }

    pub(super) fn is_unreadable(&self, begin: &[u8], end: &[u8]) -> bool {
        self.unreadable.iter().any(|r| overlaps(r, begin, end))
    }

    /// Buffers `key = value`.
    pub(super) fn set(&mut self, key: &[u8], value: &[u8]) {
        self.set_owned(key, value.to_vec());
    }

    /// [`set`](Self::set), keeping `value`'s buffer.
    pub(super) fn set_owned(&mut self, key: &[u8], value: Vec<u8>) {
        if !self.check_key(key) || !self.check_value(&value) {
            return;
        }
        self.size += key.len() + value.len();
        self.points.insert(StoredKey::from_slice(key), Point { base: Base::Set(value), ops: Vec::new() });
        self.add_point_write_conflict(key);
    }

    /// Buffers the removal of `key`.
    pub(super) fn clear(&mut self, key: &[u8]) {
        if !self.check_key(key) {
            return;
        }
        self.size += key.len();
        self.points.insert(StoredKey::from_slice(key), Point { base: Base::Cleared, ops: Vec::new() });
        self.add_point_write_conflict(key);
    }

    /// Buffers the removal of every key in `[begin, end)`.
    pub(super) fn clear_range(&mut self, begin: &[u8], end: &[u8]) {
        if begin >= end || !self.check_key(begin) || !self.check_key(end) {
            return;
        }
        self.points.remove_range(begin, end);
        self.cleared.push((begin.to_vec(), end.to_vec()));
        self.add_write_conflict(begin, end);
    }

    /// Buffers an atomic operation (a versionstamped one is resolved at commit).
    pub(super) fn atomic_op(&mut self, key: &[u8], param: &[u8], op: AtomicOp) {
        match op {
            AtomicOp::SetVersionstampedKey => {
                let Some((bytes, offset)) = atomic::versionstamp_offset(key) else {
                    self.fail_later(KvError::with_message(
                        KvError::CLIENT_INVALID_OPERATION,
                        "bad versionstamp offset in key",
                    ));
                    return;
                };
                if !self.check_key(bytes) || !self.check_value(param) {
                    return;
                }
                // The key is unknown until commit: the range of every key it could be is
                // unreadable and write-conflicting, as in FDB's client.
                let low = atomic::stamped(bytes, offset, &[0; 10]);
                let high = key_after(&atomic::stamped(bytes, offset, &[0xff; 10]));
                self.size += bytes.len() + param.len();
                self.unreadable.push((low.clone(), high.clone()));
                self.add_write_conflict(&low, &high);
                self.stamped_keys.push((bytes.to_vec(), offset, param.to_vec()));
            }
            AtomicOp::SetVersionstampedValue => {
                let Some((bytes, offset)) = atomic::versionstamp_offset(param) else {
                    self.fail_later(KvError::with_message(
                        KvError::CLIENT_INVALID_OPERATION,
                        "bad versionstamp offset in value",
                    ));
                    return;
                };
                if !self.check_key(key) || !self.check_value(bytes) {
                    return;
                }
                self.size += key.len() + bytes.len();
                self.points.insert(
                    StoredKey::from_slice(key),
                    Point { base: Base::Stamped(bytes.to_vec(), offset), ops: Vec::new() },
                );
                self.add_point_write_conflict(key);
            }
            _ => {
                if !self.check_key(key) || !self.check_value(param) {
                    return;
                }
                self.size += key.len() + param.len();
                let cleared = self.in_cleared(key);
                let point = self.points.get_or_insert_with(StoredKey::from_slice(key), || Point {
                    base: if cleared { Base::Cleared } else { Base::Unchanged },
                    ops: Vec::new(),
                });
                match &mut point.base {
                    // The value is known here, so fold the op in.
                    Base::Set(value) => match atomic::apply(op, Some(value), param) {
                        Some(next) => *value = next,
                        None => point.base = Base::Cleared,
                    },
                    Base::Cleared if point.ops.is_empty() => {
                        point.base = atomic::apply(op, None, param).map_or(Base::Cleared, Base::Set);
                    }
                    _ => point.ops.push((op, param.to_vec())),
                }
                self.add_point_write_conflict(key);
            }
        }
    }

    /// Adds `[begin, end)` to the write conflict set.
    pub(super) fn add_write_conflict_range(&mut self, begin: &[u8], end: &[u8]) {
        if begin < end {
            self.add_write_conflict(begin, end);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subtract_ranges() {
        let r = |a: &str, b: &str| (a.as_bytes().to_vec(), b.as_bytes().to_vec());
        assert_eq!(subtract(b"a", b"z", &[]), vec![r("a", "z")]);
        assert_eq!(subtract(b"a", b"z", &[r("c", "e"), r("d", "g")]), vec![r("a", "c"), r("g", "z")]);
        assert_eq!(subtract(b"a", b"z", &[r("0", "b"), r("y", "~")]), vec![r("b", "y")]);
        assert_eq!(subtract(b"c", b"d", &[r("a", "z")]), Vec::<(Vec<u8>, Vec<u8>)>::new());
    }

    #[test]
    fn merge_streams() {
        let a: Vec<(&[u8], char)> = vec![(b"a", 'a'), (b"c", 'a'), (b"e", 'a')];
        let b: Vec<(&[u8], char)> = vec![(b"b", 'b'), (b"c", 'b'), (b"f", 'b')];
        let forward: Vec<(&[u8], char)> = merge(a.iter().copied(), b.iter().copied(), false).collect();
        assert_eq!(forward, vec![(&b"a"[..], 'a'), (b"b", 'b'), (b"c", 'a'), (b"e", 'a'), (b"f", 'b')]);
        let backward: Vec<&[u8]> =
            merge(a.iter().rev().copied(), b.iter().rev().copied(), true).map(|(k, _)| k).collect();
        assert_eq!(backward, vec![&b"f"[..], b"e", b"c", b"b", b"a"]);
    }
}
