//! [`StateBudget`]: the deterministic bound of the snapshot size that refuses requests which
//! could outgrow the host's state limit.

#[cfg(doc)]
use super::BlockHost;
use super::RequestRefusal;

/// Bytes a request may add to the snapshot besides its payload and result (record framing).
pub const REQUEST_OVERHEAD_BYTES: u64 = 64;

/// A deterministic upper bound of the snapshot size: the exact size at the last checkpoint
/// ([`BlockHost::checkpoint`]) plus what the requests executed since may have added. Replicated:
/// every validator checkpoints at the same heights, so every validator refuses the same
/// requests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StateBudget {
    /// The usable limit (`None`: no limit; the budget is still tracked).
    pub limit: Option<u64>,
    /// Snapshot bytes at the last checkpoint.
    pub base: u64,
    /// What the requests executed since may have added.
    pub growth: u64,
}

impl StateBudget {
    /// Checks that a request of `payload_len` bytes keeps the snapshot within the limit. The
    /// bound assumes an application grows by at most the payload, its result (not known yet:
    /// as much as the payload is reserved) and [`REQUEST_OVERHEAD_BYTES`] per request.
    pub fn check(&self, payload_len: usize) -> Result<(), RequestRefusal> {
        let Some(limit) = self.limit else {
            return Ok(());
        };
        let projected = self
            .base
            .saturating_add(self.growth)
            .saturating_add((payload_len as u64).saturating_mul(2))
            .saturating_add(REQUEST_OVERHEAD_BYTES);
        if projected > limit {
            return Err(RequestRefusal::StateFull { projected, limit });
        }
        Ok(())
    }

    /// Accounts an executed request's possible growth.
    pub fn grow(&mut self, payload_len: usize, result_len: usize) {
        let g = (payload_len as u64)
            .saturating_add(result_len as u64)
            .saturating_add(REQUEST_OVERHEAD_BYTES);
        self.growth = self.growth.saturating_add(g);
    }
}
