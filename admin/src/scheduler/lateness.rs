//! Publication lateness over the last minute (publish − fire time), for the console's scheduler
//! health: each admin writes its figures into its `admins` row at every lease round.
//!
//! Sixty one-second slots, each a histogram with buckets about 10 % wide (1 ms up to an hour,
//! longer in the last one), so the figures cost a fixed 40 KB whatever the rate and a percentile
//! is exact to within its bucket (reported as the bucket's upper bound, rounded up to a
//! millisecond).

use std::sync::Mutex;

/// Seconds kept.
const SLOTS: usize = 60;
/// Bucket `i` holds lateness up to `GROWTH^i` ms (bucket 0: up to 1 ms, including early).
const GROWTH: f64 = 1.1;
const BUCKETS: usize = 160;

/// The last minute's publication lateness, by second.
#[derive(Debug)]
pub struct LatenessWindow {
    slots: Mutex<Vec<Slot>>,
}

#[derive(Debug, Clone)]
struct Slot {
    /// The Unix second this slot counts; a slot of another second is stale.
    second: i64,
    count: u64,
    max_ms: i64,
    buckets: [u32; BUCKETS],
}

impl Slot {
    fn empty() -> Self {
        Slot {
            second: i64::MIN,
            count: 0,
            max_ms: 0,
            buckets: [0; BUCKETS],
        }
    }
}

/// The figures of the last minute.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LatenessSummary {
    /// Triggers published.
    pub count: u64,
    pub p50_ms: i64,
    pub p99_ms: i64,
    pub max_ms: i64,
}

fn bucket_of(ms: i64) -> usize {
    if ms <= 1 {
        return 0;
    }
    let i = ((ms as f64).ln() / GROWTH.ln()).ceil() as usize;
    i.min(BUCKETS - 1)
}

fn upper_bound_ms(bucket: usize) -> i64 {
    GROWTH.powi(bucket as i32).ceil() as i64
}

impl Default for LatenessWindow {
    fn default() -> Self {
        LatenessWindow {
            slots: Mutex::new(vec![Slot::empty(); SLOTS]),
        }
    }
}

impl LatenessWindow {
    /// Counts triggers published at Unix second `now_s`, `lateness_ms` late each.
    pub fn record(&self, now_s: i64, lateness_ms: impl IntoIterator<Item = i64>) {
        let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        let slot = &mut slots[now_s.rem_euclid(SLOTS as i64) as usize];
        if slot.second != now_s {
            *slot = Slot::empty();
            slot.second = now_s;
        }
        for ms in lateness_ms {
            let ms = ms.max(0);
            slot.count += 1;
            slot.max_ms = slot.max_ms.max(ms);
            slot.buckets[bucket_of(ms)] += 1;
        }
    }

    /// The figures of the sixty seconds up to Unix second `now_s`.
    pub fn summary(&self, now_s: i64) -> LatenessSummary {
        let slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        let mut sum = LatenessSummary::default();
        let mut buckets = [0u64; BUCKETS];
        for s in slots
            .iter()
            .filter(|s| s.second <= now_s && s.second > now_s - SLOTS as i64)
        {
            sum.count += s.count;
            sum.max_ms = sum.max_ms.max(s.max_ms);
            for (b, n) in buckets.iter_mut().zip(s.buckets.iter()) {
                *b += u64::from(*n);
            }
        }
        if sum.count == 0 {
            return sum;
        }
        let rank = |p: f64| ((sum.count as f64) * p).ceil().max(1.0) as u64;
        let at = |r: u64| {
            let mut seen = 0;
            for (i, n) in buckets.iter().enumerate() {
                seen += n;
                if seen >= r {
                    if i == BUCKETS - 1 {
                        return sum.max_ms;
                    }
                    return upper_bound_ms(i).min(sum.max_ms);
                }
            }
            sum.max_ms
        };
        sum.p50_ms = at(rank(0.5));
        sum.p99_ms = at(rank(0.99));
        sum
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_within_a_bucket_and_never_above_the_max() {
        let w = LatenessWindow::default();
        // 1..=1000 ms, one each, over ten seconds.
        for s in 0..10 {
            w.record(100 + s, (1..=100).map(|i| s * 100 + i));
        }
        let sum = w.summary(109);
        assert_eq!(sum.count, 1000);
        assert_eq!(sum.max_ms, 1000);
        assert!((500..=550).contains(&sum.p50_ms), "{sum:?}");
        assert!((990..=1000).contains(&sum.p99_ms), "{sum:?}");
    }

    #[test]
    fn only_the_last_minute_counts() {
        let w = LatenessWindow::default();
        w.record(1_000, [5_000]);
        w.record(1_030, [3, 4]);
        assert_eq!(w.summary(1_040).count, 3);
        assert_eq!(w.summary(1_059).max_ms, 5_000);
        // Second 1,000 has left the window; its slot is reused a minute later.
        let later = w.summary(1_060);
        assert_eq!((later.count, later.max_ms), (2, 4));
        w.record(1_060, [7]);
        assert_eq!(w.summary(1_060).count, 3);
        assert_eq!(w.summary(1_200), LatenessSummary::default());
    }

    #[test]
    fn early_and_huge_values_are_counted() {
        let w = LatenessWindow::default();
        w.record(5, [-3, 0, 10_000_000_000]);
        let s = w.summary(5);
        assert_eq!(s.count, 3);
        assert_eq!(s.p50_ms, 1);
        assert_eq!(s.max_ms, 10_000_000_000);
        assert_eq!(s.p99_ms, 10_000_000_000);
    }
}
