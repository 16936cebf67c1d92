-- Locks the workflow runs of workflow $1 in id order, as the engine does, so that deleting them
-- (with the workflow) waits for a transaction deciding one of them instead of deadlocking with it.
SELECT id FROM workflow_runs WHERE workflow_id = $1 ORDER BY id FOR UPDATE
