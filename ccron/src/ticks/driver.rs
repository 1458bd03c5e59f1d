//! The thin thread driver of the TicksGenerator: the only thread ccron spawns.
//!
//! It owns nothing but plumbing: the timers live in a [`TickTimers`] behind a mutex (so `start`,
//! `stop` and `is_generating` can be called from any thread), time comes from an injected
//! [`Clock`], and firings leave through a bounded crossbeam channel. A full channel never blocks the
//! generator: the tick is counted and traced, and the next period produces another one (ticks are
//! idempotent triggers, and the replica's throttle would drop a backlog anyway).

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_channel::{RecvTimeoutError, Sender, TrySendError};

use super::TickTimers;
use crate::tick::{ComponentId, TimeMs};

/// The reference poll period: the generator looks at its timers once a second.
pub const DEFAULT_POLL_PERIOD_MS: u64 = 1_000;

/// A default bound for the tick channel: ample for one message per component per poll.
pub const DEFAULT_CHANNEL_CAPACITY: usize = 1_024;

/// The internal message a firing timer sends to the replica's messaging thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TickInternalMsg {
    /// The component whose timer fired.
    pub component: ComponentId,
}

/// A source of monotonic milliseconds, injected so tests control time.
pub trait Clock: Send + Sync + 'static {
    /// Milliseconds on a monotonic time line (the origin is arbitrary but fixed).
    fn now_ms(&self) -> TimeMs;
}

/// The real clock: milliseconds elapsed since the clock was created (monotonic).
#[derive(Debug, Clone, Copy)]
pub struct SystemClock {
    origin: std::time::Instant,
}

impl SystemClock {
    /// A clock whose zero is now.
    pub fn new() -> Self {
        // The one real clock read of ccron: this type exists to be the thin driver's clock.
        #[allow(clippy::disallowed_methods)]
        let origin = std::time::Instant::now();
        Self { origin }
    }
}

impl Default for SystemClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for SystemClock {
    fn now_ms(&self) -> TimeMs {
        // The one real clock read of ccron (see `SystemClock::new`).
        #[allow(clippy::disallowed_methods)]
        let elapsed = std::time::Instant::now().saturating_duration_since(self.origin);
        i64::try_from(elapsed.as_millis()).unwrap_or(i64::MAX)
    }
}

/// A clock the test sets by hand; clones share the same time.
#[derive(Debug, Clone, Default)]
pub struct ManualClock {
    now_ms: Arc<AtomicI64>,
}

impl ManualClock {
    /// A manual clock reading `now_ms`.
    pub fn new(now_ms: TimeMs) -> Self {
        Self {
            now_ms: Arc::new(AtomicI64::new(now_ms)),
        }
    }

    /// Sets the time.
    pub fn set_ms(&self, now_ms: TimeMs) {
        self.now_ms.store(now_ms, Ordering::SeqCst);
    }

    /// Moves the time forward by `delta_ms` (saturating).
    pub fn advance_ms(&self, delta_ms: u64) {
        let delta = i64::try_from(delta_ms).unwrap_or(i64::MAX);
        // fetch_update never fails with a closure that always returns Some.
        let _ = self
            .now_ms
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |t| {
                Some(t.saturating_add(delta))
            });
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> TimeMs {
        self.now_ms.load(Ordering::SeqCst)
    }
}

/// Configuration of the driver thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DriverConfig {
    /// How often the thread evaluates its timers (the tick granularity). Zero is treated as 1 ms.
    pub poll_period_ms: u64,
}

impl Default for DriverConfig {
    fn default() -> Self {
        Self {
            poll_period_ms: DEFAULT_POLL_PERIOD_MS,
        }
    }
}

/// Counters of the driver thread.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DriverStats {
    /// Evaluations of the timers performed.
    pub polls: u64,
    /// Tick messages delivered to the channel.
    pub sent: u64,
    /// Tick messages dropped because the channel was full.
    pub dropped_full: u64,
}

#[derive(Debug, Default)]
struct SharedStats {
    polls: AtomicU64,
    sent: AtomicU64,
    dropped_full: AtomicU64,
}

/// Control messages to the thread.
#[derive(Debug, Clone, Copy)]
enum Control {
    /// Evaluate now instead of waiting for the poll period.
    Wake,
    /// Exit.
    Shutdown,
}

/// The TicksGenerator: timers plus the background thread that polls them.
///
/// Dropping it stops the thread and joins it.
#[derive(Debug)]
pub struct TicksGenerator<C: Clock> {
    timers: Arc<Mutex<TickTimers>>,
    clock: Arc<C>,
    stats: Arc<SharedStats>,
    control: Sender<Control>,
    thread: Option<JoinHandle<()>>,
}

impl<C: Clock> TicksGenerator<C> {
    /// Spawns the generator thread. It sends a [`TickInternalMsg`] on `sink` for every timer due at
    /// each poll. `sink` should be bounded; the thread never blocks on it.
    ///
    /// # Errors
    /// The OS error if the thread cannot be spawned.
    pub fn spawn(
        clock: C,
        config: DriverConfig,
        sink: Sender<TickInternalMsg>,
    ) -> std::io::Result<Self> {
        let timers = Arc::new(Mutex::new(TickTimers::new()));
        let clock = Arc::new(clock);
        let stats = Arc::new(SharedStats::default());
        // Capacity 1: a pending wake already guarantees an evaluation; extra wakes are redundant.
        let (control_tx, control_rx) = crossbeam_channel::bounded::<Control>(1);
        let poll = Duration::from_millis(config.poll_period_ms.max(1));
        let thread = {
            let timers = Arc::clone(&timers);
            let clock = Arc::clone(&clock);
            let stats = Arc::clone(&stats);
            std::thread::Builder::new()
                .name("ccron-ticks".into())
                .spawn(move || {
                    loop {
                        match control_rx.recv_timeout(poll) {
                            Ok(Control::Shutdown) | Err(RecvTimeoutError::Disconnected) => break,
                            Ok(Control::Wake) | Err(RecvTimeoutError::Timeout) => {}
                        }
                        let now_ms = clock.now_ms();
                        let due = lock(&timers).evaluate(now_ms);
                        let delivered = deliver(&sink, &due, &stats);
                        // Counted after delivery so an observer of `polls` sees its effects.
                        stats.polls.fetch_add(1, Ordering::SeqCst);
                        if !delivered {
                            tracing::warn!("ticks: tick channel disconnected; generator exits");
                            break;
                        }
                    }
                })?
        };
        Ok(Self {
            timers,
            clock,
            stats,
            control: control_tx,
            thread: Some(thread),
        })
    }

    /// Starts (or restarts, resetting the phase) ticking for `component` every `period_ms`,
    /// reading the driver's clock for `now`. A zero period stops it.
    pub fn start(&self, component: ComponentId, period_ms: u64) {
        let now_ms = self.clock.now_ms();
        lock(&self.timers).start(component, period_ms, now_ms);
    }

    /// Stops ticking for `component`. Returns whether it was generating.
    pub fn stop(&self, component: ComponentId) -> bool {
        lock(&self.timers).stop(component)
    }

    /// Whether `component` is generating.
    pub fn is_generating(&self, component: ComponentId) -> bool {
        lock(&self.timers).is_generating(component)
    }

    /// Asks the thread to evaluate its timers now rather than at the end of the poll period.
    /// Useful with a [`ManualClock`]; harmless otherwise.
    pub fn wake(&self) {
        // A full control channel already holds a wake or a shutdown: either way, nothing to add.
        let _ = self.control.try_send(Control::Wake);
    }

    /// The driver's counters.
    pub fn stats(&self) -> DriverStats {
        DriverStats {
            polls: self.stats.polls.load(Ordering::SeqCst),
            sent: self.stats.sent.load(Ordering::Relaxed),
            dropped_full: self.stats.dropped_full.load(Ordering::Relaxed),
        }
    }

    /// Whether the thread is still running.
    pub fn is_running(&self) -> bool {
        self.thread.as_ref().is_some_and(|t| !t.is_finished())
    }

    /// Stops the thread and joins it. Idempotent; also done on drop.
    pub fn stop_thread(&mut self) {
        if let Some(thread) = self.thread.take() {
            // The send blocks at most until the thread drains its control channel, which it does
            // within one poll period; a disconnected channel means the thread already left.
            let _ = self.control.send(Control::Shutdown);
            if thread.join().is_err() {
                tracing::error!("ticks: generator thread panicked");
            }
        }
    }
}

impl<C: Clock> Drop for TicksGenerator<C> {
    fn drop(&mut self) {
        self.stop_thread();
    }
}

/// Locks the timers; a poisoned lock still holds consistent timers (every mutation is a single
/// map operation), so the guard is recovered instead of propagating the panic.
fn lock(timers: &Mutex<TickTimers>) -> MutexGuard<'_, TickTimers> {
    timers.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Sends one message per due component. Returns false when the receiver is gone.
fn deliver(sink: &Sender<TickInternalMsg>, due: &[ComponentId], stats: &SharedStats) -> bool {
    for &component in due {
        match sink.try_send(TickInternalMsg { component }) {
            Ok(()) => {
                stats.sent.fetch_add(1, Ordering::Relaxed);
            }
            Err(TrySendError::Full(_)) => {
                stats.dropped_full.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(component, "ticks: tick channel full; tick dropped");
            }
            Err(TrySendError::Disconnected(_)) => return false,
        }
    }
    true
}
