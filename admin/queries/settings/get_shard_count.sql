SELECT value FROM cluster_settings WHERE key = 'shard_count'
