//! A transaction's buffered point writes, found by hash and put in key order only when
//! something needs order.
//!
//! An acquisition of 2,000 fires buffers some 12,000 writes, and reads few of them back
//! in order (its range reads mostly come before its writes). In a B-tree each buffered
//! write cost a search from the root, about 1,100 instructions at that size; here it is a
//! hash and a probe. Order is kept as a sorted prefix and a tail of entries added since:
//! a range read binary-searches the prefix and scans the tail, and the whole is sorted
//! when the tail grows long ([`WriteSet::settle`]) or a range is removed. A commit takes
//! the writes as they are kept ([`WriteSet::into_entries`]): sorting 12,000 of them cost
//! more than the B-tree did, and applying them needs no order (the store tells the
//! watches they fire in key order itself).

use std::borrow::Borrow;
use std::hash::Hash;

use indexmap::map::{Entry, IndexMap};
use rustc_hash::FxBuildHasher;

/// Entries added since the last sort that a range read scans rather than sorting first.
const TAIL_MAX: usize = 64;

/// Point writes by key: insertion and lookup by hash, ranges in key order.
pub(super) struct WriteSet<K, V> {
    map: IndexMap<K, V, FxBuildHasher>,
    /// Entries `..sorted` are in ascending key order; those after were added since, in
    /// any order.
    sorted: usize,
}

impl<K, V> Default for WriteSet<K, V> {
    fn default() -> Self {
        Self { map: IndexMap::default(), sorted: 0 }
    }
}

impl<K, V> WriteSet<K, V>
where
    K: Hash + Eq + Borrow<[u8]>,
{
    pub(super) fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    pub(super) fn get(&self, key: &[u8]) -> Option<&V> {
        self.map.get(key)
    }

    /// Sets `key`'s entry to `value`.
    pub(super) fn insert(&mut self, key: K, value: V) {
        self.map.insert(key, value);
        self.note_appended();
    }

    /// `key`'s entry, made by `make` when there is none.
    pub(super) fn get_or_insert_with(&mut self, key: K, make: impl FnOnce() -> V) -> &mut V {
        let index = match self.map.entry(key) {
            Entry::Occupied(entry) => entry.index(),
            Entry::Vacant(entry) => {
                let index = entry.index();
                entry.insert(make());
                index
            }
        };
        self.note_appended();
        &mut self.map[index]
    }

    /// Extends the sorted prefix over a last entry that follows it in key order (writes in
    /// ascending order never need a sort).
    fn note_appended(&mut self) {
        let len = self.map.len();
        if self.sorted + 1 == len {
            let in_order = len < 2 || self.key_at(len - 2) < self.key_at(len - 1);
            if in_order {
                self.sorted = len;
            }
        }
    }

    fn key_at(&self, index: usize) -> &[u8] {
        self.map.get_index(index).map_or(&[], |(key, _)| key.borrow())
    }

    /// Sorts when the unsorted tail has grown long enough that scanning it at every range
    /// read costs more than sorting once. Only speed depends on it.
    pub(super) fn settle(&mut self) {
        if self.map.len() - self.sorted > TAIL_MAX {
            self.sort();
        }
    }

    fn sort(&mut self) {
        self.map.sort_unstable_by(|a, _, b, _| a.borrow().cmp(b.borrow()));
        self.sorted = self.map.len();
    }

    /// The entries with keys in `[begin, end)`, ascending.
    pub(super) fn range(&self, begin: &[u8], end: &[u8]) -> Vec<(&K, &V)> {
        let entries = self.map.as_slice();
        let prefix = &entries[..self.sorted];
        let first = prefix.partition_point(|key, _| key.borrow() < begin);
        let last = first + prefix[first..].partition_point(|key, _| key.borrow() < end);
        let mut found: Vec<(&K, &V)> = prefix[first..last].iter().collect();
        let before = found.len();
        found.extend(entries[self.sorted..].iter().filter(|(key, _)| {
            let key: &[u8] = (*key).borrow();
            begin <= key && key < end
        }));
        if found.len() > before {
            found.sort_unstable_by(|(a, _), (b, _)| (*a).borrow().cmp((*b).borrow()));
        }
        found
    }

    /// Whether no entry has a key in `[begin, end)`.
    pub(super) fn none_in(&self, begin: &[u8], end: &[u8]) -> bool {
        let prefix = &self.map.as_slice()[..self.sorted];
        let first = prefix.partition_point(|key, _| key.borrow() < begin);
        let prefix_empty = prefix.get_index(first).is_none_or(|(key, _)| key.borrow() >= end);
        prefix_empty
            && self.map.as_slice()[self.sorted..].iter().all(|(key, _)| {
                let key: &[u8] = key.borrow();
                key < begin || end <= key
            })
    }

    /// Removes the entries with keys in `[begin, end)`.
    pub(super) fn remove_range(&mut self, begin: &[u8], end: &[u8]) {
        self.sort();
        let prefix = self.map.as_slice();
        let first = prefix.partition_point(|key, _| key.borrow() < begin);
        let last = first + prefix[first..].partition_point(|key, _| key.borrow() < end);
        self.map.drain(first..last);
        self.sorted = self.map.len();
    }

    pub(super) fn values(&self) -> impl Iterator<Item = &V> {
        self.map.values()
    }

    /// Every entry, in the order they are kept (first written first, unless sorted).
    pub(super) fn into_entries(self) -> impl Iterator<Item = (K, V)> {
        self.map.into_iter()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    /// A small deterministic generator, so the test needs no randomness source.
    fn next(state: &mut u64) -> u64 {
        *state = state.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        *state >> 33
    }

    fn key(n: u64) -> Vec<u8> {
        // Keys of different lengths sharing prefixes, as tuple keys do.
        let mut key = vec![2, b's', (n % 3) as u8];
        key.extend((0..n % 4).map(|i| (n >> (i * 3)) as u8));
        key
    }

    #[test]
    fn agrees_with_an_ordered_map_under_any_mix_of_writes_ranges_and_settling() {
        let mut state = 7;
        for round in 0..200 {
            let mut set: WriteSet<Vec<u8>, u64> = WriteSet::default();
            let mut model: BTreeMap<Vec<u8>, u64> = BTreeMap::new();
            let ops = 1 + next(&mut state) % 400;
            for op in 0..ops {
                let a = key(next(&mut state) % 300);
                match next(&mut state) % 10 {
                    0..=4 => {
                        set.insert(a.clone(), op);
                        model.insert(a, op);
                    }
                    5 => {
                        *set.get_or_insert_with(a.clone(), || op) += 1;
                        *model.entry(a).or_insert(op) += 1;
                    }
                    6 => {
                        let b = key(next(&mut state) % 300);
                        let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
                        set.remove_range(&lo, &hi);
                        model.retain(|k, _| k.as_slice() < lo.as_slice() || hi.as_slice() <= k.as_slice());
                    }
                    7 => set.settle(),
                    _ => {
                        let b = key(next(&mut state) % 300);
                        let expected: Vec<(&Vec<u8>, &u64)> =
                            if a <= b { model.range(a.clone()..b.clone()).collect() } else { Vec::new() };
                        assert_eq!(set.range(&a, &b), expected, "round {round}, op {op}");
                        assert_eq!(set.none_in(&a, &b), expected.is_empty(), "round {round}, op {op}");
                        assert_eq!(set.get(&a), model.get(&a));
                    }
                }
            }
            assert_eq!(set.is_empty(), model.is_empty());
            let mut values: Vec<u64> = set.values().copied().collect();
            values.sort_unstable();
            let mut expected: Vec<u64> = model.values().copied().collect();
            expected.sort_unstable();
            assert_eq!(values, expected);
            let mut entries: Vec<(Vec<u8>, u64)> = set.into_entries().collect();
            entries.sort();
            assert_eq!(entries, model.into_iter().collect::<Vec<_>>());
        }
    }

    #[test]
    fn writes_in_ascending_order_stay_sorted_without_a_sort() {
        let mut set: WriteSet<Vec<u8>, ()> = WriteSet::default();
        for n in 0..100u8 {
            set.insert(vec![n], ());
        }
        assert_eq!(set.sorted, 100);
        set.insert(vec![50], ());
        assert_eq!(set.sorted, 100, "rewriting a key keeps its place");
        set.insert(vec![0, 1], ());
        assert_eq!(set.sorted, 100, "a key out of order starts the tail");
        assert_eq!(set.range(&[0], &[1]).len(), 2, "the tail is read too");
    }
}
