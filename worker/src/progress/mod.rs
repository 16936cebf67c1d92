//! The worker's progress protocol, in one place: what is finished, started or being reported on
//! each assigned partition, and how that reaches Kafka so that a partition's next owner neither
//! loses nor repeats work (`docs/worker-progress.md` draws it).
//!
//! * [`tracker`] — the offset tracker: per partition and offset, a mark (`Waiting`, `Started`,
//!   `Reporting`, `Finished`) and what a commit records. Plain data, no I/O.
//! * [`delivery`] — [`Delivery`], one offset taken from a partition: the only handle a run has
//!   on the tracker (mark started, mark reporting, finish).
//! * [`store`] — [`Progress`], the progress records on `<prefix>.progress` (claims, commit rounds,
//!   reading back on assignment), and the [`Committer`] task that runs the rounds.
//!
//! Who uses it: the intake takes offsets ([`Deliveries::take`]), runs move their [`Delivery`]
//! along, the rebalance callbacks assign and revoke partitions through [`Progress`]. Nothing here
//! depends on runs, the intake or the consumer's callbacks.

pub(crate) mod delivery;
pub(crate) mod store;
pub(crate) mod tracker;

pub(crate) use delivery::{Deliveries, Delivery};
pub(crate) use store::{Committer, Progress, ProgressSignal};
pub(crate) use tracker::{OffsetTracker, Prior, TopicPartition};
