//! The record format of the node's record files (`blocks.log`, `parts.log`): length, CRC-32
//! of the payload, payload; the scan that tells a good record, a torn tail and damage apart, and
//! the synced append. Split out of `store.rs` as is (behaviour unchanged).

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::path::Path;

use borsh::BorshSerialize;

use super::StoreError;

/// Largest record accepted when reading the store back.
pub const MAX_RECORD_BYTES: usize = 4 * 1024 * 1024;

/// What is wrong with a record that is not a torn tail.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Damage {
    /// Its length field is above [`MAX_RECORD_BYTES`] (no writer writes that).
    #[error("length {0} above the record bound")]
    Length(usize),
    /// Its payload fails the CRC-32.
    #[error("checksum mismatch")]
    Checksum,
    /// Its length runs past the end of the file, but a complete record follows within that
    /// span: not a torn append (which leaves a prefix of one record), a damaged length.
    #[error("length {0} runs past the end of the file over later records")]
    Overrun(usize),
    /// Its payload passes the checksum but does not decode.
    #[error("payload does not decode")]
    Decode,
    /// It decodes to another height than the next one.
    #[error("height {got}, expected {expected}")]
    Height {
        /// The record's height.
        got: u64,
        /// The next height.
        expected: u64,
    },
}

/// What the scan finds at an offset of a record file.
#[derive(Debug, PartialEq, Eq)]
pub enum Scan<T> {
    /// A record whose checksum holds: its payload and the next record's offset.
    Record(T, u64),
    /// The end of the file, or a torn last record: incomplete at the end of the file (a short
    /// header, a payload running past the end) or nothing but zero bytes up to the end (an
    /// extent a crash left unwritten). Only this is ever cut away.
    Torn,
    /// A damaged record that is not a torn tail.
    Damaged(Damage),
}

/// Classifies the record at `off` in `bytes` (the whole file).
pub fn scan_record(bytes: &[u8], off: usize) -> Scan<&[u8]> {
    let rest = bytes.get(off..).unwrap_or_default();
    if rest.iter().all(|&b| b == 0) {
        return Scan::Torn;
    }
    let Some(header) = rest.get(..8) else {
        return Scan::Torn;
    };
    let mut h = [0u8; 8];
    h.copy_from_slice(header);
    let (len, crc) = split_header(&h);
    if len > MAX_RECORD_BYTES {
        return Scan::Damaged(Damage::Length(len));
    }
    let Some(payload) = rest.get(8..8 + len) else {
        return torn_unless_records_follow(rest, len);
    };
    if crc32fast::hash(payload) != crc {
        return Scan::Damaged(Damage::Checksum);
    }
    Scan::Record(payload, (off + 8 + len) as u64)
}

/// A record header: (payload length, CRC-32).
pub(super) fn split_header(header: &[u8; 8]) -> (usize, u32) {
    let [a, b, c, d, e, f, g, h] = *header;
    (
        u32::from_le_bytes([a, b, c, d]) as usize,
        u32::from_le_bytes([e, f, g, h]),
    )
}

/// [`scan_record`] for a reader positioned at `off` in a file of `len` bytes (the block
/// store's start-up scan, which does not hold the file in memory). On anything but a good
/// record it reads the rest of the file to tell a torn tail from damage.
pub(super) fn read_record_from(
    reader: &mut impl Read,
    off: u64,
    len: u64,
) -> std::io::Result<Scan<Vec<u8>>> {
    let remaining = len.saturating_sub(off);
    if remaining < 8 {
        // A short header at the end of the file (or the end itself).
        return Ok(Scan::Torn);
    }
    let mut header = [0u8; 8];
    reader.read_exact(&mut header)?;
    let (n, crc) = split_header(&header);
    if header.iter().all(|&b| b == 0) {
        // Zeros: torn only when they run to the end of the file.
        let mut rest = Vec::new();
        reader.take(remaining - 8).read_to_end(&mut rest)?;
        return Ok(torn_or(&rest, Damage::Decode));
    }
    if n > MAX_RECORD_BYTES {
        return Ok(Scan::Damaged(Damage::Length(n)));
    }
    if remaining - 8 < n as u64 {
        // The payload runs past the end: a torn last record, unless complete records follow.
        let mut rest = header.to_vec();
        reader.take(remaining - 8).read_to_end(&mut rest)?;
        return Ok(torn_unless_records_follow(&rest, n));
    }
    let mut payload = vec![0u8; n];
    reader.read_exact(&mut payload)?;
    if crc32fast::hash(&payload) != crc {
        return Ok(Scan::Damaged(Damage::Checksum));
    }
    Ok(Scan::Record(payload, off + 8 + n as u64))
}

/// `rest` (a record claiming `len` bytes, to the end of the file, shorter than the claim):
/// torn, unless a complete record (length within bounds and the file, good checksum) starts
/// somewhere after its header: a torn append leaves the prefix of one record, so later records
/// mean its length field is damaged. (`rest` is shorter than one record, at most
/// [`MAX_RECORD_BYTES`] + 8 bytes.)
fn torn_unless_records_follow<T>(rest: &[u8], len: usize) -> Scan<T> {
    for i in 8..rest.len().saturating_sub(8) {
        let Some(hb) = rest.get(i..i + 8) else {
            break;
        };
        let mut h = [0u8; 8];
        h.copy_from_slice(hb);
        let (n, crc) = split_header(&h);
        if n == 0 || n > MAX_RECORD_BYTES {
            continue;
        }
        if let Some(payload) = rest.get(i + 8..i + 8 + n)
            && crc32fast::hash(payload) == crc
        {
            return Scan::Damaged(Damage::Overrun(len));
        }
    }
    Scan::Torn
}

/// Torn when `rest` (what follows, to the end of the file) is all zeros, else `damage`.
fn torn_or<T>(rest: &[u8], damage: Damage) -> Scan<T> {
    if rest.iter().all(|&b| b == 0) {
        Scan::Torn
    } else {
        Scan::Damaged(damage)
    }
}

/// Opens (or creates) a record file for appending and reads it whole.
pub(super) fn open_and_read(path: &Path) -> Result<(File, Vec<u8>), StoreError> {
    let mut file = open_record_file(path)?;
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)
        .map_err(|source| StoreError::Io {
            path: path.to_path_buf(),
            source,
        })?;
    Ok((file, bytes))
}

/// Opens (or creates) a record file to read it and append to it.
pub(super) fn open_record_file(path: &Path) -> Result<File, StoreError> {
    OpenOptions::new()
        .read(true)
        .append(true)
        .create(true)
        .open(path)
        .map_err(|source| StoreError::Io {
            path: path.to_path_buf(),
            source,
        })
}

/// Appends `value` as one record and fsyncs it; the record's length in bytes.
pub(super) fn append_synced<T: BorshSerialize>(
    file: &mut File,
    path: &Path,
    value: &T,
) -> Result<u64, StoreError> {
    let io = |source| StoreError::Io {
        path: path.to_path_buf(),
        source,
    };
    let rec = encode_record(value).map_err(io)?;
    file.write_all(&rec).map_err(io)?;
    file.sync_data().map_err(io)?;
    Ok(rec.len() as u64)
}

/// One record: length, CRC-32 of the payload, payload. A payload above [`MAX_RECORD_BYTES`] is
/// refused here: no reader accepts it ([`Damage::Length`]).
pub(super) fn encode_record<T: BorshSerialize>(value: &T) -> std::io::Result<Vec<u8>> {
    let payload = borsh::to_vec(value)?;
    if payload.len() > MAX_RECORD_BYTES {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!(
                "record of {} bytes exceeds MAX_RECORD_BYTES = {MAX_RECORD_BYTES}",
                payload.len()
            ),
        ));
    }
    let mut rec = Vec::with_capacity(payload.len() + 8);
    rec.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    rec.extend_from_slice(&crc32fast::hash(&payload).to_le_bytes());
    rec.extend_from_slice(&payload);
    Ok(rec)
}
