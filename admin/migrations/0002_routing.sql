-- Routing: why a run went where it went, when that is not the strategy's own pick (e.g. no
-- live worker served the job type when it was published).
ALTER TABLE triggers ADD COLUMN route_note TEXT;
