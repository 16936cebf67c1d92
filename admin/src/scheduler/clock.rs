//! The scheduler's one time base: the database clock, as seen from this admin.
//!
//! Scan and misfire rules compare fire times with the database's `now()`; the timer must release
//! triggers by the same clock, or an admin whose clock is behind the database's misfires its own
//! pending triggers and one ahead fires them early. The offset between the two clocks is measured
//! at every lease round (the database's `now()` against the moment its answer arrived, so that
//! the estimate is never ahead of the database), and the timer reads the local clock corrected
//! by it.

use std::sync::atomic::{AtomicI64, Ordering};

use chrono::{DateTime, Duration, Utc};

/// The database clock, read locally.
#[derive(Debug, Default)]
pub struct DbClock {
    /// Database time minus local time, in microseconds.
    offset_us: AtomicI64,
}

impl DbClock {
    /// The database's time now, by the last measured offset.
    pub fn now(&self) -> DateTime<Utc> {
        let local = Utc::now();
        local.checked_add_signed(self.offset()).unwrap_or(local)
    }

    /// Database time minus local time.
    pub fn offset(&self) -> Duration {
        Duration::microseconds(self.offset_us.load(Ordering::Relaxed))
    }

    /// Records a reading of the database clock `db_now`, taken by a query sent at local time
    /// `sent` and answered at `received`. The database read its clock somewhere in between; the
    /// offset is taken as if it read it at `received`, the latest it can have, so that the clock
    /// read here is never ahead of the database's: a run is never sent before its fire time by
    /// the database's clock, at the cost of being up to the round trip late.
    pub fn observe(&self, sent: DateTime<Utc>, db_now: DateTime<Utc>, received: DateTime<Utc>) {
        debug_assert!(sent <= received);
        let offset = (db_now - received).num_microseconds().unwrap_or(0);
        let before = self.offset_us.swap(offset, Ordering::Relaxed);
        if (offset - before).abs() > 1_000_000 {
            tracing::warn!(
                offset_ms = offset / 1000,
                "this admin's clock differs from the database's; scheduling follows the database"
            );
        }
    }

    /// A clock `offset` ahead of the local one (tests).
    pub fn with_offset(offset: Duration) -> Self {
        Self {
            offset_us: AtomicI64::new(offset.num_microseconds().unwrap_or(0)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_offset_never_puts_the_clock_ahead_of_the_database() {
        let c = DbClock::default();
        let sent = Utc::now();
        let received = sent + Duration::milliseconds(20);
        // The database is 10 s ahead and read its clock 10 ms after `sent`: taken as read at
        // `received`, the clock runs 10 ms behind it, never ahead.
        c.observe(sent, sent + Duration::milliseconds(10_010), received);
        assert_eq!(c.offset(), Duration::milliseconds(9_990));
        let drift = (c.now() - Utc::now() - Duration::seconds(10)).num_milliseconds();
        assert!((-60..=0).contains(&drift), "{drift}");
    }
}
