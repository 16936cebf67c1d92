-- Daily report for the dashboard: runs per job, status and day (UTC date of the fire time),
-- counted when a run reaches a terminal status. Maintained incrementally by statement-level
-- triggers (one upsert per statement and key, not per row), so every path that ends a run —
-- result ingest, the lost-run sweeper, misfire rules — is counted without knowing about it.
CREATE TABLE daily_report (
    day     DATE   NOT NULL,
    job_id  BIGINT NOT NULL,
    status  TEXT   NOT NULL,
    runs    BIGINT NOT NULL,
    PRIMARY KEY (day, job_id, status)
);

CREATE FUNCTION daily_report_on_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO daily_report (day, job_id, status, runs)
    SELECT (n.fire_time AT TIME ZONE 'UTC')::date, n.job_id, n.status, count(*)
    FROM new_rows n
    JOIN old_rows o ON o.id = n.id
    WHERE n.status IN ('succeeded', 'failed', 'timed_out', 'discarded', 'cancelled', 'lost', 'misfired')
      AND o.status NOT IN ('succeeded', 'failed', 'timed_out', 'discarded', 'cancelled', 'lost', 'misfired')
    GROUP BY 1, 2, 3
    ORDER BY 1, 2, 3
    ON CONFLICT (day, job_id, status) DO UPDATE SET runs = daily_report.runs + EXCLUDED.runs;
    RETURN NULL;
END $$;

CREATE FUNCTION daily_report_on_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO daily_report (day, job_id, status, runs)
    SELECT (n.fire_time AT TIME ZONE 'UTC')::date, n.job_id, n.status, count(*)
    FROM new_rows n
    WHERE n.status IN ('succeeded', 'failed', 'timed_out', 'discarded', 'cancelled', 'lost', 'misfired')
    GROUP BY 1, 2, 3
    ORDER BY 1, 2, 3
    ON CONFLICT (day, job_id, status) DO UPDATE SET runs = daily_report.runs + EXCLUDED.runs;
    RETURN NULL;
END $$;

CREATE TRIGGER daily_report_update AFTER UPDATE ON triggers
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION daily_report_on_update();
CREATE TRIGGER daily_report_insert AFTER INSERT ON triggers
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION daily_report_on_insert();
