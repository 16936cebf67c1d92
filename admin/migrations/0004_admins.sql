-- Admins alive in the cluster, for sharing shards evenly. An admin refreshes its row at every
-- lease renewal (database clock) and deletes it when it stops.
CREATE TABLE admins (
    admin_id   TEXT PRIMARY KEY,
    started_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    last_seen  TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- Read-back after a takeover starts from the last offset known to be published on a partition.
CREATE INDEX triggers_partition_offset ON triggers (job_type, partition, "offset")
    WHERE "offset" IS NOT NULL;
