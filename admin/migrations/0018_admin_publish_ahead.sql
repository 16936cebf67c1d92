-- How far ahead of their fire time each admin takes runs for sending (its effective
-- CADENZA_PUBLISH_AHEAD_MS), written at every lease round. A job change or a cancel keeps the
-- runs written ahead that any live admin may already have taken: admins may be configured
-- differently, for instance during a rolling change of that setting. 0 for an admin that does
-- not write it.
ALTER TABLE admins ADD COLUMN publish_ahead_ms BIGINT NOT NULL DEFAULT 0;
