//! A transaction's buffered point writes, found by hash, with an ordered index of their
//! keys built only for a transaction that reads ranges over many of them.
//!
//! An acquisition of 2,000 fires buffers some 12,000 writes and reads no range over them
//! (its range reads come before its writes). In a B-tree each buffered write cost a search
//! from the root, about 1,100 instructions at that size; here it is a hash and a probe. A
//! range read over a few writes scans them; once a transaction holding more than
//! [`SCAN_MAX`] writes reads a range ([`WriteSet::settle`]), their keys go into a B-tree
//! too, kept from then on, so such a transaction (a batch of completions unblocking
//! triggers one job after another) pays about what it paid before, never a scan per read.
//! A commit takes the writes in the order they were made ([`WriteSet::into_entries`]):
//! sorting 12,000 of them cost more than the B-tree had, and applying them needs no order
//! (the store tells the watches they fire in key order itself).

use std::borrow::Borrow;
use std::collections::BTreeSet;
use std::hash::Hash;
use std::ops::Bound;

use indexmap::map::{Entry, IndexMap};
use rustc_hash::FxBuildHasher;

/// Writes a range read scans rather than building the ordered index of their keys.
const SCAN_MAX: usize = 64;

/// Point writes by key: insertion and lookup by hash, ranges in key order.
pub(super) struct WriteSet<K, V> {
    /// In the order the keys were first written.
    map: IndexMap<K, V, FxBuildHasher>,
    /// Every key of `map`, once a range read asked for it over more than `SCAN_MAX`.
    ordered: Option<BTreeSet<K>>,
}

impl<K, V> Default for WriteSet<K, V> {
    fn default() -> Self {
        Self { map: IndexMap::default(), ordered: None }
    }
}

impl<K, V> WriteSet<K, V>
where
    K: Hash + Ord + Clone + Borrow<[u8]>,
{
    pub(super) fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    pub(super) fn get(&self, key: &[u8]) -> Option<&V> {
        self.map.get(key)
    }

    /// Sets `key`'s entry to `value`.
    pub(super) fn insert(&mut self, key: K, value: V) {
        match self.map.entry(key) {
            Entry::Occupied(mut entry) => {
                entry.insert(value);
            }
            Entry::Vacant(entry) => {
                if let Some(ordered) = &mut self.ordered {
                    ordered.insert(entry.key().clone());
                }
                entry.insert(value);
            }
        }
    }

    /// `key`'s entry, made by `make` when there is none.
    pub(super) fn get_or_insert_with(&mut self, key: K, make: impl FnOnce() -> V) -> &mut V {
        match self.map.entry(key) {
            Entry::Occupied(entry) => entry.into_mut(),
            Entry::Vacant(entry) => {
                if let Some(ordered) = &mut self.ordered {
                    ordered.insert(entry.key().clone());
                }
                entry.insert(make())
            }
        }
    }

    /// Builds the ordered index of the keys when they are too many to scan at every range
    /// read. Only speed depends on it: [`range`](Self::range) and
    /// [`none_in`](Self::none_in) are right either way.
    pub(super) fn settle(&mut self) {
        if self.ordered.is_none() && self.map.len() > SCAN_MAX {
            self.ordered = Some(self.map.keys().cloned().collect());
        }
    }

    /// The entries with keys in `[begin, end)`, ascending.
    pub(super) fn range(&self, begin: &[u8], end: &[u8]) -> Vec<(&K, &V)> {
        if begin >= end {
            return Vec::new();
        }
        match &self.ordered {
            Some(ordered) => ordered
                .range::<[u8], _>((Bound::Included(begin), Bound::Excluded(end)))
                .filter_map(|key| self.map.get_key_value(key.borrow()))
                .collect(),
            None => {
                let mut found: Vec<(&K, &V)> = self.map.iter().filter(|(key, _)| inside(*key, begin, end)).collect();
                found.sort_unstable_by_key(|(key, _)| *key);
                found
            }
        }
    }

    /// Whether no entry has a key in `[begin, end)`.
    pub(super) fn none_in(&self, begin: &[u8], end: &[u8]) -> bool {
        if begin >= end {
            return true;
        }
        match &self.ordered {
            Some(ordered) => ordered.range::<[u8], _>((Bound::Included(begin), Bound::Excluded(end))).next().is_none(),
            None => !self.map.keys().any(|key| inside(key, begin, end)),
        }
    }

    /// Removes the entries with keys in `[begin, end)`, keeping the others' order.
    pub(super) fn remove_range(&mut self, begin: &[u8], end: &[u8]) {
        if begin >= end {
            return;
        }
        self.map.retain(|key, _| !inside(key, begin, end));
        if let Some(ordered) = &mut self.ordered {
            ordered.retain(|key| !inside(key, begin, end));
        }
    }

    /// Every key, in the order it was first written.
    pub(super) fn keys(&self) -> impl ExactSizeIterator<Item = &[u8]> {
        self.map.keys().map(Borrow::borrow)
    }

    pub(super) fn values(&self) -> impl Iterator<Item = &V> {
        self.map.values()
    }

    /// Every entry, in the order its key was first written.
    pub(super) fn into_entries(self) -> impl Iterator<Item = (K, V)> {
        self.map.into_iter()
    }
}

fn inside<K: Borrow<[u8]>>(key: &K, begin: &[u8], end: &[u8]) -> bool {
    let key: &[u8] = key.borrow();
    begin <= key && key < end
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
    fn the_ordered_index_is_built_only_past_the_scan_limit_and_kept_after() {
        let mut set: WriteSet<Vec<u8>, u8> = WriteSet::default();
        for n in (0..SCAN_MAX as u8).rev() {
            set.insert(vec![n], n);
        }
        set.settle();
        assert!(set.ordered.is_none(), "a few writes are scanned");
        assert_eq!(set.range(&[1], &[4]), [(&vec![1], &1), (&vec![2], &2), (&vec![3], &3)]);
        set.insert(vec![200], 200);
        set.settle();
        assert!(set.ordered.is_some(), "more are indexed");
        set.insert(vec![100, 1], 7);
        set.insert(vec![3], 30);
        assert_eq!(set.range(&[3], &[4]), [(&vec![3], &30)], "a rewrite is seen");
        assert_eq!(set.range(&[64], &[201]), [(&vec![100, 1], &7), (&vec![200], &200)], "later writes are indexed too");
        set.remove_range(&[0], &[100]);
        assert_eq!(set.range(&[0], &[255]), [(&vec![100, 1], &7), (&vec![200], &200)]);
        let order: Vec<Vec<u8>> = set.into_entries().map(|(key, _)| key).collect();
        assert_eq!(order, [vec![200], vec![100, 1]], "entries come in the order they were first written");
    }
}
