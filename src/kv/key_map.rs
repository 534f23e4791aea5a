//! The memory store's ordered map of keys, split at fixed keys into separate B-trees.
//!
//! A keyspace mixes a few thousand hot keys (triggers, the due index, slots, nodes) read and
//! written by every transaction with millions written once and rarely read again (run
//! records and history). In one B-tree, every lookup of a hot key descends through a tree
//! sized by the cold ones, and its nodes compete for the cache with theirs. Split at the
//! boundaries of those subspaces (see [`Kv::split_hint`](super::Kv::split_hint)), each part
//! is a tree of its own size; in key order the parts are one map, so nothing a reader sees
//! depends on where the splits are.

use std::collections::btree_map::{self, BTreeMap};
use std::ops::Bound;

/// An ordered map from byte-string keys, stored as one B-tree per part between split keys.
pub(super) struct KeyMap<K, V> {
    /// Ascending: part `i` holds the keys in `[splits[i - 1], splits[i])`.
    splits: Vec<K>,
    /// One more than `splits`.
    parts: Vec<BTreeMap<K, V>>,
}

impl<K, V> KeyMap<K, V>
where
    K: Ord + std::borrow::Borrow<[u8]> + for<'a> From<&'a [u8]>,
{
    /// An empty map in one part.
    pub(super) fn new() -> Self {
        Self { splits: Vec::new(), parts: vec![BTreeMap::new()] }
    }

    /// Adds split keys (keeping those there already) and moves the keys into their parts.
    pub(super) fn split_at(&mut self, keys: &[Vec<u8>]) {
        let mut splits: Vec<&[u8]> =
            self.splits.iter().map(|k| k.borrow()).chain(keys.iter().map(Vec::as_slice)).collect();
        splits.sort_unstable();
        splits.dedup();
        if splits.len() == self.splits.len() {
            return;
        }
        let splits: Vec<K> = splits.into_iter().map(K::from).collect();
        let old = std::mem::take(&mut self.parts);
        self.parts = (0..=splits.len()).map(|_| BTreeMap::new()).collect();
        self.splits = splits;
        for (key, value) in old.into_iter().flatten() {
            let part = self.part_of(key.borrow());
            self.parts[part].insert(key, value);
        }
    }

    /// The part `key` belongs to.
    fn part_of(&self, key: &[u8]) -> usize {
        self.splits.partition_point(|split| split.borrow() <= key)
    }

    pub(super) fn get(&self, key: &[u8]) -> Option<&V> {
        self.parts[self.part_of(key)].get(key)
    }

    pub(super) fn get_mut(&mut self, key: &[u8]) -> Option<&mut V> {
        let part = self.part_of(key);
        self.parts[part].get_mut(key)
    }

    pub(super) fn entry(&mut self, key: K) -> btree_map::Entry<'_, K, V> {
        let part = self.part_of(key.borrow());
        self.parts[part].entry(key)
    }

    pub(super) fn remove(&mut self, key: &[u8]) -> Option<V> {
        let part = self.part_of(key);
        self.parts[part].remove(key)
    }

    /// The entries from `begin` on, ascending.
    pub(super) fn from(&self, begin: &[u8]) -> impl Iterator<Item = (&K, &V)> {
        let part = self.part_of(begin);
        let first = self.parts[part].range::<[u8], _>((Bound::Included(begin), Bound::Unbounded));
        first.chain(self.parts[part + 1..].iter().flatten())
    }

    /// The entries before `end`, descending.
    pub(super) fn before(&self, end: &[u8]) -> impl Iterator<Item = (&K, &V)> {
        let part = self.part_of(end);
        let first = self.parts[part].range::<[u8], _>((Bound::Unbounded, Bound::Excluded(end))).rev();
        first.chain(self.parts[..part].iter().rev().flat_map(|map| map.iter().rev()))
    }

    /// The entries in `[begin, end)`, ascending.
    pub(super) fn range<'a>(&'a self, begin: &[u8], end: &'a [u8]) -> impl Iterator<Item = (&'a K, &'a V)> {
        self.from(begin).take_while(move |(key, _)| (*key).borrow() < end)
    }

    /// Every value, in key order.
    pub(super) fn values(&self) -> impl Iterator<Item = &V> {
        self.parts.iter().flat_map(BTreeMap::values)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(map: &KeyMap<Vec<u8>, u32>, from: &[u8]) -> Vec<u8> {
        map.from(from).map(|(k, _)| k[0]).collect()
    }

    #[test]
    fn a_split_map_reads_as_one_map_in_key_order() {
        let mut map: KeyMap<Vec<u8>, u32> = KeyMap::new();
        for byte in [1u8, 3, 5, 7, 9] {
            map.entry(vec![byte]).or_insert(u32::from(byte));
        }
        map.split_at(&[vec![4], vec![8], vec![4]]);
        assert_eq!(map.parts.len(), 3, "a repeated split key splits once");
        assert_eq!(map.parts.iter().map(BTreeMap::len).collect::<Vec<_>>(), [2, 2, 1]);
        map.entry(vec![4]).or_insert(4);
        map.entry(vec![8]).or_insert(8);
        assert_eq!(map.parts.iter().map(BTreeMap::len).collect::<Vec<_>>(), [2, 3, 2], "a split key opens its part");
        assert_eq!(keys(&map, &[0]), [1, 3, 4, 5, 7, 8, 9]);
        assert_eq!(keys(&map, &[5]), [5, 7, 8, 9]);
        assert_eq!(map.range(&[2], &[8]).map(|(k, _)| k[0]).collect::<Vec<_>>(), [3, 4, 5, 7]);
        assert_eq!(map.before(&[8]).map(|(k, _)| k[0]).collect::<Vec<_>>(), [7, 5, 4, 3, 1]);
        assert_eq!(map.before(&[10]).map(|(k, _)| k[0]).collect::<Vec<_>>(), [9, 8, 7, 5, 4, 3, 1]);
        assert_eq!(map.values().copied().collect::<Vec<_>>(), [1, 3, 4, 5, 7, 8, 9]);
        assert_eq!(map.get(&[7]), Some(&7));
        *map.get_mut(&[7]).unwrap() = 70;
        assert_eq!(map.remove(&[7]), Some(70));
        assert_eq!(map.get(&[7]), None);
        map.split_at(&[vec![2]]);
        assert_eq!(map.parts.len(), 4, "splits add up");
        assert_eq!(keys(&map, &[0]), [1, 3, 4, 5, 8, 9]);
    }
}
