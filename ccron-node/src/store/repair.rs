//! The operator's repair of a record file a node refused (`repair-store`). Split out of
//! `store.rs` as is (behaviour unchanged).

use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};

use super::StoreError;
use super::record::{Scan, scan_record};

/// What [`cut_record_file`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cut {
    /// Where the file was cut (its first damaged record).
    pub offset: u64,
    /// The bytes cut away.
    pub cut_bytes: u64,
    /// The untouched copy of the whole file, kept next to it.
    pub copy: PathBuf,
}

/// The operator's repair of a record file (`blocks.log` or `parts.log`) that a node refused
/// with [`StoreError::Corrupt`]: copies the file whole to `FILE.corrupt-OFFSET`, then cuts it
/// at `at` (the offset the node's error named) or, without it, at the first record that fails
/// its length bound or checksum. `Ok(None)`: nothing to cut. The node then starts from the
/// records before the cut and takes the later heights from its peers (value sync); the copy
/// keeps the evidence.
///
/// # Errors
/// I/O errors.
pub fn cut_record_file(path: &Path, at: Option<u64>) -> Result<Option<Cut>, StoreError> {
    let io = |source| StoreError::Io {
        path: path.to_path_buf(),
        source,
    };
    let bytes = std::fs::read(path).map_err(io)?;
    let offset = match at {
        Some(at) => at,
        None => {
            let mut off = 0usize;
            loop {
                match scan_record(&bytes, off) {
                    Scan::Record(_, next) => off = usize::try_from(next).unwrap_or(usize::MAX),
                    Scan::Torn => return Ok(None),
                    Scan::Damaged(_) => break off as u64,
                }
            }
        }
    };
    let len = bytes.len() as u64;
    if offset >= len {
        return Ok(None);
    }
    let copy = PathBuf::from(format!("{}.corrupt-{offset}", path.display()));
    std::fs::write(&copy, &bytes).map_err(io)?;
    File::open(&copy).and_then(|f| f.sync_all()).map_err(io)?;
    let f = OpenOptions::new().write(true).open(path).map_err(io)?;
    f.set_len(offset).map_err(io)?;
    f.sync_all().map_err(io)?;
    tracing::warn!(path = %path.display(), offset, cut_bytes = len - offset, copy = %copy.display(), "record file cut at a damaged record");
    Ok(Some(Cut {
        offset,
        cut_bytes: len - offset,
        copy,
    }))
}
