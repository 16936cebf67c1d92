//! Strategy, status and kind enums. Each is stored as its snake_case name in the database and
//! written the same way in JSON; `FromStr` accepts exactly those names.

use std::fmt;
use std::str::FromStr;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A name that is not one of an enum's values.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {what} {value:?}; expected one of: {expected}")]
pub struct ParseEnumError {
    pub what: &'static str,
    pub value: String,
    pub expected: String,
}

macro_rules! wire_enum {
    (
        $(#[$meta:meta])*
        $name:ident, $what:literal { $( $(#[$vmeta:meta])* $variant:ident = $text:literal ),+ $(,)? }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema, utoipa::ToSchema)]
        #[serde(rename_all = "snake_case")]
        pub enum $name {
            $( $(#[$vmeta])* #[serde(rename = $text)] $variant ),+
        }

        impl $name {
            /// Every value, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            /// The snake_case name used in JSON and in the database.
            pub const fn as_str(self) -> &'static str {
                match self { $($name::$variant => $text),+ }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl FromStr for $name {
            type Err = ParseEnumError;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                match s {
                    $($text => Ok($name::$variant),)+
                    _ => Err(ParseEnumError {
                        what: $what,
                        value: s.to_owned(),
                        expected: [$($text),+].join(", "),
                    }),
                }
            }
        }
    };
}

wire_enum! {
    /// How the admin picks the partition (and so the worker) for a trigger; XXL-JOB's routing
    /// strategies.
    RouteStrategy, "route strategy" {
        First = "first",
        Last = "last",
        Round = "round",
        Random = "random",
        ConsistentHash = "consistent_hash",
        LeastFrequentlyUsed = "least_frequently_used",
        LeastRecentlyUsed = "least_recently_used",
        Failover = "failover",
        Busyover = "busyover",
        ShardingBroadcast = "sharding_broadcast",
    }
}

wire_enum! {
    /// What a worker does with a trigger that arrives while a run of the same job is running or
    /// waiting; XXL-JOB's block strategies.
    BlockStrategy, "block strategy" {
        /// Queue behind the running run, in order.
        SerialExecution = "serial_execution",
        /// Drop the new trigger (recorded `discarded`).
        DiscardLater = "discard_later",
        /// Cancel the running run (recorded `cancelled`) and run the new one.
        CoverEarly = "cover_early",
    }
}

wire_enum! {
    /// What the admin does with fire times it finds later than the misfire threshold.
    MisfireStrategy, "misfire strategy" {
        /// Record each missed fire time as `misfired` and skip it.
        DoNothing = "do_nothing",
        /// One run now for all missed fire times.
        FireOnceNow = "fire_once_now",
        /// Every missed run, as soon as possible.
        FireAll = "fire_all",
    }
}

wire_enum! {
    /// What a fire does while a run of the same job is in flight anywhere in the cluster
    /// (Temporal's overlap policies); block strategies still apply on each worker.
    Overlap, "overlap policy" {
        /// Runs overlap freely (the default).
        Allow = "allow",
        /// The fire is recorded `skipped`.
        Skip = "skip",
        /// One fire waits for the run in flight; later ones are recorded `skipped`.
        BufferOne = "buffer_one",
        /// Every fire waits, and they run one after the other.
        BufferAll = "buffer_all",
        /// The run in flight is cancelled and the newest fire runs once it ended.
        CancelOther = "cancel_other",
    }
}

wire_enum! {
    /// The status of one run (one row of `triggers`). See `docs/states.md`.
    RunStatus, "run status" {
        /// Waiting for a slot of its concurrency group, or for its job's overlap policy.
        Queued = "queued",
        Scheduled = "scheduled",
        Publishing = "publishing",
        Published = "published",
        Running = "running",
        Succeeded = "succeeded",
        Failed = "failed",
        TimedOut = "timed_out",
        Discarded = "discarded",
        Cancelled = "cancelled",
        Lost = "lost",
        Misfired = "misfired",
        /// Not run: its job's overlap policy passed it over (a run of the job was in flight).
        Skipped = "skipped",
    }
}

impl RunStatus {
    /// A terminal status never changes again.
    pub const fn is_terminal(self) -> bool {
        matches!(
            self,
            RunStatus::Succeeded
                | RunStatus::Failed
                | RunStatus::TimedOut
                | RunStatus::Discarded
                | RunStatus::Cancelled
                | RunStatus::Lost
                | RunStatus::Misfired
                | RunStatus::Skipped
        )
    }

    /// Statuses a worker may report in a `finished` event.
    pub const fn is_worker_outcome(self) -> bool {
        matches!(
            self,
            RunStatus::Succeeded
                | RunStatus::Failed
                | RunStatus::TimedOut
                | RunStatus::Discarded
                | RunStatus::Cancelled
        )
    }
}

wire_enum! {
    /// Why a run exists.
    TriggerKind, "trigger kind" {
        Cron = "cron",
        FixRate = "fix_rate",
        FixDelay = "fix_delay",
        Once = "once",
        Manual = "manual",
        Api = "api",
        Retry = "retry",
        Misfire = "misfire",
        Child = "child",
        Replay = "replay",
        // A run of a workflow node: its trigger message carries the workflow run, the node's key
        // and its parents' outputs. (A `//` comment: a doc comment on one variant would turn
        // the generated JSON Schema and OpenAPI enum into a `oneOf`.)
        Workflow = "workflow",
    }
}

impl TriggerKind {
    /// A run of a job's schedule (its misfire strategy applies to it), not one asked for.
    pub fn is_schedule(self) -> bool {
        matches!(
            self,
            TriggerKind::Cron
                | TriggerKind::FixRate
                | TriggerKind::FixDelay
                | TriggerKind::Once
                | TriggerKind::Misfire
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_through_json_and_from_str() {
        for s in RouteStrategy::ALL {
            let json = serde_json::to_string(s).unwrap();
            assert_eq!(json, format!("\"{}\"", s.as_str()));
            assert_eq!(s.as_str().parse::<RouteStrategy>().unwrap(), *s);
        }
        for s in RunStatus::ALL {
            assert_eq!(s.as_str().parse::<RunStatus>().unwrap(), *s);
        }
        assert_eq!(RouteStrategy::ALL.len(), 10);
    }

    #[test]
    fn unknown_name_lists_the_valid_ones() {
        let e = "sometimes".parse::<BlockStrategy>().unwrap_err();
        assert_eq!(
            e.to_string(),
            "unknown block strategy \"sometimes\"; expected one of: serial_execution, discard_later, cover_early"
        );
    }

    #[test]
    fn terminal_statuses() {
        assert!(!RunStatus::Running.is_terminal());
        assert!(RunStatus::Misfired.is_terminal());
        assert!(!RunStatus::Misfired.is_worker_outcome());
        assert!(RunStatus::TimedOut.is_worker_outcome());
    }
}
