//! The amplification attackers: cheap questions, expensive answers.
//!
//! `Amplify` asks every peer, every 50 ms, for commit certificates from its stable checkpoint
//! (a `Status`) and for the newest batches of its log (`BatchFetch`). `WithholdCommits` never
//! sends a commit (so no peer can tell from its votes which batches it holds) and every 50 ms
//! sends every peer a `Status` from its stable checkpoint and a `Have` listing every seq of
//! its window as held with nothing. The bounds they test are in docs/replica.md.

use crate::crypto::Digest32;
use crate::node::{Millis, Output};
use crate::protocol::{Body, MAX_FETCH_BATCHES, MAX_HAVE_SEQS, SeqHave};
use crate::replica::hooks::{Outgoing, Strategy};
use crate::replica::{Dest, Metrics, Replica};

/// Period of an asking round.
const ROUND_MS: Millis = 50;

/// Whether a round is due at `now`; if so, starts the next one.
fn round_due(next_round: &mut Millis, now: Millis) -> bool {
    if now < *next_round {
        return false;
    }
    *next_round = now.saturating_add(ROUND_MS);
    true
}

/// Every 50 ms, a `Status` from its stable checkpoint and `BatchFetch`es for the newest
/// batches of its log, to every peer.
pub(super) struct Amplify {
    pub(super) next_round: Millis,
}

impl Strategy for Amplify {
    fn after_propose(&mut self, r: &mut Replica, now: Millis, out: &mut Vec<Output>) {
        if !round_due(&mut self.next_round, now) {
            return;
        }
        r.metrics_mut().inc("byz_amplify_rounds");
        let (view, last_executed) = (r.view(), r.stable().seq);
        r.send(
            Body::Status {
                view,
                last_executed,
            },
            Dest::All,
            out,
        );
        let wanted: Vec<(u64, Digest32)> = r
            .log()
            .iter()
            .rev()
            .filter_map(|(s, e)| e.digest.map(|d| (*s, d)))
            .take(MAX_FETCH_BATCHES)
            .collect();
        if !wanted.is_empty() {
            r.send(Body::BatchFetch { wanted }, Dest::All, out);
        }
    }
}

/// Withholds every commit; every 50 ms, a `Status` from its stable checkpoint and a `Have`
/// listing every seq of its window as held with nothing, to every peer.
pub(super) struct WithholdCommits {
    pub(super) next_round: Millis,
}

impl Strategy for WithholdCommits {
    fn outgoing(&mut self, body: Body, dest: Dest, metrics: &mut Metrics) -> Outgoing {
        if matches!(body, Body::Commit { .. }) {
            metrics.inc("byz_commits_withheld");
            return Outgoing::Withhold;
        }
        Outgoing::Send(body, dest)
    }

    fn after_propose(&mut self, r: &mut Replica, now: Millis, out: &mut Vec<Output>) {
        if !round_due(&mut self.next_round, now) {
            return;
        }
        r.metrics_mut().inc("byz_drain_rounds");
        let (view, stable) = (r.view(), r.stable().seq);
        r.send(
            Body::Status {
                view,
                last_executed: stable,
            },
            Dest::All,
            out,
        );
        let hi = r.high_watermark();
        let seqs: Vec<SeqHave> = (stable.saturating_add(1)..=hi)
            .take(MAX_HAVE_SEQS)
            .map(|seq| SeqHave {
                seq,
                digest: None,
                prepares: Vec::new(),
                commits: Vec::new(),
            })
            .collect();
        r.send(
            Body::Have {
                view,
                last_executed: stable,
                seqs,
            },
            Dest::All,
            out,
        );
    }
}
