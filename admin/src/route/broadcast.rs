//! `sharding_broadcast`: every live worker runs one shard of each fire time.
//!
//! The scan (and a manual trigger) writes one run per live worker serving the job type, with
//! `shard_index` 0..n−1 and `shard_total` n ([`super::registry::Registry::shard_total`]); the
//! selector sends shard i to the i-th live worker by worker id.

use super::registry::Candidate;

/// The worker of shard `shard_index`: the i-th by worker id (wrapping when workers left since
/// the runs were written).
pub fn sharding_broadcast(candidates: &[Candidate], shard_index: u32) -> usize {
    (shard_index as usize) % candidates.len().max(1)
}

#[cfg(test)]
mod tests {
    use super::super::tests::cand;
    use super::*;

    #[test]
    fn shard_i_goes_to_the_ith_worker() {
        let c = [cand("a", &[0]), cand("b", &[1]), cand("c", &[2])];
        let picks: Vec<usize> = (0..3).map(|i| sharding_broadcast(&c, i)).collect();
        assert_eq!(picks, [0, 1, 2]);
        assert_eq!(sharding_broadcast(&c[..2], 2), 0, "a worker left since");
    }
}
