"""A run's files as the sweep writes them and the report, the time estimates, ``--resume`` and the tuner read
them: the per-config result schema, the failure classes, the lossless-restart mode a run records."""
