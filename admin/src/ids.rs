//! The admin's own identifiers: which shard, which lease epoch, which admin. Newtypes keep a
//! shard number from being passed as an epoch (both are integers in `scheduler_lease`).

use std::fmt;

use serde::{Deserialize, Serialize};

/// A scheduler shard, `0 .. shard_count` (a job's shard is `id % shard_count`). Stored as
/// `int` in PostgreSQL, which has no unsigned types: [`ShardId::to_db`] and
/// [`ShardId::from_db`] convert.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ShardId(pub u32);

/// The bare number, so that shard lists in logs read `[3, 7]`.
impl fmt::Debug for ShardId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// A shard number read from the database that is not one (negative).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("shard {0} is not a shard number")]
pub struct BadShard(pub i32);

impl ShardId {
    /// The value bound to an `int` column. Shards are fewer than `i32::MAX` (the shard count is
    /// itself stored as `int`), so this never wraps.
    pub fn to_db(self) -> i32 {
        self.0 as i32
    }

    pub fn from_db(shard: i32) -> Result<Self, BadShard> {
        u32::try_from(shard).map(Self).map_err(|_| BadShard(shard))
    }

    /// The values bound to an `int[]` parameter.
    pub fn to_db_all<'a>(shards: impl IntoIterator<Item = &'a ShardId>) -> Vec<i32> {
        shards.into_iter().map(|s| s.to_db()).collect()
    }
}

impl fmt::Display for ShardId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// The epoch of a shard's lease: it grows each time the shard changes hands, and every write that
/// depends on the lease names the epoch it was made under.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, sqlx::Type)]
#[serde(transparent)]
#[sqlx(transparent)]
pub struct LeaseEpoch(pub i64);

/// The bare number, as in logs before it had a type.
impl fmt::Debug for LeaseEpoch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl fmt::Display for LeaseEpoch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// An admin process, as it names itself in `scheduler_lease.holder`, the `admins` table and
/// fence records (`CADENZA_ADMIN_ID`, or host name and process id).
#[derive(
    Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, sqlx::Type,
)]
#[serde(transparent)]
#[sqlx(transparent)]
pub struct AdminId(String);

impl AdminId {
    pub fn new(id: impl Into<String>) -> Self {
        Self(id.into())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl From<String> for AdminId {
    fn from(id: String) -> Self {
        Self(id)
    }
}

impl From<&str> for AdminId {
    fn from(id: &str) -> Self {
        Self(id.to_owned())
    }
}

impl From<AdminId> for String {
    fn from(id: AdminId) -> Self {
        id.0
    }
}

impl fmt::Display for AdminId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shard_ids_round_trip_through_the_database_type() {
        assert_eq!(ShardId::from_db(ShardId(63).to_db()), Ok(ShardId(63)));
        assert_eq!(ShardId::from_db(-1), Err(BadShard(-1)));
        assert_eq!(ShardId::to_db_all(&[ShardId(1), ShardId(2)]), vec![1, 2]);
    }

    #[test]
    fn ids_serialize_as_their_value() {
        assert_eq!(serde_json::to_string(&ShardId(3)).unwrap(), "3");
        assert_eq!(serde_json::to_string(&LeaseEpoch(7)).unwrap(), "7");
        assert_eq!(
            serde_json::to_string(&AdminId::from("a-1")).unwrap(),
            "\"a-1\""
        );
    }
}
