//! The time-service attacks: a lying clock (`LyingClock`), and a primary that omits its time
//! certificate (`TimeOmit`), attaches the oldest usable one to freeze time (`TimeReplay`), or
//! omits it and stamps its batches ahead of its clock (`TimeOwn`). Each is a
//! [`TimePolicy`]: what the replica writes into what it signs (docs/time-service.md).

use crate::replica::hooks::{Strategy, TimePolicy};

/// Signs the clocks and picks the certificates its policy says.
pub(super) struct TimeLiar(pub(super) TimePolicy);

impl Strategy for TimeLiar {
    fn time_policy(&self) -> TimePolicy {
        self.0
    }
}
