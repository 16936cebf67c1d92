INSERT INTO scheduler_lease (shard) SELECT generate_series(0, $1::int - 1) ON CONFLICT DO NOTHING
