//! Decided blocks from the peers, before the engine starts, for a node whose store lost heights
//! it had held: a corrupt `blocks.log` kept aside and cut before the damaged record at start
//! (`crate::store::recover_at_start`, which records the height the store held, `refill_to`).
//!
//! Why before the engine: this node's engine WAL and signing guard are at the height it had
//! reached; an engine started at the cut height would be asked to sign below what the guard
//! recorded (refused, and Malachite 0.8.2 stops on a refused signature). So the node takes the
//! missing heights from its peers first, each block checked before it is appended
//! ([`verify_next`]: the next height, a commit certificate that verifies with the engine's
//! check — a quorum of the validators' precommit signatures in the chain's signing domain —,
//! the commit of this block, and linked to the previous block's value id), then starts its
//! engine where it was. A peer that lies or fails is refused by kind and the next one asked.
//!
//! Serving ([`router`], `GET /v1/catchup/blocks?from=H`): up to [`MAX_BLOCKS_PER_ANSWER`]
//! consecutive decided records from height `H`, read from the node's `blocks.log` (each record
//! checked by its length and checksum; the file streamed, the heights before `H` skipped by
//! their headers), at most [`MAX_BLOCKS_BYTES`], behind the node's bounded server.

use std::io::{BufReader, Read, Seek, SeekFrom};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde::{Deserialize, Serialize};

use super::fetch::PeerClient;
use super::{CatchUpError, CommitVerifier};
use crate::store::{BASE_MAGIC, BlockStore, Commit, Decided, MAX_RECORD_BYTES, StoreError};
use crate::types::Hash32;

/// The route.
pub const BLOCKS_ROUTE: &str = "/v1/catchup/blocks";

/// Records in one answer at most.
pub const MAX_BLOCKS_PER_ANSWER: usize = 64;

/// Bytes of one answer at most (and read by the client at most).
pub const MAX_BLOCKS_BYTES: usize = 16 << 20;

/// Up to `max` decided records from height `from` of the block store file `path` (`from` at or
/// below the store's base: from its first height), at most about `max_bytes` of payload. Stops
/// at the end, at a torn or damaged record (nothing after it is served).
///
/// # Errors
/// I/O errors opening or reading the file.
pub fn read_blocks<C: Commit>(
    path: &Path,
    from: u64,
    max: usize,
    max_bytes: usize,
) -> std::io::Result<Vec<Decided<C>>> {
    let file = std::fs::File::open(path)?;
    let len = file.metadata()?.len();
    let mut r = BufReader::new(file);
    let mut off = 0u64;
    let mut height = 0u64;
    let mut out = Vec::new();
    let mut bytes = 0usize;
    while out.len() < max && bytes < max_bytes && off.saturating_add(8) <= len {
        let mut h = [0u8; 8];
        r.read_exact(&mut h)?;
        let plen = u32::from_le_bytes([h[0], h[1], h[2], h[3]]) as usize;
        let crc = u32::from_le_bytes([h[4], h[5], h[6], h[7]]);
        if plen > MAX_RECORD_BYTES || off + 8 + plen as u64 > len {
            break;
        }
        let next = height + 1;
        if off == 0 && plen == 16 {
            // Possibly a pruned store's base record: checked and read.
            let mut p = [0u8; 16];
            r.read_exact(&mut p)?;
            if crc32fast::hash(&p) != crc {
                break;
            }
            if p[..8] == BASE_MAGIC {
                height = u64::from_le_bytes(p[8..].try_into().unwrap_or_default());
            }
            off += 24;
            continue;
        }
        if next < from {
            r.seek(SeekFrom::Current(plen as i64))?;
        } else {
            let mut p = vec![0u8; plen];
            r.read_exact(&mut p)?;
            if crc32fast::hash(&p) != crc {
                break;
            }
            let Ok(d) = borsh::from_slice::<Decided<C>>(&p) else {
                break;
            };
            bytes += plen;
            out.push(d);
        }
        height = next;
        off += 8 + plen as u64;
    }
    Ok(out)
}

/// Checks that `d` is the decided block at `height` following a block of value id `prev_id`
/// (`None`: the node holds no block below, the link is not checked): its heights, its commit
/// certificate (`verifier`), the commit is of this block, the link.
///
/// # Errors
/// [`CatchUpError::NotAbove`] (another height), [`CatchUpError::Commit`],
/// [`CatchUpError::NotCommitted`], [`CatchUpError::Link`].
pub fn verify_next<C: Commit>(
    d: &Decided<C>,
    height: u64,
    prev_id: Option<Hash32>,
    verifier: &dyn CommitVerifier<C>,
) -> Result<(), CatchUpError> {
    if d.height() != height || d.block.height != height {
        return Err(CatchUpError::NotAbove {
            snapshot: height.saturating_sub(1),
            above: d.height(),
        });
    }
    verifier.verify_commit(&d.commit)?;
    if d.commit.value_id() != d.block.id() {
        return Err(CatchUpError::NotCommitted);
    }
    if prev_id.is_some_and(|p| p != d.block.prev_id) {
        return Err(CatchUpError::Link);
    }
    Ok(())
}

/// The `from` of a query `from=H` (`None`: absent or not a number).
fn from_query(uri: &Uri) -> Option<u64> {
    uri.query()?
        .split('&')
        .find_map(|kv| kv.strip_prefix("from="))?
        .parse()
        .ok()
}

/// The route serving `blocks_log`'s records (module docs), to merge into the node's router.
pub fn router<C: Commit>(blocks_log: PathBuf) -> Router {
    Router::new()
        .route(BLOCKS_ROUTE, get(serve::<C>))
        .with_state(blocks_log)
}

async fn serve<C: Commit>(State(path): State<PathBuf>, uri: Uri) -> Response {
    let Some(from) = from_query(&uri) else {
        return (StatusCode::BAD_REQUEST, "from=HEIGHT expected").into_response();
    };
    let read = tokio::task::spawn_blocking(move || {
        read_blocks::<C>(&path, from, MAX_BLOCKS_PER_ANSWER, MAX_BLOCKS_BYTES / 2)
    })
    .await;
    match read.map_err(std::io::Error::other).and_then(|r| r) {
        Ok(blocks) => match borsh::to_vec(&blocks) {
            Ok(body) => (
                StatusCode::OK,
                [(header::CONTENT_TYPE, "application/octet-stream")],
                body,
            )
                .into_response(),
            Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
        },
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

/// What [`refill`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Refill {
    /// The store's last height before.
    pub from_height: u64,
    /// The height it had to reach.
    pub want: u64,
    /// Its last height after.
    pub reached: u64,
    /// Blocks appended, by the peer that served them.
    pub blocks_by_peer: std::collections::BTreeMap<String, u64>,
    /// Refused answers by kind ([`CatchUpError::kind`]).
    pub refused_by_kind: std::collections::BTreeMap<String, u64>,
    /// Rounds of asking every peer.
    pub rounds: u32,
}

/// Brings the block store at `path` up to height `want` with verified blocks from `peers`
/// (module docs), in at most `rounds` rounds of asking every peer, `pause` apart.
///
/// # Errors
/// The store's errors; [`StoreError::OutOfOrder`] when `want` is not reached (the node then
/// refuses to start: its engine would be asked to sign below its guard).
pub async fn refill<C: Commit>(
    path: &Path,
    peers: &[SocketAddr],
    client: &PeerClient,
    verifier: &dyn CommitVerifier<C>,
    want: u64,
    rounds: u32,
    pause: Duration,
) -> Result<Refill, StoreError> {
    let mut store = BlockStore::<C>::open(path)?;
    let mut report = Refill {
        from_height: store.last_height(),
        want,
        ..Refill::default()
    };
    let mut prev = store.get(store.last_height())?.map(|d| d.block.id());
    while store.last_height() < want && report.rounds < rounds {
        report.rounds += 1;
        for &peer in peers {
            while store.last_height() < want {
                let next = store.last_height() + 1;
                let answer = client.blocks(peer, next).await.and_then(|bytes| {
                    borsh::from_slice::<Vec<Decided<C>>>(&bytes)
                        .map_err(|e| CatchUpError::Decode(e.to_string()))
                });
                let blocks = match answer {
                    Ok(b) if !b.is_empty() => b,
                    Ok(_) => break,
                    Err(e) => {
                        tracing::warn!(%peer, error = %e, "store refill: a peer's blocks refused");
                        *report
                            .refused_by_kind
                            .entry(e.kind().to_string())
                            .or_insert(0) += 1;
                        break;
                    }
                };
                let mut appended = 0u64;
                for d in blocks {
                    if store.last_height() >= want {
                        break;
                    }
                    let h = store.last_height() + 1;
                    if let Err(e) = verify_next(&d, h, prev, verifier) {
                        tracing::warn!(%peer, height = h, error = %e, "store refill: a peer's block refused");
                        *report
                            .refused_by_kind
                            .entry(e.kind().to_string())
                            .or_insert(0) += 1;
                        break;
                    }
                    prev = Some(d.block.id());
                    store.append(d)?;
                    appended += 1;
                }
                *report.blocks_by_peer.entry(peer.to_string()).or_insert(0) += appended;
                if appended == 0 {
                    break;
                }
            }
        }
        if store.last_height() < want {
            tokio::time::sleep(pause).await;
        }
    }
    report.reached = store.last_height();
    if report.reached < want {
        tracing::error!(
            ?report,
            "store refill: the heights the node held were not recovered from any peer"
        );
        return Err(StoreError::OutOfOrder {
            got: report.reached,
            expected: want,
        });
    }
    tracing::warn!(
        ?report,
        "store refill: the heights after the damaged record recovered from the peers, each verified"
    );
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catchup::CommitRefusal;
    use crate::catchup::fetch::FetchConfig;
    use crate::store::PlainCommit;
    use crate::types::Block;

    #[derive(Clone, Debug, borsh::BorshSerialize, borsh::BorshDeserialize)]
    struct TestPart(u64);
    impl crate::store::Part for TestPart {
        fn height(&self) -> u64 {
            self.0
        }
    }

    fn block(h: u64, prev_id: Hash32) -> Block {
        crate::testutil::empty_block(h, prev_id)
    }

    fn scratch(name: &str) -> PathBuf {
        crate::testutil::scratch("refill", name)
    }

    /// `n` linked blocks in `path`, committed in round `round` (round 0 "verifies").
    fn chain(path: &Path, n: u64, round: u32) -> Vec<Hash32> {
        let mut s = BlockStore::<PlainCommit>::open(path).unwrap();
        let mut ids = vec![Hash32::default()];
        for h in 1..=n {
            let b = block(h, ids[h as usize - 1]);
            ids.push(b.id());
            let mut commit = PlainCommit::of(&b);
            commit.round = round;
            s.append(Decided { commit, block: b }).unwrap();
        }
        ids
    }

    fn verify(c: &PlainCommit) -> Result<(), CommitRefusal> {
        if c.round == 0 {
            Ok(())
        } else {
            Err(CommitRefusal::NotEnoughPower {
                signed: 1,
                total: 4,
            })
        }
    }

    async fn serve_at(path: PathBuf) -> SocketAddr {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            axum::serve(listener, router::<PlainCommit>(path))
                .await
                .unwrap();
        });
        addr
    }

    /// Issue 23 item 3, the whole path without an engine: a node's `blocks.log` with a byte
    /// flipped in the middle is kept aside and cut at start, and the heights it held after the
    /// damage come back from its peers over real sockets, each verified: a peer serving forged
    /// commits is refused by kind, the honest one's blocks are appended, and the store ends
    /// with exactly the blocks it had before the flip.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_cut_store_is_refilled_from_verified_peer_blocks_to_the_height_it_held() {
        let dir = scratch("node");
        let ids = chain(&dir.join("blocks.log"), 120, 0);
        let honest = scratch("honest");
        chain(&honest.join("blocks.log"), 150, 0);
        let liar = scratch("liar");
        chain(&liar.join("blocks.log"), 150, 1);
        // A byte flipped at the middle: refused, kept aside, cut, the height it held recorded.
        let path = dir.join("blocks.log");
        let mut bytes = std::fs::read(&path).unwrap();
        let mid = bytes.len() / 2;
        bytes[mid] ^= 0x04;
        std::fs::write(&path, &bytes).unwrap();
        let rec = crate::store::recover_at_start::<PlainCommit, TestPart>(&dir).unwrap();
        assert_eq!(rec.len(), 1, "{rec:?}");
        assert_eq!(rec[0].refill_to, Some(120), "{rec:?}");
        assert_eq!(
            crate::store::refill_target::<PlainCommit>(&dir).unwrap(),
            Some(120)
        );
        let cut = BlockStore::<PlainCommit>::open(&path)
            .unwrap()
            .last_height();
        assert!(cut < 120);
        // The served answer: at most MAX_BLOCKS_PER_ANSWER records from the height asked.
        let served =
            read_blocks::<PlainCommit>(&honest.join("blocks.log"), 10, 64, 1 << 20).unwrap();
        assert_eq!(served.len(), 64);
        assert_eq!((served[0].height(), served[63].height()), (10, 73));
        let peers = vec![
            serve_at(liar.join("blocks.log")).await,
            serve_at(honest.join("blocks.log")).await,
        ];
        let client = PeerClient::new(FetchConfig::default());
        let r = refill::<PlainCommit>(
            &path,
            &peers,
            &client,
            &verify,
            120,
            3,
            Duration::from_millis(10),
        )
        .await
        .unwrap();
        assert_eq!((r.from_height, r.reached), (cut, 120), "{r:?}");
        assert_eq!(r.refused_by_kind.get("commit"), Some(&1), "{r:?}");
        assert_eq!(
            r.blocks_by_peer.get(&peers[1].to_string()),
            Some(&(120 - cut))
        );
        let s = BlockStore::<PlainCommit>::open(&path).unwrap();
        assert_eq!(s.last_height(), 120);
        for (h, id) in ids.iter().enumerate().skip(1) {
            assert_eq!(
                s.get(h as u64).unwrap().unwrap().block.id(),
                *id,
                "height {h}"
            );
        }
        // Nothing left to refill.
        assert_eq!(
            crate::store::refill_target::<PlainCommit>(&dir).unwrap(),
            None
        );
        // With only the liar, the heights are not recovered: refused to start.
        drop(s);
        std::fs::copy(dir.join(&rec[0].kept_as), &path).unwrap();
        crate::store::recover_at_start::<PlainCommit, TestPart>(&dir).unwrap();
        let only_liar = refill::<PlainCommit>(
            &path,
            &peers[..1],
            &client,
            &verify,
            120,
            2,
            Duration::from_millis(10),
        )
        .await;
        assert!(
            matches!(only_liar, Err(StoreError::OutOfOrder { .. })),
            "{only_liar:?}"
        );
        for d in [dir, honest, liar] {
            std::fs::remove_dir_all(d).unwrap();
        }
    }
}
