//! Byzantine strategies: what a faulty replica does, outside the honest protocol.
//!
//! The honest replica (`crate::replica`) has no branch on a fault mode: it calls its
//! strategy at a few interception points (`replica/hooks.rs`: the step, outgoing messages,
//! inbound messages and requests, the clocks it signs, how many state chunks an answer
//! carries), and every behaviour below is one strategy wrapping them. A replica configured
//! with [`Byzantine::Honest`] (the default) runs the honest strategy, whose every hook is the
//! identity. Which strategy a replica runs is [`ReplicaConfig::byzantine`]: only the simulator
//! (`sim::cluster::replica_fault`) and tests set it. A strategy holds nothing but its own
//! replica (and so its own keys): whatever it sends, the replica signs.
//!
//! The generic kinds (`silent`, `replay`, `corrupt` of `sim::ByzantineKind`) are done by the
//! simulator on the replica's outgoing bytes, not here.
//!
//! - `messages.rs`: outgoing rewrites: bad signatures, bad digests, replayed old messages,
//!   an equivocating primary, corrupt state chunks;
//! - `time.rs`: the time-service attacks (a lying clock, omitted, replayed or own time);
//! - `floods.rs`: tick, future-view, state-request and bogus view-change floods;
//! - `primary.rs`: a silent replica, a primary that starves a client, re-proposes committed
//!   seqs, or builds fat view changes;
//! - `amplify.rs`: the amplification attackers (`amplify`, `withhold-commits`).

mod amplify;
mod floods;
mod messages;
mod primary;
mod time;

use crate::node::Millis;
#[cfg(test)]
use crate::protocol::codec;
use crate::replica::ReplicaConfig;
use crate::replica::hooks::{CertChoice, Honest, Strategy, TimePolicy};

pub use floods::{FUTURE_FLOOD_MESSAGES, TICK_FLOOD_FACTOR};

/// Byzantine behaviours (only the simulator and tests set them, through
/// `ReplicaConfig::byzantine`; honest replicas must tolerate each).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Byzantine {
    /// Follows the protocol.
    #[default]
    Honest,
    /// Ignores every input and sends nothing.
    Silent,
    /// As primary, sends different batches to different backups.
    EquivocatingPrimary,
    /// Corrupts the signature of everything it signs.
    BadSignatures,
    /// Votes (prepare/commit/checkpoint) with wrong digests.
    BadDigests,
    /// Re-sends old messages alongside new ones.
    ReplayOld,
    /// Its clock is off by `offset_ms` (in pre-prepares and commits).
    LyingClock {
        /// Offset added to every clock reading.
        offset_ms: Millis,
    },
    /// Sends view changes with forged proofs for future views.
    BogusViewChange,
    /// Serves state transfer with corrupted chunks.
    CorruptStateChunks,
    /// Submits many ticks per timer, ignoring the throttle.
    TickFlood,
    /// Amplification attacker: asks every checkpoint voter for its whole snapshot, and asks
    /// again on every state message it gets.
    StateRequestFlood,
    /// Serves state transfer slowly: one chunk per request, then lets the receiver time out.
    SlowStateSource,
    /// Floods maximal-size pre-prepares (and duplicates of them) for future views, to make
    /// the others buffer them (see [`crate::replica::future`]).
    FutureFlood,
    /// Never admits (so, as primary, never proposes) the requests of user client
    /// [`STARVED_CLIENT`], while ordering everyone else's normally.
    StarveClient,
    /// As primary, keeps sending pre-prepares of the current view with other batches for seqs
    /// its log already committed in this view (those a new-view re-ordered included): only a
    /// replica that skipped the new-view, or lets a pre-prepare replace a committed entry,
    /// accepts them.
    ReproposeCommitted,
    /// As primary, attaches no time certificate to its batches (robust time).
    TimeOmit,
    /// As primary, attaches the oldest usable time certificate it holds, to freeze time.
    TimeReplay,
    /// As primary, omits time certificates and stamps its batches `genesis_bound_ms - 1` ahead
    /// of its clock (just inside the backups' bound).
    TimeOwn,
    /// As primary, proposes only large batches (it holds requests back until half a batch
    /// waits, or half a view-change timeout passed), and once the prepared batches above the
    /// stable checkpoint exceed `max_message_bytes` in all, goes silent for good: the view
    /// change has to carry all of them. The old (batch-carrying) view changes were then
    /// undeliverable and the cluster stalled for ever.
    FatViewChange,
    /// Amplification attacker: every 50 ms asks every peer for everything cheap to ask and
    /// expensive to answer: a `Status` claiming nothing executed above its stable checkpoint
    /// (commit certificates with whole batches) and `BatchFetch`es for the batches of its log.
    Amplify,
    /// The smarter amplification attacker: never sends a commit (so no peer can tell which
    /// batches it holds from its votes), and every 50 ms sends every peer a `Status` from its
    /// stable checkpoint and a `Have` listing every seq of its window as held with nothing
    /// (each a request for a batch-carrying answer: a certificate or the pre-prepare).
    WithholdCommits,
}

/// The client a [`Byzantine::StarveClient`] replica starves.
pub const STARVED_CLIENT: crate::node::ClientId = 0;

/// The strategy a replica runs at its interception points, from its configuration.
pub(crate) fn strategy(cfg: &ReplicaConfig) -> Box<dyn Strategy> {
    match cfg.byzantine {
        Byzantine::Honest => Box::new(Honest),
        Byzantine::Silent => Box::new(primary::Silent),
        Byzantine::EquivocatingPrimary => Box::new(messages::Equivocate {
            id: cfg.id,
            n: cfg.n,
        }),
        Byzantine::BadSignatures => Box::new(messages::BadSignatures {
            max_bytes: cfg.max_message_bytes,
        }),
        Byzantine::BadDigests => Box::new(messages::BadDigests),
        Byzantine::ReplayOld => Box::new(messages::ReplayOld::default()),
        Byzantine::LyingClock { offset_ms } => Box::new(time::TimeLiar(TimePolicy {
            clock_offset_ms: offset_ms,
            ..TimePolicy::default()
        })),
        Byzantine::BogusViewChange => Box::new(floods::BogusViewChange),
        Byzantine::CorruptStateChunks => Box::new(messages::CorruptStateChunks),
        Byzantine::TickFlood => Box::new(floods::TickFlood),
        Byzantine::StateRequestFlood => Box::new(floods::StateRequestFlood),
        Byzantine::SlowStateSource => Box::new(floods::SlowStateSource),
        Byzantine::FutureFlood => Box::new(floods::FutureFlood),
        Byzantine::StarveClient => Box::new(primary::StarveClient),
        Byzantine::ReproposeCommitted => Box::new(primary::ReproposeCommitted {
            next_at: Millis::MIN,
        }),
        Byzantine::TimeOmit => Box::new(time::TimeLiar(TimePolicy {
            cert: CertChoice::Omit,
            ..TimePolicy::default()
        })),
        Byzantine::TimeReplay => Box::new(time::TimeLiar(TimePolicy {
            cert: CertChoice::Oldest,
            ..TimePolicy::default()
        })),
        Byzantine::TimeOwn => Box::new(time::TimeLiar(TimePolicy {
            cert: CertChoice::Omit,
            // Just inside the backups' bound, to push agreed time ahead.
            stamp_ahead_ms: cfg.time.genesis_bound_ms.saturating_sub(1).max(0),
            ..TimePolicy::default()
        })),
        Byzantine::FatViewChange => Box::new(primary::FatViewChange { silenced: false }),
        Byzantine::Amplify => Box::new(amplify::Amplify {
            next_round: Millis::MIN,
        }),
        Byzantine::WithholdCommits => Box::new(amplify::WithholdCommits {
            next_round: Millis::MIN,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replica::Dest;
    use crate::replica::Metrics;
    use crate::replica::hooks::Outgoing;

    fn commit() -> crate::protocol::Body {
        crate::protocol::Body::Commit {
            view: 0,
            seq: 1,
            digest: [1; 32],
            clock_ms: 5,
        }
    }

    fn with(kind: Byzantine) -> Box<dyn Strategy> {
        let mut c = ReplicaConfig::new(0, 4, 1, 1);
        c.byzantine = kind;
        strategy(&c)
    }

    #[test]
    fn honest_hooks_are_the_identity() {
        let mut s = with(Byzantine::Honest);
        let mut m = Metrics::default();
        assert!(matches!(
            s.outgoing(commit(), Dest::All, &mut m),
            Outgoing::Send(b, Dest::All) if b == commit()
        ));
        let mut out = Vec::new();
        assert_eq!(s.on_wire(vec![1, 2, 3], &mut out), vec![1, 2, 3]);
        assert!(out.is_empty());
        assert!(s.admits(0, &mut m));
        assert_eq!(s.time_policy(), TimePolicy::default());
        assert_eq!(s.serve_limit(7), 7);
    }

    #[test]
    fn message_strategies_rewrite_what_they_claim() {
        let mut m = Metrics::default();
        let Outgoing::Send(crate::protocol::Body::Commit { digest, .. }, _) =
            with(Byzantine::BadDigests).outgoing(commit(), Dest::All, &mut m)
        else {
            panic!("bad digests sends its commit");
        };
        assert_ne!(digest, [1; 32]);
        assert!(matches!(
            with(Byzantine::WithholdCommits).outgoing(commit(), Dest::All, &mut m),
            Outgoing::Withhold
        ));
        assert_eq!(m.get("byz_commits_withheld"), 1);
        assert!(!with(Byzantine::StarveClient).admits(STARVED_CLIENT, &mut m));
        assert_eq!(with(Byzantine::SlowStateSource).serve_limit(7), 1);
        assert_eq!(
            with(Byzantine::TimeReplay).time_policy().cert,
            CertChoice::Oldest
        );
    }

    #[test]
    fn an_equivocating_primary_sends_two_batches_and_bad_signatures_fail() {
        let mut c = ReplicaConfig::new(0, 4, 1, 1);
        c.byzantine = Byzantine::EquivocatingPrimary;
        let batch = crate::protocol::Batch {
            requests: Vec::new(),
            primary_clock_ms: 9,
            time_cert: None,
            null: false,
        };
        let pp = crate::protocol::Body::PrePrepare {
            view: 0,
            seq: 1,
            batch,
        };
        let mut m = Metrics::default();
        let Outgoing::Split(parts) = strategy(&c).outgoing(pp, Dest::All, &mut m) else {
            panic!("an equivocating primary splits its pre-prepare");
        };
        assert_eq!(parts.len(), 3);
        let clocks: std::collections::BTreeSet<_> = parts
            .iter()
            .map(|(b, _)| match b {
                crate::protocol::Body::PrePrepare { batch, .. } => batch.primary_clock_ms,
                _ => 0,
            })
            .collect();
        assert_eq!(clocks.len(), 2);
        // A message the bad-signatures strategy lets out does not verify.
        let key = crate::crypto::replica_key(c.signatures, c.key_seed, 0);
        let payload = crate::protocol::Payload {
            from: 0,
            body: commit(),
        };
        let msg = crate::protocol::SignedMsg::sign(&key, &payload).unwrap();
        let bytes = codec::encode(&crate::protocol::Wire::Signed(msg)).unwrap();
        c.byzantine = Byzantine::BadSignatures;
        let mut out = Vec::new();
        let bad = strategy(&c).on_wire(bytes.clone(), &mut out);
        assert_ne!(bad, bytes);
        let Ok(crate::protocol::Wire::Signed(m)) = codec::decode(&bad, 1 << 20) else {
            panic!("still a signed message");
        };
        let ring = crate::crypto::Keyring::new(c.signatures, c.key_seed, 4, 1);
        assert!(m.open(&ring, 1 << 20, None).is_err());
    }
}
