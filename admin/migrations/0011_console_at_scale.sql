-- The daily report rolled up by job type: runs per day, job type and status. The dashboard's
-- chart sums it instead of the per-job report, whose rows grow with the number of jobs (a
-- million rows for a month of 100,000 jobs); this one grows with the job types only. Kept in the
-- same transactions as `daily_report` (queries/report/count_ended*.sql).
CREATE TABLE daily_type_report (
    day      DATE   NOT NULL,
    job_type TEXT   NOT NULL,
    status   TEXT   NOT NULL,
    runs     BIGINT NOT NULL,
    PRIMARY KEY (day, job_type, status)
);

-- What the per-job report counted so far, by the job's type. Rows of jobs already deleted cannot
-- be given a type and are left out; from now on a deleted job's runs stay counted in both.
INSERT INTO daily_type_report (day, job_type, status, runs)
SELECT r.day, j.job_type, r.status, sum(r.runs)
FROM daily_report r JOIN jobs j ON j.id = r.job_id
GROUP BY 1, 2, 3;

-- Runs of one status, newest first (the console's "running now", "failed in the last 24 hours"
-- and the run list's status filter): without it, a status with no recent run walks every run.
CREATE INDEX triggers_status ON triggers (status, id DESC);
