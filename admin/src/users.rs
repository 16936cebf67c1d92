//! Users in PostgreSQL: creating them (from `cadenza-admin users create`, the bootstrap
//! variable or the API), with their names, roles and job-type patterns checked first.

use secrecy::{ExposeSecret, SecretString};
use sqlx::{PgConnection, PgPool};

use crate::auth::{check_pattern, password, Role};
use crate::jobs::FieldError;

/// Longest user name.
pub const MAX_NAME_LEN: usize = 100;

/// A user to create.
#[derive(Debug, Clone)]
pub struct NewUser {
    pub name: String,
    pub role: Role,
    pub job_types: Vec<String>,
    /// The password in plain text (only its hash is stored).
    pub password: SecretString,
}

fn field(field: &str, message: impl Into<String>) -> FieldError {
    FieldError {
        field: field.to_owned(),
        message: message.into(),
    }
}

/// Why a user name is not acceptable.
pub fn check_name(name: &str) -> Result<(), String> {
    if name.trim().is_empty() || name.len() > MAX_NAME_LEN {
        return Err(format!("must be 1 to {MAX_NAME_LEN} characters"));
    }
    if name.chars().any(|c| c.is_control() || c.is_whitespace()) {
        return Err("must not contain spaces or control characters".into());
    }
    Ok(())
}

impl NewUser {
    /// Checks every field, naming the first one that is wrong.
    pub fn check(&self) -> Result<(), FieldError> {
        check_name(&self.name).map_err(|m| field("name", m))?;
        for (i, p) in self.job_types.iter().enumerate() {
            check_pattern(p).map_err(|m| field(&format!("job_types[{i}]"), m))?;
        }
        if self.role == Role::Admin && !self.job_types.is_empty() {
            return Err(field(
                "job_types",
                "an admin sees every job type; give patterns to operators and viewers",
            ));
        }
        password::check(self.password.expose_secret()).map_err(|m| field("password", m))
    }
}

/// Why creating a user failed.
#[derive(Debug, thiserror::Error)]
pub enum CreateError {
    #[error("{}: {}", .0.field, .0.message)]
    Invalid(FieldError),
    #[error("a user named {0:?} exists already")]
    Exists(String),
    #[error(transparent)]
    Hash(#[from] password::HashError),
    /// No hashing slot came free, or the task that hashed the password panicked.
    #[error(transparent)]
    Slot(#[from] password::SlotError),
    #[error(transparent)]
    Database(#[from] sqlx::Error),
}

/// Why `CADENZA_BOOTSTRAP_ADMIN` could not be applied.
#[derive(Debug, thiserror::Error)]
pub enum BootstrapError {
    #[error("CADENZA_BOOTSTRAP_ADMIN must be NAME:PASSWORD")]
    Format,
    #[error(transparent)]
    Database(#[from] sqlx::Error),
    #[error("CADENZA_BOOTSTRAP_ADMIN: {0}")]
    Create(CreateError),
}

/// Hashes the password and inserts the user; its id. `only_if_none`: insert only when the table
/// is empty (the bootstrap), else return `Ok(None)`.
pub async fn create(
    conn: &mut PgConnection,
    user: &NewUser,
    only_if_none: bool,
) -> Result<Option<i64>, CreateError> {
    user.check().map_err(CreateError::Invalid)?;
    let plain = user.password.clone();
    let hash = password::hash_in_slot(plain).await??;
    let sql = if only_if_none {
        "INSERT INTO users (name, role, job_types, password_hash)
         SELECT $1, $2, $3, $4 WHERE NOT EXISTS (SELECT 1 FROM users)
         RETURNING id"
    } else {
        "INSERT INTO users (name, role, job_types, password_hash) VALUES ($1, $2, $3, $4)
         RETURNING id"
    };
    let inserted: Result<Option<i64>, sqlx::Error> = sqlx::query_scalar(sql)
        .bind(&user.name)
        .bind(user.role.as_str())
        .bind(&user.job_types)
        .bind(&hash)
        .fetch_optional(conn)
        .await;
    match inserted {
        Ok(id) => Ok(id),
        Err(sqlx::Error::Database(e)) if e.constraint() == Some("users_name") => {
            Err(CreateError::Exists(user.name.clone()))
        }
        Err(e) => Err(CreateError::Database(e)),
    }
}

/// `CADENZA_BOOTSTRAP_ADMIN` (`name:password`): the first admin, created when the users table is
/// empty; ignored (with a log line) once any user exists.
pub async fn bootstrap(pool: &PgPool, spec: &str) -> Result<(), BootstrapError> {
    let Some((name, pass)) = spec.split_once(':') else {
        return Err(BootstrapError::Format);
    };
    let user = NewUser {
        name: name.to_owned(),
        role: Role::Admin,
        job_types: Vec::new(),
        password: SecretString::from(pass),
    };
    let mut conn = pool.acquire().await?;
    match create(&mut conn, &user, true).await {
        Ok(Some(id)) => {
            tracing::info!(
                user = name,
                user_id = id,
                "first admin created from CADENZA_BOOTSTRAP_ADMIN"
            );
            Ok(())
        }
        Ok(None) => {
            tracing::info!("users exist: CADENZA_BOOTSTRAP_ADMIN is ignored (remove it)");
            Ok(())
        }
        Err(e) => Err(BootstrapError::Create(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_output_hides_the_password() {
        let user = NewUser {
            name: "ada".into(),
            role: Role::Viewer,
            job_types: Vec::new(),
            password: SecretString::from("correct horse battery"),
        };
        assert!(user.check().is_ok());
        assert!(!format!("{user:?}").contains("correct horse"));
    }
}
