//! Cadenza's scenario tests, one module per area, in one test binary: each test starts its own
//! PostgreSQL, broker, admins and workers (see the `cadenza_integration` harness) and checks
//! what a user would observe.
//!
//! Run one area with a filter on the module path, e.g.
//! `cargo nextest run -p cadenza-integration --test scenarios worker_chaos::`.

mod accounts;
mod block_strategies;
mod broker_chaos;
mod cli;
mod console;
mod contract;
mod delivery_record;
mod flow_control;
mod frozen_admin;
mod harness;
mod harness_cluster;
mod hostile;
mod import_xxl;
mod metrics;
mod operations;
mod read_back;
mod reliability;
mod rolling_restart;
mod routing;
mod scheduler_core;
mod topics;
mod tracing;
mod walking_skeleton;
mod worker_chaos;
mod worker_fence;
mod worker_misc;
mod workflow_api;
mod workflows;
mod xxl_bridge;
mod xxl_protocol;
