//! Strategies that scan the live workers in worker-id order: `first`, `last`, `failover`,
//! `busyover`.

use super::registry::Candidate;

/// `first`: the first live worker by worker id.
pub fn first(_candidates: &[Candidate]) -> usize {
    0
}

/// `last`: the last live worker by worker id.
pub fn last(candidates: &[Candidate]) -> usize {
    candidates.len().saturating_sub(1)
}

/// Whether a worker's heartbeat is fresh: it has not missed a beat (younger than two of its
/// intervals). Every candidate is live (younger than the dead timeout); a fresh one is also
/// answering right now, as XXL-JOB's failover checks with a beat before choosing.
pub fn is_fresh(c: &Candidate) -> bool {
    (c.heartbeat_age_ms as u64) < c.interval_ms.saturating_mul(2)
}

/// `failover`: the first worker, by worker id, whose heartbeat is fresh; the first live one
/// when none is.
pub fn failover(candidates: &[Candidate]) -> usize {
    candidates.iter().position(is_fresh).unwrap_or(0)
}

/// `busyover`: the first worker, by worker id, that reports the job idle (no run of it running
/// or waiting in its last heartbeat); when every worker is busy with it, the least busy one.
pub fn busyover(candidates: &[Candidate]) -> usize {
    candidates
        .iter()
        .position(|c| c.job_runs == 0)
        .or_else(|| {
            candidates
                .iter()
                .enumerate()
                .min_by_key(|(i, c)| (c.job_runs, *i))
                .map(|(i, _)| i)
        })
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::super::tests::cand;
    use super::*;

    #[test]
    fn first_and_last_by_worker_id() {
        let c = [cand("a", &[0]), cand("b", &[1]), cand("c", &[2])];
        assert_eq!(first(&c), 0);
        assert_eq!(last(&c), 2);
        assert_eq!(last(&c[..1]), 0);
    }

    #[test]
    fn failover_skips_workers_that_missed_a_beat() {
        let mut c = [cand("a", &[0]), cand("b", &[1]), cand("c", &[2])];
        assert_eq!(failover(&c), 0);
        c[0].heartbeat_age_ms = 1000; // interval 500: missed a beat
        assert_eq!(failover(&c), 1);
        c[1].heartbeat_age_ms = 1200;
        assert_eq!(failover(&c), 2);
        c[2].heartbeat_age_ms = 1200;
        assert_eq!(failover(&c), 0, "none fresh: the first live one");
    }

    #[test]
    fn busyover_takes_the_first_worker_idle_for_the_job() {
        let mut c = [cand("a", &[0]), cand("b", &[1]), cand("c", &[2])];
        assert_eq!(busyover(&c), 0);
        c[0].job_runs = 1;
        assert_eq!(busyover(&c), 1);
        c[1].job_runs = 3;
        assert_eq!(busyover(&c), 2);
        c[2].job_runs = 2;
        assert_eq!(busyover(&c), 0, "all busy: the least busy");
    }
}
