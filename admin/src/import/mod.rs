//! Importing job definitions from XXL-JOB (`cadenza import xxl-job`, `POST /api/import/xxl-job`).
//!
//! - [`Row`] — an exported row: column name → text, number or null ([`Cell`]), as the API
//!   receives it (`cadenza_schemas::xxl_export`, shared with the CLI, which reads the export
//!   files).
//! - [`xxl`] — the mapping of `xxl_job_info` rows to [`crate::jobs::JobSpec`]s and the report of
//!   what an import does with each row; pure, so a dry run and a real import decide alike.
//!
//! The API side (the transaction, the idempotency table `xxl_imports`) is `api/import.rs`.

pub mod xxl;

pub use cadenza_schemas::xxl_export::{Cell, Row};
