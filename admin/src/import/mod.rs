//! Importing job definitions from XXL-JOB (`cadenza import xxl-job`, `POST /api/import/xxl-job`).
//!
//! - [`rows`] — an exported row: column name → text, number or null ([`Cell`]), as the API
//!   receives it.
//! - [`files`] — reading export files into rows (the CLI's side): `mysql --batch` tab-separated
//!   output, RFC 4180 CSV, JSON (an array of rows, `{"xxl_job_info": …, "xxl_job_group": …}`,
//!   mysqlsh's `{"rows": …}`, phpMyAdmin's export, JSON lines).
//! - [`xxl`] — the mapping of `xxl_job_info` rows to [`crate::jobs::JobSpec`]s and the report of
//!   what an import does with each row; pure, so a dry run and a real import decide alike.
//!
//! The API side (the transaction, the idempotency table `xxl_imports`) is `api/import.rs`.

pub mod files;
pub mod rows;
pub mod xxl;

pub use rows::{Cell, Row};
