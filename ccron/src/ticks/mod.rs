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

mod driver;
mod throttle;
mod timers;

pub use driver::{
    Clock, DEFAULT_CHANNEL_CAPACITY, DEFAULT_POLL_PERIOD_MS, DriverConfig, DriverStats,
    ManualClock, SystemClock, TickInternalMsg, TicksGenerator,
};
pub use throttle::{PendingTick, ThrottleStats, TickDecision, TickThrottle};
pub use timers::TickTimers;
