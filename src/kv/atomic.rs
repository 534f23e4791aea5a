//! FoundationDB's atomic operations, applied to a current value (API version ≥ 510 rules).

/// An atomic mutation applied at commit without reading (so without a read conflict).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AtomicOp {
    /// Little-endian integer addition with wraparound; the result has the operand's length.
    Add,
    /// Bitwise AND; an absent value yields the operand.
    BitAnd,
    /// Bitwise OR.
    BitOr,
    /// Bitwise XOR.
    BitXor,
    /// The larger, comparing both as little-endian unsigned integers of the operand's length.
    Max,
    /// The smaller, as for `Max`; an absent value yields the operand.
    Min,
    /// The lexicographically larger byte string.
    ByteMax,
    /// The lexicographically smaller byte string; an absent value yields the operand.
    ByteMin,
    /// Clears the key if its value equals the operand.
    CompareAndClear,
    /// Sets a key containing the commit versionstamp: the key's last 4 bytes are a
    /// little-endian offset of 10 placeholder bytes to overwrite.
    SetVersionstampedKey,
    /// Sets a value containing the commit versionstamp: the value's last 4 bytes are a
    /// little-endian offset of 10 placeholder bytes to overwrite.
    SetVersionstampedValue,
}

/// `existing` resized to `len` bytes: truncated, or zero-extended at the high end.
fn resized(existing: Option<&[u8]>, len: usize) -> Vec<u8> {
    let mut value = existing.map(<[u8]>::to_vec).unwrap_or_default();
    value.resize(len, 0);
    value
}

/// Compares two equal-length little-endian unsigned integers.
fn cmp_le(a: &[u8], b: &[u8]) -> std::cmp::Ordering {
    a.iter().rev().cmp(b.iter().rev())
}

/// The value after applying `op` with operand `param` to `existing` (`None` = absent).
/// Returns `None` when the key ends up cleared. Versionstamp operations are not value
/// transforms and are handled at commit; here they return the operand unchanged.
pub fn apply(op: AtomicOp, existing: Option<&[u8]>, param: &[u8]) -> Option<Vec<u8>> {
    match op {
        AtomicOp::Add => {
            let mut value = resized(existing, param.len());
            let mut carry = 0u16;
            for (byte, add) in value.iter_mut().zip(param) {
                let sum = u16::from(*byte) + u16::from(*add) + carry;
                *byte = sum as u8;
                carry = sum >> 8;
            }
            Some(value)
        }
        AtomicOp::BitAnd => match existing {
            None => Some(param.to_vec()),
            Some(existing) => {
                Some(resized(Some(existing), param.len()).iter().zip(param).map(|(a, b)| a & b).collect())
            }
        },
        AtomicOp::BitOr => Some(resized(existing, param.len()).iter().zip(param).map(|(a, b)| a | b).collect()),
        AtomicOp::BitXor => Some(resized(existing, param.len()).iter().zip(param).map(|(a, b)| a ^ b).collect()),
        AtomicOp::Max => {
            let value = resized(existing, param.len());
            Some(if cmp_le(&value, param).is_ge() { value } else { param.to_vec() })
        }
        AtomicOp::Min => match existing {
            None => Some(param.to_vec()),
            Some(existing) => {
                let value = resized(Some(existing), param.len());
                Some(if cmp_le(&value, param).is_le() { value } else { param.to_vec() })
            }
        },
        AtomicOp::ByteMax => match existing {
            Some(existing) if existing >= param => Some(existing.to_vec()),
            _ => Some(param.to_vec()),
        },
        AtomicOp::ByteMin => match existing {
            Some(existing) if existing <= param => Some(existing.to_vec()),
            _ => Some(param.to_vec()),
        },
        AtomicOp::CompareAndClear => match existing {
            Some(existing) if existing == param => None,
            other => other.map(<[u8]>::to_vec),
        },
        AtomicOp::SetVersionstampedKey | AtomicOp::SetVersionstampedValue => Some(param.to_vec()),
    }
}

/// Splits a versionstamp operand into its bytes and the offset of the 10-byte placeholder,
/// checking the placeholder fits. `None` when the operand is malformed.
pub fn versionstamp_offset(with_offset: &[u8]) -> Option<(&[u8], usize)> {
    let split = with_offset.len().checked_sub(4)?;
    let (bytes, offset) = with_offset.split_at(split);
    let offset = u32::from_le_bytes(offset.try_into().ok()?) as usize;
    (offset.checked_add(10)? <= bytes.len()).then_some((bytes, offset))
}

/// `bytes` with the 10 bytes at `offset` replaced by `stamp`.
pub fn stamped(bytes: &[u8], offset: usize, stamp: &[u8; 10]) -> Vec<u8> {
    let mut out = bytes.to_vec();
    out[offset..offset + 10].copy_from_slice(stamp);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn add_is_little_endian_with_operand_length() {
        assert_eq!(apply(AtomicOp::Add, None, &5u64.to_le_bytes()), Some(5u64.to_le_bytes().to_vec()));
        assert_eq!(
            apply(AtomicOp::Add, Some(&255u16.to_le_bytes()), &1u16.to_le_bytes()),
            Some(256u16.to_le_bytes().to_vec())
        );
        // Wraps around and keeps the operand's length.
        assert_eq!(apply(AtomicOp::Add, Some(&[0xff, 0xff, 0x07]), &[1, 0]), Some(vec![0, 0]));
        assert_eq!(apply(AtomicOp::Add, Some(&(-1i64).to_le_bytes()), &1i64.to_le_bytes()), Some(vec![0; 8]));
    }

    #[test]
    fn min_max_and_bitwise() {
        assert_eq!(apply(AtomicOp::Max, Some(&[1, 2]), &[2, 1]), Some(vec![1, 2]));
        assert_eq!(apply(AtomicOp::Min, Some(&[1, 2]), &[2, 1]), Some(vec![2, 1]));
        assert_eq!(apply(AtomicOp::Min, None, &[7]), Some(vec![7]));
        assert_eq!(apply(AtomicOp::Max, None, &[7]), Some(vec![7]));
        assert_eq!(apply(AtomicOp::BitAnd, None, &[0b1010]), Some(vec![0b1010]));
        assert_eq!(apply(AtomicOp::BitAnd, Some(&[0b0110]), &[0b1010]), Some(vec![0b0010]));
        assert_eq!(apply(AtomicOp::BitOr, Some(&[0b0110]), &[0b1010]), Some(vec![0b1110]));
        assert_eq!(apply(AtomicOp::BitXor, Some(&[0b0110]), &[0b1010]), Some(vec![0b1100]));
        assert_eq!(apply(AtomicOp::ByteMax, Some(b"b"), b"ab"), Some(b"b".to_vec()));
        assert_eq!(apply(AtomicOp::ByteMin, Some(b"b"), b"ab"), Some(b"ab".to_vec()));
    }

    #[test]
    fn compare_and_clear() {
        assert_eq!(apply(AtomicOp::CompareAndClear, Some(&[0, 0]), &[0, 0]), None);
        assert_eq!(apply(AtomicOp::CompareAndClear, Some(&[1, 0]), &[0, 0]), Some(vec![1, 0]));
        assert_eq!(apply(AtomicOp::CompareAndClear, None, &[0]), None);
    }

    #[test]
    fn versionstamp_operands() {
        let mut key = b"k".to_vec();
        key.extend_from_slice(&[0; 10]);
        key.extend_from_slice(&1u32.to_le_bytes());
        let (bytes, offset) = versionstamp_offset(&key).unwrap();
        assert_eq!((bytes.len(), offset), (11, 1));
        assert_eq!(stamped(bytes, offset, &[9; 10])[1..], [9; 10]);
        assert!(versionstamp_offset(&[0, 0, 0]).is_none());
        assert!(versionstamp_offset(&[0, 0, 0, 0, 5, 0, 0, 0]).is_none());
    }
}
