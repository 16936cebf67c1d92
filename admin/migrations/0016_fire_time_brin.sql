-- A replay maps a fire-time window to topic offsets (queries/replay/window.sql). It did so through
-- a b-tree of (job_type, fire_time) over every run with an offset, so each run got an entry when
-- its delivery was recorded (`published`) or its worker started it, one more entry on the path
-- of every run. Runs are written in about fire-time order, so a block-range index over fire_time
-- finds the window's rows as well, for a replay, at almost no cost per write; the job type and
-- the offset are checked on the rows read.
DROP INDEX triggers_type_fire;
CREATE INDEX triggers_fire_time_brin ON triggers USING brin (fire_time);
