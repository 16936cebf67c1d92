//! Validated schedules and fire-time arithmetic.
//!
//! `cadenza_schemas::Schedule` is what the API receives; [`JobSchedule::parse`] checks it once
//! (cron syntax, time zone, intervals, an instant in the future) and the result computes fire times.

use std::str::FromStr;

use cadenza_schemas::{Schedule, TriggerKind};
use chrono::{DateTime, Duration, LocalResult, TimeZone, Utc};
use chrono_tz::Tz;

use crate::quartz::QuartzCron;

/// Why a schedule was rejected; `field` names the JSON field at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct ScheduleError {
    pub field: &'static str,
    pub message: String,
}

fn err(field: &'static str, message: impl Into<String>) -> ScheduleError {
    ScheduleError {
        field,
        message: message.into(),
    }
}

/// A Quartz cron expression (parsed by the crate's `quartz` module) in a time zone, its fire
/// times moved by a fixed `offset` (the job's jitter; zero unless [`JobSchedule::jittered`]).
#[derive(Debug, Clone)]
pub struct CronSchedule {
    expr: QuartzCron,
    tz: Tz,
    offset: Duration,
}

impl CronSchedule {
    /// Accepts Quartz's 6 fields (`sec min hour day-of-month month day-of-week`), 7 with a
    /// year, or the classic 5 (which fire at second 0), with all of Quartz's syntax: `?`, `L`,
    /// `W`, `LW`, `L-n`, `#`, names. Day-of-week follows Quartz, as XXL-JOB does: `1`–`7` is
    /// Sunday–Saturday; names (`MON-FRI`) are clearer.
    pub fn parse(expr: &str, timezone: Option<&str>) -> Result<Self, ScheduleError> {
        Self::parse_with(QuartzCron::parse, expr, timezone)
    }

    /// A schedule read back from the database: stored expressions that give both day fields
    /// (accepted before Cadenza read Quartz) keep their meaning, a day matching both.
    pub fn parse_stored(expr: &str, timezone: Option<&str>) -> Result<Self, ScheduleError> {
        Self::parse_with(QuartzCron::parse_stored, expr, timezone)
    }

    fn parse_with(
        read: fn(&str) -> Result<QuartzCron, String>,
        expr: &str,
        timezone: Option<&str>,
    ) -> Result<Self, ScheduleError> {
        let parsed = read(expr)
            .map_err(|e| err("schedule.expr", format!("cron expression {expr:?} {e}")))?;
        let tz = match timezone {
            None => Tz::UTC,
            Some(name) => Tz::from_str(name).map_err(|_| {
                err(
                    "schedule.timezone",
                    format!("unknown time zone {name:?}; use an IANA name such as \"Europe/Berlin\" or \"UTC\""),
                )
            })?,
        };
        Ok(Self {
            expr: parsed,
            tz,
            offset: Duration::zero(),
        })
    }

    /// The first fire time strictly after `t`.
    ///
    /// Fire times are local wall-clock times of the job's time zone. A local time that does not
    /// exist (skipped when clocks go forward) does not fire; a local time that happens twice
    /// (when clocks go back) fires once, at its first occurrence. So during the repeated hour a
    /// job fires for the first pass only: jobs that must fire every few seconds or minutes
    /// through the change are better written in UTC or as `fix_rate`.
    ///
    /// The property test `cron_across_dst_matches_brute_force` holds it to these rules.
    ///
    /// With an offset (jitter), every fire time is the expression's plus the offset: the first
    /// after `t` is the expression's first after `t − offset`, moved.
    pub fn next_after(&self, t: DateTime<Utc>) -> Option<DateTime<Utc>> {
        if self.offset.is_zero() {
            return self.nominal_after(t);
        }
        let nominal = self.nominal_after(t.checked_sub_signed(self.offset)?)?;
        nominal.checked_add_signed(self.offset)
    }

    /// The expression's first fire time strictly after `t`, without the offset.
    fn nominal_after(&self, t: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let mut wall = t.with_timezone(&self.tz).naive_local();
        // Wall-clock times that are skipped or already passed: at most the length of one clock
        // change (a few hours), so the bound only stops a search that would never end.
        for _ in 0..100_000 {
            wall = self.expr.next_after(wall)?;
            match self.tz.from_local_datetime(&wall) {
                LocalResult::Single(at) if at.with_timezone(&Utc) > t => {
                    return Some(at.with_timezone(&Utc))
                }
                // The first pass of a repeated time; the second never fires.
                LocalResult::Ambiguous(first, _) if first.with_timezone(&Utc) > t => {
                    return Some(first.with_timezone(&Utc))
                }
                // Skipped when the clocks went forward, or passed already.
                _ => {}
            }
        }
        None
    }
}

/// A validated schedule.
#[derive(Debug, Clone)]
pub enum JobSchedule {
    Cron(Box<CronSchedule>),
    FixRate(Duration),
    FixDelay(Duration),
    Once(DateTime<Utc>),
    None,
}

/// Longest `jitter_ms`: one day.
pub const MAX_JITTER_MS: i64 = 24 * 3_600_000;

/// The offset in `[0, jitter_ms)` by which every fire time of job `job_id` is moved: the same
/// for every fire of the job, spread evenly over the range from one job id to the next (a
/// SplitMix64 hash of the id), so that jobs of one cron expression fire apart.
pub fn jitter_offset(job_id: i64, jitter_ms: i64) -> Duration {
    if jitter_ms <= 0 {
        return Duration::zero();
    }
    let mut z = (job_id as u64).wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    Duration::milliseconds((z % jitter_ms as u64) as i64)
}

/// Longest `every_ms` / `delay_ms`: 366 days (see `jobs::MAX_DURATION_MS`).
pub const MAX_INTERVAL_MS: i64 = 366 * 24 * 3_600_000;

fn interval(field: &'static str, ms: i64) -> Result<Duration, ScheduleError> {
    if !(1..=MAX_INTERVAL_MS).contains(&ms) {
        return Err(err(
            field,
            format!("must be between 1 and {MAX_INTERVAL_MS} milliseconds (366 days); got {ms}"),
        ));
    }
    Ok(Duration::milliseconds(ms))
}

impl JobSchedule {
    /// Validates a schedule as of `now` (a `once` instant must be in the future).
    pub fn parse(s: &Schedule, now: DateTime<Utc>) -> Result<Self, ScheduleError> {
        Ok(match s {
            Schedule::Cron { expr, timezone } => {
                let cron = CronSchedule::parse(expr, timezone.as_deref())?;
                if cron.next_after(now).is_none() {
                    return Err(err(
                        "schedule.expr",
                        format!("cron expression {expr:?} never fires (e.g. a date that does not exist)"),
                    ));
                }
                JobSchedule::Cron(Box::new(cron))
            }
            Schedule::FixRate { every_ms } => {
                JobSchedule::FixRate(interval("schedule.every_ms", *every_ms)?)
            }
            Schedule::FixDelay { delay_ms } => {
                JobSchedule::FixDelay(interval("schedule.delay_ms", *delay_ms)?)
            }
            Schedule::Once { at } => {
                if *at <= now {
                    return Err(err(
                        "schedule.at",
                        format!(
                            "{} is in the past; a once schedule needs a future instant",
                            at.to_rfc3339()
                        ),
                    ));
                }
                JobSchedule::Once(*at)
            }
            Schedule::None {} => JobSchedule::None,
        })
    }

    /// Re-reads a schedule stored in the database, without the checks that depend on the
    /// time it was accepted (a `once` instant may since have passed).
    pub fn from_stored(s: &Schedule) -> Result<Self, ScheduleError> {
        Ok(match s {
            Schedule::Cron { expr, timezone } => JobSchedule::Cron(Box::new(
                CronSchedule::parse_stored(expr, timezone.as_deref())?,
            )),
            Schedule::Once { at } => JobSchedule::Once(*at),
            other => Self::parse(other, DateTime::<Utc>::MIN_UTC)?,
        })
    }

    /// The schedule of job `job_id` with `jitter_ms`: a cron schedule's fire times moved by
    /// [`jitter_offset`] (jitter applies to cron schedules only; the API refuses it on others).
    pub fn jittered(self, job_id: i64, jitter_ms: i64) -> Self {
        match self {
            JobSchedule::Cron(mut c) => {
                c.offset = jitter_offset(job_id, jitter_ms);
                JobSchedule::Cron(c)
            }
            other => other,
        }
    }

    /// The kind recorded on runs this schedule creates.
    pub fn trigger_kind(&self) -> TriggerKind {
        match self {
            JobSchedule::Cron(_) => TriggerKind::Cron,
            JobSchedule::FixRate(_) => TriggerKind::FixRate,
            JobSchedule::FixDelay(_) => TriggerKind::FixDelay,
            JobSchedule::Once(_) | JobSchedule::None => TriggerKind::Once,
        }
    }

    /// The first fire time of a job enabled (or created, or rescheduled) at `now`.
    /// Time the job was disabled never fires: counting starts at `now`.
    pub fn first_fire(&self, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
        match self {
            JobSchedule::Cron(c) => c.next_after(now),
            JobSchedule::FixRate(d) | JobSchedule::FixDelay(d) => now.checked_add_signed(*d),
            JobSchedule::Once(at) => (*at > now).then_some(*at),
            JobSchedule::None => None,
        }
    }

    /// The fire time after `prev` when runs do not depend on results (`cron`, `fix_rate`);
    /// `None` for `once` (fires one time), `fix_delay` (next time comes from the finished run)
    /// and `none`.
    pub fn next_after(&self, prev: DateTime<Utc>) -> Option<DateTime<Utc>> {
        match self {
            JobSchedule::Cron(c) => c.next_after(prev),
            JobSchedule::FixRate(d) => prev.checked_add_signed(*d),
            JobSchedule::FixDelay(_) | JobSchedule::Once(_) | JobSchedule::None => None,
        }
    }

    /// The time zone fire times are computed in (UTC but for cron).
    pub fn zone(&self) -> Tz {
        match self {
            JobSchedule::Cron(c) => c.tz,
            _ => Tz::UTC,
        }
    }

    /// The delay of a `fix_delay` schedule.
    pub fn fix_delay(&self) -> Option<Duration> {
        match self {
            JobSchedule::FixDelay(d) => Some(*d),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    #[test]
    fn six_and_five_field_cron() {
        let now = at("2026-03-01T10:00:00.500Z");
        let c = CronSchedule::parse("*/1 * * * * *", None).unwrap();
        assert_eq!(c.next_after(now), Some(at("2026-03-01T10:00:01Z")));
        let c = CronSchedule::parse("*/15 * * * *", None).unwrap();
        assert_eq!(c.next_after(now), Some(at("2026-03-01T10:15:00Z")));
    }

    #[test]
    fn jitter_moves_every_fire_of_a_job_by_one_offset_within_the_range() {
        // Half past: this hour's fire, moved by less than a minute, has passed.
        let now = at("2026-03-01T10:30:00Z");
        let plain = JobSchedule::parse(
            &Schedule::Cron {
                expr: "0 0 * * * ?".into(),
                timezone: None,
            },
            now,
        )
        .unwrap();
        let mut offsets = std::collections::BTreeSet::new();
        for job in 1..=1000 {
            let off = jitter_offset(job, 60_000);
            assert_eq!(off, jitter_offset(job, 60_000), "deterministic");
            assert!(off >= Duration::zero() && off < Duration::milliseconds(60_000));
            offsets.insert(off.num_milliseconds());
            let s = plain.clone().jittered(job, 60_000);
            let first = s.first_fire(now).unwrap();
            assert_eq!(first, at("2026-03-01T11:00:00Z") + off, "job {job}");
            // The next ones keep the offset: one an hour, each moved alike.
            let second = s.next_after(first).unwrap();
            assert_eq!(second - first, Duration::hours(1));
            // A time inside the offset of this hour's fire still finds this hour's fire.
            assert_eq!(s.next_after(first - Duration::milliseconds(1)), Some(first));
        }
        // Spread over the minute, not bunched: at least 900 distinct offsets of 1,000 jobs,
        // some in each tenth of the range.
        assert!(offsets.len() >= 900, "{}", offsets.len());
        for tenth in 0..10 {
            let (lo, hi) = (tenth * 6_000, (tenth + 1) * 6_000);
            assert!(offsets.range(lo..hi).count() > 50, "tenth {tenth}");
        }
        assert_eq!(jitter_offset(7, 0), Duration::zero());
        // Just after the expression's time, its fire moved by the offset is still to come.
        let s = plain.clone().jittered(1, 60_000);
        let off = jitter_offset(1, 60_000);
        assert!(off > Duration::zero());
        assert_eq!(
            s.first_fire(at("2026-03-01T10:00:00Z")),
            Some(at("2026-03-01T10:00:00Z") + off)
        );
        // Only cron schedules move.
        let rate = JobSchedule::FixRate(Duration::seconds(1)).jittered(7, 60_000);
        assert_eq!(rate.first_fire(now), Some(now + Duration::seconds(1)));
    }

    #[test]
    fn cron_in_a_time_zone() {
        let now = at("2026-07-01T00:00:00Z");
        let c = CronSchedule::parse("0 0 9 * * *", Some("Europe/Berlin")).unwrap();
        // 09:00 in Berlin in summer is 07:00 UTC.
        assert_eq!(c.next_after(now), Some(at("2026-07-01T07:00:00Z")));
    }

    #[test]
    fn bad_cron_names_the_field() {
        let now = Utc::now();
        let cron = |expr: &str, tz: Option<&str>| {
            JobSchedule::parse(
                &Schedule::Cron {
                    expr: expr.into(),
                    timezone: tz.map(Into::into),
                },
                now,
            )
        };
        let e = cron("61 * * * * *", None).unwrap_err();
        assert_eq!(e.field, "schedule.expr");
        let e = cron("* *", None).unwrap_err();
        assert!(e.message.contains("has 2 fields"), "{e}");
        let e = cron("* * * * * *", Some("Mars/Olympus")).unwrap_err();
        assert_eq!(e.field, "schedule.timezone");
        let e = cron("0 0 0 30 2 *", None).unwrap_err();
        assert!(e.message.contains("never fires"), "{e}");
        // Both day fields: refused for a new job, still read for a stored one.
        let e = cron("0 0 9 1 * MON", None).unwrap_err();
        assert!(e.message.contains("both a day-of-month"), "{e}");
        let legacy = Schedule::Cron {
            expr: "0 0 9 1 * MON".into(),
            timezone: None,
        };
        assert!(JobSchedule::from_stored(&legacy).is_ok());
        let stored = Schedule::Cron {
            expr: "*/1 * * * * *".into(),
            timezone: None,
        };
        assert!(JobSchedule::from_stored(&stored)
            .unwrap()
            .next_after(now)
            .is_some());
    }

    #[test]
    fn intervals_and_once() {
        let now = at("2026-01-01T00:00:00Z");
        assert!(JobSchedule::parse(&Schedule::FixRate { every_ms: 0 }, now).is_err());
        let e = JobSchedule::parse(&Schedule::FixDelay { delay_ms: -5 }, now).unwrap_err();
        assert_eq!(e.field, "schedule.delay_ms");
        let s = JobSchedule::parse(&Schedule::FixRate { every_ms: 250 }, now).unwrap();
        assert_eq!(s.first_fire(now), Some(at("2026-01-01T00:00:00.250Z")));
        assert_eq!(
            s.next_after(at("2026-01-01T00:00:00.250Z")),
            Some(at("2026-01-01T00:00:00.500Z"))
        );
        let e = JobSchedule::parse(
            &Schedule::Once {
                at: at("2025-01-01T00:00:00Z"),
            },
            now,
        )
        .unwrap_err();
        assert_eq!(e.field, "schedule.at");
        let once = JobSchedule::parse(
            &Schedule::Once {
                at: at("2026-01-02T00:00:00Z"),
            },
            now,
        )
        .unwrap();
        assert_eq!(once.first_fire(now), Some(at("2026-01-02T00:00:00Z")));
        assert_eq!(once.next_after(at("2026-01-02T00:00:00Z")), None);
        assert_eq!(JobSchedule::None.first_fire(now), None);
    }

    /// The values a simple time field (`*`, `*/n`, `a-b`, `a`, lists of these) stands for,
    /// read independently of the parser under test.
    fn field_values(text: &str, max: u32) -> Vec<u32> {
        let mut out = Vec::new();
        for item in text.split(',') {
            if item == "*" {
                out.extend(0..=max);
            } else if let Some(step) = item.strip_prefix("*/") {
                out.extend((0..=max).step_by(step.parse().unwrap()));
            } else if let Some((lo, hi)) = item.split_once('-') {
                out.extend(lo.parse::<u32>().unwrap()..=hi.parse().unwrap());
            } else {
                out.push(item.parse().unwrap());
            }
        }
        out
    }

    /// Local times at which `sec min hour * * ?` fires between `from` and `to`, by brute force:
    /// every second of the interval whose wall-clock time matches, at the first occurrence of
    /// that wall-clock time.
    fn brute_force(
        (sec, min, hour): (&str, &str, &str),
        tz: Tz,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
    ) -> Vec<DateTime<Utc>> {
        let (secs, mins, hours) = (
            field_values(sec, 59),
            field_values(min, 59),
            field_values(hour, 23),
        );
        let mut seen = std::collections::HashSet::new();
        let mut out = Vec::new();
        let mut t = from + Duration::seconds(1);
        // Wall-clock times seen before `from` (the first pass of a repeated hour) count too.
        let mut back = from - Duration::hours(3);
        while back <= from {
            seen.insert(back.with_timezone(&tz).naive_local());
            back += Duration::seconds(1);
        }
        while t <= to {
            let wall = t.with_timezone(&tz).naive_local();
            use chrono::Timelike;
            if seen.insert(wall)
                && secs.contains(&wall.second())
                && mins.contains(&wall.minute())
                && hours.contains(&wall.hour())
            {
                out.push(t);
            }
            t += Duration::seconds(1);
        }
        out
    }

    /// Instants in `year` where the zone's UTC offset changes (to the hour).
    fn transitions(tz: Tz, year: i32) -> Vec<DateTime<Utc>> {
        use chrono::Offset;
        let start = Utc.with_ymd_and_hms(year, 1, 1, 0, 0, 0).unwrap();
        let offset = |t: DateTime<Utc>| t.with_timezone(&tz).offset().fix();
        (0..24 * 366)
            .map(|h| start + Duration::hours(h))
            .filter(|t| offset(*t) != offset(*t + Duration::hours(1)))
            .collect()
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(48))]

        /// Around every clock change of 2026 in three zones (one with a 30-minute change): no
        /// fire at a skipped local time, one fire for a repeated local time, fire times strictly
        /// increasing, and none missing.
        #[test]
        fn cron_across_dst_matches_brute_force(
            sec in proptest::sample::select(vec!["0", "*/15", "30", "0,20,40"]),
            min in proptest::sample::select(vec!["0", "30", "*/10", "*", "15,45"]),
            hour in proptest::sample::select(vec!["*", "1", "2", "3", "1-3", "*/2", "2,3"]),
            zone in proptest::sample::select(vec!["Europe/Berlin", "America/New_York", "Australia/Lord_Howe"]),
            which in 0usize..2,
        ) {
            let expr = format!("{sec} {min} {hour} * * ?");
            let c = CronSchedule::parse(&expr, Some(zone)).unwrap();
            let changes = transitions(c.tz, 2026);
            proptest::prop_assert_eq!(changes.len(), 2, "{} changes clocks twice a year", zone);
            let from = changes[which] - Duration::hours(2);
            let to = changes[which] + Duration::hours(3);
            let mut got = Vec::new();
            let mut t = from;
            while let Some(next) = c.next_after(t) {
                if next > to { break; }
                proptest::prop_assert!(next > t, "not increasing: {} after {}", next, t);
                got.push(next);
                t = next;
            }
            let want = brute_force((sec, min, hour), c.tz, from, to);
            proptest::prop_assert_eq!(got, want, "{} in {}", expr, zone);
        }

        /// fix_rate fires exactly every `every_ms`, sub-second rates included.
        #[test]
        fn fix_rate_is_exact(every_ms in 1i64..5000, start_ms in 0i64..1_000_000) {
            let s = JobSchedule::FixRate(Duration::milliseconds(every_ms));
            let mut t = DateTime::<Utc>::UNIX_EPOCH + Duration::milliseconds(start_ms);
            for _ in 0..50 {
                let next = s.next_after(t).unwrap();
                proptest::prop_assert_eq!((next - t).num_milliseconds(), every_ms);
                t = next;
            }
        }
    }

    #[test]
    fn skipped_and_repeated_local_times() {
        // Berlin: 2026-03-29 02:30 does not exist; 2026-10-25 02:30 happens twice.
        let c = CronSchedule::parse("0 30 2 * * *", Some("Europe/Berlin")).unwrap();
        let fires = |from: &str, n: usize| {
            let mut t = at(from);
            (0..n)
                .map(|_| {
                    t = c.next_after(t).unwrap();
                    t
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(
            fires("2026-03-28T00:00:00Z", 2),
            vec![at("2026-03-28T01:30:00Z"), at("2026-03-30T00:30:00Z")]
        );
        assert_eq!(
            fires("2026-10-24T00:00:00Z", 3),
            vec![
                at("2026-10-24T00:30:00Z"),
                at("2026-10-25T00:30:00Z"),
                at("2026-10-26T01:30:00Z")
            ]
        );
    }
}
