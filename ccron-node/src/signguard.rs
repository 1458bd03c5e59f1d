//! The validator's signing guard (Tendermint's `priv_validator_state`, engine-free): a small
//! file kept beside the validator's key, outside the node's home, recording per kind of signed
//! message (proposal, proposal part, prevote, precommit) the highest height this key signed at
//! and, at that height, the digest of what it signed in each round (the last
//! [`MAX_ROUNDS_KEPT`] rounds). Before any signature of those kinds the adapter asks
//! [`SigningGuard::sign`]:
//!
//! - a message already signed, byte for byte (same height, round and digest), again: allowed
//!   ([`Check::Same`]; the signature is deterministic, so the same bytes go out). This is
//!   what an engine's WAL replay after a crash asks for: a node that signed a round-0 prevote,
//!   then a round-1 prevote at the same height, and crashed, replays the round-0 one first.
//!   Refusing it halted the node at every restart (Malachite 0.8.2 treats a refused signature
//!   as fatal): found by the localnet's kill-all test;
//! - below the kind's last `(height, round)` and not signed before: refused
//!   ([`SignRefusal::Lower`]);
//! - at a signed `(height, round)` with another digest: refused ([`SignRefusal::Conflict`]);
//! - above: the new record is written durably (temporary file, fsync, rename, directory
//!   fsync) **before** the signature is made ([`Check::New`]).
//!
//! A home lost with its engine WAL (a wiped validator) loses the engine's lock and what it
//! voted at the height it was at. Opening the guard without the WAL ([`SigningGuard::open`],
//! `wal_present = false`) raises the file's **floor** to the highest height it recorded: from
//! then on nothing at or below that height is signed ([`SignRefusal::BelowFloor`]), in any
//! round, whatever the WAL later holds. The floor is persisted, so a second crash before the
//! WAL holds anything does not lower it.
//!
//! The file is refused loudly when it cannot be read or does not check (magic, version,
//! length, SHA-256): [`SigningStateError`], never a silent reset. Every refusal is a typed
//! [`SignRefusal`], counted by reason in [`SignCounters`] (`status.json` `signing`, `/metrics`
//! `ccron_sign_refused_total{reason}`) and traced by the adapter.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The signing state's file name, beside the validator's `secret.key` by default.
pub const SIGNING_STATE_FILE: &str = "signing.state";

/// The default signing-state path of validator `index` under `home`: beside its key
/// (`node-I/secret.key`), a file a wipe of the node's state keeps (as it keeps the key).
pub fn default_path(home: &Path, index: usize) -> PathBuf {
    crate::core::node_dir(home, index).join(SIGNING_STATE_FILE)
}

const MAGIC: &[u8; 8] = b"CCRSIGN\0";
/// The file's layout: 2 keeps every round's digest at the kind's height; 1 (read, migrated)
/// kept only the last `(height, round)`.
const VERSION: u8 = 2;
/// Bytes of one layout-1 record: kind, height, round, digest.
const V1_RECORD_BYTES: usize = 1 + 8 + 8 + 32;
/// Bytes of one round in layout 2: round, digest.
const ROUND_BYTES: usize = 8 + 32;
/// Rounds kept per kind at its height: a re-sign of an older round there is refused as
/// [`SignRefusal::Lower`] (loud, never an equivocation).
pub const MAX_ROUNDS_KEPT: usize = 32;
/// The largest file the guard reads (above the 4 kinds x [`MAX_ROUNDS_KEPT`] rounds it writes).
pub const MAX_STATE_BYTES: u64 = 16 * 1024;

/// A kind of signed message the guard orders.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[non_exhaustive]
pub enum SignKind {
    /// The engine's proposal (height, round, value id, proof-of-lock round).
    Proposal,
    /// The adapter's signed proposal part (the whole block).
    Part,
    /// A prevote.
    Prevote,
    /// A precommit.
    Precommit,
}

impl SignKind {
    /// Every kind.
    pub const ALL: [SignKind; 4] = [
        SignKind::Proposal,
        SignKind::Part,
        SignKind::Prevote,
        SignKind::Precommit,
    ];

    fn code(self) -> u8 {
        match self {
            SignKind::Proposal => 1,
            SignKind::Part => 2,
            SignKind::Prevote => 3,
            SignKind::Precommit => 4,
        }
    }

    fn of_code(c: u8) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.code() == c)
    }

    /// The kind's name (`proposal`, `part`, `prevote`, `precommit`).
    pub fn name(self) -> &'static str {
        match self {
            SignKind::Proposal => "proposal",
            SignKind::Part => "part",
            SignKind::Prevote => "prevote",
            SignKind::Precommit => "precommit",
        }
    }
}

impl std::fmt::Display for SignKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// What this key signed of one kind at the highest height it signed that kind at.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LastSigned {
    /// The height.
    pub height: u64,
    /// Per round signed at `height` (the last [`MAX_ROUNDS_KEPT`], never empty): SHA-256 of
    /// the message's signing bytes.
    pub rounds: BTreeMap<i64, [u8; 32]>,
}

impl LastSigned {
    /// The highest round signed at [`height`](Self::height).
    pub fn round(&self) -> i64 {
        self.rounds.keys().next_back().copied().unwrap_or(i64::MIN)
    }
}

/// What a validator key signed (the file's content).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SigningState {
    /// Nothing at or below this height is signed (raised to the highest recorded height when
    /// the node starts without its WAL; 0: none).
    pub floor: u64,
    /// Per kind, what was signed at its highest height.
    pub last: BTreeMap<SignKind, LastSigned>,
}

/// What [`SigningState::check`] allows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Check {
    /// A new message above the kind's last: recorded before signing.
    New,
    /// The identical message again: signed again (the same bytes), nothing recorded.
    Same,
}

/// A signature the guard refused (nothing was signed).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SignRefusal {
    /// At or below the floor a start without the WAL set.
    #[error(
        "{kind} at height {height} round {round}: at or below height {floor}, signed before \
         this node lost its WAL"
    )]
    BelowFloor {
        /// The kind.
        kind: SignKind,
        /// The height asked.
        height: u64,
        /// The round asked.
        round: i64,
        /// The floor.
        floor: u64,
    },
    /// Below the last message of the kind.
    #[error(
        "{kind} at height {height} round {round}: below the last one signed, at height \
         {last_height} round {last_round}"
    )]
    Lower {
        /// The kind.
        kind: SignKind,
        /// The height asked.
        height: u64,
        /// The round asked.
        round: i64,
        /// The last signed height.
        last_height: u64,
        /// The last signed round.
        last_round: i64,
    },
    /// Another message of the kind at the `(height, round)` already signed.
    #[error("{kind} at height {height} round {round}: another one was signed there")]
    Conflict {
        /// The kind.
        kind: SignKind,
        /// The height.
        height: u64,
        /// The round.
        round: i64,
    },
    /// The new record could not be made durable, so nothing is signed.
    #[error("{kind} at height {height} round {round}: signing state not saved: {reason}")]
    NotSaved {
        /// The kind.
        kind: SignKind,
        /// The height.
        height: u64,
        /// The round.
        round: i64,
        /// The I/O error.
        reason: String,
    },
}

impl SignRefusal {
    /// The reason's name (`below_floor`, `lower`, `conflict`, `not_saved`): the counter's key.
    pub fn reason(&self) -> &'static str {
        match self {
            SignRefusal::BelowFloor { .. } => "below_floor",
            SignRefusal::Lower { .. } => "lower",
            SignRefusal::Conflict { .. } => "conflict",
            SignRefusal::NotSaved { .. } => "not_saved",
        }
    }
}

/// The signing state cannot be used: the node refuses to start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SigningStateError {
    /// Reading or writing the file failed.
    #[error("signing state {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// The file does not check (never reset: restore it, or knowingly remove it).
    #[error("signing state {path} is corrupt: {reason} (refusing to start)")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What failed.
        reason: String,
    },
    /// The node would start at or below a height this key signed at before its WAL was lost.
    #[error(
        "signing state {path}: this validator signed at heights up to {floor} and its home was \
         lost; it starts at height {start} and would sign there again: start it once it can \
         catch up above {floor} (a peer's snapshot), or keep its WAL"
    )]
    SignedAhead {
        /// The file.
        path: PathBuf,
        /// The floor.
        floor: u64,
        /// The height the node would start at.
        start: u64,
    },
}

impl SigningState {
    /// Whether `kind` at `(height, round)` with `digest` may be signed.
    ///
    /// # Errors
    /// The refusal (see the module documentation).
    pub fn check(
        &self,
        kind: SignKind,
        height: u64,
        round: i64,
        digest: &[u8; 32],
    ) -> Result<Check, SignRefusal> {
        let last = self.last.get(&kind);
        let signed = last
            .filter(|l| l.height == height)
            .and_then(|l| l.rounds.get(&round));
        if signed == Some(digest) {
            return Ok(Check::Same);
        }
        if height <= self.floor {
            return Err(SignRefusal::BelowFloor {
                kind,
                height,
                round,
                floor: self.floor,
            });
        }
        if signed.is_some() {
            return Err(SignRefusal::Conflict {
                kind,
                height,
                round,
            });
        }
        if let Some(l) = last
            && (height, round) < (l.height, l.round())
        {
            return Err(SignRefusal::Lower {
                kind,
                height,
                round,
                last_height: l.height,
                last_round: l.round(),
            });
        }
        Ok(Check::New)
    }

    /// Records a message [`check`](Self::check) found [`Check::New`]: a new height replaces
    /// the kind's rounds, a higher round at the same height joins them (the oldest beyond
    /// [`MAX_ROUNDS_KEPT`] forgotten).
    fn record(&mut self, kind: SignKind, height: u64, round: i64, digest: [u8; 32]) {
        let entry = self.last.entry(kind).or_insert_with(|| LastSigned {
            height,
            rounds: BTreeMap::new(),
        });
        if entry.height != height {
            entry.height = height;
            entry.rounds.clear();
        }
        entry.rounds.insert(round, digest);
        while entry.rounds.len() > MAX_ROUNDS_KEPT {
            entry.rounds.pop_first();
        }
    }

    /// The highest height recorded (0: none).
    pub fn highest(&self) -> u64 {
        self.last.values().map(|l| l.height).max().unwrap_or(0)
    }

    /// The file's bytes (layout 2): magic, version, floor, kind count, per kind (kind,
    /// height, round count, per round (round, digest)), SHA-256 of all before it.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(64 + (10 + ROUND_BYTES) * self.last.len());
        out.extend_from_slice(MAGIC);
        out.push(VERSION);
        out.extend_from_slice(&self.floor.to_le_bytes());
        out.push(u8::try_from(self.last.len()).unwrap_or(u8::MAX));
        for (k, l) in &self.last {
            out.push(k.code());
            out.extend_from_slice(&l.height.to_le_bytes());
            out.push(u8::try_from(l.rounds.len()).unwrap_or(u8::MAX));
            for (round, digest) in &l.rounds {
                out.extend_from_slice(&round.to_le_bytes());
                out.extend_from_slice(digest);
            }
        }
        let sum = Sha256::digest(&out);
        out.extend_from_slice(&sum);
        out
    }

    /// Decodes [`encode`](Self::encode)'s bytes, and layout 1's (each kind's one round); `Err` names
    /// what failed.
    ///
    /// # Errors
    /// A bad magic, version, length, checksum or record.
    pub fn decode(bytes: &[u8]) -> Result<Self, String> {
        let head = MAGIC.len() + 1 + 8 + 1;
        if bytes.len() < head + 32 {
            return Err(format!("{} bytes, too short", bytes.len()));
        }
        let (body, sum) = bytes.split_at(bytes.len() - 32);
        if Sha256::digest(body).as_slice() != sum {
            return Err("checksum mismatch".into());
        }
        if &body[..MAGIC.len()] != MAGIC {
            return Err("bad magic".into());
        }
        let version = body[MAGIC.len()];
        if version != 1 && version != VERSION {
            return Err(format!("unknown version {version}"));
        }
        let u64_at = |at: usize| -> Result<u64, String> {
            let b = body
                .get(at..at + 8)
                .ok_or_else(|| format!("truncated at byte {at}"))?;
            let mut a = [0u8; 8];
            a.copy_from_slice(b);
            Ok(u64::from_le_bytes(a))
        };
        let byte_at = |at: usize| {
            body.get(at)
                .copied()
                .ok_or(format!("truncated at byte {at}"))
        };
        let digest_at = |at: usize| -> Result<[u8; 32], String> {
            let b = body
                .get(at..at + 32)
                .ok_or_else(|| format!("truncated at byte {at}"))?;
            let mut d = [0u8; 32];
            d.copy_from_slice(b);
            Ok(d)
        };
        let floor = u64_at(MAGIC.len() + 1)?;
        let count = usize::from(body[head - 1]);
        let mut last = BTreeMap::new();
        let mut at = head;
        for _ in 0..count {
            let code = byte_at(at)?;
            let kind = SignKind::of_code(code).ok_or(format!("unknown kind {code}"))?;
            let height = u64_at(at + 1)?;
            let mut rounds = BTreeMap::new();
            if version == 1 {
                // Layout 1 (migrated): one round per kind.
                let round = i64::from_le_bytes(u64_at(at + 9)?.to_le_bytes());
                rounds.insert(round, digest_at(at + 17)?);
                at += V1_RECORD_BYTES;
            } else {
                let n = usize::from(byte_at(at + 9)?);
                if n == 0 || n > MAX_ROUNDS_KEPT {
                    return Err(format!("kind {kind}: {n} rounds"));
                }
                at += 10;
                for _ in 0..n {
                    let round = i64::from_le_bytes(u64_at(at)?.to_le_bytes());
                    if rounds.keys().next_back().is_some_and(|r| *r >= round) {
                        return Err(format!("kind {kind}: rounds out of order"));
                    }
                    rounds.insert(round, digest_at(at + 8)?);
                    at += ROUND_BYTES;
                }
            }
            if last.insert(kind, LastSigned { height, rounds }).is_some() {
                return Err(format!("kind {kind} twice"));
            }
        }
        if at != body.len() {
            return Err(format!("length {} for {count} kinds", body.len()));
        }
        Ok(Self { floor, last })
    }
}

/// What the guard signed and refused (this process), in `status.json` as `signing`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct SignCounters {
    /// New messages recorded, then signed.
    pub signed: u64,
    /// Identical messages signed again.
    pub resigned: u64,
    /// Refusals by reason ([`SignRefusal::reason`]).
    pub refused: BTreeMap<String, u64>,
    /// The floor (heights at or below it are never signed again).
    pub floor: u64,
}

/// The temporary file a new state is written to before its rename.
fn tmp_path(path: &Path) -> PathBuf {
    let mut name = path
        .file_name()
        .map(|n| n.to_os_string())
        .unwrap_or_default();
    name.push(".tmp");
    path.with_file_name(name)
}

/// Writes `bytes` to the state's temporary file and fsyncs it (the first half of a save).
///
/// # Errors
/// I/O.
pub fn write_tmp(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = tmp_path(path);
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(bytes)?;
    f.sync_all()
}

/// Renames the temporary file over the state and fsyncs the directory (the second half).
///
/// # Errors
/// I/O.
pub fn commit_tmp(path: &Path) -> std::io::Result<()> {
    std::fs::rename(tmp_path(path), path)?;
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    std::fs::File::open(dir)?.sync_all()
}

/// The guard: the state file and what this process signed and refused.
#[derive(Debug)]
pub struct SigningGuard {
    path: PathBuf,
    state: SigningState,
    counters: SignCounters,
}

impl SigningGuard {
    /// Opens the state at `path` (absent: nothing signed yet, written at the first signature).
    /// `wal_present`: whether the engine's WAL survived; without it the floor is raised to the
    /// highest recorded height and saved. A leftover temporary file (a crash before its
    /// rename) is removed: the state before it holds.
    ///
    /// # Errors
    /// [`SigningStateError`]: an unreadable or corrupt file, or a failed save of the floor.
    pub fn open(path: &Path, wal_present: bool) -> Result<Self, SigningStateError> {
        let io = |source| SigningStateError::Io {
            path: path.to_path_buf(),
            source,
        };
        let tmp = tmp_path(path);
        if tmp.exists() {
            tracing::warn!(path = %tmp.display(), "signing state: a torn save removed");
            std::fs::remove_file(&tmp).map_err(io)?;
        }
        let state = match std::fs::File::open(path) {
            Ok(f) => {
                let mut bytes = Vec::new();
                f.take(MAX_STATE_BYTES + 1)
                    .read_to_end(&mut bytes)
                    .map_err(io)?;
                if bytes.len() as u64 > MAX_STATE_BYTES {
                    return Err(SigningStateError::Corrupt {
                        path: path.to_path_buf(),
                        reason: format!("larger than {MAX_STATE_BYTES} bytes"),
                    });
                }
                SigningState::decode(&bytes).map_err(|reason| SigningStateError::Corrupt {
                    path: path.to_path_buf(),
                    reason,
                })?
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => SigningState::default(),
            Err(e) => return Err(io(e)),
        };
        let mut guard = Self {
            path: path.to_path_buf(),
            counters: SignCounters {
                floor: state.floor,
                ..SignCounters::default()
            },
            state,
        };
        let highest = guard.state.highest();
        if !wal_present && highest > guard.state.floor {
            tracing::warn!(
                floor = highest,
                "signing state: the WAL is gone; nothing at or below this height is signed again"
            );
            let mut next = guard.state.clone();
            next.floor = highest;
            guard.save(&next).map_err(io)?;
            guard.state = next;
            guard.counters.floor = highest;
        }
        Ok(guard)
    }

    /// Refuses to go on when the node would start at `start` at or below the floor.
    ///
    /// # Errors
    /// [`SigningStateError::SignedAhead`].
    pub fn check_start(&self, start: u64) -> Result<(), SigningStateError> {
        if start <= self.state.floor {
            return Err(SigningStateError::SignedAhead {
                path: self.path.clone(),
                floor: self.state.floor,
                start,
            });
        }
        Ok(())
    }

    fn save(&self, state: &SigningState) -> std::io::Result<()> {
        write_tmp(&self.path, &state.encode())?;
        commit_tmp(&self.path)
    }

    /// Asks to sign `kind` at `(height, round)` whose signing bytes hash to `digest`: a new
    /// message is recorded durably before this returns `Ok(Check::New)`; the identical one
    /// again is `Ok(Check::Same)`. Each refusal is counted (the caller traces it).
    ///
    /// # Errors
    /// The refusal; nothing may be signed.
    pub fn sign(
        &mut self,
        kind: SignKind,
        height: u64,
        round: i64,
        digest: [u8; 32],
    ) -> Result<Check, SignRefusal> {
        let outcome = self
            .state
            .check(kind, height, round, &digest)
            .and_then(|c| {
                if c == Check::New {
                    let mut next = self.state.clone();
                    next.record(kind, height, round, digest);
                    self.save(&next).map_err(|e| SignRefusal::NotSaved {
                        kind,
                        height,
                        round,
                        reason: e.to_string(),
                    })?;
                    self.state = next;
                }
                Ok(c)
            });
        match &outcome {
            Ok(Check::New) => self.counters.signed += 1,
            Ok(Check::Same) => self.counters.resigned += 1,
            Err(r) => {
                *self.counters.refused.entry(r.reason().into()).or_insert(0) += 1;
            }
        }
        outcome
    }

    /// The state as recorded.
    pub fn state(&self) -> &SigningState {
        &self.state
    }

    /// This process's counters.
    pub fn counters(&self) -> &SignCounters {
        &self.counters
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// SHA-256 of a message's signing bytes: the digest the guard records.
pub fn digest(signing_bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(signing_bytes).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("ccron-signguard-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn lower_heights_and_rounds_are_refused_per_kind() {
        let p = dir("lower").join(SIGNING_STATE_FILE);
        let mut g = SigningGuard::open(&p, true).unwrap();
        assert_eq!(g.sign(SignKind::Prevote, 5, 2, [1; 32]), Ok(Check::New));
        assert!(matches!(
            g.sign(SignKind::Prevote, 4, 9, [2; 32]),
            Err(SignRefusal::Lower { .. })
        ));
        assert!(matches!(
            g.sign(SignKind::Prevote, 5, 1, [2; 32]),
            Err(SignRefusal::Lower { .. })
        ));
        // Other kinds keep their own order; higher rounds and heights go on.
        assert_eq!(g.sign(SignKind::Precommit, 5, 2, [3; 32]), Ok(Check::New));
        assert_eq!(g.sign(SignKind::Prevote, 5, 3, [4; 32]), Ok(Check::New));
        assert_eq!(g.sign(SignKind::Prevote, 6, 0, [5; 32]), Ok(Check::New));
        assert_eq!(g.counters().signed, 4);
        assert_eq!(g.counters().refused.get("lower"), Some(&2));
        // Durable: a reopened guard refuses the same.
        let mut again = SigningGuard::open(&p, true).unwrap();
        assert!(matches!(
            again.sign(SignKind::Prevote, 5, 3, [4; 32]),
            Err(SignRefusal::Lower { .. })
        ));
    }

    #[test]
    fn another_value_at_a_signed_round_is_refused_and_the_same_one_allowed() {
        let p = dir("conflict").join(SIGNING_STATE_FILE);
        let mut g = SigningGuard::open(&p, true).unwrap();
        assert_eq!(g.sign(SignKind::Part, 3, 0, [7; 32]), Ok(Check::New));
        assert_eq!(
            g.sign(SignKind::Part, 3, 0, [8; 32]),
            Err(SignRefusal::Conflict {
                kind: SignKind::Part,
                height: 3,
                round: 0
            })
        );
        assert_eq!(g.sign(SignKind::Part, 3, 0, [7; 32]), Ok(Check::Same));
        let mut reopened = SigningGuard::open(&p, true).unwrap();
        assert_eq!(
            reopened.sign(SignKind::Part, 3, 0, [7; 32]),
            Ok(Check::Same)
        );
        assert!(reopened.sign(SignKind::Part, 3, 0, [8; 32]).is_err());
        assert_eq!(g.counters().resigned, 1);
        assert_eq!(g.counters().refused.get("conflict"), Some(&1));
    }

    #[test]
    fn a_start_without_the_wal_refuses_every_height_it_signed_at() {
        let p = dir("floor").join(SIGNING_STATE_FILE);
        let mut g = SigningGuard::open(&p, true).unwrap();
        assert_eq!(g.sign(SignKind::Prevote, 9, 0, [1; 32]), Ok(Check::New));
        assert_eq!(g.sign(SignKind::Precommit, 10, 1, [2; 32]), Ok(Check::New));
        drop(g);
        // With the WAL, a higher round at the same height is allowed (the WAL keeps the lock).
        let g = SigningGuard::open(&p, true).unwrap();
        assert_eq!(g.state().floor, 0);
        assert_eq!(
            g.state().check(SignKind::Precommit, 10, 2, &[3; 32]),
            Ok(Check::New)
        );
        drop(g);
        // Without it: nothing at or below height 10, any round, any kind.
        let mut g = SigningGuard::open(&p, false).unwrap();
        assert_eq!(g.state().floor, 10);
        for (k, h, r) in [
            (SignKind::Precommit, 10, 2),
            (SignKind::Prevote, 10, 5),
            (SignKind::Proposal, 1, 0),
            (SignKind::Part, 10, 0),
        ] {
            assert!(matches!(
                g.sign(k, h, r, [4; 32]),
                Err(SignRefusal::BelowFloor { floor: 10, .. })
            ));
        }
        assert!(g.check_start(10).is_err());
        assert!(g.check_start(11).is_ok());
        assert_eq!(g.sign(SignKind::Prevote, 11, 0, [5; 32]), Ok(Check::New));
        // The floor is durable, even once a WAL exists again.
        let g = SigningGuard::open(&p, true).unwrap();
        assert_eq!(g.state().floor, 10);
        assert_eq!(g.counters().floor, 10);
    }

    #[test]
    fn a_crash_between_write_and_rename_leaves_the_previous_state() {
        let p = dir("torn").join(SIGNING_STATE_FILE);
        let mut g = SigningGuard::open(&p, true).unwrap();
        assert_eq!(g.sign(SignKind::Precommit, 4, 0, [1; 32]), Ok(Check::New));
        let before = g.state().clone();
        // A save that wrote its temporary file (whole, or half) and crashed before the rename.
        let mut next = before.clone();
        next.record(SignKind::Precommit, 5, 0, [2; 32]);
        let bytes = next.encode();
        for torn in [&bytes[..], &bytes[..bytes.len() / 2]] {
            write_tmp(&p, torn).unwrap();
            let g = SigningGuard::open(&p, true).unwrap();
            assert_eq!(g.state(), &before);
            assert!(!tmp_path(&p).exists(), "the torn save is removed");
        }
        // The signature of that save was never made: height 5 is still free, height 4 holds.
        let mut g = SigningGuard::open(&p, true).unwrap();
        assert_eq!(g.sign(SignKind::Precommit, 4, 0, [1; 32]), Ok(Check::Same));
        assert_eq!(g.sign(SignKind::Precommit, 5, 0, [3; 32]), Ok(Check::New));
        // After the rename the new state holds.
        write_tmp(&p, &next.encode()).unwrap();
        commit_tmp(&p).unwrap();
        assert_eq!(SigningGuard::open(&p, true).unwrap().state(), &next);
    }

    #[test]
    fn a_corrupt_or_unreadable_state_is_refused_never_reset() {
        let d = dir("corrupt");
        let p = d.join(SIGNING_STATE_FILE);
        let mut g = SigningGuard::open(&p, true).unwrap();
        assert_eq!(g.sign(SignKind::Prevote, 2, 0, [1; 32]), Ok(Check::New));
        let good = std::fs::read(&p).unwrap();
        for i in [0, 9, 20, good.len() - 1] {
            let mut bad = good.clone();
            bad[i] ^= 0x10;
            std::fs::write(&p, &bad).unwrap();
            let e = SigningGuard::open(&p, true).unwrap_err();
            assert!(matches!(e, SigningStateError::Corrupt { .. }), "{e}");
            // Not reset: the bad file is still there.
            assert_eq!(std::fs::read(&p).unwrap(), bad);
        }
        std::fs::write(&p, &good[..good.len() - 3]).unwrap();
        assert!(matches!(
            SigningGuard::open(&p, true),
            Err(SigningStateError::Corrupt { .. })
        ));
        std::fs::write(&p, vec![0u8; MAX_STATE_BYTES as usize + 10]).unwrap();
        assert!(matches!(
            SigningGuard::open(&p, true),
            Err(SigningStateError::Corrupt { .. })
        ));
        // A directory where the file should be: unreadable.
        std::fs::remove_file(&p).unwrap();
        std::fs::create_dir(&p).unwrap();
        assert!(SigningGuard::open(&p, true).is_err());
        std::fs::remove_dir(&p).unwrap();
        std::fs::write(&p, &good).unwrap();
        assert_eq!(
            SigningGuard::open(&p, true)
                .unwrap()
                .state()
                .last
                .get(&SignKind::Prevote)
                .map(|l| l.height),
            Some(2)
        );
    }

    #[test]
    fn a_failed_save_refuses_the_signature() {
        let d = dir("nosave");
        let p = d.join("gone").join(SIGNING_STATE_FILE);
        let mut g = SigningGuard::open(&p, true).unwrap();
        assert!(matches!(
            g.sign(SignKind::Prevote, 1, 0, [1; 32]),
            Err(SignRefusal::NotSaved { .. })
        ));
        // Nothing recorded in memory either: a later save of another value is not a conflict.
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        assert_eq!(g.sign(SignKind::Prevote, 1, 0, [2; 32]), Ok(Check::New));
        assert_eq!(g.counters().refused.get("not_saved"), Some(&1));
    }

    /// The localnet's kill-all failure (issue 23): a node signs a round-0 prevote, times out,
    /// signs a round-1 prevote at the same height and is killed; at restart the engine's WAL
    /// replays the round-0 prevote first. The identical message is allowed again (the same
    /// signature bytes); another value at round 0, or a round never signed, still is not.
    #[test]
    fn a_wal_replay_of_an_earlier_round_at_the_same_height_is_signed_again() {
        let p = dir("replay").join(SIGNING_STATE_FILE);
        let mut g = SigningGuard::open(&p, true).unwrap();
        assert_eq!(g.sign(SignKind::Prevote, 292, 0, [1; 32]), Ok(Check::New));
        assert_eq!(g.sign(SignKind::Prevote, 292, 2, [2; 32]), Ok(Check::New));
        drop(g);
        let mut g = SigningGuard::open(&p, true).unwrap();
        assert_eq!(g.sign(SignKind::Prevote, 292, 0, [1; 32]), Ok(Check::Same));
        assert_eq!(g.sign(SignKind::Prevote, 292, 2, [2; 32]), Ok(Check::Same));
        assert_eq!(
            g.sign(SignKind::Prevote, 292, 0, [9; 32]),
            Err(SignRefusal::Conflict {
                kind: SignKind::Prevote,
                height: 292,
                round: 0
            })
        );
        assert!(matches!(
            g.sign(SignKind::Prevote, 292, 1, [1; 32]),
            Err(SignRefusal::Lower { last_round: 2, .. })
        ));
        // A new height forgets the old one's rounds: its messages are refused as lower.
        assert_eq!(g.sign(SignKind::Prevote, 293, 0, [3; 32]), Ok(Check::New));
        assert!(matches!(
            g.sign(SignKind::Prevote, 292, 0, [1; 32]),
            Err(SignRefusal::Lower { .. })
        ));
        assert_eq!(g.counters().resigned, 2);
    }

    #[test]
    fn only_the_last_rounds_are_kept_and_the_file_stays_bounded() {
        let p = dir("rounds").join(SIGNING_STATE_FILE);
        let mut g = SigningGuard::open(&p, true).unwrap();
        for kind in SignKind::ALL {
            for round in 0..(MAX_ROUNDS_KEPT as i64 + 5) {
                assert_eq!(g.sign(kind, 40, round, [round as u8; 32]), Ok(Check::New));
            }
        }
        let bytes = std::fs::read(&p).unwrap();
        assert!(bytes.len() as u64 <= MAX_STATE_BYTES, "{}", bytes.len());
        let rounds = &g.state().last[&SignKind::Precommit].rounds;
        assert_eq!(rounds.len(), MAX_ROUNDS_KEPT);
        assert_eq!(rounds.keys().next(), Some(&5));
        // The forgotten rounds are refused (loudly), the kept ones re-signed.
        assert!(matches!(
            g.sign(SignKind::Precommit, 40, 4, [4; 32]),
            Err(SignRefusal::Lower { .. })
        ));
        assert_eq!(g.sign(SignKind::Precommit, 40, 5, [5; 32]), Ok(Check::Same));
        assert_eq!(SigningState::decode(&bytes).unwrap(), *g.state());
    }

    /// A layout-1 file (the last `(height, round)` per kind, written by builds before layout 2)
    /// is read as each kind's one round and rewritten in layout 2 at the next signature.
    #[test]
    fn a_layout_1_file_is_migrated() {
        // Layout 1: floor 7; Part at (292, 1) digest 0xab..; Prevote at (291, 0) digest 0xcd...
        const V1: &str = "4343525349474e00010700000000000000020224010000000000000100000000000000\
                          abababababababababababababababababababababababababababababababab0323\
                          010000000000000000000000000000cdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcd\
                          cdcdcdcdcdcdcdcdcdcdcdcdcdcd0e55476b652fdb0c221f7446f204b6eca4b4d6\
                          97678b82c85e9cfb1a180412d4";
        let bytes: Vec<u8> = (0..V1.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&V1[i..i + 2], 16).unwrap())
            .collect();
        let state = SigningState::decode(&bytes).unwrap();
        assert_eq!(state.floor, 7);
        assert_eq!(state.last[&SignKind::Part].height, 292);
        assert_eq!(
            state.last[&SignKind::Part].rounds,
            BTreeMap::from([(1, [0xab; 32])])
        );
        assert_eq!(
            state.last[&SignKind::Prevote].rounds,
            BTreeMap::from([(0, [0xcd; 32])])
        );
        let p = dir("v1").join(SIGNING_STATE_FILE);
        std::fs::write(&p, &bytes).unwrap();
        let mut g = SigningGuard::open(&p, true).unwrap();
        assert_eq!(g.sign(SignKind::Part, 292, 1, [0xab; 32]), Ok(Check::Same));
        assert!(g.sign(SignKind::Part, 292, 0, [0xab; 32]).is_err());
        assert_eq!(g.sign(SignKind::Part, 292, 2, [0xef; 32]), Ok(Check::New));
        let written = std::fs::read(&p).unwrap();
        assert_eq!(written[MAGIC.len()], VERSION);
        let again = SigningState::decode(&written).unwrap();
        assert_eq!(
            again.last[&SignKind::Part].rounds,
            BTreeMap::from([(1, [0xab; 32]), (2, [0xef; 32])])
        );
        assert_eq!(
            again.last[&SignKind::Prevote],
            state.last[&SignKind::Prevote]
        );
    }

    #[test]
    fn layout_2_records_out_of_bounds_are_refused() {
        let mut st = SigningState::default();
        st.record(SignKind::Prevote, 3, 0, [1; 32]);
        st.record(SignKind::Prevote, 3, 1, [2; 32]);
        let good = st.encode();
        assert_eq!(SigningState::decode(&good).unwrap(), st);
        let reseal = |mut body: Vec<u8>| {
            body.truncate(body.len() - 32);
            let sum = Sha256::digest(&body);
            body.extend_from_slice(&sum);
            body
        };
        let rounds_at = MAGIC.len() + 1 + 8 + 1 + 1 + 8;
        // Zero rounds, too many rounds, rounds out of order, a truncated record.
        let mut zero = good.clone();
        zero[rounds_at] = 0;
        assert!(SigningState::decode(&reseal(zero)).is_err());
        let mut many = good.clone();
        many[rounds_at] = (MAX_ROUNDS_KEPT + 1) as u8;
        assert!(SigningState::decode(&reseal(many)).is_err());
        let mut swapped = good.clone();
        let first = rounds_at + 1;
        swapped[first..first + 8].copy_from_slice(&5i64.to_le_bytes());
        assert!(SigningState::decode(&reseal(swapped)).is_err());
        let mut short = good.clone();
        short.truncate(good.len() - 33);
        assert!(SigningState::decode(&reseal(short)).is_err());
    }
}
