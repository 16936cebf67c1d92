//! What the selector remembers per job: the turn for `round`, use counts in the current window
//! for `least_frequently_used`, the order of last use for `least_recently_used`, and the turn
//! over each worker's partitions.
//!
//! History lives in the memory of the admin publishing the job (as in XXL-JOB); when another
//! admin takes the job's shard over, it starts a new history.

use std::collections::BTreeMap;

use cadenza_schemas::{JobId, WorkerId};
use chrono::{DateTime, Utc};

use super::registry::Candidate;

/// How long `least_frequently_used` counts uses before starting over (XXL-JOB: 24 h).
pub const LFU_WINDOW: chrono::Duration = chrono::Duration::hours(24);

/// The routing history of one job.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JobHistory {
    /// Trigger counter for `round`; starts at a per-job offset so jobs do not all begin on the
    /// same worker.
    pub turn: u64,
    /// Start of the current `least_frequently_used` window.
    pub window_start: Option<DateTime<Utc>>,
    /// Uses per worker in the current window.
    pub window_uses: BTreeMap<WorkerId, u64>,
    /// Sequence number of each worker's last use (higher = more recent).
    pub last_used: BTreeMap<WorkerId, u64>,
    /// Uses recorded so far (the next sequence number).
    pub seq: u64,
    /// Next partition turn per worker.
    pub partition_turn: BTreeMap<WorkerId, u64>,
}

impl JobHistory {
    /// A job's empty history.
    pub fn new(job: JobId) -> Self {
        Self {
            turn: (job.0 as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40,
            ..Self::default()
        }
    }

    /// Starts a new `least_frequently_used` window when the current one is over.
    pub fn roll_window(&mut self, now: DateTime<Utc>) {
        match self.window_start {
            Some(start) if now - start < LFU_WINDOW => {}
            _ => {
                self.window_start = Some(now);
                self.window_uses.clear();
            }
        }
    }

    /// The partition of `c` the next run goes to: its partitions in turn.
    pub fn partition_for(&self, c: &Candidate) -> i32 {
        let turn = self.partition_turn.get(&c.worker_id).copied().unwrap_or(0);
        let len = c.partitions.len().max(1) as u64;
        c.partitions
            .get((turn % len) as usize)
            .copied()
            .unwrap_or_default()
    }

    /// Records that a run of the job went to `chosen`; workers no longer among `candidates` are
    /// forgotten.
    pub fn record(&mut self, chosen: &WorkerId, candidates: &[Candidate]) {
        let present = |w: &WorkerId| candidates.iter().any(|c| &c.worker_id == w);
        self.window_uses.retain(|w, _| present(w));
        self.last_used.retain(|w, _| present(w));
        self.partition_turn.retain(|w, _| present(w));
        self.turn = self.turn.wrapping_add(1);
        self.seq += 1;
        *self.window_uses.entry(chosen.clone()).or_default() += 1;
        self.last_used.insert(chosen.clone(), self.seq);
        *self.partition_turn.entry(chosen.clone()).or_default() += 1;
    }
}
