//! The quorum reader of schedule queries: ask every node, believe an answer only when `quorum`
//! (f+1) nodes return it byte-identically at the same height.
//!
//! A [`ScheduleReader`] sends one [`ScheduleQuery`] to every endpoint concurrently, each under
//! a timeout and reading at most [`ScheduleReadConfig::max_response_bytes`]; every answer is
//! decoded by ccron's bounded decoder ([`QueryAnswer::decode`]). [`decide`] groups the valid
//! answers by (height, canonical body bytes): a group of at least `quorum` answers holds at
//! least one honest node, so it is true at its height. With several such groups (honest nodes
//! a height apart) the highest height wins. Up to f lying nodes can neither forge, alter nor
//! hide an answer. When no group reaches the quorum the read is retried
//! ([`ScheduleReadConfig::attempts`]: honest nodes a block apart agree a moment later), then
//! fails with a typed error: [`ScheduleReadError::Unreachable`] when fewer than `quorum` nodes
//! answered at all, [`ScheduleReadError::Disagreement`] when enough answered but no `quorum`
//! of them agree (each answer's height and digest listed), [`ScheduleReadError::Conflict`] when
//! two different answers each reached the quorum at one height (more than f nodes lie).

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
use ccron::schedule::query::{QueryAnswer, QueryBody};
use http_body_util::{BodyExt, Empty, Limited};
use hyper::Uri;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use sha2::{Digest, Sha256};
use tokio::task::JoinSet;

use crate::schedules::{ScheduleQuery, path_of};

/// Settings of a [`ScheduleReader`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScheduleReadConfig {
    /// Base URI of each node (`http://host:port`).
    pub endpoints: Vec<String>,
    /// Identical answers needed (f+1 for n = 3f+1 nodes).
    pub quorum: usize,
    /// Largest answer body read.
    pub max_response_bytes: usize,
    /// Time allowed for one node's whole answer.
    pub timeout_ms: u64,
    /// TCP connect timeout.
    pub connect_timeout_ms: u64,
    /// Reads tried before giving up on agreement (at least 1).
    pub attempts: u32,
    /// Pause between attempts.
    pub retry_delay_ms: u64,
}

impl ScheduleReadConfig {
    /// `endpoints` with quorum `quorum`, answers up to the format's bound, a 2 s timeout, a 1 s
    /// connect timeout, 3 attempts 200 ms apart.
    pub fn new(endpoints: Vec<String>, quorum: usize) -> Self {
        Self {
            endpoints,
            quorum,
            max_response_bytes: ccron::schedule::query::MAX_ANSWER_BYTES,
            timeout_ms: 2_000,
            connect_timeout_ms: 1_000,
            attempts: 3,
            retry_delay_ms: 200,
        }
    }

    /// The quorum of a cluster of `n` nodes tolerating `f = (n - 1) / 3` faulty ones: f+1.
    pub fn quorum_of(n: usize) -> usize {
        n.saturating_sub(1) / 3 + 1
    }
}

/// What one node answered, as the error reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeAnswer {
    /// A valid answer: its height and the SHA-256 of its body (hex, 16 characters shown).
    Answered {
        /// The node.
        endpoint: String,
        /// The height it named.
        at_height: u64,
        /// Its body's digest, short hex.
        digest: String,
    },
    /// No valid answer.
    Failed {
        /// The node.
        endpoint: String,
        /// Why.
        error: String,
    },
}

impl std::fmt::Display for NodeAnswer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NodeAnswer::Answered {
                endpoint,
                at_height,
                digest,
            } => write!(f, "{endpoint}: height {at_height}, answer {digest}"),
            NodeAnswer::Failed { endpoint, error } => write!(f, "{endpoint}: {error}"),
        }
    }
}

fn list(answers: &[NodeAnswer]) -> String {
    answers
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

/// Why a quorum read failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ScheduleReadError {
    /// The configuration is unusable (no endpoints, a quorum outside 1..=endpoints, a bad URI).
    #[error("bad reader configuration: {0}")]
    Config(String),
    /// Fewer than `quorum` nodes gave a valid answer.
    #[error("only {answered} of {asked} nodes answered, {quorum} needed: {}", list(.answers))]
    Unreachable {
        /// Valid answers.
        answered: usize,
        /// Nodes asked.
        asked: usize,
        /// Needed.
        quorum: usize,
        /// Every node's outcome.
        answers: Vec<NodeAnswer>,
    },
    /// Enough nodes answered, but no `quorum` of them identically at one height.
    #[error("no {quorum} nodes agree: {}", list(.answers))]
    Disagreement {
        /// Needed.
        quorum: usize,
        /// Every node's outcome.
        answers: Vec<NodeAnswer>,
    },
    /// Two different answers each reached the quorum at the same height: more than f nodes
    /// lie (or the quorum is too small for the cluster).
    #[error("conflicting answers each reached {quorum} at height {at_height}: {}", list(.answers))]
    Conflict {
        /// Needed.
        quorum: usize,
        /// The height.
        at_height: u64,
        /// Every node's outcome.
        answers: Vec<NodeAnswer>,
    },
}

/// An answer `quorum` nodes returned identically.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Believed {
    /// The height it was read at.
    pub at_height: u64,
    /// The answer.
    pub body: QueryBody,
    /// The nodes that returned it.
    pub agreeing: Vec<String>,
    /// Every node's outcome.
    pub answers: Vec<NodeAnswer>,
}

fn short_hex(d: &[u8]) -> String {
    d.iter().take(8).map(|b| format!("{b:02x}")).collect()
}

/// Decides what to believe from each endpoint's outcome (`(endpoint, answer or error)`), see
/// the module documentation. Pure: the network part is [`ScheduleReader::read`].
///
/// # Errors
/// [`ScheduleReadError::Unreachable`], [`ScheduleReadError::Disagreement`],
/// [`ScheduleReadError::Conflict`].
pub fn decide(
    outcomes: Vec<(String, Result<QueryAnswer, String>)>,
    quorum: usize,
) -> Result<Believed, ScheduleReadError> {
    let mut outcomes = outcomes;
    // Nodes of two answer formats (a rolling upgrade) are compared on what both say.
    ccron::schedule::query::to_common_format(
        outcomes.iter_mut().filter_map(|(_, o)| o.as_mut().ok()),
    );
    let asked = outcomes.len();
    let mut answers = Vec::with_capacity(asked);
    // (height, body bytes) -> (body, endpoints)
    let mut groups: BTreeMap<(u64, Vec<u8>), (QueryBody, Vec<String>)> = BTreeMap::new();
    for (endpoint, outcome) in outcomes {
        let a = match outcome
            .and_then(|a| a.body.encode().map(|b| (a, b)).map_err(|e| e.to_string()))
        {
            Ok(a) => a,
            Err(error) => {
                answers.push(NodeAnswer::Failed { endpoint, error });
                continue;
            }
        };
        let (answer, bytes) = a;
        answers.push(NodeAnswer::Answered {
            endpoint: endpoint.clone(),
            at_height: answer.at_height,
            digest: short_hex(&Sha256::digest(&bytes)),
        });
        groups
            .entry((answer.at_height, bytes))
            .or_insert_with(|| (answer.body, Vec::new()))
            .1
            .push(endpoint);
    }
    let answered = answers
        .iter()
        .filter(|a| matches!(a, NodeAnswer::Answered { .. }))
        .count();
    if answered < quorum {
        return Err(ScheduleReadError::Unreachable {
            answered,
            asked,
            quorum,
            answers,
        });
    }
    let mut best: Option<(u64, QueryBody, Vec<String>)> = None;
    for ((height, _), (body, eps)) in groups {
        if eps.len() < quorum {
            continue;
        }
        match &best {
            Some((h, _, _)) if *h == height => {
                return Err(ScheduleReadError::Conflict {
                    quorum,
                    at_height: height,
                    answers,
                });
            }
            // Ascending heights: a later group is higher.
            _ => best = Some((height, body, eps)),
        }
    }
    match best {
        Some((at_height, body, agreeing)) => Ok(Believed {
            at_height,
            body,
            agreeing,
            answers,
        }),
        None => Err(ScheduleReadError::Disagreement { quorum, answers }),
    }
}

/// Reads schedule queries from a cluster by quorum (see the module documentation).
pub struct ScheduleReader {
    cfg: ScheduleReadConfig,
    client: Client<HttpConnector, Empty<Bytes>>,
}

impl std::fmt::Debug for ScheduleReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScheduleReader")
            .field("endpoints", &self.cfg.endpoints)
            .field("quorum", &self.cfg.quorum)
            .finish_non_exhaustive()
    }
}

impl ScheduleReader {
    /// A reader of `cfg.endpoints`. Call it inside a tokio runtime.
    ///
    /// # Errors
    /// [`ScheduleReadError::Config`].
    pub fn new(cfg: ScheduleReadConfig) -> Result<Self, ScheduleReadError> {
        if cfg.endpoints.is_empty() || cfg.quorum == 0 || cfg.quorum > cfg.endpoints.len() {
            return Err(ScheduleReadError::Config(format!(
                "quorum {} of {} endpoints",
                cfg.quorum,
                cfg.endpoints.len()
            )));
        }
        for e in &cfg.endpoints {
            e.parse::<Uri>()
                .map_err(|err| ScheduleReadError::Config(format!("{e}: {err}")))?;
        }
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(Duration::from_millis(cfg.connect_timeout_ms)));
        connector.set_nodelay(true);
        let client = Client::builder(TokioExecutor::new()).build(connector);
        Ok(Self { cfg, client })
    }

    /// The configuration.
    pub fn config(&self) -> &ScheduleReadConfig {
        &self.cfg
    }

    /// Asks every node `q` once, concurrently; each outcome in endpoint order.
    pub async fn ask(&self, q: &ScheduleQuery) -> Vec<(String, Result<QueryAnswer, String>)> {
        let path = path_of(q);
        let mut set = JoinSet::new();
        for (i, base) in self.cfg.endpoints.iter().enumerate() {
            let uri = format!("{}{path}", base.trim_end_matches('/'));
            let client = self.client.clone();
            let (max, timeout_ms) = (self.cfg.max_response_bytes, self.cfg.timeout_ms);
            set.spawn(async move {
                let r = tokio::time::timeout(
                    Duration::from_millis(timeout_ms),
                    fetch(&client, &uri, max),
                )
                .await
                .unwrap_or_else(|_| Err(format!("no answer within {timeout_ms} ms")));
                (i, r)
            });
        }
        let mut out: Vec<(String, Result<QueryAnswer, String>)> = self
            .cfg
            .endpoints
            .iter()
            .map(|e| (e.clone(), Err("task failed".to_string())))
            .collect();
        while let Some(joined) = set.join_next().await {
            if let Ok((i, r)) = joined
                && let Some(slot) = out.get_mut(i)
            {
                if let Err(e) = &r {
                    tracing::warn!(endpoint = %slot.0, error = %e, "schedule read failed");
                }
                slot.1 = r;
            }
        }
        out
    }

    /// Reads `q` by quorum, retrying up to [`ScheduleReadConfig::attempts`] times while no
    /// answer reaches the quorum.
    ///
    /// # Errors
    /// The last attempt's [`ScheduleReadError`].
    pub async fn read(&self, q: &ScheduleQuery) -> Result<Believed, ScheduleReadError> {
        let attempts = self.cfg.attempts.max(1);
        let mut attempt = 1;
        loop {
            match decide(self.ask(q).await, self.cfg.quorum) {
                Ok(b) => return Ok(b),
                Err(e @ ScheduleReadError::Conflict { .. }) => return Err(e),
                Err(e) if attempt >= attempts => return Err(e),
                Err(e) => {
                    tracing::debug!(attempt, error = %e, "schedule read: no quorum yet, retrying");
                    attempt += 1;
                    tokio::time::sleep(Duration::from_millis(self.cfg.retry_delay_ms)).await;
                }
            }
        }
    }
}

async fn fetch(
    client: &Client<HttpConnector, Empty<Bytes>>,
    uri: &str,
    max_response_bytes: usize,
) -> Result<QueryAnswer, String> {
    let uri: Uri = uri.parse().map_err(|e| format!("bad URI {uri}: {e}"))?;
    let resp = client
        .get(uri)
        .await
        .map_err(|e| format!("transport: {e}"))?;
    let status = resp.status();
    let body = Limited::new(resp.into_body(), max_response_bytes)
        .collect()
        .await
        .map_err(|e| {
            if e.is::<http_body_util::LengthLimitError>() {
                format!("answer longer than {max_response_bytes} bytes")
            } else {
                format!("transport: {e}")
            }
        })?
        .to_bytes();
    if !status.is_success() {
        let text = String::from_utf8_lossy(&body[..body.len().min(200)]).into_owned();
        return Err(format!("status {}: {text}", status.as_u16()));
    }
    QueryAnswer::decode(&body).map_err(|e| format!("bad answer: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use ccron::schedule::query::BookState;

    fn book(n: u64) -> QueryBody {
        QueryBody::Book(BookState {
            schedules: n,
            ..BookState::default()
        })
    }

    fn at(h: u64, body: QueryBody) -> Result<QueryAnswer, String> {
        Ok(QueryAnswer {
            replica: 0,
            at_height: h,
            body,
        })
    }

    fn o(v: Vec<Result<QueryAnswer, String>>) -> Vec<(String, Result<QueryAnswer, String>)> {
        v.into_iter()
            .enumerate()
            .map(|(i, r)| (format!("n{i}"), r))
            .collect()
    }

    #[test]
    fn a_liar_is_outvoted_and_disagreement_is_typed() {
        // One liar of four (quorum 2): the honest answer wins, even when the liar claims a
        // higher height.
        let b = decide(
            o(vec![
                at(5, book(3)),
                at(9, book(99)),
                at(5, book(3)),
                at(5, book(3)),
            ]),
            2,
        )
        .unwrap();
        assert_eq!((b.at_height, b.body.clone()), (5, book(3)));
        assert_eq!(b.agreeing, vec!["n0", "n2", "n3"]);
        // Honest nodes a height apart: the highest group reaching the quorum wins.
        let b = decide(
            o(vec![
                at(5, book(3)),
                at(6, book(4)),
                at(6, book(4)),
                at(5, book(3)),
            ]),
            2,
        )
        .unwrap();
        assert_eq!((b.at_height, b.body), (6, book(4)));
        // Same body, different heights: not one group.
        let e = decide(
            o(vec![at(5, book(3)), at(6, book(3)), Err("down".into())]),
            2,
        );
        assert!(matches!(e, Err(ScheduleReadError::Disagreement { .. })));
        // Too few answers.
        let e = decide(
            o(vec![at(5, book(3)), Err("down".into()), Err("down".into())]),
            2,
        );
        assert!(matches!(
            e,
            Err(ScheduleReadError::Unreachable {
                answered: 1,
                asked: 3,
                ..
            })
        ));
        // Two quorums at one height: more than f liars.
        let e = decide(
            o(vec![
                at(5, book(3)),
                at(5, book(3)),
                at(5, book(4)),
                at(5, book(4)),
            ]),
            2,
        );
        assert!(matches!(
            e,
            Err(ScheduleReadError::Conflict { at_height: 5, .. })
        ));
        assert_eq!(ScheduleReadConfig::quorum_of(4), 2);
        assert_eq!(ScheduleReadConfig::quorum_of(7), 3);
        assert_eq!(ScheduleReadConfig::quorum_of(1), 1);
    }

    /// A description of a schedule with a calendar and overlap policies (query format 4).
    fn described() -> QueryBody {
        use ccron::schedule::{
            Handlers, Limits, NewSchedule, Overlap, Principal, ScheduleRequest, Scheduler, Target,
            Timing,
        };
        let mut h: Handlers<u64> = Handlers::new();
        assert!(h.register("a", |ctx| *ctx.state += 1));
        let mut b = Scheduler::new(1, Limits::default());
        let cron = Timing::Cron {
            expression: "0 9 * * *".into(),
            zone: None,
        };
        let cal = ccron::cron::ExclusionCalendar::new(
            "weekends",
            vec![ccron::cron::Exclusion::Weekdays { mask: 0b100_0001 }],
        )
        .unwrap();
        for req in [
            ScheduleRequest::InstallCalendar(cal),
            ScheduleRequest::Create(NewSchedule::new("a", cron)),
            ScheduleRequest::SetCalendar {
                target: Target::Id(1),
                calendar: Some("weekends".into()),
            },
            ScheduleRequest::BackfillWith {
                target: Target::Id(1),
                from_ms: 0,
                to_ms: 86_400_000,
                overlap: Overlap::BufferAll,
            },
        ] {
            b.apply(&Principal::Host, req, &h, 1, Some(3 * 86_400_000))
                .unwrap();
        }
        let d = ccron::schedule::query::describe(&b, &Target::Id(1), 2).unwrap();
        assert!(d.policies.is_some());
        QueryBody::Describe(Some(Box::new(d)))
    }

    /// The reader believes format-4 descriptions with their policies; in a rolling upgrade
    /// (two nodes answering format 3, two format 4, one height) it believes what both formats
    /// say instead of reporting a conflict; a liar's forged policies are outvoted.
    #[test]
    fn format4_descriptions_and_a_rolling_upgrade_are_read() {
        let new = described();
        let old = QueryAnswer::decode(
            &QueryAnswer {
                replica: 0,
                at_height: 5,
                body: new.clone(),
            }
            .encode_format3()
            .unwrap(),
        )
        .unwrap()
        .body;
        assert!(old.lacks_policies() && !new.lacks_policies());
        let b = decide(
            o(vec![
                at(5, new.clone()),
                at(5, new.clone()),
                at(5, new.clone()),
            ]),
            2,
        )
        .unwrap();
        assert_eq!(b.body, new);
        let b = decide(
            o(vec![
                at(5, new.clone()),
                at(5, old.clone()),
                at(5, new.clone()),
                at(5, old.clone()),
            ]),
            2,
        )
        .unwrap();
        assert_eq!((b.body, b.agreeing.len()), (old, 4));
        let QueryBody::Describe(Some(mut forged)) = new.clone() else {
            unreachable!()
        };
        if let Some(p) = forged.policies.as_mut() {
            p.calendar = None;
        }
        let b = decide(
            o(vec![
                at(5, new.clone()),
                at(5, QueryBody::Describe(Some(forged))),
                at(5, new.clone()),
                at(5, new.clone()),
            ]),
            2,
        )
        .unwrap();
        assert_eq!((b.body, b.agreeing.len()), (new, 3));
    }

    /// A table entry described and a list with entries (query format 7: with overlap counts),
    /// from a ledger with one cron table.
    fn entry_bodies() -> (QueryBody, QueryBody) {
        use ccron::schedule::query::{ScheduleFilter, describe_entry, list_all, table_entries};
        use ccron::{CronEntry, CronTable, CronTableRegistry, PageRange, Periodic};
        let mut t = CronTable::with_persistence(3, PageRange::new(0, 8).unwrap(), 8);
        let every = Periodic::every_ms(60_000).unwrap().starting_at(0);
        t.add(CronEntry::<()>::periodic(4, every, |_| {})).unwrap();
        t.add(CronEntry::new(5, |_| true, |_| {})).unwrap();
        let mut r = CronTableRegistry::new();
        r.register(t).unwrap();
        let counts = std::collections::BTreeMap::from([(
            (3, 4),
            ccron::schedule::query::EntryCounts {
                fired: 7,
                overlap: ccron::schedule::query::EntryOverlapCounts {
                    skipped: 2,
                    held: 1,
                },
            },
        )]);
        let e = table_entries(&r, &counts, None);
        let d = describe_entry(&e, 3, 4, 3).unwrap();
        assert_eq!(d.upcoming.len(), 3);
        let l = list_all(None, Some(&e), &ScheduleFilter::default());
        (QueryBody::Entry(Some(Box::new(d))), QueryBody::List(l))
    }

    /// One node lying about a table entry (its fire count, its rule's period, or its absence)
    /// is outvoted; a list of format 5 and lists of format 4 in a rolling upgrade make one
    /// quorum on the schedules both formats report.
    #[test]
    fn a_liar_about_a_table_entry_is_outvoted() {
        let (entry, list) = entry_bodies();
        let QueryBody::Entry(Some(honest)) = entry.clone() else {
            unreachable!()
        };
        let mut more_fires = honest.clone();
        more_fires.summary.fired += 1;
        let mut other_rule = honest.clone();
        if let ccron::schedule::query::EntryRule::Periodic { period_ms, .. } =
            &mut other_rule.summary.rule
        {
            *period_ms = 1_000;
        }
        for lie in [
            QueryBody::Entry(Some(more_fires)),
            QueryBody::Entry(Some(other_rule)),
            QueryBody::Entry(None),
        ] {
            assert_ne!(lie, entry);
            let b = decide(
                o(vec![
                    at(5, entry.clone()),
                    at(5, lie.clone()),
                    at(5, entry.clone()),
                    at(5, entry.clone()),
                ]),
                2,
            )
            .unwrap();
            assert_eq!(
                (b.body, b.agreeing),
                (entry.clone(), vec!["n0".into(), "n2".into(), "n3".into()])
            );
            // With only one honest node beside it, nobody is believed.
            let e = decide(o(vec![at(5, entry.clone()), at(5, lie)]), 2);
            assert!(matches!(e, Err(ScheduleReadError::Disagreement { .. })));
        }
        // A liar listing a doctored entry.
        let QueryBody::List(mut doctored) = list.clone() else {
            unreachable!()
        };
        if let Some(p) = doctored.entries.as_mut() {
            p.items[0].fired = 0;
        }
        let b = decide(
            o(vec![
                at(5, list.clone()),
                at(5, list.clone()),
                at(5, QueryBody::List(doctored)),
            ]),
            2,
        )
        .unwrap();
        assert_eq!(b.body, list);
        // Rolling upgrade: two nodes answer format 4 (no entries), two format 5.
        let old = QueryAnswer::decode(
            &QueryAnswer {
                replica: 0,
                at_height: 5,
                body: list.clone(),
            }
            .encode_format4()
            .unwrap(),
        )
        .unwrap()
        .body;
        assert!(old.lacks_entries() && !list.lacks_entries());
        let b = decide(
            o(vec![
                at(5, list.clone()),
                at(5, old.clone()),
                at(5, list.clone()),
                at(5, old.clone()),
            ]),
            2,
        )
        .unwrap();
        assert_eq!((b.body, b.agreeing.len()), (old, 4));
    }

    /// One node lying about a table entry's overlap counts (query format 7) is outvoted; with
    /// only one honest node beside it nobody is believed; nodes of format 6 (no counts) and 7
    /// in a rolling upgrade make one quorum on what both report.
    #[test]
    fn a_liar_about_an_entrys_overlap_counts_is_outvoted() {
        let (entry, list) = entry_bodies();
        for honest in [entry, list] {
            assert!(!honest.lacks_entry_counts());
            let mut lie = honest.clone();
            match &mut lie {
                QueryBody::Entry(Some(d)) => {
                    d.summary.overlap_counts.as_mut().unwrap().skipped += 1;
                }
                QueryBody::List(l) => {
                    l.entries.as_mut().unwrap().items[0]
                        .overlap_counts
                        .as_mut()
                        .unwrap()
                        .held += 1;
                }
                _ => unreachable!(),
            }
            let b = decide(
                o(vec![
                    at(5, honest.clone()),
                    at(5, lie.clone()),
                    at(5, honest.clone()),
                    at(5, honest.clone()),
                ]),
                2,
            )
            .unwrap();
            assert_eq!(
                (b.body, b.agreeing),
                (honest.clone(), vec!["n0".into(), "n2".into(), "n3".into()])
            );
            let e = decide(o(vec![at(5, honest.clone()), at(5, lie)]), 2);
            assert!(matches!(e, Err(ScheduleReadError::Disagreement { .. })));
            let old = QueryAnswer::decode(
                &QueryAnswer {
                    replica: 0,
                    at_height: 5,
                    body: honest.clone(),
                }
                .encode_format6()
                .unwrap(),
            )
            .unwrap()
            .body;
            assert!(old.lacks_entry_counts());
            assert_eq!(old, honest.clone().without_entry_counts());
            let b = decide(
                o(vec![
                    at(5, honest.clone()),
                    at(5, old.clone()),
                    at(5, honest.clone()),
                    at(5, old.clone()),
                ]),
                2,
            )
            .unwrap();
            assert_eq!((b.body, b.agreeing.len()), (old, 4));
        }
    }

    /// One node lying about the book's refusals (query format 6) is outvoted; with only one
    /// honest node beside it nobody is believed; nodes of format 5 (no refusals) and 6 in a
    /// rolling upgrade make one quorum on what both report.
    #[test]
    fn a_liar_about_refusals_is_outvoted() {
        use ccron::schedule::RefusalCounters;
        let state = |slot_full| {
            QueryBody::Book(BookState {
                schedules: 3,
                refusals: Some(RefusalCounters {
                    slot_full,
                    calendar: 1,
                    backfill: 2,
                }),
                ..BookState::default()
            })
        };
        let (honest, lie) = (state(4), state(0));
        let b = decide(
            o(vec![
                at(5, honest.clone()),
                at(5, lie.clone()),
                at(5, honest.clone()),
                at(5, honest.clone()),
            ]),
            2,
        )
        .unwrap();
        assert_eq!(
            (b.body, b.agreeing),
            (honest.clone(), vec!["n0".into(), "n2".into(), "n3".into()])
        );
        let e = decide(o(vec![at(5, honest.clone()), at(5, lie)]), 2);
        assert!(matches!(e, Err(ScheduleReadError::Disagreement { .. })));
        let old = QueryAnswer::decode(
            &QueryAnswer {
                replica: 0,
                at_height: 5,
                body: honest.clone(),
            }
            .encode_format5()
            .unwrap(),
        )
        .unwrap()
        .body;
        assert!(old.lacks_refusals() && !honest.lacks_refusals());
        let b = decide(
            o(vec![
                at(5, honest.clone()),
                at(5, old.clone()),
                at(5, honest.clone()),
                at(5, old.clone()),
            ]),
            2,
        )
        .unwrap();
        assert_eq!((b.body, b.agreeing.len()), (old, 4));
    }
}
