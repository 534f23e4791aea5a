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

/// Bytes reserved for an encoded record (run and trigger records mostly fit).
const ENCODE_ROOM: usize = 256;

/// Encodes `value` with the schema byte.
pub fn encode<T: Serialize>(value: &T) -> Vec<u8> {
    // Room for most records at once, encoded in place after the schema byte: growing from
    // nothing took half a dozen reallocations per record, and a copy, on every fire.
    let mut out = Vec::with_capacity(ENCODE_ROOM);
    out.push(SCHEMA_VERSION);
    // Encoding plain records into a Vec cannot fail: no writer errors, no size limit on
    // encode, and every record type is serializable.
    bincode::serde::encode_into_std_write(value, &mut out, bincode::config::standard())
        .unwrap_or_else(|e| unreachable!("records always encode: {e}"));
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
