-- An id for a new job, taken before it is inserted (its jitter is derived from it).
SELECT nextval(pg_get_serial_sequence('jobs', 'id'))
