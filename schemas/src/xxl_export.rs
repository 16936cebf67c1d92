//! Rows of an XXL-JOB database export, as `cadenza import xxl-job` sends them to
//! `POST /api/import/xxl-job`: column name → value, where values are what SQL exports hold (text,
//! a number or null). Also which columns the import reads, so the CLI sends only those.

use std::collections::BTreeMap;
use std::fmt;

use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The source name when none is given: one XXL-JOB installation.
pub const DEFAULT_SOURCE: &str = "xxl-job";
/// The job type GLUE_SHELL jobs get when none is given: the worker's `shell` built-in.
pub const DEFAULT_SHELL_JOB_TYPE: &str = "shell";
/// Longest source name.
pub const MAX_SOURCE_LEN: usize = 100;

/// The columns of `xxl_job_info` the import reads; the others are ignored.
pub const JOB_COLUMNS: &[&str] = &[
    "id",
    "job_group",
    "job_desc",
    "alarm_email",
    "schedule_type",
    "schedule_conf",
    "job_cron",
    "misfire_strategy",
    "executor_route_strategy",
    "executor_handler",
    "executor_param",
    "executor_block_strategy",
    "executor_timeout",
    "executor_fail_retry_count",
    "glue_type",
    "glue_source",
    "child_jobid",
    "trigger_status",
];
/// The columns of `xxl_job_group` the import reads.
pub const GROUP_COLUMNS: &[&str] = &["id", "app_name"];

/// The columns of a row the import reads (the CLI sends only these). A GLUE source is kept for
/// GLUE_SHELL rows only: other GLUE sources are not carried over.
pub fn columns_read(row: &Row, group: bool) -> Row {
    let wanted = if group { GROUP_COLUMNS } else { JOB_COLUMNS };
    let shell = row
        .iter()
        .find(|(k, _)| k.trim().eq_ignore_ascii_case("glue_type"))
        .and_then(|(_, v)| v.text())
        .is_some_and(|g| g.trim().eq_ignore_ascii_case("GLUE_SHELL"));
    row.iter()
        .filter(|(k, _)| {
            let k = k.trim().to_ascii_lowercase();
            wanted.contains(&k.as_str()) && (group || shell || k != "glue_source")
        })
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// One value of an exported row.
#[derive(Debug, Clone, PartialEq)]
pub enum Cell {
    Null,
    Number(serde_json::Number),
    Text(String),
}

/// An exported row: column name (any case) → value.
pub type Row = BTreeMap<String, Cell>;

impl Cell {
    /// The value as text (a number in its JSON form); `None` for null.
    pub fn text(&self) -> Option<String> {
        match self {
            Cell::Null => None,
            Cell::Number(n) => Some(n.to_string()),
            Cell::Text(s) => Some(s.clone()),
        }
    }
}

impl Serialize for Cell {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Cell::Null => s.serialize_none(),
            Cell::Number(n) => n.serialize(s),
            Cell::Text(t) => s.serialize_str(t),
        }
    }
}

impl<'de> Deserialize<'de> for Cell {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct CellVisitor;
        impl Visitor<'_> for CellVisitor {
            type Value = Cell;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("text, a number or null")
            }
            fn visit_unit<E: de::Error>(self) -> Result<Cell, E> {
                Ok(Cell::Null)
            }
            fn visit_none<E: de::Error>(self) -> Result<Cell, E> {
                Ok(Cell::Null)
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Cell, E> {
                Ok(Cell::Text(v.to_owned()))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Cell, E> {
                Ok(Cell::Text(v))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Cell, E> {
                Ok(Cell::Number(v.into()))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Cell, E> {
                Ok(Cell::Number(v.into()))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Cell, E> {
                serde_json::Number::from_f64(v)
                    .map(Cell::Number)
                    .ok_or_else(|| E::custom("a number that is not finite"))
            }
        }
        d.deserialize_any(CellVisitor)
    }
}

/// The OpenAPI schema of an array of rows: objects whose values are text, numbers or null
/// (`schema_with` of the fields holding rows).
pub fn rows_schema() -> utoipa::openapi::schema::Array {
    use utoipa::openapi::schema::{
        AdditionalProperties, ArrayBuilder, ObjectBuilder, SchemaType, Type,
    };
    let value = ObjectBuilder::new()
        .schema_type(SchemaType::from_iter([
            Type::String,
            Type::Number,
            Type::Null,
        ]))
        .description(Some("A column's value: text, a number or null."))
        .build();
    let row = ObjectBuilder::new()
        .schema_type(SchemaType::new(Type::Object))
        .description(Some("One exported row: column name → value."))
        .additional_properties(Some(AdditionalProperties::RefOr(value.into())))
        .build();
    ArrayBuilder::new().items(row).build()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(v: serde_json::Value) -> Row {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn only_the_columns_read_are_sent() {
        let bean = columns_read(
            &row(
                serde_json::json!({"id": 1, "glue_type": "BEAN", "glue_source": "big",
                "author": "x", "executor_handler": "h"}),
            ),
            false,
        );
        assert!(!bean.contains_key("glue_source") && !bean.contains_key("author"));
        assert!(bean.contains_key("executor_handler"));
        let shell = columns_read(
            &row(serde_json::json!({"id": 1, " GLUE_TYPE": "glue_shell", "glue_source": "echo"})),
            false,
        );
        assert!(shell.contains_key("glue_source"));
        let group = columns_read(
            &row(serde_json::json!({"id": 1, "app_name": "a", "x": 2})),
            true,
        );
        assert_eq!(group.len(), 2);
    }

    #[test]
    fn cells_are_text_numbers_or_null() {
        let row: Row =
            serde_json::from_str(r#"{"id": 3, "job_desc": "x", "alarm_email": null, "t": 1.5}"#)
                .unwrap();
        assert_eq!(row["id"].text().as_deref(), Some("3"));
        assert_eq!(row["job_desc"], Cell::Text("x".into()));
        assert_eq!(row["alarm_email"], Cell::Null);
        assert_eq!(row["t"].text().as_deref(), Some("1.5"));
        let e = serde_json::from_str::<Row>(r#"{"trigger_status": true}"#).unwrap_err();
        assert!(e.to_string().contains("text, a number or null"), "{e}");
        assert!(serde_json::from_str::<Row>(r#"{"a": [1]}"#).is_err());
        assert_eq!(
            serde_json::to_string(&row).unwrap(),
            r#"{"alarm_email":null,"id":3,"job_desc":"x","t":1.5}"#
        );
    }
}
