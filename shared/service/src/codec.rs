//! Bodies in the store: JSON, gzip-compressed, split into chunks that fit
//! a DynamoDB item ([`MAX_BODY_BYTES`]).

use std::io::{Read, Write};

use flotilla_ports::{Item, Key, MAX_BODY_BYTES};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::ServiceError;

/// Stored bodies larger than this after decompression are refused (a
/// corrupt or hostile item must not exhaust the Lambda's memory).
pub const MAX_INFLATED_BYTES: u64 = 512 * 1024 * 1024;

/// Plain JSON (small records that are read often).
pub fn to_json<T: Serialize>(value: &T) -> Vec<u8> {
    // The records are plain structs of strings, numbers, maps and vectors.
    serde_json::to_vec(value).unwrap_or_default()
}

pub fn from_json<T: DeserializeOwned>(key: &str, bytes: &[u8]) -> Result<T, ServiceError> {
    serde_json::from_slice(bytes).map_err(|e| ServiceError::Corrupt {
        key: key.to_string(),
        reason: e.to_string(),
    })
}

pub fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    // Writing into a Vec cannot fail.
    let _ = enc.write_all(bytes);
    enc.finish().unwrap_or_default()
}

pub fn gunzip(key: &str, bytes: &[u8]) -> Result<Vec<u8>, ServiceError> {
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(bytes)
        .take(MAX_INFLATED_BYTES)
        .read_to_end(&mut out)
        .map_err(|e| ServiceError::Corrupt {
            key: key.to_string(),
            reason: format!("gzip: {e}"),
        })?;
    Ok(out)
}

/// The value stored gzip'd under `key`, checked against its recorded
/// [`content_hash`] before it is parsed (what the batch and state readers
/// share).
pub fn from_verified_gzip<T: DeserializeOwned>(
    key: &str,
    compressed: &[u8],
    hash: &str,
) -> Result<T, ServiceError> {
    let json = gunzip(key, compressed)?;
    if content_hash(&json) != hash {
        return Err(ServiceError::Corrupt {
            key: key.to_string(),
            reason: "content hash mismatch".into(),
        });
    }
    from_json(key, &json)
}

/// Split `bytes` into pieces of at most [`MAX_BODY_BYTES`].
pub fn chunks(bytes: &[u8]) -> Vec<Vec<u8>> {
    if bytes.is_empty() {
        return vec![Vec::new()];
    }
    bytes.chunks(MAX_BODY_BYTES).map(<[u8]>::to_vec).collect()
}

/// `json` gzip-compressed and cut into items under `key(0)`, `key(1)`, …,
/// each expiring at `expires_at`: how a body larger than one item is
/// stored (its chunk count is the number of items).
pub fn chunk_items(json: &[u8], key: impl Fn(usize) -> Key, expires_at: Option<i64>) -> Vec<Item> {
    chunks(&gzip(json))
        .into_iter()
        .enumerate()
        .map(|(i, body)| {
            let mut item = Item::new(key(i), body);
            item.expires_at = expires_at;
            item
        })
        .collect()
}

/// 64-bit FNV-1a as 16 hex digits: stable content ids.
pub fn content_hash(bytes: &[u8]) -> String {
    format!("{:016x}", flotilla_core::state::compact::fnv(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Stored ids are content hashes: the function never changes (64-bit
    /// FNV-1a's published vectors).
    #[test]
    fn content_hash_is_fnv1a_64() {
        assert_eq!(content_hash(b""), "cbf29ce484222325");
        assert_eq!(content_hash(b"a"), "af63dc4c8601ec8c");
        assert_eq!(content_hash(b"foobar"), "85944171f73967e8");
    }

    #[test]
    fn gzip_round_trip_and_chunk_bound() {
        let data: Vec<u8> = (0..(MAX_BODY_BYTES * 2 + 17))
            .map(|i| (i % 251) as u8)
            .collect();
        let parts = chunks(&data);
        assert_eq!(parts.len(), 3);
        assert!(parts.iter().all(|p| p.len() <= MAX_BODY_BYTES));
        assert_eq!(parts.concat(), data);
        let z = gzip(&data);
        assert_eq!(gunzip("k", &z).unwrap(), data);
        assert!(gunzip("k", b"not gzip").is_err());
    }
}
