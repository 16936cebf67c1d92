-- Scheduler health for the console: each admin writes, at every lease round, its lease TTL (so
-- readers can tell whether it is alive) and its publication figures of the last minute.
ALTER TABLE admins
    ADD COLUMN lease_ttl_ms     BIGINT NOT NULL DEFAULT 0,
    ADD COLUMN published_1m     BIGINT NOT NULL DEFAULT 0,
    ADD COLUMN lateness_p50_ms  BIGINT NOT NULL DEFAULT 0,
    ADD COLUMN lateness_p99_ms  BIGINT NOT NULL DEFAULT 0,
    ADD COLUMN lateness_max_ms  BIGINT NOT NULL DEFAULT 0;
