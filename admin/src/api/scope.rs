//! References from one definition to jobs (a job's children, a workflow's nodes): a caller may
//! only point at jobs it may see, and an id it may not see answers exactly as an id of no job,
//! so that references tell nobody which jobs exist outside their patterns.

use std::collections::HashMap;

use sqlx::PgConnection;

use super::ApiResult;
use crate::auth::{Access, Principal};

/// The job type of each job among `ids` that `p` may see; ids of no job, and of jobs outside
/// `p`'s patterns, are absent.
pub(super) async fn visible_job_types(
    conn: &mut PgConnection,
    p: &Principal,
    ids: &[i64],
) -> ApiResult<HashMap<i64, String>> {
    let rows: Vec<(i64, String)> =
        sqlx::query_as("SELECT id, job_type FROM jobs WHERE id = ANY($1)")
            .bind(ids)
            .fetch_all(conn)
            .await?;
    Ok(rows
        .into_iter()
        .filter(|(_, job_type)| p.may(Access::Read, job_type))
        .collect())
}
