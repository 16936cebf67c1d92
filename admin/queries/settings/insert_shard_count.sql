INSERT INTO cluster_settings (key, value) VALUES ('shard_count', $1) ON CONFLICT DO NOTHING
