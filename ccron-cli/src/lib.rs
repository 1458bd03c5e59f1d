//! `ccron`: the operator's command line for a ccron cluster.
//!
//! ```text
//! ccron schedules list     --nodes URL,... [--owner client:N] [--handler H] [--topic T]
//!                          [--paused true|false] [--parked true|false] [--after ID] [--limit N]
//!                          [--kind book|entry] [--entries-from C:P]
//! ccron schedules describe TARGET [--preview N]      (TARGET: ID, key:NAME or entry:C:P)
//! ccron schedules preview  TARGET [--count N]
//! ccron schedules history  TARGET
//! ccron schedules pause|resume|cancel TARGET --key-file PATH [--number N] [--wait-ms MS]
//! ccron cluster status     --nodes URL,...
//! ccron key new --out PATH | ccron key show --key-file PATH
//! ccron relay --nodes URL,... --key FILE --workers FILE --chain-id ID --dir DIR
//! ```
//!
//! Exit codes ([`CliError::exit_code`]): 0 ok, 2 bad arguments or key file (or workers file),
//! 3 unreachable, 4 nodes disagree, 5 not found, 6 timeout, 7 refused by the ledger, 8 the
//! relay's state directory cannot be used ([`CliError::RelayState`]).
//!
//! Every command takes `--nodes` (the nodes' HTTP API base URLs), `--quorum` (default f+1 for
//! the number of nodes given), `--timeout-ms` and `--json`. A `TARGET` is a schedule id
//! (`42`), or a key (`key:nightly-report`, or any text that is not a number); `describe` and
//! `preview` also take a cron table entry, `entry:C:P` (component C, position P).
//!
//! Reads go to every node and are believed only when `quorum` nodes return the same answer at
//! the same height ([`ccron_http::ScheduleReader`]): one lying node is outvoted; nodes that do
//! not answer or do not agree are typed errors ([`CliError`]) naming each node's answer.
//! Mutations are `ScheduleRequest`s signed with the operator's ed25519 key in the node's
//! request format, submitted to every node, their result read back by quorum
//! ([`submit::submit`]). Output is a human table by default, JSON with `--json`.

pub mod http;
pub mod relay;
pub mod render;
pub mod submit;

use std::path::PathBuf;

use ccron::schedule::query::{EntryDetail, ListKind, QueryBody, ScheduleFilter};
use ccron::schedule::{Overlap, ScheduleRequest, Target};
use ccron_http::{ScheduleQuery, ScheduleReadConfig, ScheduleReadError, ScheduleReader};
use clap::{Args, Parser, Subcommand};
use hyper::Method;

/// Why a command failed (each maps to an exit code, [`CliError::exit_code`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CliError {
    /// Bad arguments.
    #[error("{0}")]
    Args(String),
    /// The key file cannot be used.
    #[error("key file: {0}")]
    KeyFile(String),
    /// Too few nodes answered.
    #[error("unreachable: {0}")]
    Unreachable(String),
    /// Nodes answered but did not agree.
    #[error("nodes disagree: {0}")]
    Disagreement(String),
    /// The schedule does not exist (believed by quorum).
    #[error("not found: {0}")]
    NotFound(String),
    /// A mutation's result did not come back in time.
    #[error("timeout: {0}")]
    Timeout(String),
    /// The ledger refused the mutation (its reply).
    #[error("refused: {0}")]
    Refused(String),
    /// `ccron relay`'s own durable state cannot be used: its directory cannot be created, or
    /// a file in it (request numbers, progress, dead letters, results journal) cannot be
    /// opened, read or written, or fails its checksum. Nothing was lost: fix the directory
    /// (or restore it) and start the relay again.
    #[error("relay state: {0}")]
    RelayState(String),
}

impl CliError {
    /// The process exit code: 2 arguments and key files, 3 unreachable, 4 disagreement,
    /// 5 not found, 6 timeout, 7 refused by the ledger, 8 the relay's state directory.
    pub fn exit_code(&self) -> i32 {
        match self {
            CliError::Args(_) | CliError::KeyFile(_) => 2,
            CliError::Unreachable(_) => 3,
            CliError::Disagreement(_) => 4,
            CliError::NotFound(_) => 5,
            CliError::Timeout(_) => 6,
            CliError::Refused(_) => 7,
            CliError::RelayState(_) => 8,
        }
    }
}

impl From<ScheduleReadError> for CliError {
    fn from(e: ScheduleReadError) -> Self {
        match e {
            ScheduleReadError::Config(m) => CliError::Args(m),
            ScheduleReadError::Unreachable { ref answers, .. } if no_book(answers) => {
                CliError::NotFound("the nodes' ledger keeps no schedule book (404)".into())
            }
            e @ ScheduleReadError::Unreachable { .. } => CliError::Unreachable(e.to_string()),
            e => CliError::Disagreement(e.to_string()),
        }
    }
}

/// Whether every node answered `404`: its ledger keeps no book.
fn no_book(answers: &[ccron_http::schedule_read::NodeAnswer]) -> bool {
    !answers.is_empty() && answers.iter().all(|a| a.to_string().contains("status 404"))
}

/// The command line.
#[derive(Debug, Parser)]
#[command(name = "ccron", version, about = "Operate a ccron cluster")]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Top-level commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Schedules: read by quorum, change by signed request.
    #[command(subcommand)]
    Schedules(Schedules),
    /// The cluster as a whole.
    #[command(subcommand)]
    Cluster(Cluster),
    /// Operator keys.
    #[command(subcommand)]
    Key(Key),
    /// Deliver the outbox to workers and submit their results back (runs until stopped).
    #[command(
        after_help = "Exit codes: 0 done (--until-progress reached, or --max-run-ms \
        without --until-progress); 2 bad arguments, key file or workers file; 6 \
        --until-progress not reached within --max-run-ms; 8 the relay's directory (--dir) or \
        a file in it cannot be created, opened or read back (a damaged file is refused, never \
        reset: restore it or start a new directory above the old request numbers)."
    )]
    Relay(relay::RelayArgs),
}

/// Options every cluster command takes.
#[derive(Debug, Clone, Args)]
pub struct Common {
    /// The nodes' HTTP API base URLs, comma-separated (e.g. http://127.0.0.1:26700,...).
    #[arg(long, value_delimiter = ',', required = true)]
    pub nodes: Vec<String>,
    /// Identical answers needed (default: f+1 for n = 3f+1 nodes given).
    #[arg(long)]
    pub quorum: Option<usize>,
    /// Time allowed for one node's answer, ms.
    #[arg(long, default_value_t = 2_000)]
    pub timeout_ms: u64,
    /// Print JSON instead of tables.
    #[arg(long)]
    pub json: bool,
}

impl Common {
    fn quorum(&self) -> usize {
        self.quorum
            .unwrap_or_else(|| ScheduleReadConfig::quorum_of(self.nodes.len()))
    }

    fn reader(&self) -> Result<ScheduleReader, CliError> {
        let mut cfg = ScheduleReadConfig::new(self.nodes.clone(), self.quorum());
        cfg.timeout_ms = self.timeout_ms;
        cfg.connect_timeout_ms = self.timeout_ms;
        Ok(ScheduleReader::new(cfg)?)
    }
}

/// Options of a signed mutation.
#[derive(Debug, Clone, Args)]
pub struct Signed {
    /// The operator's ed25519 secret key: 64 hex characters (`ccron key new`).
    #[arg(long)]
    pub key_file: PathBuf,
    /// The request number (each executes once per key; default: the current Unix ms).
    #[arg(long)]
    pub number: Option<u64>,
    /// How long to wait for the result, ms.
    #[arg(long, default_value_t = 15_000)]
    pub wait_ms: u64,
}

/// `ccron schedules ...`.
#[derive(Debug, Subcommand)]
pub enum Schedules {
    /// List schedules (filters combine).
    List {
        /// Nodes and output.
        #[command(flatten)]
        common: Common,
        /// Owner: host or client:N.
        #[arg(long)]
        owner: Option<String>,
        /// The book's component.
        #[arg(long)]
        component: Option<u32>,
        /// Handler name.
        #[arg(long)]
        handler: Option<String>,
        /// Routing topic.
        #[arg(long)]
        topic: Option<String>,
        /// Paused (true) or not (false).
        #[arg(long)]
        paused: Option<bool>,
        /// Parked (true) or not (false).
        #[arg(long)]
        parked: Option<bool>,
        /// Only ids above this one (the cursor a previous page printed).
        #[arg(long, default_value_t = 0)]
        after: u64,
        /// Most schedules and table entries (at most 256).
        #[arg(long, default_value_t = 0)]
        limit: usize,
        /// Only the book's schedules (book) or only the cron table entries (entry).
        #[arg(long, value_enum)]
        kind: Option<KindArg>,
        /// Continue the table entries at COMPONENT:POSITION (the cursor a previous page
        /// printed; skips the book's schedules).
        #[arg(long)]
        entries_from: Option<String>,
    },
    /// Everything about one schedule (or cron table entry).
    Describe {
        /// Nodes and output.
        #[command(flatten)]
        common: Common,
        /// Id, key (key:NAME), or a cron table entry (entry:COMPONENT:POSITION).
        target: String,
        /// Upcoming instants shown.
        #[arg(long, default_value_t = 5)]
        preview: usize,
    },
    /// The next instants of one schedule (or cron table entry), in its zone.
    Preview {
        /// Nodes and output.
        #[command(flatten)]
        common: Common,
        /// Id, key (key:NAME), or a cron table entry (entry:COMPONENT:POSITION).
        target: String,
        /// How many (at most 32).
        #[arg(long, default_value_t = 10)]
        count: usize,
    },
    /// Recent runs and dead runs of one schedule.
    History {
        /// Nodes and output.
        #[command(flatten)]
        common: Common,
        /// Id, or key (key:NAME).
        target: String,
    },
    /// Pause a schedule (it keeps its phase).
    Pause {
        /// Nodes and output.
        #[command(flatten)]
        common: Common,
        /// Signing.
        #[command(flatten)]
        signed: Signed,
        /// Id, or key (key:NAME).
        target: String,
    },
    /// Resume a paused schedule.
    Resume {
        /// Nodes and output.
        #[command(flatten)]
        common: Common,
        /// Signing.
        #[command(flatten)]
        signed: Signed,
        /// Id, or key (key:NAME).
        target: String,
    },
    /// Cancel (remove) a schedule.
    Cancel {
        /// Nodes and output.
        #[command(flatten)]
        common: Common,
        /// Signing.
        #[command(flatten)]
        signed: Signed,
        /// Id, or key (key:NAME).
        target: String,
    },
    /// Run a recurring schedule once now (outside its phase; its owner or an admin).
    Trigger {
        /// Nodes and output.
        #[command(flatten)]
        common: Common,
        /// Signing.
        #[command(flatten)]
        signed: Signed,
        /// Id, or key (key:NAME).
        target: String,
    },
    /// Run a recurring schedule's occurrences in a past window again (at most 1,000).
    Backfill {
        /// Nodes and output.
        #[command(flatten)]
        common: Common,
        /// Signing.
        #[command(flatten)]
        signed: Signed,
        /// Id, or key (key:NAME).
        target: String,
        /// The window's first instant: RFC 3339 or Unix ms.
        #[arg(long)]
        from: String,
        /// Its last instant (inclusive): RFC 3339 or Unix ms.
        #[arg(long)]
        to: String,
        /// The backfill's own overlap policy: what each of its runs does while the backfill's
        /// previous run has no result yet (sends `BackfillWith`; without it, the plain
        /// `Backfill`, which runs them regardless: `allow-all`).
        #[arg(long, value_enum)]
        overlap: Option<OverlapArg>,
    },
}

/// Which kind of schedule `schedules list` shows (`ccron::schedule::query::ListKind`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum KindArg {
    /// The book's schedules.
    Book,
    /// The cron table entries.
    Entry,
}

impl From<KindArg> for ListKind {
    fn from(k: KindArg) -> Self {
        match k {
            KindArg::Book => ListKind::Book,
            KindArg::Entry => ListKind::Entry,
        }
    }
}

/// An overlap policy on the command line (`ccron::schedule::Overlap`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OverlapArg {
    /// Skip a run while the previous one has no result.
    Skip,
    /// Keep one run buffered, skip the rest.
    BufferOne,
    /// Buffer runs (bounded), run them in order.
    BufferAll,
    /// Run regardless (runs may overlap).
    AllowAll,
}

impl From<OverlapArg> for Overlap {
    fn from(o: OverlapArg) -> Self {
        match o {
            OverlapArg::Skip => Overlap::Skip,
            OverlapArg::BufferOne => Overlap::BufferOne,
            OverlapArg::BufferAll => Overlap::BufferAll,
            OverlapArg::AllowAll => Overlap::AllowAll,
        }
    }
}

/// The request `ccron schedules backfill` sends: `BackfillWith` when an overlap policy is
/// given, the plain `Backfill` otherwise.
pub fn backfill_request(
    target: Target,
    from_ms: i64,
    to_ms: i64,
    overlap: Option<OverlapArg>,
) -> ScheduleRequest {
    match overlap {
        Some(o) => ScheduleRequest::BackfillWith {
            target,
            from_ms,
            to_ms,
            overlap: o.into(),
        },
        None => ScheduleRequest::Backfill {
            target,
            from_ms,
            to_ms,
        },
    }
}

/// `ccron cluster ...`.
#[derive(Debug, Subcommand)]
pub enum Cluster {
    /// The book and outbox (by quorum) and each node's tick pool.
    Status {
        /// Nodes and output.
        #[command(flatten)]
        common: Common,
    },
}

/// `ccron key ...`.
#[derive(Debug, Subcommand)]
pub enum Key {
    /// Write a new operator key (64 hex characters, mode 0600).
    New {
        /// Where to write it (refused if it exists).
        #[arg(long)]
        out: PathBuf,
    },
    /// Print a key's public key and the client id the ledger sees.
    Show {
        /// The key file.
        #[arg(long)]
        key_file: PathBuf,
    },
}

/// Parses a cron table entry `TARGET` (`entry:COMPONENT:POSITION`): `None` when `s` does not
/// name one.
///
/// # Errors
/// [`CliError::Args`] for `entry:` followed by anything but two numbers.
pub fn parse_entry_target(s: &str) -> Result<Option<(u32, u32)>, CliError> {
    let Some(rest) = s.strip_prefix("entry:") else {
        return Ok(None);
    };
    let c = ccron_http::schedules::parse_cursor(rest)
        .map_err(|e| CliError::Args(format!("{s:?}: {e}")))?;
    Ok(Some((c.component, c.position)))
}

/// Parses a `TARGET`: a number is an id, `key:NAME` or any other text a key.
pub fn parse_target(s: &str) -> Target {
    if let Some(k) = s.strip_prefix("key:") {
        return Target::Key(k.to_string());
    }
    match s.parse() {
        Ok(id) => Target::Id(id),
        Err(_) => Target::Key(s.to_string()),
    }
}

fn target_text(t: &Target) -> String {
    match t {
        Target::Id(id) => format!("schedule {id}"),
        Target::Key(k) => format!("schedule with key {k:?}"),
    }
}

/// The inputs a command takes from the process (injected, so tests pass their own).
#[derive(Debug, Clone, Copy)]
pub struct Env {
    /// The current Unix time, ms (the default request number).
    pub now_ms: u64,
    /// 32 random bytes (for `key new`).
    pub entropy: [u8; 32],
}

/// Runs `cli`; returns what to print.
///
/// # Errors
/// [`CliError`].
pub async fn run(cli: Cli, env: Env) -> Result<String, CliError> {
    match cli.command {
        Command::Schedules(s) => schedules(s, env).await,
        Command::Cluster(Cluster::Status { common }) => cluster_status(&common).await,
        Command::Key(k) => key(k, env),
        Command::Relay(args) => relay::relay(args, env).await,
    }
}

async fn describe_read(
    common: &Common,
    target: &str,
    preview: usize,
) -> Result<(u64, Box<ccron::schedule::query::ScheduleDetail>), CliError> {
    let target = parse_target(target);
    let got = common
        .reader()?
        .read(&ScheduleQuery::Describe {
            target: target.clone(),
            preview,
        })
        .await?;
    match got.body {
        QueryBody::Describe(Some(d)) => Ok((got.at_height, d)),
        QueryBody::Describe(None) => Err(CliError::NotFound(format!(
            "no {} at height {}",
            target_text(&target),
            got.at_height
        ))),
        _ => Err(CliError::Disagreement(
            "the nodes answered another query".into(),
        )),
    }
}

async fn entry_read(
    common: &Common,
    (component, position): (u32, u32),
    preview: usize,
) -> Result<(u64, Box<EntryDetail>), CliError> {
    let got = match common
        .reader()?
        .read(&ScheduleQuery::DescribeEntry {
            component,
            position,
            preview,
        })
        .await
    {
        Ok(got) => got,
        Err(ScheduleReadError::Unreachable { ref answers, .. }) if no_book(answers) => {
            return Err(CliError::NotFound(
                "the nodes serve no cron table entries (404: their ledger keeps neither a book \
                 nor tables, or they answer query format 4 or older)"
                    .into(),
            ));
        }
        Err(e) => return Err(e.into()),
    };
    match got.body {
        QueryBody::Entry(Some(d)) => Ok((got.at_height, d)),
        QueryBody::Entry(None) => Err(CliError::NotFound(format!(
            "no cron table entry at component {component} position {position} at height {}",
            got.at_height
        ))),
        _ => Err(CliError::Disagreement(
            "the nodes answered another query".into(),
        )),
    }
}

async fn schedules(s: Schedules, env: Env) -> Result<String, CliError> {
    use render::View;
    match s {
        Schedules::List {
            common,
            owner,
            component,
            handler,
            topic,
            paused,
            parked,
            after,
            limit,
            kind,
            entries_from,
        } => {
            let entries_from = entries_from
                .map(|c| ccron_http::schedules::parse_cursor(&c))
                .transpose()
                .map_err(|e| CliError::Args(format!("--entries-from: {e}")))?;
            let owner = owner
                .map(|o| ccron_http::schedules::parse_principal(&o))
                .transpose()
                .map_err(CliError::Args)?;
            let filter = ScheduleFilter {
                component,
                owner,
                handler,
                topic,
                paused,
                parked,
                after,
                limit,
                kind: kind.map(ListKind::from),
                entries_from,
            };
            let got = common.reader()?.read(&ScheduleQuery::List(filter)).await?;
            match got.body {
                QueryBody::List(l) => Ok(render::list(got.at_height, &l, common.json)),
                _ => Err(CliError::Disagreement(
                    "the nodes answered another query".into(),
                )),
            }
        }
        Schedules::Describe {
            common,
            target,
            preview,
        } => {
            if let Some(e) = parse_entry_target(&target)? {
                let (h, d) = entry_read(&common, e, preview).await?;
                return Ok(render::entry_detail(h, &d, View::Describe, common.json));
            }
            let (h, d) = describe_read(&common, &target, preview).await?;
            Ok(render::detail(h, &d, View::Describe, common.json))
        }
        Schedules::Preview {
            common,
            target,
            count,
        } => {
            if let Some(e) = parse_entry_target(&target)? {
                let (h, d) = entry_read(&common, e, count).await?;
                return Ok(render::entry_detail(h, &d, View::Preview, common.json));
            }
            let (h, d) = describe_read(&common, &target, count).await?;
            Ok(render::detail(h, &d, View::Preview, common.json))
        }
        Schedules::History { common, target } => {
            if parse_entry_target(&target)?.is_some() {
                return Err(CliError::Args(
                    "a cron table entry keeps no run history: `describe` shows its fire count"
                        .into(),
                ));
            }
            let (h, d) = describe_read(&common, &target, 0).await?;
            Ok(render::detail(h, &d, View::History, common.json))
        }
        Schedules::Pause {
            common,
            signed,
            target,
        } => {
            mutate(
                &common,
                &signed,
                ScheduleRequest::Pause(parse_target(&target)),
                env,
            )
            .await
        }
        Schedules::Resume {
            common,
            signed,
            target,
        } => {
            mutate(
                &common,
                &signed,
                ScheduleRequest::Resume(parse_target(&target)),
                env,
            )
            .await
        }
        Schedules::Cancel {
            common,
            signed,
            target,
        } => {
            mutate(
                &common,
                &signed,
                ScheduleRequest::Cancel(parse_target(&target)),
                env,
            )
            .await
        }
        Schedules::Trigger {
            common,
            signed,
            target,
        } => {
            mutate(
                &common,
                &signed,
                ScheduleRequest::TriggerNow(parse_target(&target)),
                env,
            )
            .await
        }
        Schedules::Backfill {
            common,
            signed,
            target,
            from,
            to,
            overlap,
        } => {
            let req = backfill_request(
                parse_target(&target),
                parse_instant(&from)?,
                parse_instant(&to)?,
                overlap,
            );
            mutate(&common, &signed, req, env).await
        }
    }
}

/// An instant given as RFC 3339 (`2026-01-01T00:00:00Z`) or Unix ms.
pub fn parse_instant(s: &str) -> Result<i64, CliError> {
    if let Ok(ms) = s.parse::<i64>() {
        return Ok(ms);
    }
    ccron::cron::parse_rfc3339_ms(s)
        .map_err(|e| CliError::Args(format!("{s:?} is neither Unix ms nor RFC 3339: {e}")))
}

async fn mutate(
    common: &Common,
    signed: &Signed,
    req: ScheduleRequest,
    env: Env,
) -> Result<String, CliError> {
    let quorum = common.quorum();
    if quorum == 0 || quorum > common.nodes.len() {
        return Err(CliError::Args(format!(
            "quorum {quorum} of {} nodes",
            common.nodes.len()
        )));
    }
    let key = submit::read_key(&signed.key_file)?;
    let http = http::Http::new(common.timeout_ms);
    let number = signed.number.unwrap_or(env.now_ms);
    let out = submit::submit(
        &http,
        &common.nodes,
        quorum,
        &key,
        number,
        &req,
        signed.wait_ms,
    )
    .await?;
    let ok = out.reply.starts_with("ok");
    let text = if common.json {
        serde_json::json!({
            "client": out.client,
            "number": out.number,
            "height": out.height,
            "reply": out.reply,
            "agreeing": out.agreeing,
            "ok": ok,
        })
        .to_string()
    } else {
        format!(
            "{} (request {} of client {}, executed at height {}, {} nodes agree)\n",
            out.reply, out.number, out.client, out.height, out.agreeing
        )
    };
    if ok {
        Ok(text)
    } else {
        Err(CliError::Refused(text.trim_end().to_string()))
    }
}

async fn cluster_status(common: &Common) -> Result<String, CliError> {
    let reader = common.reader()?;
    let book = reader.read(&ScheduleQuery::Book).await;
    let outbox = reader.read(&ScheduleQuery::Outbox).await?;
    let book = match book {
        Ok(b) => match b.body {
            QueryBody::Book(s) => Some(s),
            _ => None,
        },
        // Every node answered 404: the ledger keeps no book.
        Err(ScheduleReadError::Unreachable { ref answers, .. }) if no_book(answers) => None,
        Err(e) => return Err(e.into()),
    };
    let out = match outbox.body {
        QueryBody::Outbox(o) => o,
        _ => None,
    };
    let http = http::Http::new(common.timeout_ms);
    let mut pools = Vec::new();
    for n in &common.nodes {
        let url = format!("{}/v1/ticks", n.trim_end_matches('/'));
        let r = match http.send(Method::GET, &url, Vec::new()).await {
            Ok((200, b)) => serde_json::from_slice(&b).map_err(|e| e.to_string()),
            Ok((code, _)) => Err(format!("status {code}")),
            Err(e) => Err(e),
        };
        pools.push((n.clone(), r));
    }
    Ok(render::cluster(
        outbox.at_height,
        book.as_ref(),
        out.as_ref(),
        &pools,
        common.json,
    ))
}

fn key(k: Key, env: Env) -> Result<String, CliError> {
    match k {
        Key::New { out } => {
            let hex = ccron_node::types::hex(&env.entropy);
            let mut opts = std::fs::OpenOptions::new();
            opts.write(true).create_new(true);
            #[cfg(unix)]
            {
                use std::os::unix::fs::OpenOptionsExt;
                opts.mode(0o600);
            }
            use std::io::Write;
            opts.open(&out)
                .and_then(|mut f| f.write_all(format!("{hex}\n").as_bytes()))
                .map_err(|e| CliError::KeyFile(format!("{}: {e}", out.display())))?;
            let key = ed25519_dalek::SigningKey::from_bytes(&env.entropy);
            Ok(show(&key))
        }
        Key::Show { key_file } => Ok(show(&submit::read_key(&key_file)?)),
    }
}

fn show(key: &ed25519_dalek::SigningKey) -> String {
    let public = key.verifying_key().to_bytes();
    format!(
        "public key {}\nclient id  {}\n",
        ccron_node::types::hex(&public),
        ccron_node::request::client_id(&public)
    )
}
