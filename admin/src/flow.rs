//! Flow control across the cluster: concurrency groups (at most `limit` runs of their jobs in
//! flight, starts spread by an optional rate), priorities, and each job's overlap policy.
//!
//! A run of a job in a group, or of a job whose overlap policy is not `allow`, is written
//! `queued` under a *queue key* (`g:<group>` or `j:<job id>`). The admin holding the key's
//! shard releases it ([`crate::scheduler::release`]) under the key's lock, deciding with
//! [`decide`] which queued runs go (`scheduled`, then published as any run), which are passed
//! over (`skipped`), and which runs in flight a `cancel_other` job cancels.

use std::collections::{HashMap, HashSet};

use cadenza_schemas::Overlap;
use chrono::{DateTime, Utc};

use crate::jobs::FieldError;

/// Longest group name.
pub const MAX_GROUP_NAME: usize = 100;
/// Largest `limit` (and rate, and burst) a group accepts.
pub const MAX_LIMIT: i64 = 100_000;
/// The rate limit's allowance for the time between a run's release and its start on a
/// worker (publication, pickup): releases are counted over a window this much longer than a
/// second, so that no second of *starts* sees more than `per_second + burst`.
pub const RATE_GUARD_MS: i64 = 200;

/// A concurrency group's name: 1 to 100 letters, digits, `.`, `_`, `-`, starting with a letter
/// or digit (it is part of metric labels and URLs).
pub fn check_group_name(field: &str, name: &str) -> Result<(), FieldError> {
    let mut chars = name.chars();
    let first_ok = chars.next().is_some_and(|c| c.is_ascii_alphanumeric());
    let rest_ok = name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    if !first_ok || !rest_ok || name.len() > MAX_GROUP_NAME {
        return Err(FieldError::new(
            field,
            format!(
                "{name:?} is not a group name: 1 to {MAX_GROUP_NAME} letters, digits, '.', '_' or '-', starting with a letter or digit"
            ),
        ));
    }
    Ok(())
}

/// The queue key of a job's runs: its group's, else its own when its overlap policy is not
/// `allow`; `None`: its runs are never queued.
pub fn queue_key(job_id: i64, group: Option<&str>, overlap: Overlap) -> Option<String> {
    match (group, overlap) {
        (Some(g), _) => Some(format!("g:{g}")),
        (None, Overlap::Allow) => None,
        (None, _) => Some(format!("j:{job_id}")),
    }
}

/// A queued run at the head of its queue (due, in release order: priority, then fire time).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Queued {
    pub id: i64,
    pub job_id: i64,
    pub overlap: Overlap,
}

/// What one release round does.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Decision {
    /// Runs to release now, in order.
    pub release: Vec<i64>,
    /// Runs passed over by their job's overlap policy, each with why.
    pub skip: Vec<(i64, String)>,
    /// Jobs (`cancel_other`) whose runs in flight are to be cancelled.
    pub cancel_jobs: Vec<i64>,
}

/// Decides a release round of one queue key: `head` in release order, `slots` free (the
/// group's limit minus its runs in flight; `None`: no limit), `in_flight` the runs in flight
/// per job, `rate` how many may start now by the group's rate (`None`: no rate).
pub fn decide(
    head: &[Queued],
    slots: Option<i64>,
    in_flight: &HashMap<i64, i64>,
    rate: Option<i64>,
) -> Decision {
    let mut d = Decision::default();
    let mut budget = match (slots, rate) {
        (Some(s), Some(r)) => s.min(r),
        (Some(s), None) => s,
        (None, Some(r)) => r,
        (None, None) => i64::MAX,
    }
    .max(0);
    // The newest queued run of each `cancel_other` job: the one that runs; older ones are
    // replaced by it.
    let mut newest: HashMap<i64, usize> = HashMap::new();
    for (i, q) in head.iter().enumerate() {
        if q.overlap == Overlap::CancelOther {
            newest.insert(q.job_id, i);
        }
    }
    // Jobs with a run released this round, and jobs with a run kept waiting this round.
    let mut released: HashSet<i64> = HashSet::new();
    let mut waiting: HashSet<i64> = HashSet::new();
    for (i, q) in head.iter().enumerate() {
        let busy = in_flight.get(&q.job_id).copied().unwrap_or(0) > 0;
        let running = busy || released.contains(&q.job_id);
        let ahead = waiting.contains(&q.job_id);
        let skip = |why: &str| (q.id, why.to_owned());
        match q.overlap {
            Overlap::Allow => {}
            Overlap::Skip if running || ahead => {
                d.skip.push(skip(
                    "a run of the job was in flight or waiting (overlap policy skip)",
                ));
                continue;
            }
            Overlap::BufferOne if ahead => {
                d.skip.push(skip(
                    "a run of the job was already waiting for the one in flight (overlap policy buffer_one)",
                ));
                continue;
            }
            Overlap::BufferOne | Overlap::BufferAll if running || ahead => {
                waiting.insert(q.job_id);
                continue;
            }
            Overlap::CancelOther if newest.get(&q.job_id) != Some(&i) => {
                d.skip.push(skip(
                    "replaced by a newer fire of the job (overlap policy cancel_other)",
                ));
                continue;
            }
            Overlap::CancelOther if running => {
                if busy && !d.cancel_jobs.contains(&q.job_id) {
                    d.cancel_jobs.push(q.job_id);
                }
                waiting.insert(q.job_id);
                continue;
            }
            Overlap::Skip | Overlap::BufferOne | Overlap::BufferAll | Overlap::CancelOther => {}
        }
        if budget > 0 {
            budget -= 1;
            d.release.push(q.id);
            released.insert(q.job_id);
        } else {
            waiting.insert(q.job_id);
        }
    }
    d
}

/// How many runs a group with `per_second` and `burst` may release at `now`, given the times
/// of its earlier releases: at most `per_second + burst` in any window of a second plus
/// [`RATE_GUARD_MS`], and, over time, `per_second` a second (a bucket of `burst + 1` tokens).
pub fn rate_allowance(
    per_second: f64,
    burst: i64,
    recent: &[DateTime<Utc>],
    now: DateTime<Utc>,
) -> i64 {
    let window = chrono::Duration::milliseconds(1000 + RATE_GUARD_MS);
    let cap = (per_second.floor() as i64 + burst).max(1);
    let in_window = recent.iter().filter(|t| now - **t < window).count() as i64;
    let by_window = cap - in_window;
    // The bucket: `burst + 1` tokens, one more every 1/per_second; replayed from the releases
    // of the window (older ones have long been paid back when the bucket is this small).
    let spacing_ms = 1000.0 / per_second;
    let capacity = (burst + 1) as f64;
    let mut tokens = capacity;
    let mut last: Option<DateTime<Utc>> = None;
    let mut sorted: Vec<&DateTime<Utc>> = recent.iter().collect();
    sorted.sort();
    for t in sorted {
        if let Some(l) = last {
            tokens = (tokens + (*t - l).num_milliseconds() as f64 / spacing_ms).min(capacity);
        }
        tokens -= 1.0;
        last = Some(*t);
    }
    if let Some(l) = last {
        tokens = (tokens + (now - l).num_milliseconds() as f64 / spacing_ms).min(capacity);
    }
    by_window.min(tokens.floor() as i64).max(0)
}

/// The release times worth keeping for [`rate_allowance`]: those of the last window, and the
/// latest `burst + 1` (the bucket's memory).
pub fn keep_recent(
    mut recent: Vec<DateTime<Utc>>,
    burst: i64,
    now: DateTime<Utc>,
) -> Vec<DateTime<Utc>> {
    let window = chrono::Duration::milliseconds(1000 + RATE_GUARD_MS);
    recent.sort();
    let keep_last = usize::try_from(burst + 1).unwrap_or(1);
    let n = recent.len();
    recent
        .into_iter()
        .enumerate()
        .filter(|(i, t)| now - *t < window || *i + keep_last >= n)
        .map(|(_, t)| t)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(id: i64, job_id: i64, overlap: Overlap) -> Queued {
        Queued {
            id,
            job_id,
            overlap,
        }
    }

    #[test]
    fn a_group_releases_into_its_free_slots_in_queue_order() {
        let head = [
            q(1, 10, Overlap::Allow),
            q(2, 11, Overlap::Allow),
            q(3, 10, Overlap::Allow),
        ];
        let d = decide(&head, Some(2), &HashMap::new(), None);
        assert_eq!(d.release, vec![1, 2]);
        assert!(d.skip.is_empty());
        assert!(decide(&head, Some(0), &HashMap::new(), None)
            .release
            .is_empty());
        // A rate allows fewer than the slots.
        assert_eq!(
            decide(&head, Some(3), &HashMap::new(), Some(1)).release,
            vec![1]
        );
    }

    #[test]
    fn overlap_policies_decide_what_a_fire_does_while_its_job_runs() {
        let busy: HashMap<i64, i64> = [(1, 1), (2, 1), (3, 1), (4, 1)].into();
        let head = [
            q(10, 1, Overlap::Skip),
            q(20, 2, Overlap::BufferOne),
            q(21, 2, Overlap::BufferOne),
            q(30, 3, Overlap::BufferAll),
            q(31, 3, Overlap::BufferAll),
            q(40, 4, Overlap::CancelOther),
            q(41, 4, Overlap::CancelOther),
            q(50, 5, Overlap::Skip),
            q(51, 5, Overlap::Skip),
        ];
        let d = decide(&head, None, &busy, None);
        // Job 5 runs nothing: its first fire goes, the second is skipped.
        assert_eq!(d.release, vec![50]);
        let skipped: Vec<i64> = d.skip.iter().map(|(id, _)| *id).collect();
        assert_eq!(skipped, vec![10, 21, 40, 51]);
        assert_eq!(d.cancel_jobs, vec![4]);
    }

    #[test]
    fn buffered_fires_go_one_at_a_time_once_their_job_is_idle() {
        let head = [
            q(1, 7, Overlap::BufferAll),
            q(2, 7, Overlap::BufferAll),
            q(3, 8, Overlap::CancelOther),
        ];
        let d = decide(&head, None, &HashMap::new(), None);
        assert_eq!(d.release, vec![1, 3]);
        assert!(d.skip.is_empty() && d.cancel_jobs.is_empty());
    }

    #[test]
    fn a_group_full_keeps_a_skip_jobs_first_fire_waiting_and_skips_the_next() {
        let head = [q(1, 7, Overlap::Skip), q(2, 7, Overlap::Skip)];
        let d = decide(&head, Some(0), &HashMap::new(), None);
        assert!(d.release.is_empty());
        assert_eq!(d.skip.iter().map(|s| s.0).collect::<Vec<_>>(), vec![2]);
    }

    #[test]
    fn the_rate_spreads_releases_and_no_window_holds_more_than_rate_plus_burst() {
        let t0 = DateTime::from_timestamp_millis(1_700_000_000_000).unwrap();
        let at = |ms: i64| t0 + chrono::Duration::milliseconds(ms);
        // 5/s, no burst: one now, then one every 200 ms.
        assert_eq!(rate_allowance(5.0, 0, &[], t0), 1);
        assert_eq!(rate_allowance(5.0, 0, &[t0], at(100)), 0);
        assert_eq!(rate_allowance(5.0, 0, &[t0], at(200)), 1);
        // Burst 3: four at once, then the rate.
        assert_eq!(rate_allowance(5.0, 3, &[], t0), 4);
        // Simulated at 10 ms steps for 10 s: no window of 1.2 s holds more than 5.
        let mut released: Vec<DateTime<Utc>> = Vec::new();
        let mut kept: Vec<DateTime<Utc>> = Vec::new();
        for step in 0..1000 {
            let now = at(step * 10);
            let n = rate_allowance(5.0, 0, &kept, now);
            for _ in 0..n {
                released.push(now);
                kept.push(now);
            }
            kept = keep_recent(kept, 0, now);
        }
        for (i, t) in released.iter().enumerate() {
            let within = released[i..]
                .iter()
                .filter(|u| **u - *t < chrono::Duration::milliseconds(1000 + RATE_GUARD_MS))
                .count();
            assert!(within <= 5, "{within} releases within a window from {t}");
        }
        // The rate is used: at least 4 a second over the 10 s.
        assert!(released.len() >= 40, "{} released", released.len());
    }

    #[test]
    fn group_names_are_checked() {
        assert!(check_group_name("name", "warehouse-1.eu_west").is_ok());
        for bad in ["", "-x", "a b", "a/b", &"x".repeat(101)] {
            assert!(check_group_name("name", bad).is_err(), "{bad:?}");
        }
        assert_eq!(
            queue_key(5, Some("w"), Overlap::Skip).as_deref(),
            Some("g:w")
        );
        assert_eq!(queue_key(5, None, Overlap::Skip).as_deref(), Some("j:5"));
        assert_eq!(queue_key(5, None, Overlap::Allow), None);
    }
}
