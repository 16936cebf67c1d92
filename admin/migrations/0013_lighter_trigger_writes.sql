-- The run list's index by status leaves out the statuses every run passes through on its way to
-- success (scheduled, publishing, running) and succeeded itself: a run's insert, its
-- `publishing` mark, its start and its success no longer each add an entry to it. Lists of those
-- statuses use other indexes (queries/triggers/list_by_status.sql): triggers_pending for
-- scheduled and publishing runs, triggers_running for running ones, and the newest runs first
-- for succeeded ones, which are most runs.
DROP INDEX triggers_status;
CREATE INDEX triggers_status ON triggers (status, id DESC)
    WHERE status NOT IN ('scheduled', 'publishing', 'running', 'succeeded');
