-- Daily report for the dashboard: runs per job, status and day (UTC date of the fire time),
-- counted in the transaction that ends each run (result ingest, the lost-run sweeper, the
-- misfire rules; see queries/report/count_ended.sql), one upsert per batch and key.
CREATE TABLE daily_report (
    day     DATE   NOT NULL,
    job_id  BIGINT NOT NULL,
    status  TEXT   NOT NULL,
    runs    BIGINT NOT NULL,
    PRIMARY KEY (day, job_id, status)
);
