//! Values: one schema-version byte, then `bincode` 2 (standard config). Decoding is
//! strict: an unknown version, trailing bytes or a malformed body is an error, never a
//! guess.

use serde::Deserialize;
use serde::Serialize;

use super::StoreError;

/// The schema version written in front of every value.
pub const SCHEMA_VERSION: u8 = 1;

/// The largest value decoding will allocate for, so corrupt lengths cannot exhaust memory.
const DECODE_LIMIT: usize = 1 << 20;

fn config() -> impl bincode::config::Config {
    bincode::config::standard().with_limit::<DECODE_LIMIT>()
}

/// Appends what bincode writes to a vector (sized beforehand, so it never grows).
struct Append<'a>(&'a mut Vec<u8>);

impl bincode::enc::write::Writer for Append<'_> {
    fn write(&mut self, bytes: &[u8]) -> Result<(), bincode::error::EncodeError> {
        self.0.extend_from_slice(bytes);
        Ok(())
    }
}

/// Encodes `value` with the schema byte.
///
/// The value is measured first and encoded into a vector of exactly its size: one
/// allocation, and a buffer a store keeps as it is (a vector with room to spare is
/// reallocated when a store shrinks it to keep it, on every write).
pub fn encode<T: Serialize>(value: &T) -> Vec<u8> {
    // Encoding plain records cannot fail: no writer errors, no size limit on encode, and
    // every record type is serializable.
    let failed = |e: bincode::error::EncodeError| unreachable!("records always encode: {e}");
    let mut size = bincode::enc::write::SizeWriter::default();
    bincode::serde::encode_into_writer(value, &mut size, bincode::config::standard()).unwrap_or_else(failed);
    let mut out = Vec::with_capacity(1 + size.bytes_written);
    out.push(SCHEMA_VERSION);
    bincode::serde::encode_into_writer(value, Append(&mut out), bincode::config::standard()).unwrap_or_else(failed);
    debug_assert_eq!(out.len(), out.capacity());
    out
}

/// Decodes a value written by [`encode`]; `what` names it in errors. The value may borrow
/// its strings from `bytes` (a view of a record read often, such as [`NodeView`](super::records::NodeView)).
///
/// # Errors
/// [`StoreError::Corrupt`] for an empty value, an unknown schema version, a malformed body
/// or trailing bytes.
pub fn decode<'de, T: Deserialize<'de>>(bytes: &'de [u8], what: &str) -> Result<T, StoreError> {
    let Some((&version, body)) = bytes.split_first() else {
        return Err(StoreError::Corrupt(format!("{what}: empty value")));
    };
    if version != SCHEMA_VERSION {
        return Err(StoreError::Corrupt(format!("{what}: unknown schema version {version}")));
    }
    let (value, read) = bincode::serde::borrow_decode_from_slice(body, config())
        .map_err(|e| StoreError::Corrupt(format!("{what}: {e}")))?;
    if read != body.len() {
        return Err(StoreError::Corrupt(format!("{what}: {} trailing bytes", body.len() - read)));
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
    struct Sample {
        name: String,
        count: u32,
        flag: Option<bool>,
    }

    #[test]
    fn round_trip_and_strictness() {
        let sample = Sample { name: "x".into(), count: 7, flag: Some(true) };
        let bytes = encode(&sample);
        assert_eq!(bytes[0], SCHEMA_VERSION);
        assert_eq!(bytes.len(), bytes.capacity(), "encoded to size");
        assert_eq!(decode::<Sample>(&bytes, "sample").unwrap(), sample);
        let mut wrong_version = bytes.clone();
        wrong_version[0] = 9;
        assert!(decode::<Sample>(&wrong_version, "sample").unwrap_err().to_string().contains("schema version 9"));
        let mut trailing = bytes.clone();
        trailing.push(0);
        assert!(decode::<Sample>(&trailing, "sample").unwrap_err().to_string().contains("trailing"));
        assert!(decode::<Sample>(&bytes[..bytes.len() - 1], "sample").is_err());
        assert!(decode::<Sample>(&[], "sample").is_err());
    }
}
