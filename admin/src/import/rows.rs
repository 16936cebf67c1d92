//! One exported database row: column name → value. Values are what SQL exports hold: text, a
//! number or null.

use std::collections::BTreeMap;
use std::fmt;

use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

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
