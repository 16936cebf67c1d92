use chrono::{DateTime, Utc};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// When a job fires, as written in the HTTP API (`"schedule": {"kind": "cron", …}`).
///
/// This is the wire shape only; the admin validates it (cron syntax, time zone, intervals) and
/// computes fire times.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema, utoipa::ToSchema)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Schedule {
    /// A cron expression with seconds (6 fields) or without (5 fields, fires at second 0),
    /// evaluated in an IANA time zone (default `UTC`).
    Cron {
        expr: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        timezone: Option<String>,
    },
    /// Every `every_ms` milliseconds from the previous fire time.
    FixRate {
        /// 1 ms to 366 days.
        #[schema(minimum = 1, maximum = 31_622_400_000i64)]
        every_ms: i64,
    },
    /// `delay_ms` milliseconds after the previous run finished.
    FixDelay {
        /// 1 ms to 366 days.
        #[schema(minimum = 1, maximum = 31_622_400_000i64)]
        delay_ms: i64,
    },
    /// A single instant.
    Once { at: DateTime<Utc> },
    /// Never by itself: manual and API triggers only. (A struct variant, so that serde refuses
    /// unknown fields here too: it ignores them next to the tag of a unit variant.)
    None {},
}

impl Schedule {
    /// The schedule kind's name (`cron`, `fix_rate`, …).
    pub fn kind(&self) -> &'static str {
        match self {
            Schedule::Cron { .. } => "cron",
            Schedule::FixRate { .. } => "fix_rate",
            Schedule::FixDelay { .. } => "fix_delay",
            Schedule::Once { .. } => "once",
            Schedule::None {} => "none",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_shapes_parse() {
        let s: Schedule = serde_json::from_str(
            r#"{"kind":"cron","expr":"*/5 * * * * *","timezone":"Europe/Paris"}"#,
        )
        .unwrap();
        assert_eq!(
            s,
            Schedule::Cron {
                expr: "*/5 * * * * *".into(),
                timezone: Some("Europe/Paris".into())
            }
        );
        let s: Schedule = serde_json::from_str(r#"{"kind":"fix_rate","every_ms":1000}"#).unwrap();
        assert_eq!(s, Schedule::FixRate { every_ms: 1000 });
        let s: Schedule = serde_json::from_str(r#"{"kind":"none"}"#).unwrap();
        assert_eq!(s.kind(), "none");
        assert_eq!(serde_json::to_string(&s).unwrap(), r#"{"kind":"none"}"#);
        assert!(
            serde_json::from_str::<Schedule>(r#"{"kind":"none","every_ms":5}"#).is_err(),
            "an unknown field next to kind none is refused"
        );
        assert!(serde_json::from_str::<Schedule>(r#"{"kind":"hourly"}"#).is_err());
    }
}
