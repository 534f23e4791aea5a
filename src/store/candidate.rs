//! A due fire an acquisition may take, as read from the due index.

use std::borrow::Cow;

use crate::kv::KvBytes;

/// A due fire an acquisition may take: its due entry and what orders it among the others.
pub(super) struct Candidate {
    /// From one of this node's home shards (taken before stolen ones).
    pub(super) home: bool,
    /// Order among stolen candidates: a hash of (node, trigger), so nodes that steal at
    /// the same time pick different fires.
    pub(super) spread: u64,
    pub(super) priority: i32,
    pub(super) due: i64,
    /// The due entry's key, which holds the job's and the trigger's names.
    pub(super) key: KvBytes,
    pub(super) job: KeyText,
    pub(super) trigger: KeyText,
    pub(super) shard: u16,
}

impl Candidate {
    pub(super) fn job(&self) -> &str {
        self.job.get(&self.key)
    }

    pub(super) fn trigger(&self) -> &str {
        self.trigger.get(&self.key)
    }
}

/// A name a candidate keeps: where it lies in the candidate's due key, so thousands of
/// candidates read together copy no names; or a copy, where the key holds it escaped.
pub(super) enum KeyText {
    Span(std::ops::Range<usize>),
    Copied(String),
}

impl KeyText {
    /// `text`, as decoded from `key`.
    pub(super) fn of(key: &[u8], text: Cow<'_, str>) -> Self {
        let span = (text.as_ptr() as usize).checked_sub(key.as_ptr() as usize).map(|start| start..start + text.len());
        match span.filter(|span| key.get(span.clone()) == Some(text.as_bytes())) {
            Some(span) => Self::Span(span),
            None => Self::Copied(text.into_owned()),
        }
    }

    fn get<'a>(&'a self, key: &'a [u8]) -> &'a str {
        match self {
            // The span held this text when it was made, and the key is not changed since.
            Self::Span(span) => key.get(span.clone()).and_then(|bytes| std::str::from_utf8(bytes).ok()).unwrap_or(""),
            Self::Copied(text) => text,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_decoded_from_the_key_is_kept_as_its_span() {
        let key = b"\x01due\x00\x02job-1\x00\x02t\x00".to_vec();
        let job = std::str::from_utf8(&key[6..11]).unwrap();
        let kept = KeyText::of(&key, Cow::Borrowed(job));
        assert!(matches!(kept, KeyText::Span(ref span) if *span == (6..11)));
        assert_eq!(kept.get(&key), "job-1");
    }

    #[test]
    fn a_name_not_lying_in_the_key_is_copied() {
        let key = b"\x02job-1\x00".to_vec();
        // Unescaped by the decoder (owned), or text from elsewhere that merely borrows.
        for text in [Cow::Owned("job\u{0}1".to_owned()), Cow::Borrowed("job-1")] {
            let kept = KeyText::of(&key, text.clone());
            assert!(matches!(kept, KeyText::Copied(_)));
            assert_eq!(kept.get(&key), text);
        }
    }
}
