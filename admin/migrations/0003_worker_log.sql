-- Live log: batches of log lines of a running run are appended to `log` once each, in order;
-- `log_seq` is the number of the last batch applied (0: none). A new attempt starts over.
ALTER TABLE triggers ADD COLUMN log_seq BIGINT NOT NULL DEFAULT 0;
