//! TicksGenerator: the per-replica source of tick requests.
//!
//! Three layers, from pure to threaded:
//! - [`TickTimers`]: the pure timer core. Per component a period and a next expiry; `evaluate(now)`
//!   returns the components due, in the order they were started. No clock, no thread.
//! - [`TickThrottle`]: the pure throttle the replica's messaging thread consults. At most one tick
//!   per component is pending anywhere (external queue or consensus), every exit path clears the
//!   mark, and components never crowd each other out.
//! - [`TicksGenerator`]: the thin thread driver. It polls the timers every poll period against an
//!   injected [`Clock`] and sends [`TickInternalMsg`]s through a bounded crossbeam channel.
//!
//! The path of one tick (the replica owns every step after the channel):
//!
//! ```text
//! TicksGenerator thread --TickInternalMsg--> internal queue --> TickThrottle::on_internal_tick
//!   --Send{req_seq}--> external queue --pop--> on_tick_popped --> consensus
//!   --> on_committed / on_executed / on_dropped / on_view_change_cleared
//! ```
//!
//! ```
//! use ccron::ticks::{TickDecision, TickThrottle, TickTimers};
//!
//! let mut timers = TickTimers::new();
//! timers.start(7, 1_000, 0); // component 7 ticks every second, first at t = 1000 ms
//! assert_eq!(timers.evaluate(1_000), vec![7]);
//!
//! let mut throttle = TickThrottle::new();
//! let mut next_req_seq = 0;
//! let mut alloc = || {
//!     next_req_seq += 1;
//!     next_req_seq
//! };
//! let TickDecision::Send { req_seq } = throttle.on_internal_tick(7, 1_000, &mut alloc) else {
//!     unreachable!("nothing was pending");
//! };
//! // A second tick while the first is pending is dropped.
//! assert!(matches!(
//!     throttle.on_internal_tick(7, 2_000, &mut alloc),
//!     TickDecision::Throttled { .. }
//! ));
//! throttle.on_tick_popped(7, req_seq);
//! throttle.on_committed(7, req_seq);
//! assert!(!throttle.is_pending(7));
//! ```

mod driver;
mod throttle;
mod timers;

pub use driver::{
    Clock, DEFAULT_CHANNEL_CAPACITY, DEFAULT_POLL_PERIOD_MS, DriverConfig, DriverStats,
    ManualClock, SystemClock, TickInternalMsg, TicksGenerator,
};
pub use throttle::{PendingTick, ThrottleStats, TickDecision, TickThrottle};
pub use timers::TickTimers;
