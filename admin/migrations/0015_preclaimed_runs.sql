-- The scan writes a schedule's runs already claimed for publication (`publishing`, routed, under
-- the lease epoch of their shard), so a run is written once before it is sent instead of twice.
-- A job change that drops such runs (those due later than the publish-ahead plus a guard) bumps
-- the job's plan_gen; the holder, which checks plan_gen under a key-share lock of the job when it
-- takes runs for sending, then sends only those still there.
ALTER TABLE jobs ADD COLUMN plan_gen BIGINT NOT NULL DEFAULT 0;
