//! A workflow as the API accepts it, and the checks that need no database (the jobs its nodes
//! name are checked by the engine, see [`super::engine::check_jobs`]).

use std::collections::{HashMap, HashSet};

use cadenza_schemas::{JobId, MisfireStrategy, Schedule};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::jobs::{check_misfire_threshold, check_name, FieldError, DEFAULT_MISFIRE_THRESHOLD_MS};
use crate::schedule::JobSchedule;

/// Most nodes in one workflow.
pub const MAX_NODES: usize = 1_000;
/// Shortest `fix_rate` interval of a workflow (each fire is a workflow run with up to 1,000
/// nodes).
pub const MIN_EVERY_MS: i64 = 1_000;
/// Longest node key.
pub const MAX_KEY_LEN: usize = 64;
const MAX_PARAMS_LEN: usize = 256 * 1024;

/// When a node starts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum After {
    /// Once every parent succeeded (or failed with `allow_failure`); a node whose parent ended
    /// otherwise is skipped.
    #[default]
    AllSucceeded,
    /// Once every parent ended, however (cleanup nodes).
    AnyEnd,
}

/// One node: a run of an existing job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NodeSpec {
    /// The node's name in this workflow: 1 to 64 letters, digits, `_`, `-` or `.`.
    #[schema(min_length = 1, max_length = 64, pattern = r"^[A-Za-z0-9_.-]+$")]
    pub key: String,
    /// The job the node runs (its job type, route, block strategy, timeout and retries apply).
    #[schema(value_type = i64)]
    pub job_id: JobId,
    /// Params for this node's runs instead of the job's (at most 256 KiB).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(max_length = 262_144)]
    pub params: Option<String>,
    /// Keys of the nodes this one runs after (none: it starts when the workflow run starts).
    #[serde(default)]
    pub parents: Vec<String>,
    /// When it starts: `all_succeeded` (default) or `any_end`.
    #[serde(default)]
    pub after: After,
    /// Its failure does not fail the workflow run, and its `all_succeeded` children still run.
    #[serde(default)]
    pub allow_failure: bool,
}

/// A workflow as the API accepts it (create, or replace).
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct WorkflowSpec {
    /// 1 to 200 characters, unique among workflows.
    #[schema(min_length = 1, max_length = 200)]
    pub name: String,
    /// When it fires: `cron` (with `timezone`), `fix_rate`, `once` or `none` (manual and API
    /// triggers only). `fix_delay` is for jobs only.
    pub schedule: Schedule,
    /// What happens to fire times missed by more than `misfire_threshold_ms` (default
    /// `do_nothing`).
    #[serde(default = "default_misfire")]
    pub misfire: MisfireStrategy,
    /// Milliseconds after its fire time that a fire time counts as missed (default 5000).
    #[serde(default = "default_threshold")]
    #[schema(minimum = 0, maximum = 31_622_400_000i64)]
    pub misfire_threshold_ms: i64,
    /// 1 to 1,000 nodes forming one connected graph without cycles.
    #[schema(min_items = 1, max_items = 1000)]
    pub nodes: Vec<NodeSpec>,
    #[serde(default = "default_enabled")]
    pub enabled: bool,
}

fn default_misfire() -> MisfireStrategy {
    MisfireStrategy::DoNothing
}
fn default_threshold() -> i64 {
    DEFAULT_MISFIRE_THRESHOLD_MS
}
fn default_enabled() -> bool {
    true
}

/// A node key: 1 to 64 letters, digits, `_`, `-`, `.`, with at least one letter or digit (so
/// that it is a path segment of its own: `.` and `..` are not).
fn key_ok(k: &str) -> bool {
    k.chars().any(|c| c.is_ascii_alphanumeric())
        && k.len() <= MAX_KEY_LEN
        && k.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
}

impl WorkflowSpec {
    /// Checks every field that the types alone do not (but whether its jobs exist); returns the
    /// parsed schedule. An error names the node (`nodes[i]` with its key).
    pub fn validate(&self, now: DateTime<Utc>) -> Result<JobSchedule, FieldError> {
        check_name(&self.name)?;
        check_misfire_threshold(self.misfire_threshold_ms)?;
        if matches!(self.schedule, Schedule::FixDelay { .. }) {
            return Err(FieldError::new(
                "schedule.kind",
                "a workflow cannot use fix_delay; use cron, fix_rate, once or none",
            ));
        }
        if let Schedule::FixRate { every_ms } = self.schedule {
            if every_ms < MIN_EVERY_MS {
                return Err(FieldError::new(
                    "schedule.every_ms",
                    format!(
                        "a workflow fires at most once every {MIN_EVERY_MS} ms; got {every_ms}"
                    ),
                ));
            }
        }
        validate_nodes(&self.nodes)?;
        Ok(JobSchedule::parse(&self.schedule, now)?)
    }
}

/// The graph checks: 1 to [`MAX_NODES`] nodes, unique well-formed keys, known parents, no
/// cycle, one connected graph.
pub fn validate_nodes(nodes: &[NodeSpec]) -> Result<(), FieldError> {
    if nodes.is_empty() {
        return Err(FieldError::new(
            "nodes",
            "a workflow needs at least one node",
        ));
    }
    if nodes.len() > MAX_NODES {
        return Err(FieldError::new(
            "nodes",
            format!(
                "a workflow has at most {MAX_NODES} nodes; this one has {} (node {:?} is number {})",
                nodes.len(),
                nodes[MAX_NODES].key,
                MAX_NODES + 1
            ),
        ));
    }
    let field = |i: usize, n: &NodeSpec, what: &str| format!("nodes[{i}] ({:?}){what}", n.key);
    let mut seen: HashMap<&str, usize> = HashMap::new();
    for (i, n) in nodes.iter().enumerate() {
        if !key_ok(&n.key) {
            return Err(FieldError::new(
                format!("nodes[{i}].key"),
                format!(
                    "{:?} is not a node key: 1 to {MAX_KEY_LEN} letters, digits, '_', '-' or '.', with a letter or digit",
                    n.key
                ),
            ));
        }
        if let Some(first) = seen.insert(n.key.as_str(), i) {
            return Err(FieldError::new(
                format!("nodes[{i}].key"),
                format!(
                    "{:?} is also the key of nodes[{first}]; keys are unique",
                    n.key
                ),
            ));
        }
        if n.params.as_ref().is_some_and(|p| p.len() > MAX_PARAMS_LEN) {
            return Err(FieldError::new(
                field(i, n, ".params"),
                format!("is longer than {MAX_PARAMS_LEN} bytes"),
            ));
        }
    }
    for (i, n) in nodes.iter().enumerate() {
        let mut parents = HashSet::new();
        for p in &n.parents {
            if p == &n.key {
                return Err(FieldError::new(
                    field(i, n, ".parents"),
                    "a node cannot run after itself",
                ));
            }
            if !seen.contains_key(p.as_str()) {
                return Err(FieldError::new(
                    field(i, n, ".parents"),
                    format!("{p:?} is not a node of this workflow"),
                ));
            }
            if !parents.insert(p.as_str()) {
                return Err(FieldError::new(
                    field(i, n, ".parents"),
                    format!("{p:?} is listed twice"),
                ));
            }
        }
    }
    let ordered = super::topological(nodes);
    if ordered.len() < nodes.len() {
        let placed: HashSet<&str> = ordered.iter().map(|n| n.key.as_str()).collect();
        let (i, n) = nodes
            .iter()
            .enumerate()
            .find(|(_, n)| !placed.contains(n.key.as_str()))
            .unwrap_or((0, &nodes[0]));
        let cycle = cycle_through(nodes, &placed).unwrap_or_else(|| vec![n.key.clone()]);
        return Err(FieldError::new(
            field(i, n, ".parents"),
            format!(
                "the nodes form a cycle: {}; a workflow is a graph without cycles",
                cycle.join(" -> ")
            ),
        ));
    }
    if let Some((i, n)) = disconnected(nodes) {
        return Err(FieldError::new(
            field(i, n, ""),
            format!(
                "is not connected to node {:?}: a workflow's nodes form one graph (give it a parent or a child, or make it a workflow of its own)",
                nodes[0].key
            ),
        ));
    }
    Ok(())
}

/// One cycle among the nodes not in `placed` (each of them has an unplaced parent), as keys
/// from a node back to itself.
fn cycle_through(nodes: &[NodeSpec], placed: &HashSet<&str>) -> Option<Vec<String>> {
    let by_key: HashMap<&str, &NodeSpec> = nodes.iter().map(|n| (n.key.as_str(), n)).collect();
    let start = nodes.iter().find(|n| !placed.contains(n.key.as_str()))?;
    // Walk parent links among unplaced nodes until a node repeats.
    let mut path: Vec<&str> = Vec::new();
    let mut at = start.key.as_str();
    loop {
        if let Some(pos) = path.iter().position(|k| *k == at) {
            let mut cycle: Vec<String> = path[pos..].iter().rev().map(|k| k.to_string()).collect();
            cycle.push(cycle[0].clone());
            return Some(cycle);
        }
        path.push(at);
        let node = by_key.get(at)?;
        at = node
            .parents
            .iter()
            .map(String::as_str)
            .find(|p| !placed.contains(p))?;
    }
}

/// The first node (with its index) not connected to the first node, ignoring edge directions.
fn disconnected(nodes: &[NodeSpec]) -> Option<(usize, &NodeSpec)> {
    let mut adjacent: HashMap<&str, Vec<&str>> = HashMap::new();
    for n in nodes {
        for p in &n.parents {
            adjacent.entry(n.key.as_str()).or_default().push(p.as_str());
            adjacent.entry(p.as_str()).or_default().push(n.key.as_str());
        }
    }
    let mut reached: HashSet<&str> = HashSet::new();
    let mut stack = vec![nodes.first()?.key.as_str()];
    while let Some(k) = stack.pop() {
        if reached.insert(k) {
            stack.extend(adjacent.get(k).into_iter().flatten().copied());
        }
    }
    nodes
        .iter()
        .enumerate()
        .find(|(_, n)| !reached.contains(n.key.as_str()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(key: &str, parents: &[&str]) -> NodeSpec {
        NodeSpec {
            key: key.into(),
            job_id: JobId(1),
            params: None,
            parents: parents.iter().map(|p| p.to_string()).collect(),
            after: After::AllSucceeded,
            allow_failure: false,
        }
    }

    fn err(nodes: &[NodeSpec]) -> FieldError {
        validate_nodes(nodes).unwrap_err()
    }

    #[test]
    fn a_diamond_is_valid() {
        validate_nodes(&[
            node("a", &[]),
            node("b", &["a"]),
            node("c", &["a"]),
            node("d", &["b", "c"]),
        ])
        .unwrap();
    }

    #[test]
    fn a_cycle_is_named() {
        let e = err(&[
            node("a", &[]),
            node("b", &["a", "d"]),
            node("c", &["b"]),
            node("d", &["c"]),
        ]);
        assert_eq!(e.field, "nodes[1] (\"b\").parents");
        assert!(e.message.contains("cycle"), "{e}");
        for k in ["b", "c", "d"] {
            assert!(e.message.contains(k), "{e}");
        }
        let e = err(&[node("a", &["a"])]);
        assert!(e.message.contains("itself"), "{e}");
    }

    #[test]
    fn unknown_parents_duplicates_and_bad_keys_are_named() {
        let e = err(&[node("a", &[]), node("b", &["x"])]);
        assert_eq!(e.field, "nodes[1] (\"b\").parents");
        assert!(e.message.contains("\"x\""), "{e}");
        let e = err(&[node("a", &[]), node("a", &["a"])]);
        assert_eq!(e.field, "nodes[1].key");
        let e = err(&[node("a b", &[])]);
        assert_eq!(e.field, "nodes[0].key");
        let e = err(&[node("..", &[])]);
        assert_eq!(e.field, "nodes[0].key");
        assert_eq!(err(&[]).field, "nodes");
    }

    #[test]
    fn disconnected_nodes_are_named() {
        let e = err(&[node("a", &[]), node("b", &["a"]), node("lonely", &[])]);
        assert_eq!(e.field, "nodes[2] (\"lonely\")");
        assert!(e.message.contains("not connected"), "{e}");
        validate_nodes(&[node("only", &[])]).unwrap();
    }

    #[test]
    fn more_than_a_thousand_nodes_are_refused() {
        let mut nodes = vec![node("n0", &[])];
        for i in 1..=MAX_NODES {
            nodes.push(node(&format!("n{i}"), &["n0"]));
        }
        let e = err(&nodes);
        assert_eq!(e.field, "nodes");
        assert!(e.message.contains("\"n1000\""), "{e}");
        nodes.pop();
        validate_nodes(&nodes).unwrap();
    }

    /// A one-node workflow on `schedule`.
    fn spec(schedule: Schedule) -> WorkflowSpec {
        WorkflowSpec {
            name: "w".into(),
            schedule,
            misfire: MisfireStrategy::DoNothing,
            misfire_threshold_ms: 5000,
            nodes: vec![node("a", &[])],
            enabled: true,
        }
    }

    #[test]
    fn a_workflow_fires_at_most_once_a_second() {
        let field = |s| spec(s).validate(Utc::now()).unwrap_err().field;
        assert_eq!(
            field(Schedule::FixRate { every_ms: 999 }),
            "schedule.every_ms"
        );
        spec(Schedule::FixRate { every_ms: 1000 })
            .validate(Utc::now())
            .unwrap();
    }

    #[test]
    fn fix_delay_is_refused() {
        let e = spec(Schedule::FixDelay { delay_ms: 1000 })
            .validate(Utc::now())
            .unwrap_err();
        assert_eq!(e.field, "schedule.kind");
    }
}
