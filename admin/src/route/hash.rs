//! `consistent_hash`: a hash ring with virtual nodes over the live workers, and the stable hash
//! used for it and for routing when no worker is live.
//!
//! The hash is fixed (not randomly seeded) so every admin, and every restart, maps a job to the
//! same place.

use cadenza_schemas::JobId;

use super::registry::Candidate;

/// Virtual nodes per worker on the ring (XXL-JOB uses 100).
pub const VIRTUAL_NODES: u32 = 100;

/// FNV-1a with a splitmix64 finish: stable across processes and well spread.
pub fn stable_hash(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h = (h ^ (h >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h = (h ^ (h >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

/// The partition a job goes to when no worker is live: its id's hash.
pub fn job_partition(job: JobId, partitions: i32) -> i32 {
    let p = u64::try_from(partitions.max(1)).unwrap_or(1);
    (stable_hash(job.0.to_string().as_bytes()) % p) as i32
}

/// A hash ring of workers.
#[derive(Debug, Clone)]
pub struct Ring {
    /// (position, index of the worker in the list the ring was built from), by position.
    nodes: Vec<(u64, usize)>,
}

impl Ring {
    /// The ring of `workers` (their order gives the indices [`Ring::lookup`] returns).
    pub fn new<'a>(workers: impl IntoIterator<Item = &'a str>) -> Self {
        let mut nodes = Vec::new();
        for (i, w) in workers.into_iter().enumerate() {
            for v in 0..VIRTUAL_NODES {
                nodes.push((stable_hash(format!("{w}#{v}").as_bytes()), i));
            }
        }
        nodes.sort_unstable();
        Self { nodes }
    }

    /// The worker at or clockwise after the job's position.
    pub fn lookup(&self, job: JobId) -> usize {
        let h = stable_hash(job.0.to_string().as_bytes());
        let at = self.nodes.partition_point(|(p, _)| *p < h);
        self.nodes
            .get(at)
            .or_else(|| self.nodes.first())
            .map_or(0, |(_, i)| *i)
    }
}

/// `consistent_hash`: the job's worker on the ring of `candidates`.
pub fn consistent_hash(job: JobId, candidates: &[Candidate]) -> usize {
    Ring::new(candidates.iter().map(|c| c.worker_id.0.as_str())).lookup(job)
}

#[cfg(test)]
mod tests {
    use super::super::tests::cand;
    use super::*;
    use std::collections::HashMap;

    fn owners(workers: &[&str], jobs: i64) -> HashMap<i64, String> {
        let c: Vec<Candidate> = workers.iter().map(|w| cand(w, &[0])).collect();
        (1..=jobs)
            .map(|j| (j, c[consistent_hash(JobId(j), &c)].worker_id.0.clone()))
            .collect()
    }

    #[test]
    fn jobs_stick_and_spread() {
        let a = owners(&["w1", "w2", "w3"], 3000);
        assert_eq!(
            a,
            owners(&["w1", "w2", "w3"], 3000),
            "same membership, same owner"
        );
        for w in ["w1", "w2", "w3"] {
            let n = a.values().filter(|o| *o == w).count();
            assert!((700..=1300).contains(&n), "{w} has {n} of 3000 jobs");
        }
    }

    #[test]
    fn only_the_leaving_workers_jobs_move() {
        let before = owners(&["w1", "w2", "w3"], 3000);
        let after = owners(&["w1", "w3"], 3000);
        for (job, owner) in &before {
            if owner == "w2" {
                assert_ne!(after[job], "w2");
            } else {
                assert_eq!(&after[job], owner, "job {job} moved though {owner} stayed");
            }
        }
        // and a joining worker takes jobs only for itself
        let joined = owners(&["w1", "w2", "w3", "w4"], 3000);
        for (job, owner) in &before {
            assert!(joined[job] == *owner || joined[job] == "w4");
        }
    }

    #[test]
    fn job_partition_is_stable_and_in_range() {
        for j in 1..200 {
            let p = job_partition(JobId(j), 6);
            assert!((0..6).contains(&p));
            assert_eq!(p, job_partition(JobId(j), 6));
        }
        assert_eq!(job_partition(JobId(5), 0), 0);
    }
}
