//! The node's own value types, engine-free: validator addresses, hashes, signatures, the
//! validator set, signed ticks, carried clock samples and the block a node proposes.
//!
//! An engine adapter wraps them in its own types where its traits require (Malachite's
//! `Context` needs its own `Address` and `Value`); everything a node stores, serves or signs
//! is one of these, borsh-encoded with byte limits on every decode.

use std::fmt;

use borsh::{BorshDeserialize, BorshSerialize};
use sha2::{Digest, Sha256};

use crate::crypto::{SignedKind, Signer, SigningDomain, verify_raw};
use crate::request::SignedRequest;

/// A validator address: its ed25519 public key.
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Default,
    BorshSerialize,
    BorshDeserialize,
)]
pub struct Address(pub [u8; 32]);

impl fmt::Display for Address {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for b in &self.0[..8] {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

/// A 32-byte hash (value ids, digests).
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Default,
    BorshSerialize,
    BorshDeserialize,
)]
pub struct Hash32(pub [u8; 32]);

impl fmt::Display for Hash32 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for b in &self.0[..8] {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

/// An ed25519 signature.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, BorshSerialize, BorshDeserialize,
)]
pub struct Sig(pub [u8; 64]);

/// An ed25519 public key (raw bytes; validated when used).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, BorshSerialize, BorshDeserialize)]
pub struct PubKey(pub [u8; 32]);

/// The validator set: addresses in ascending order (the order validator indices follow), equal
/// voting power.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Validators {
    addresses: Vec<Address>,
}

impl Validators {
    /// The set of these public keys (sorted; duplicates kept once).
    pub fn new(keys: &[[u8; 32]]) -> Self {
        let mut addresses: Vec<Address> = keys.iter().map(|k| Address(*k)).collect();
        addresses.sort();
        addresses.dedup();
        Self { addresses }
    }

    /// The addresses, in validator-index order.
    pub fn addresses(&self) -> &[Address] {
        &self.addresses
    }

    /// Number of validators.
    pub fn len(&self) -> usize {
        self.addresses.len()
    }

    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.addresses.is_empty()
    }

    /// Number of validators as the kernel counts them.
    pub fn count(&self) -> u32 {
        u32::try_from(self.addresses.len()).unwrap_or(u32::MAX)
    }

    /// The commit quorum with equal power: more than two thirds,
    /// [`ccron::host::two_thirds_quorum`] (2f+1 when n = 3f+1, at least that for any n).
    pub fn quorum(&self) -> usize {
        ccron::host::two_thirds_quorum(self.count())
    }

    /// Whether `address` is a validator.
    pub fn contains(&self, address: &Address) -> bool {
        self.addresses.binary_search(address).is_ok()
    }

    /// The validator index of `address` (what the kernel calls the sender).
    pub fn index_of(&self, address: &Address) -> Option<u32> {
        self.addresses
            .binary_search(address)
            .ok()
            .and_then(|i| u32::try_from(i).ok())
    }

    /// The address of validator `index`.
    pub fn get(&self, index: usize) -> Option<&Address> {
        self.addresses.get(index)
    }
}

/// A signed clock sample of height h-1 as the block of height h carries it: enough to re-verify
/// its signature (the engine's sample message binds the previous height, the round and value id
/// of its commit, and the validator).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, BorshSerialize, BorshDeserialize)]
pub struct CarriedSample {
    /// The validator that signed the sample.
    pub validator: Address,
    /// Its clock.
    pub time_ms: i64,
    /// Its signature over the engine's sample message.
    pub signature: Sig,
}

/// The domain tag of tick signatures in signing domain version 1
/// ([`crate::crypto::SignedKind::v1_tag`]).
pub const TICK_DOMAIN: &[u8] = b"ccron-malachite/tick/v1";

/// The largest encoded tick transaction accepted from the network (4 + 32 + 8 + 64 bytes).
pub const MAX_TICK_BYTES: usize = 108;

/// A tick transaction: a validator's request to evaluate one component's cron table.
///
/// Signed with the submitter's validator key over [`TickTx::signing_bytes`] (the chain's
/// [`SigningDomain`] for ticks, then the component, the submitter, the number), so any node
/// of that chain can forward it and
/// any proposer can carry it; the number increases per (submitter, component), and a block may
/// not carry a number a decided block already carried (the kernel's tick gate).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, BorshSerialize, BorshDeserialize)]
pub struct TickTx {
    /// The component (cron table) to tick.
    pub component: u32,
    /// The validator that submitted it (only validators may submit ticks).
    pub submitter: Address,
    /// The submitter's tick number (increasing per submitter and component).
    pub number: u64,
    /// The submitter's signature over [`TickTx::signing_bytes`].
    pub signature: Sig,
}

impl TickTx {
    /// The bytes a submitter signs in `domain`.
    pub fn signing_bytes(
        domain: &SigningDomain,
        component: u32,
        submitter: &Address,
        number: u64,
    ) -> Vec<u8> {
        let mut b = Vec::with_capacity(44);
        b.extend_from_slice(&component.to_le_bytes());
        b.extend_from_slice(&submitter.0);
        b.extend_from_slice(&number.to_le_bytes());
        domain.message(SignedKind::Tick, &b)
    }

    /// Tick `number` of `component`, signed by `signer` (the submitter) in `domain`.
    pub fn sign(domain: &SigningDomain, component: u32, number: u64, signer: &Signer) -> Self {
        let submitter = Address(signer.public_key());
        let signature =
            signer.sign_raw(&Self::signing_bytes(domain, component, &submitter, number));
        TickTx {
            component,
            submitter,
            number,
            signature,
        }
    }

    /// Whether the signature is the submitter's, in `domain`.
    pub fn verify(&self, domain: &SigningDomain) -> bool {
        verify_raw(
            &PubKey(self.submitter.0),
            &Self::signing_bytes(domain, self.component, &self.submitter, self.number),
            &self.signature,
        )
    }

    /// Its encoding (borsh).
    pub fn encode(&self) -> Vec<u8> {
        borsh::to_vec(self).unwrap_or_default()
    }

    /// Decodes a tick transaction, refusing more than [`MAX_TICK_BYTES`].
    pub fn decode(bytes: &[u8]) -> Option<Self> {
        if bytes.len() > MAX_TICK_BYTES {
            return None;
        }
        borsh::from_slice(bytes).ok()
    }
}

/// The largest block accepted from the network or the store.
pub const MAX_BLOCK_BYTES: usize = 256 * 1024;

/// The value consensus decides: one block.
///
/// **Layouts.** A block with [`prev_state`](Block::prev_state) encodes as `u64::MAX` (a height
/// no chain reaches), the layout version `2u8`, the fields in order, then the 32-byte state
/// digest; a block without it (every block decided before layout 2) in the first layout: the
/// fields in order, nothing before or after. Both decode, so a `blocks.log` written before
/// layout 2 reads back unchanged and its blocks keep their value ids (the migration is the
/// decoder).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Block {
    /// Its height.
    pub height: u64,
    /// The round of the commit of block h-1 whose clock samples this block carries (the
    /// samples' scope); 0 at height 1.
    pub prev_round: u32,
    /// The value id of block h-1 (the samples' scope); zero at height 1.
    pub prev_id: Hash32,
    /// The signed clock samples of height h-1, in ascending validator order.
    pub samples: Vec<CarriedSample>,
    /// The agreed time the proposer claims: must equal the rule's result.
    pub agreed_time_ms: i64,
    /// Tick transactions, at most one per (component, submitter).
    pub ticks: Vec<TickTx>,
    /// Client requests, in execution order (bounded: [`crate::request::MAX_BLOCK_REQUESTS`],
    /// [`crate::request::MAX_BLOCK_REQUEST_BYTES`]).
    pub requests: Vec<SignedRequest>,
    /// The state digest after block h-1 (`LedgerHost::state_digest`) that this block executes
    /// on: what a quorum's commit of this block vouches for, so a snapshot of height h-1 can be
    /// checked against it (`crate::catchup`). Required by the validity rule; `None` only in
    /// blocks of the first layout, decided before it existed.
    pub prev_state: Option<[u8; 32]>,
}

/// The first 8 bytes of a block of layout 2 (where the first layout has its height).
const BLOCK_LAYOUT_2: u64 = u64::MAX;

impl BorshSerialize for Block {
    fn serialize<W: std::io::Write>(&self, w: &mut W) -> std::io::Result<()> {
        if self.prev_state.is_some() {
            BLOCK_LAYOUT_2.serialize(w)?;
            2u8.serialize(w)?;
        }
        self.height.serialize(w)?;
        self.prev_round.serialize(w)?;
        self.prev_id.serialize(w)?;
        self.samples.serialize(w)?;
        self.agreed_time_ms.serialize(w)?;
        self.ticks.serialize(w)?;
        self.requests.serialize(w)?;
        if let Some(state) = &self.prev_state {
            state.serialize(w)?;
        }
        Ok(())
    }
}

impl BorshDeserialize for Block {
    fn deserialize_reader<R: std::io::Read>(r: &mut R) -> std::io::Result<Self> {
        let first = u64::deserialize_reader(r)?;
        let (layout_2, height) = if first == BLOCK_LAYOUT_2 {
            let version = u8::deserialize_reader(r)?;
            if version != 2 {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!("block layout {version} unknown"),
                ));
            }
            (true, u64::deserialize_reader(r)?)
        } else {
            (false, first)
        };
        Ok(Block {
            height,
            prev_round: u32::deserialize_reader(r)?,
            prev_id: Hash32::deserialize_reader(r)?,
            samples: Vec::deserialize_reader(r)?,
            agreed_time_ms: i64::deserialize_reader(r)?,
            ticks: Vec::deserialize_reader(r)?,
            requests: Vec::deserialize_reader(r)?,
            prev_state: if layout_2 {
                Some(<[u8; 32]>::deserialize_reader(r)?)
            } else {
                None
            },
        })
    }
}

impl Block {
    /// Its canonical encoding.
    pub fn encode(&self) -> Vec<u8> {
        borsh::to_vec(self).unwrap_or_default()
    }

    /// Decodes a block, with a byte limit.
    pub fn decode(bytes: &[u8]) -> Option<Block> {
        if bytes.len() > MAX_BLOCK_BYTES {
            return None;
        }
        borsh::from_slice(bytes).ok()
    }

    /// Its value id: SHA-256 of its encoding.
    pub fn id(&self) -> Hash32 {
        Hash32(Sha256::digest(self.encode()).into())
    }
}

/// Hex encoding.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Hex decoding of exactly 32 bytes.
pub fn unhex32(s: &str) -> Option<[u8; 32]> {
    let s = s.trim();
    if s.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(s.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validators_are_ordered_and_indexed_by_address() {
        let v = Validators::new(&[[3; 32], [1; 32], [2; 32], [1; 32]]);
        assert_eq!(v.len(), 3);
        assert_eq!(v.index_of(&Address([1; 32])), Some(0));
        assert_eq!(v.index_of(&Address([3; 32])), Some(2));
        assert_eq!(v.index_of(&Address([4; 32])), None);
        assert_eq!(v.quorum(), 3);
        assert!(v.contains(&Address([2; 32])));
    }

    #[test]
    fn ticks_verify_only_unchanged_and_decode_with_a_limit() {
        let s = Signer::new([7; 32]);
        let d = SigningDomain::chain(b"t").unwrap();
        let t = TickTx::sign(&d, 3, 9, &s);
        assert!(t.verify(&d));
        let bytes = t.encode();
        assert_eq!(bytes.len(), MAX_TICK_BYTES);
        assert_eq!(TickTx::decode(&bytes), Some(t.clone()));
        assert_eq!(TickTx::decode(&[bytes.clone(), vec![0]].concat()), None);
        let mut other = t.clone();
        other.number = 10;
        assert!(!other.verify(&d));
        assert_eq!(unhex32(&hex(&[5; 32])), Some([5; 32]));
        assert_eq!(unhex32("zz"), None);
    }

    #[test]
    fn both_block_layouts_round_trip_and_the_first_keeps_its_bytes() {
        let first = Block {
            height: 7,
            prev_round: 1,
            prev_id: Hash32([3; 32]),
            samples: Vec::new(),
            agreed_time_ms: 42,
            ticks: Vec::new(),
            requests: Vec::new(),
            prev_state: None,
        };
        // The first layout's bytes, as the derived encoding wrote them before layout 2.
        let old = borsh::to_vec(&(
            7u64,
            1u32,
            Hash32([3; 32]),
            Vec::<CarriedSample>::new(),
            42i64,
            Vec::<TickTx>::new(),
            Vec::<SignedRequest>::new(),
        ))
        .unwrap();
        assert_eq!(first.encode(), old);
        assert_eq!(Block::decode(&old), Some(first.clone()));
        let second = Block {
            prev_state: Some([9; 32]),
            ..first.clone()
        };
        let bytes = second.encode();
        assert_eq!(bytes.len(), old.len() + 9 + 32);
        assert_eq!(Block::decode(&bytes), Some(second.clone()));
        assert_ne!(second.id(), first.id());
        let mut unknown = bytes.clone();
        unknown[8] = 3;
        assert_eq!(Block::decode(&unknown), None);
    }
}
