//! JSON Schema documents generated from the wire types, committed under `schemas/json/`.

use schemars::{schema_for, Schema};

/// `(file name, schema)` for every message type that crosses a process boundary.
pub fn all() -> Vec<(&'static str, Schema)> {
    vec![
        ("trigger_record.json", schema_for!(crate::TriggerRecord)),
        ("result_event.json", schema_for!(crate::ResultEvent)),
        ("heartbeat.json", schema_for!(crate::Heartbeat)),
        ("dlq_message.json", schema_for!(crate::DlqMessage)),
        ("progress_record.json", schema_for!(crate::ProgressRecord)),
        ("progress_claim.json", schema_for!(crate::ProgressClaim)),
        ("schedule.json", schema_for!(crate::Schedule)),
        ("run_status.json", schema_for!(crate::RunStatus)),
        ("trigger_kind.json", schema_for!(crate::TriggerKind)),
        ("route_strategy.json", schema_for!(crate::RouteStrategy)),
        ("block_strategy.json", schema_for!(crate::BlockStrategy)),
        ("misfire_strategy.json", schema_for!(crate::MisfireStrategy)),
    ]
}

/// The text written to each file: pretty JSON with a final newline.
pub fn render(schema: &Schema) -> String {
    let mut s = serde_json::to_string_pretty(schema).unwrap_or_default();
    s.push('\n');
    s
}
