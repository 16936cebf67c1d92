//! Who is asking, and what they may do.
//!
//! Three roles, as XXL-JOB's admin and normal users with per-executor-group rights:
//!
//! * `admin`: everything, including users and other people's tokens;
//! * `operator`: creates, edits, triggers, replays and deletes jobs, and sees runs, of the job
//!   types its patterns match (`billing.*`);
//! * `viewer`: reads the same, writes nothing.
//!
//! A request is made by a [`Principal`]: the service token (`CADENZA_API_TOKEN`, role admin), a
//! personal API token (its owner's role and patterns at the time of the request) or a console
//! session (a cookie, with a CSRF token for writes). What a route needs is declared once, in
//! [`rules`]; job-type scope is checked where the job type is known, through
//! [`Principal::require`].

pub(crate) mod password;
pub mod rules;
pub(crate) mod secret;

use std::fmt;
use std::str::FromStr;

use secrecy::SecretString;
use serde::{Deserialize, Serialize};

/// A user's role: `viewer` reads, `operator` also writes jobs (both within their job-type
/// patterns), `admin` does everything.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, utoipa::ToSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    Viewer,
    Operator,
    Admin,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Viewer => "viewer",
            Role::Operator => "operator",
            Role::Admin => "admin",
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Role {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "viewer" => Ok(Role::Viewer),
            "operator" => Ok(Role::Operator),
            "admin" => Ok(Role::Admin),
            other => Err(format!(
                "{other:?} is not a role: use admin, operator or viewer"
            )),
        }
    }
}

/// Whether the job-type pattern `pattern` (`*` matches any run of characters, including none)
/// matches `job_type`.
pub fn pattern_matches(pattern: &str, job_type: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    if parts.len() == 1 {
        return pattern == job_type;
    }
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if !job_type.starts_with(first) || job_type.len() < first.len() + last.len() {
        return false;
    }
    let mut rest = &job_type[first.len()..job_type.len() - last.len()];
    if !job_type.ends_with(last) {
        return false;
    }
    for middle in &parts[1..parts.len() - 1] {
        match rest.find(middle) {
            Some(at) => rest = &rest[at + middle.len()..],
            None => return false,
        }
    }
    true
}

/// Why a pattern is not acceptable: job-type characters and `*` only.
pub fn check_pattern(pattern: &str) -> Result<(), String> {
    if pattern.is_empty() || pattern.len() > 249 {
        return Err("must be 1 to 249 characters".into());
    }
    if let Some(c) = pattern
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '*')))
    {
        return Err(format!(
            "{pattern:?} has {c:?}: a pattern is a job type with * as a wildcard, such as billing.*"
        ));
    }
    Ok(())
}

/// A pattern as a SQL `LIKE` pattern (`_` and `%` escaped, `*` → `%`).
pub fn like_pattern(pattern: &str) -> String {
    let mut out = String::with_capacity(pattern.len());
    for c in pattern.chars() {
        match c {
            '*' => out.push('%'),
            '_' | '%' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            c => out.push(c),
        }
    }
    out
}

/// How the request proved who it is.
#[derive(Debug, Clone)]
pub enum Via {
    /// `CADENZA_API_TOKEN`, or no token configured (an admin on loopback only).
    Service,
    /// A personal API token (its id).
    Token(i64),
    /// A console session cookie; writes must carry its CSRF token.
    Session { csrf: SecretString },
}

/// Who makes a request.
#[derive(Debug, Clone)]
pub struct Principal {
    /// As recorded in the audit: a user name, or `service`.
    pub actor: String,
    pub user_id: Option<i64>,
    pub role: Role,
    /// Job-type patterns (ignored for admins).
    pub patterns: Vec<String>,
    pub via: Via,
    /// The client's address, as recorded in the audit.
    pub source: Option<String>,
}

/// What is done to a job type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    Read,
    Write,
}

impl Principal {
    /// The service token's principal.
    pub fn service() -> Self {
        Principal {
            actor: "service".into(),
            user_id: None,
            role: Role::Admin,
            patterns: Vec::new(),
            via: Via::Service,
            source: None,
        }
    }

    /// The audit's view of this principal.
    pub fn actor(&self) -> crate::audit::Actor {
        crate::audit::Actor::of(self, self.source.clone())
    }

    /// Whether this principal may `access` jobs and runs of `job_type`.
    pub fn may(&self, access: Access, job_type: &str) -> bool {
        match self.role {
            Role::Admin => true,
            Role::Viewer if access == Access::Write => false,
            _ => self.patterns.iter().any(|p| pattern_matches(p, job_type)),
        }
    }

    /// `Ok` when [`Principal::may`], else the `403 forbidden` naming what is missing.
    pub fn require(&self, access: Access, job_type: &str) -> Result<(), crate::api::ApiError> {
        if self.may(access, job_type) {
            return Ok(());
        }
        let what = match access {
            Access::Read => "see",
            Access::Write => "change",
        };
        let why = if self.role == Role::Viewer && access == Access::Write {
            "a viewer changes nothing; an operator or admin can".to_owned()
        } else if self.patterns.is_empty() {
            "no job-type patterns are granted to them".to_owned()
        } else {
            format!("their patterns are {}", self.patterns.join(", "))
        };
        Err(crate::api::ApiError::forbidden(format!(
            "{} ({}) may not {what} jobs of type {job_type}: {why}",
            self.actor, self.role
        )))
    }

    /// `None` when every job type is visible (an admin), else the `LIKE` patterns of those that
    /// are, for SQL filters.
    pub fn visible_like(&self) -> Option<Vec<String>> {
        (self.role != Role::Admin).then(|| self.patterns.iter().map(|p| like_pattern(p)).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_match_like_globs() {
        assert!(pattern_matches("billing.*", "billing.invoice"));
        assert!(pattern_matches("billing.*", "billing."));
        assert!(!pattern_matches("billing.*", "billingx"));
        assert!(!pattern_matches("billing.*", "ops.billing.x"));
        assert!(pattern_matches("*", "anything"));
        assert!(pattern_matches("*.daily", "reports.daily"));
        assert!(pattern_matches("a*b*c", "a-x-b-y-c"));
        assert!(!pattern_matches("a*b*c", "a-c-b"));
        assert!(pattern_matches("exact", "exact"));
        assert!(!pattern_matches("exact", "exact2"));
        assert!(!pattern_matches("ab*ba", "aba"));
    }

    #[test]
    fn like_patterns_escape_what_like_treats_specially() {
        assert_eq!(like_pattern("billing_x.*"), "billing\\_x.%");
    }

    #[test]
    fn roles_scope_reads_and_writes() {
        let op = Principal {
            actor: "olga".into(),
            user_id: Some(2),
            role: Role::Operator,
            patterns: vec!["billing.*".into()],
            via: Via::Token(1),
            source: None,
        };
        assert!(op.may(Access::Write, "billing.invoice"));
        assert!(!op.may(Access::Read, "ops.cleanup"));
        let viewer = Principal {
            role: Role::Viewer,
            ..op.clone()
        };
        assert!(viewer.may(Access::Read, "billing.invoice"));
        assert!(!viewer.may(Access::Write, "billing.invoice"));
        let e = viewer
            .require(Access::Write, "billing.invoice")
            .unwrap_err();
        assert_eq!(e.code, "forbidden");
        let e = op.require(Access::Read, "ops.cleanup").unwrap_err();
        assert!(e.message.contains("billing.*"), "{}", e.message);
        assert!(Principal::service().may(Access::Write, "anything"));
    }
}
