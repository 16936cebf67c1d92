//! The audit trail: every write, and every refused write attempt, as a row of `audit`
//! (migration 0009). A change's row is written in the change's own transaction, so a change that
//! fails leaves none and one that commits always has one.

use serde_json::Value;
use sqlx::PgConnection;

use crate::auth::Principal;

/// One audit row.
#[derive(Debug, Clone, Default)]
pub struct Entry {
    /// What was done: `job.create`, `job.update`, `job.delete`, `job.enable`, `job.disable`,
    /// `job.trigger`, `replay`, `user.create`, `token.create`, `login`, …
    pub action: String,
    pub job_id: Option<i64>,
    pub job_type: Option<String>,
    /// What else it concerned (a user name, a token id).
    pub target: Option<String>,
    pub before: Option<Value>,
    pub after: Option<Value>,
    pub detail: Option<String>,
}

impl Entry {
    pub fn new(action: &str) -> Self {
        Entry {
            action: action.to_owned(),
            ..Entry::default()
        }
    }

    pub fn job(mut self, id: i64, job_type: &str) -> Self {
        self.job_id = Some(id);
        self.job_type = Some(job_type.to_owned());
        self
    }

    pub fn target(mut self, target: impl Into<String>) -> Self {
        self.target = Some(target.into());
        self
    }

    pub fn before(mut self, v: Value) -> Self {
        self.before = Some(v);
        self
    }

    pub fn after(mut self, v: Value) -> Self {
        self.after = Some(v);
        self
    }

    pub fn detail(mut self, d: impl Into<String>) -> Self {
        self.detail = Some(d.into());
        self
    }
}

/// Who did it and from where.
#[derive(Debug, Clone)]
pub struct Actor {
    pub name: String,
    pub user_id: Option<i64>,
    pub source: Option<String>,
}

impl Actor {
    pub fn of(p: &Principal, source: Option<String>) -> Self {
        Actor {
            name: p.actor.clone(),
            user_id: p.user_id,
            source,
        }
    }

    pub fn anonymous(source: Option<String>) -> Self {
        Actor {
            name: "anonymous".into(),
            user_id: None,
            source,
        }
    }
}

/// Records a write that is being made, inside its transaction.
pub async fn done(conn: &mut PgConnection, actor: &Actor, entry: Entry) -> sqlx::Result<()> {
    insert(conn, actor, entry, "done").await
}

/// Records a write attempt that was refused.
pub async fn refused(conn: &mut PgConnection, actor: &Actor, entry: Entry) -> sqlx::Result<()> {
    insert(conn, actor, entry, "refused").await
}

async fn insert(
    conn: &mut PgConnection,
    actor: &Actor,
    e: Entry,
    outcome: &str,
) -> sqlx::Result<()> {
    sqlx::query(
        "INSERT INTO audit (actor, user_id, source, action, outcome, job_id, job_type, target,
                            before, after, detail)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
    )
    .bind(&actor.name)
    .bind(actor.user_id)
    .bind(&actor.source)
    .bind(&e.action)
    .bind(outcome)
    .bind(e.job_id)
    .bind(&e.job_type)
    .bind(&e.target)
    .bind(e.before.map(sqlx::types::Json))
    .bind(e.after.map(sqlx::types::Json))
    .bind(&e.detail)
    .execute(conn)
    .await?;
    Ok(())
}
