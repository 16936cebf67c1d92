-- Scheduled runs of a job's schedule get an index of their own, beside the index of pending runs.
--
-- Nearly every run is written `publishing` by the scan and recorded `published` about a second
-- after its fire time; each record leaves a dead entry in triggers_pending until vacuum removes
-- it, which on a busy `triggers` partition can take many minutes. The misfire sweep, every few
-- seconds, looked for `scheduled` runs of a schedule there: it read every entry of the held
-- shards, those dead entries again on every call, and at 25,000 triggers/s its time per call grew
-- from 60 to 280 ms in two minutes. This index holds only the runs it looks for, which the
-- publication path never writes.
--
-- The predicate names the schedule kinds, as the sweep does. Statements that look a run up by id
-- and `status = 'scheduled'` alone cannot use it: an index of exactly the `publishing` runs was
-- tried, and the planner then read all of it for the record after delivery, looking runs up by
-- id, instead of their primary key.
CREATE INDEX triggers_scheduled ON triggers (shard, fire_time)
    WHERE status = 'scheduled' AND kind IN ('cron', 'fix_rate', 'fix_delay', 'once', 'misfire');
