//! What a node publishes after each executed height for its read endpoints and its metrics,
//! shared between the executing thread and the HTTP server: the committed schedule book and
//! outbox state ([`ccron_http::PublishedBook`], served by the schedule read router), the last
//! status, the height of the last snapshot, and the lateness of fires.
//!
//! The node core calls [`NodeReads::publish`] after every executed height (the book is cloned
//! only when the application's state digest changed), [`NodeReads::observe_fires`] after every
//! decided block, [`NodeReads::set_status`] with every status it writes and
//! [`NodeReads::snapshot_written`] after every snapshot. Everything here is observation: none
//! of it feeds back into replicated state.

use std::sync::{Arc, Mutex};

use ccron::Due;
use ccron::host::{Application, Digest32, FireNote};

use crate::api::lock;
use crate::metrics::Lateness;
use crate::records::NodeStatus;

/// The node's published read state (cheap to clone: shared handles).
#[derive(Debug, Clone)]
pub struct NodeReads {
    /// The committed book and outbox state, as of the last executed height.
    pub book: ccron_http::PublishedBook,
    status: Arc<Mutex<NodeStatus>>,
    last_snapshot: Arc<Mutex<Option<(u64, i64)>>>,
    lateness: Lateness,
}

impl NodeReads {
    /// Nothing published yet, for validator `index`.
    pub fn new(index: u64) -> Self {
        Self {
            book: ccron_http::PublishedBook::new(index),
            status: Arc::default(),
            last_snapshot: Arc::default(),
            lateness: Lateness::new(),
        }
    }

    /// Publishes `app`'s book, outbox state and cron table entries after executing `height`
    /// (state digest `digest`).
    pub fn publish<A: Application>(&self, app: &A, height: u64, digest: Digest32) {
        self.book.publish_with_entries(
            app.schedule_book(),
            app.outbox(),
            || app.table_entries(),
            height,
            digest,
        );
    }

    /// Records the lateness of the fires of a decided block: agreed time minus due, and the
    /// node's wall clock when it executed minus due (only fires with a time due).
    pub fn observe_fires(&self, agreed_ms: i64, wall_ms: i64, fires: &[FireNote]) {
        for f in fires {
            if let Some(Due::Time(due)) = f.due {
                self.lateness.observe(
                    f.component,
                    agreed_ms.saturating_sub(due),
                    wall_ms.saturating_sub(due),
                );
            }
        }
    }

    /// The status the node just wrote.
    pub fn set_status(&self, status: &NodeStatus) {
        *lock(&self.status) = status.clone();
    }

    /// A snapshot was written at `height`, at wall time `wall_ms`.
    pub fn snapshot_written(&self, height: u64, wall_ms: i64) {
        *lock(&self.last_snapshot) = Some((height, wall_ms));
    }

    /// The last status written.
    pub fn status(&self) -> NodeStatus {
        lock(&self.status).clone()
    }

    /// The height and wall time of the last snapshot this process wrote.
    pub fn last_snapshot(&self) -> Option<(u64, i64)> {
        *lock(&self.last_snapshot)
    }

    /// The lateness histograms.
    pub fn lateness(&self) -> &Lateness {
        &self.lateness
    }
}
