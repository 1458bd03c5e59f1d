//! The executed-requests table's digest, its canonical encoding and the migrations from
//! layouts 3 and 4 ([`super::EXECUTED_REQUESTS_LAYOUT`]).

use super::super::app::{ClientId, Digest32};
use super::super::wire::{self, WireError};
use super::{Entry, ExecutedRequests, Mask};

/// An entry as encoded: client, highest, mask words, last execution.
pub(super) type EncodedEntry = (ClientId, u64, [u64; 4], u64);

/// Layout 5: (bound, base, clock, evictions, refused ahead), entries, watermarks, legacy
/// watermarks (64-bit id, highest).
pub(super) type Encoded = (
    (u64, u64, u64, u64, u64),
    Vec<EncodedEntry>,
    Vec<(ClientId, u64)>,
    Vec<(u64, u64)>,
);

/// Layout 4 (frozen): as layout 5 with 64-bit client ids and no legacy watermarks.
pub(super) type EncodedV4 = (
    (u64, u64, u64, u64, u64),
    Vec<(u64, u64, [u64; 4], u64)>,
    Vec<(u64, u64)>,
);

impl ExecutedRequests {
    /// SHA-256 over the layout, bound, base, clock, evictions, refusals, the entries and the
    /// watermarks in client order, and the legacy watermarks (equal on validators that
    /// executed the same requests).
    pub fn digest(&self) -> Digest32 {
        self.digest_in(crate::state_hash::StateHash::Sha256)
    }

    /// [`Self::digest`]'s stream under the host's hash function `hash`.
    pub fn digest_in(&self, hash: crate::state_hash::StateHash) -> Digest32 {
        let mut h = crate::state_hash::StateHasher::new(hash);
        h.update(b"ccron-executed-requests/v5");
        for v in [
            self.max_clients as u64,
            self.base,
            self.clock,
            self.evicted,
            self.refused_ahead,
        ] {
            h.update(v.to_le_bytes());
        }
        h.update((self.clients.len() as u64).to_le_bytes());
        for (client, e) in &self.clients {
            h.update(client.0);
            h.update(e.highest.to_le_bytes());
            for w in e.mask.0 {
                h.update(w.to_le_bytes());
            }
            h.update(e.last_used.to_le_bytes());
        }
        h.update((self.watermarks.len() as u64).to_le_bytes());
        for (client, w) in &self.watermarks {
            h.update(client.0);
            h.update(w.to_le_bytes());
        }
        h.update((self.legacy.len() as u64).to_le_bytes());
        for (old, w) in &self.legacy {
            h.update(old.to_le_bytes());
            h.update(w.to_le_bytes());
        }
        h.finalize()
    }

    /// The canonical encoding ([`wire`]) for snapshots, layout [`EXECUTED_REQUESTS_LAYOUT`](super::EXECUTED_REQUESTS_LAYOUT).
    ///
    /// # Errors
    /// [`WireError::Encode`] (never for this type in practice).
    pub fn encode(&self) -> Result<Vec<u8>, WireError> {
        let entries: Vec<EncodedEntry> = self
            .clients
            .iter()
            .map(|(c, e)| (*c, e.highest, e.mask.0, e.last_used))
            .collect();
        let watermarks: Vec<(ClientId, u64)> =
            self.watermarks.iter().map(|(c, w)| (*c, *w)).collect();
        let legacy: Vec<(u64, u64)> = self.legacy.iter().map(|(c, w)| (*c, *w)).collect();
        let encoded: Encoded = (
            (
                self.max_clients as u64,
                self.base,
                self.clock,
                self.evicted,
                self.refused_ahead,
            ),
            entries,
            watermarks,
            legacy,
        );
        wire::encode(&encoded)
    }

    /// Decodes [`encode`](Self::encode)'s bytes, refusing more than `limit_bytes`, more
    /// entries than the bound, clients out of order, repeated, or with both an entry and a
    /// watermark, masks without their highest bit, and execution times repeated or after the
    /// clock.
    ///
    /// # Errors
    /// [`WireError`] for malformed bytes or entries.
    pub fn decode(bytes: &[u8], limit_bytes: usize) -> Result<Self, WireError> {
        let ((max_clients, base, clock, evicted, refused_ahead), entries, watermarks, legacy): Encoded =
            wire::decode(bytes, limit_bytes)?;
        let mut out = Self::empty_decoded(max_clients, clock, entries.len())?;
        out.base = base;
        out.evicted = evicted;
        out.refused_ahead = refused_ahead;
        for (client, highest, mask, last_used) in entries {
            out.insert_decoded(client, highest, Mask(mask), last_used)?;
        }
        let mut last = None;
        for (client, w) in watermarks {
            if last.is_some_and(|l| l >= client) || out.clients.contains_key(&client) {
                return Err(bad(format!(
                    "watermark of client {client} out of order or beside its entry"
                )));
            }
            last = Some(client);
            out.watermarks.insert(client, w);
        }
        out.set_legacy(legacy)?;
        Ok(out)
    }

    /// Installs legacy watermarks, ascending by old id.
    fn set_legacy(&mut self, legacy: Vec<(u64, u64)>) -> Result<(), WireError> {
        let mut last = None;
        for (old, w) in legacy {
            if last.is_some_and(|l| l >= old) {
                return Err(bad(format!(
                    "legacy watermark of client {old} out of order"
                )));
            }
            last = Some(old);
            self.legacy.insert(old, w);
        }
        Ok(())
    }

    /// Decodes a table of layout 4 (64-bit client ids) and migrates it: every entry (its
    /// highest number) and every watermark becomes a legacy watermark of its old id (the
    /// module documentation); no entries or watermarks of 256-bit ids; bound, base, clock and
    /// counters kept.
    ///
    /// # Errors
    /// [`WireError`] for malformed bytes, more entries than the bound, clients out of order
    /// or repeated.
    pub fn decode_v4(bytes: &[u8], limit_bytes: usize) -> Result<Self, WireError> {
        let ((max_clients, base, clock, evicted, refused_ahead), entries, watermarks): EncodedV4 =
            wire::decode(bytes, limit_bytes)?;
        let mut out = Self::empty_decoded(max_clients, clock, entries.len())?;
        out.base = base;
        out.evicted = evicted;
        out.refused_ahead = refused_ahead;
        let mut legacy: Vec<(u64, u64)> = entries
            .iter()
            .map(|(c, highest, _, _)| (*c, *highest))
            .chain(watermarks)
            .collect();
        legacy.sort_unstable();
        if legacy.windows(2).any(|w| w[0].0 == w[1].0) {
            return Err(bad("a client with both an entry and a watermark".into()));
        }
        out.set_legacy(legacy)?;
        tracing::info!(
            legacy = out.legacy.len(),
            "executed requests of layout 4 (64-bit client ids) migrated to legacy watermarks"
        );
        Ok(out)
    }

    /// Decodes a table of layout 3 (host snapshot layout 2: a global floor raised by evictions
    /// and a floor per entry, 64-bit client ids) and migrates it: each entry becomes a legacy
    /// watermark at its highest number (every number at or below it refused, its entry floor
    /// included), the global floor becomes the frozen base (every client evicted before the
    /// migration is below it), no entries of 256-bit ids, no refusals.
    ///
    /// # Errors
    /// [`WireError`] for malformed bytes or entries (as [`decode`](Self::decode), and an entry
    /// floor above the table's).
    pub fn decode_legacy(bytes: &[u8], limit_bytes: usize) -> Result<Self, WireError> {
        type Legacy = ((u64, u64, u64, u64), Vec<(u64, u64, [u64; 4], u64, u64)>);
        let ((max_clients, floor, clock, evicted), entries): Legacy =
            wire::decode(bytes, limit_bytes)?;
        let mut out = Self::empty_decoded(max_clients, clock, entries.len())?;
        out.base = floor;
        out.evicted = evicted;
        let mut legacy = Vec::with_capacity(entries.len());
        for (client, highest, mask, last_used, entry_floor) in entries {
            if entry_floor > floor {
                return Err(bad(format!(
                    "entry floor {entry_floor} of client {client} above the floor {floor}"
                )));
            }
            if !Mask(mask).get(0) || last_used == 0 || last_used > clock {
                return Err(bad(format!(
                    "entry of client {client} without its highest number or with a bad execution time"
                )));
            }
            // 64-bit ids (layout 5 names clients by 256 bits): the entry's highest number
            // becomes its legacy watermark (its window's unused numbers are given up).
            legacy.push((client, highest));
        }
        out.set_legacy(legacy)?;
        Ok(out)
    }

    fn empty_decoded(max_clients: u64, clock: u64, entries: usize) -> Result<Self, WireError> {
        let max_clients = usize::try_from(max_clients)
            .ok()
            .filter(|&m| m >= 1)
            .ok_or_else(|| bad(format!("bound {max_clients}")))?;
        if entries > max_clients {
            return Err(bad(format!("{entries} clients over the bound")));
        }
        Ok(Self {
            clock,
            ..Self::with_max_clients(max_clients)
        })
    }

    /// Inserts a decoded entry, in client order.
    fn insert_decoded(
        &mut self,
        client: ClientId,
        highest: u64,
        mask: Mask,
        last_used: u64,
    ) -> Result<(), WireError> {
        if self
            .clients
            .last_key_value()
            .is_some_and(|(&l, _)| l >= client)
            || !mask.get(0)
            || last_used == 0
            || last_used > self.clock
            || self.by_use.insert(last_used, client).is_some()
        {
            return Err(bad(format!(
                "entry of client {client} out of order, without its highest number, or with a bad execution time"
            )));
        }
        self.clients.insert(
            client,
            Entry {
                highest,
                mask,
                last_used,
            },
        );
        Ok(())
    }
}

fn bad(what: String) -> WireError {
    WireError::Malformed(format!("executed-requests: {what}"))
}
