//! Strategies that take workers in turn or at random: `round`, `random`.

use super::history::JobHistory;
use super::registry::Candidate;

/// `round`: the next worker in turn, per job.
pub fn round(candidates: &[Candidate], history: &JobHistory) -> usize {
    (history.turn % candidates.len().max(1) as u64) as usize
}

/// `random`: a worker picked by `random` (uniform when `random` is).
pub fn random(candidates: &[Candidate], random: u64) -> usize {
    (random % candidates.len().max(1) as u64) as usize
}

#[cfg(test)]
mod tests {
    use super::super::tests::cand;
    use super::*;
    use cadenza_schemas::JobId;

    #[test]
    fn round_visits_every_worker_in_turn() {
        let c = [cand("a", &[0]), cand("b", &[1]), cand("c", &[2])];
        let mut h = JobHistory::new(JobId(42));
        let mut seen = vec![];
        for _ in 0..9 {
            let i = round(&c, &h);
            h.record(&c[i].worker_id, &c);
            seen.push(i);
        }
        for w in 0..3 {
            assert_eq!(seen.iter().filter(|i| **i == w).count(), 3, "{seen:?}");
        }
        assert_eq!(seen[0..3], seen[3..6]);
    }

    #[test]
    fn random_stays_in_range_and_reaches_every_worker() {
        let c = [cand("a", &[0]), cand("b", &[1]), cand("c", &[2])];
        let picks: Vec<usize> = (0..300).map(|_| random(&c, rand::random())).collect();
        assert!(picks.iter().all(|i| *i < 3));
        for w in 0..3 {
            assert!(picks.contains(&w), "{w} never picked");
        }
    }
}
