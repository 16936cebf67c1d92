//! Workflows: DAGs of jobs, run as ordinary runs.
//!
//! A workflow has a schedule like a job; each fire is a workflow run, a row of `workflow_runs`
//! holding the nodes as they were when it fired. Each node runs an existing job (with the node's
//! params if it has some) as a run of kind `workflow` linked to the workflow run; its retries are
//! the job's, as for any run. Where every node stands is a row of `workflow_run_nodes`.
//!
//! What a workflow run does next is decided without I/O by [`advance`], and applied by
//! [`engine`] in the transaction that records the end of a node's run (result ingest, the
//! lost-run sweeper) or an operator's action, under a lock on the workflow run's row: a node is
//! started once, whatever admin crashes when.
//!
//! - `model.rs`: the definition as the API accepts it, and its validation.
//! - `engine.rs`: starting workflow runs, following node runs' ends, operator actions.
//! - `scan.rs`: firing workflows on their schedules under the shard leases.
//! - `store.rs`: workflows and workflow runs as the API stores and shows them.

pub mod engine;
pub mod model;
pub mod scan;
pub mod store;

use std::collections::{BTreeMap, HashMap};

pub use model::{After, NodeSpec, WorkflowSpec};

/// Where a node of a workflow run stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum NodeStatus {
    /// Its parents have not all ended.
    Waiting,
    /// Its run (or a retry of it) is out.
    Running,
    Succeeded,
    /// Its run ended failed, timed out or lost, with no retry left.
    Failed,
    /// Not run: a parent it needed did not succeed, or the workflow run was cancelled first.
    Skipped,
    /// Its run was cancelled or discarded (block strategy), or the workflow run was cancelled
    /// while it ran.
    Cancelled,
}

impl NodeStatus {
    pub const fn as_str(self) -> &'static str {
        match self {
            NodeStatus::Waiting => "waiting",
            NodeStatus::Running => "running",
            NodeStatus::Succeeded => "succeeded",
            NodeStatus::Failed => "failed",
            NodeStatus::Skipped => "skipped",
            NodeStatus::Cancelled => "cancelled",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "waiting" => NodeStatus::Waiting,
            "running" => NodeStatus::Running,
            "succeeded" => NodeStatus::Succeeded,
            "failed" => NodeStatus::Failed,
            "skipped" => NodeStatus::Skipped,
            "cancelled" => NodeStatus::Cancelled,
            _ => return None,
        })
    }

    /// The node will not change by itself any more.
    pub const fn ended(self) -> bool {
        !matches!(self, NodeStatus::Waiting | NodeStatus::Running)
    }

    /// The node status a run's terminal status gives.
    pub fn of_run(status: cadenza_schemas::RunStatus) -> Self {
        use cadenza_schemas::RunStatus as R;
        match status {
            R::Succeeded => NodeStatus::Succeeded,
            R::Cancelled | R::Discarded => NodeStatus::Cancelled,
            _ => NodeStatus::Failed,
        }
    }
}

/// Where a workflow run stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum WorkflowRunStatus {
    Running,
    Succeeded,
    Failed,
    Cancelled,
    /// Its fire time was missed by more than the misfire threshold (strategy `do_nothing`, or
    /// all but the last with `fire_once_now`); no node ran.
    Misfired,
}

impl WorkflowRunStatus {
    pub const ALL: &'static [WorkflowRunStatus] = &[
        WorkflowRunStatus::Running,
        WorkflowRunStatus::Succeeded,
        WorkflowRunStatus::Failed,
        WorkflowRunStatus::Cancelled,
        WorkflowRunStatus::Misfired,
    ];

    pub const fn as_str(self) -> &'static str {
        match self {
            WorkflowRunStatus::Running => "running",
            WorkflowRunStatus::Succeeded => "succeeded",
            WorkflowRunStatus::Failed => "failed",
            WorkflowRunStatus::Cancelled => "cancelled",
            WorkflowRunStatus::Misfired => "misfired",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.iter().copied().find(|v| v.as_str() == s)
    }
}

/// What [`advance`] decided.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Step {
    /// Waiting nodes whose parents all ended as they need: to start now.
    pub start: Vec<String>,
    /// Waiting nodes that will not run: a parent they needed did not succeed.
    pub skip: Vec<String>,
    /// Set when no node is left to run or running: the workflow run's final status.
    pub done: Option<WorkflowRunStatus>,
}

/// Whether a parent in status `s` lets an `all_succeeded` child run: it succeeded, or it failed
/// and is allowed to.
fn lets_through(node: &NodeSpec, s: NodeStatus) -> bool {
    s == NodeStatus::Succeeded || (node.allow_failure && s == NodeStatus::Failed)
}

/// Decides, without I/O, which waiting nodes of a workflow run start and which are skipped, given
/// where every node stands (a node missing from `status` is waiting), and whether the workflow
/// run is over. Skips cascade: a skipped node has ended for its own children.
///
/// A node starts once all its parents have ended: with `after: all_succeeded` (the default) if
/// every parent succeeded (or failed with `allow_failure`), and it is skipped as soon as one
/// ended otherwise; with `after: any_end` whatever they ended as. The workflow run ends when no node is waiting or
/// running: `failed` if a node failed without `allow_failure` or was cancelled (a skipped node
/// always follows such a one), else `succeeded`.
pub fn advance(nodes: &[NodeSpec], status: &HashMap<String, NodeStatus>) -> Step {
    let mut now: HashMap<&str, NodeStatus> = nodes
        .iter()
        .map(|n| {
            let s = status.get(&n.key).copied().unwrap_or(NodeStatus::Waiting);
            (n.key.as_str(), s)
        })
        .collect();
    let by_key: HashMap<&str, &NodeSpec> = nodes.iter().map(|n| (n.key.as_str(), n)).collect();
    let mut step = Step::default();
    // Nodes in an order where parents come first: one pass settles every cascade.
    for node in topological(nodes) {
        if now.get(node.key.as_str()) != Some(&NodeStatus::Waiting) {
            continue;
        }
        let parents: Vec<(&NodeSpec, NodeStatus)> = node
            .parents
            .iter()
            .filter_map(|p| {
                let spec = by_key.get(p.as_str())?;
                Some((*spec, *now.get(p.as_str())?))
            })
            .collect();
        // An `all_succeeded` node is skipped as soon as one parent ended without letting it
        // through; otherwise a node waits until every parent ended.
        let blocked = node.after == After::AllSucceeded
            && parents
                .iter()
                .any(|(p, s)| s.ended() && !lets_through(p, *s));
        if !blocked && parents.iter().any(|(_, s)| !s.ended()) {
            continue;
        }
        let runs = !blocked;
        if runs {
            step.start.push(node.key.clone());
            now.insert(node.key.as_str(), NodeStatus::Running);
        } else {
            step.skip.push(node.key.clone());
            now.insert(node.key.as_str(), NodeStatus::Skipped);
        }
    }
    if now.values().all(|s| s.ended()) {
        let failed = nodes.iter().any(|n| match now.get(n.key.as_str()) {
            Some(NodeStatus::Failed) => !n.allow_failure,
            Some(NodeStatus::Cancelled) => true,
            _ => false,
        });
        step.done = Some(if failed {
            WorkflowRunStatus::Failed
        } else {
            WorkflowRunStatus::Succeeded
        });
    }
    step
}

/// The nodes, parents before children (Kahn's algorithm, ties in definition order). Nodes on a
/// cycle (which validation refuses) are left out.
pub fn topological(nodes: &[NodeSpec]) -> Vec<&NodeSpec> {
    let index: HashMap<&str, usize> = nodes
        .iter()
        .enumerate()
        .map(|(i, n)| (n.key.as_str(), i))
        .collect();
    let mut indegree = vec![0usize; nodes.len()];
    let mut children: Vec<Vec<usize>> = vec![Vec::new(); nodes.len()];
    for (i, n) in nodes.iter().enumerate() {
        for p in &n.parents {
            if let Some(&pi) = index.get(p.as_str()) {
                indegree[i] += 1;
                children[pi].push(i);
            }
        }
    }
    let mut ready: std::collections::BTreeSet<usize> = indegree
        .iter()
        .enumerate()
        .filter(|(_, d)| **d == 0)
        .map(|(i, _)| i)
        .collect();
    let mut out = Vec::with_capacity(nodes.len());
    while let Some(i) = ready.pop_first() {
        out.push(&nodes[i]);
        for &c in &children[i] {
            indegree[c] -= 1;
            if indegree[c] == 0 {
                ready.insert(c);
            }
        }
    }
    out
}

/// The node `key` and every node after it (its descendants), in definition order.
pub fn descendants<'a>(nodes: &'a [NodeSpec], key: &str) -> Vec<&'a NodeSpec> {
    let mut children: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for n in nodes {
        for p in &n.parents {
            children.entry(p.as_str()).or_default().push(n.key.as_str());
        }
    }
    let mut seen: std::collections::HashSet<&str> = std::collections::HashSet::new();
    let mut stack = vec![key];
    while let Some(k) = stack.pop() {
        for c in children.get(k).into_iter().flatten() {
            if seen.insert(c) {
                stack.push(c);
            }
        }
    }
    nodes
        .iter()
        .filter(|n| seen.contains(n.key.as_str()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use NodeStatus::*;

    fn node(key: &str, parents: &[&str]) -> NodeSpec {
        NodeSpec {
            key: key.into(),
            job_id: cadenza_schemas::JobId(1),
            params: None,
            parents: parents.iter().map(|p| p.to_string()).collect(),
            after: After::AllSucceeded,
            allow_failure: false,
        }
    }

    fn diamond() -> Vec<NodeSpec> {
        vec![
            node("a", &[]),
            node("b", &["a"]),
            node("c", &["a"]),
            node("d", &["b", "c"]),
        ]
    }

    fn st(pairs: &[(&str, NodeStatus)]) -> HashMap<String, NodeStatus> {
        pairs.iter().map(|(k, s)| (k.to_string(), *s)).collect()
    }

    #[test]
    fn roots_start_first() {
        let step = advance(&diamond(), &HashMap::new());
        assert_eq!(step.start, vec!["a"]);
        assert!(step.skip.is_empty());
        assert_eq!(step.done, None);
    }

    #[test]
    fn a_join_waits_for_every_parent() {
        let d = diamond();
        let step = advance(
            &d,
            &st(&[("a", Succeeded), ("b", Succeeded), ("c", Running)]),
        );
        assert!(step.start.is_empty());
        let step = advance(
            &d,
            &st(&[("a", Succeeded), ("b", Succeeded), ("c", Succeeded)]),
        );
        assert_eq!(step.start, vec!["d"]);
        let all = st(&[
            ("a", Succeeded),
            ("b", Succeeded),
            ("c", Succeeded),
            ("d", Succeeded),
        ]);
        assert_eq!(advance(&d, &all).done, Some(WorkflowRunStatus::Succeeded));
    }

    #[test]
    fn a_failed_node_skips_its_descendants_and_fails_the_run_once_the_rest_ended() {
        let mut d = diamond();
        d.push(node("e", &["d"]));
        // d cannot run once b failed: skipped at once, while c still runs.
        let step = advance(&d, &st(&[("a", Succeeded), ("b", Failed), ("c", Running)]));
        assert_eq!(step.skip, vec!["d", "e"]);
        assert_eq!(step.done, None, "c still runs");
        let step = advance(
            &d,
            &st(&[
                ("a", Succeeded),
                ("b", Failed),
                ("c", Succeeded),
                ("d", Skipped),
                ("e", Skipped),
            ]),
        );
        assert!(step.skip.is_empty());
        assert_eq!(step.done, Some(WorkflowRunStatus::Failed));
    }

    #[test]
    fn any_end_nodes_run_after_a_failure_and_allow_failure_lets_children_go_on() {
        let mut d = diamond();
        d[3].after = After::AnyEnd;
        let step = advance(
            &d,
            &st(&[("a", Succeeded), ("b", Failed), ("c", Succeeded)]),
        );
        assert_eq!(step.start, vec!["d"]);
        let mut d = diamond();
        d[1].allow_failure = true;
        let step = advance(
            &d,
            &st(&[("a", Succeeded), ("b", Failed), ("c", Succeeded)]),
        );
        assert_eq!(step.start, vec!["d"]);
        let all = st(&[
            ("a", Succeeded),
            ("b", Failed),
            ("c", Succeeded),
            ("d", Succeeded),
        ]);
        assert_eq!(advance(&d, &all).done, Some(WorkflowRunStatus::Succeeded));
    }

    #[test]
    fn a_cleanup_node_after_a_skipped_one_still_runs() {
        let mut d = diamond();
        let mut cleanup = node("cleanup", &["d"]);
        cleanup.after = After::AnyEnd;
        d.push(cleanup);
        let step = advance(&d, &st(&[("a", Failed), ("b", Waiting), ("c", Waiting)]));
        assert_eq!(step.skip, vec!["b", "c", "d"]);
        assert_eq!(step.start, vec!["cleanup"]);
        assert_eq!(step.done, None);
    }

    #[test]
    fn descendants_follow_every_path() {
        let d = diamond();
        let keys: Vec<&str> = descendants(&d, "b")
            .iter()
            .map(|n| n.key.as_str())
            .collect();
        assert_eq!(keys, vec!["d"]);
        let keys: Vec<&str> = descendants(&d, "a")
            .iter()
            .map(|n| n.key.as_str())
            .collect();
        assert_eq!(keys, vec!["b", "c", "d"]);
    }
}
