-- Workflows: DAGs of jobs. A workflow fires on its own schedule; each fire is a workflow run,
-- whose nodes run as ordinary runs (triggers of kind `workflow`, or `retry` for their retries)
-- linked to it. What a workflow run does next is decided in the transaction that ends a node's
-- run (admin/src/workflow/).

CREATE TABLE workflows (
    id                   BIGSERIAL PRIMARY KEY,
    name                 TEXT NOT NULL,
    -- same shapes as jobs.schedule / schedule_kind (cron, fix_rate, once, none)
    schedule             JSONB NOT NULL,
    schedule_kind        TEXT NOT NULL,
    misfire              TEXT NOT NULL,
    misfire_threshold_ms BIGINT NOT NULL
        CONSTRAINT workflows_misfire_threshold_bounded
        CHECK (misfire_threshold_ms >= 0 AND misfire_threshold_ms <= 31622400000),
    -- the validated nodes: [{key, job_id, params, parents, after, allow_failure}]
    nodes                JSONB NOT NULL,
    enabled              BOOLEAN NOT NULL DEFAULT true,
    shard                INT NOT NULL,
    -- the next fire time not yet turned into a workflow run
    next_fire_at         TIMESTAMPTZ,
    created_at           TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at           TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX workflows_name ON workflows (name);
CREATE INDEX workflows_due ON workflows (shard, next_fire_at)
    WHERE enabled AND next_fire_at IS NOT NULL;

CREATE TABLE workflow_runs (
    id           BIGSERIAL PRIMARY KEY,
    workflow_id  BIGINT NOT NULL REFERENCES workflows (id) ON DELETE CASCADE,
    -- cron, fix_rate, once, misfire (from the schedule), manual, api
    kind         TEXT NOT NULL,
    fire_time    TIMESTAMPTZ NOT NULL,
    -- running, succeeded, failed, cancelled, misfired
    status       TEXT NOT NULL,
    -- the workflow's nodes as they were when this run fired
    nodes        JSONB NOT NULL,
    message      TEXT,
    requested_by TEXT,
    created_at   TIMESTAMPTZ NOT NULL DEFAULT now(),
    finished_at  TIMESTAMPTZ,
    updated_at   TIMESTAMPTZ NOT NULL DEFAULT now()
);
-- One run per fire time of the schedule.
CREATE UNIQUE INDEX workflow_runs_fire ON workflow_runs (workflow_id, fire_time)
    WHERE kind IN ('cron', 'fix_rate', 'once', 'misfire');
CREATE INDEX workflow_runs_workflow ON workflow_runs (workflow_id, id DESC);
CREATE INDEX workflow_runs_status ON workflow_runs (status, id DESC);

-- Where each node of a workflow run stands: waiting, running, succeeded, failed, skipped,
-- cancelled. `run_id` is the node's latest run (its retries and operator retries replace it).
CREATE TABLE workflow_run_nodes (
    workflow_run_id BIGINT NOT NULL REFERENCES workflow_runs (id) ON DELETE CASCADE,
    node            TEXT NOT NULL,
    status          TEXT NOT NULL,
    run_id          BIGINT,
    -- how many times the node was started (1 for the first; an operator's retry adds one)
    tries           INT NOT NULL DEFAULT 0,
    message         TEXT,
    started_at      TIMESTAMPTZ,
    finished_at     TIMESTAMPTZ,
    updated_at      TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (workflow_run_id, node)
);

-- A node's runs carry their workflow run and node; a succeeded run keeps its handler's output,
-- and a node run keeps the outputs of its parents it was given.
ALTER TABLE triggers
    ADD COLUMN workflow_run_id BIGINT,
    ADD COLUMN workflow_node   TEXT,
    ADD COLUMN output          JSONB,
    ADD COLUMN upstream        JSONB;
CREATE INDEX triggers_workflow_run ON triggers (workflow_run_id) WHERE workflow_run_id IS NOT NULL;

-- Node runs are requested runs: loaded by the sweep as they come due, never misfired.
DROP INDEX triggers_requested;
CREATE INDEX triggers_requested ON triggers (shard, fire_time)
    WHERE status = 'scheduled' AND kind IN ('manual', 'api', 'retry', 'child', 'replay', 'workflow');
