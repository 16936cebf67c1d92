//! XXL-JOB's executor protocol, for running jobs on existing XXL-JOB executors: the calls an
//! admin makes to an executor ([`protocol`]) and the endpoints an executor calls on its admin
//! ([`admin_side`]).
pub mod admin_side;
pub mod bridge;
pub mod protocol;
pub mod share;
