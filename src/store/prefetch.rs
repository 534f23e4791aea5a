//! Values read together ahead of the work that uses them. On FoundationDB, N reads issued
//! at once cost one round trip instead of N: an acquisition reads its fires' triggers,
//! jobs, slots and run guards this way, and a batch of completions its runs, jobs and
//! triggers.

use std::collections::BTreeSet;

use super::keys::{fnv, Key};

/// Values of keys, in the order the work asks for them. Each is handed out once; a key
/// asked for again (the same trigger or run met twice in one batch), or a key listed twice,
/// is not handed out (nor, rarely, one whose fingerprint an earlier key shares): the caller
/// reads it again, and so sees what it wrote since.
#[derive(Debug)]
pub(crate) struct Prefetched<V = Option<Vec<u8>>> {
    /// (key, value): `None` once handed out, and for a key listed earlier too. Keys are
    /// kept as they were built, inline: a batch lists thousands.
    entries: Vec<(Key, Option<V>)>,
    /// Entries before this one were handed out or passed over.
    next: usize,
}

impl<V> Default for Prefetched<V> {
    fn default() -> Self {
        Self { entries: Vec::new(), next: 0 }
    }
}

impl<V> Prefetched<V> {
    /// `values[i]` is the value of `keys[i]`.
    pub(crate) fn new(keys: Vec<Key>, values: Vec<V>) -> Self {
        // By fingerprint: cheaper than comparing keys, and a collision only costs a read.
        let mut seen = BTreeSet::new();
        let first: Vec<bool> = keys.iter().map(|key| seen.insert(fnv(&[key]))).collect();
        let entries = keys
            .into_iter()
            .zip(values)
            .zip(first)
            .map(|((key, value), first)| (key, first.then_some(value)))
            .collect();
        Self { entries, next: 0 }
    }

    /// The value of `key`, unless it was handed out already or never read. Work asks in
    /// the order the keys were listed, skipping some: entries before the one found are
    /// passed over for good.
    pub(crate) fn take(&mut self, key: &[u8]) -> Option<V> {
        let found = self.entries[self.next..].iter().position(|(k, _)| k.as_slice() == key)?;
        let at = self.next + found;
        self.next = at + 1;
        self.entries[at].1.take()
    }

    /// The values in the order the keys were listed (`None` for a repeated key).
    pub(crate) fn values(&self) -> impl Iterator<Item = Option<&V>> {
        self.entries.iter().map(|(_, value)| value.as_ref())
    }

    /// Each value converted by `f`.
    pub(crate) fn try_map<W, E>(self, mut f: impl FnMut(V) -> Result<W, E>) -> Result<Prefetched<W>, E> {
        // A loop, not `collect` into a `Result`: that cannot size the vector up front,
        // and a batch converts thousands of entries.
        let mut entries = Vec::with_capacity(self.entries.len());
        for (key, value) in self.entries {
            entries.push((key, value.map(&mut f).transpose()?));
        }
        Ok(Prefetched { entries, next: self.next })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(names: &[&str]) -> Vec<Key> {
        names.iter().map(|n| Key::from_slice(n.as_bytes())).collect()
    }

    #[test]
    fn each_value_is_handed_out_once_in_order_and_skipped_ones_are_passed_over() {
        let mut p = Prefetched::new(keys(&["a", "b", "c", "d"]), vec![1, 2, 3, 4]);
        assert_eq!(p.take(b"a"), Some(1));
        assert_eq!(p.take(b"a"), None, "handed out already: read again");
        assert_eq!(p.take(b"c"), Some(3), "b was skipped");
        assert_eq!(p.take(b"b"), None, "passed over");
        assert_eq!(p.take(b"x"), None, "never read");
        assert_eq!(p.take(b"d"), Some(4));
    }

    #[test]
    fn a_key_listed_twice_is_handed_out_only_for_its_first_listing() {
        let p = Prefetched::new(keys(&["t", "u", "t"]), vec![1, 2, 3]);
        assert_eq!(p.values().collect::<Vec<_>>(), vec![Some(&1), Some(&2), None]);
        let mut p = p.try_map(|v| Ok::<_, ()>(v * 10)).unwrap();
        assert_eq!(p.take(b"t"), Some(10));
        assert_eq!(p.take(b"u"), Some(20));
        assert_eq!(p.take(b"t"), None, "the second listing: the caller reads it again");
    }
}
