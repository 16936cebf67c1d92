-- A run's job is no longer checked by a foreign key on every insert. The check was a query and a
-- row lock per run (about 5 µs of the database's time each: a quarter of a core at 50,000 runs a
-- second) that the statements writing runs do not need:
-- * the scan writes the runs of jobs it has locked itself (scan/due_jobs, FOR NO KEY UPDATE) in
--   the same transaction, and reads them in the insert (a job deleted first is not due);
-- * every other statement writing runs (API and child runs, retries, replays, workflow nodes)
--   locks the jobs it reads FOR KEY SHARE, as the key's check did, so a job being deleted waits
--   for them, or they skip it once it is gone.
-- A job's runs still go with it: the trigger below deletes them in the deleting statement, as
-- ON DELETE CASCADE did (each statement of the function sees what committed before it ran, so
-- runs written by a transaction the delete waited for are seen and deleted).
ALTER TABLE triggers DROP CONSTRAINT triggers_job_id_fkey;

CREATE FUNCTION cadenza_delete_runs_of_deleted_jobs() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM triggers t USING (SELECT DISTINCT id FROM deleted_jobs) d WHERE t.job_id = d.id;
    RETURN NULL;
END $$;

CREATE TRIGGER jobs_delete_runs AFTER DELETE ON jobs
    REFERENCING OLD TABLE AS deleted_jobs
    FOR EACH STATEMENT EXECUTE FUNCTION cadenza_delete_runs_of_deleted_jobs();
