"""A run's lifecycle: config, runner, run directory, records, metrics, trackers, after-training, export."""
