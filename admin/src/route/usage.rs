//! Strategies that follow the job's history of use: `least_frequently_used`,
//! `least_recently_used`.

use super::history::JobHistory;
use super::registry::Candidate;

/// `least_frequently_used`: the worker this job has used least in the current window (ties:
/// lowest worker id).
pub fn least_frequently_used(candidates: &[Candidate], history: &JobHistory) -> usize {
    candidates
        .iter()
        .enumerate()
        .min_by_key(|(i, c)| {
            (
                history.window_uses.get(&c.worker_id).copied().unwrap_or(0),
                *i,
            )
        })
        .map_or(0, |(i, _)| i)
}

/// `least_recently_used`: the worker this job has used least recently; one it has never used
/// comes first (ties: lowest worker id).
pub fn least_recently_used(candidates: &[Candidate], history: &JobHistory) -> usize {
    candidates
        .iter()
        .enumerate()
        .min_by_key(|(i, c)| {
            (
                history.last_used.get(&c.worker_id).copied().unwrap_or(0),
                *i,
            )
        })
        .map_or(0, |(i, _)| i)
}

#[cfg(test)]
mod tests {
    use super::super::registry::tests::t;
    use super::super::tests::cand;
    use super::*;
    use cadenza_schemas::{JobId, WorkerId};

    fn ids(c: &[Candidate], picks: &[usize]) -> String {
        picks.iter().map(|i| c[*i].worker_id.0.as_str()).collect()
    }

    #[test]
    fn lfu_takes_the_least_used_in_the_window() {
        let c = [cand("a", &[0]), cand("b", &[1]), cand("c", &[2])];
        let mut h = JobHistory::new(JobId(1));
        h.roll_window(t(0));
        // a used three times (e.g. manual triggers naming it)
        for _ in 0..3 {
            h.record(&WorkerId("a".into()), &c);
        }
        let mut picks = vec![];
        for _ in 0..7 {
            let i = least_frequently_used(&c, &h);
            h.record(&c[i].worker_id, &c);
            picks.push(i);
        }
        assert_eq!(ids(&c, &picks), "bcbcbca");
        // a new window forgets the counts
        h.roll_window(t(24 * 3600 * 1000));
        assert!(h.window_uses.is_empty());
        assert_eq!(least_frequently_used(&c, &h), 0);
    }

    #[test]
    fn lfu_sends_a_new_worker_runs_until_it_caught_up() {
        let two = [cand("a", &[0]), cand("b", &[1])];
        let mut h = JobHistory::new(JobId(1));
        h.roll_window(t(0));
        for _ in 0..4 {
            let i = least_frequently_used(&two, &h);
            h.record(&two[i].worker_id, &two);
        }
        let three = [cand("a", &[0]), cand("b", &[1]), cand("c", &[2])];
        let mut picks = vec![];
        for _ in 0..3 {
            let i = least_frequently_used(&three, &h);
            h.record(&three[i].worker_id, &three);
            picks.push(i);
        }
        assert_eq!(ids(&three, &picks), "cca");
    }

    #[test]
    fn lru_takes_the_least_recently_used() {
        let c = [cand("a", &[0]), cand("b", &[1]), cand("c", &[2])];
        let mut h = JobHistory::new(JobId(1));
        h.record(&WorkerId("b".into()), &c);
        h.record(&WorkerId("a".into()), &c);
        let mut picks = vec![];
        for _ in 0..6 {
            let i = least_recently_used(&c, &h);
            h.record(&c[i].worker_id, &c);
            picks.push(i);
        }
        // never used first, then the oldest use
        assert_eq!(ids(&c, &picks), "cbacba");
    }

    #[test]
    fn a_worker_that_left_is_forgotten() {
        let c = [cand("a", &[0]), cand("b", &[1])];
        let mut h = JobHistory::new(JobId(1));
        h.record(&WorkerId("a".into()), &c);
        h.record(&WorkerId("b".into()), &c);
        let only_b = [cand("b", &[1])];
        h.record(&WorkerId("b".into()), &only_b);
        assert!(!h.last_used.contains_key(&WorkerId("a".into())));
        assert!(!h.window_uses.contains_key(&WorkerId("a".into())));
    }
}
