"""On-disk data: atomic writes, the sharded mined-data store and its compaction/statistics, eval records."""
