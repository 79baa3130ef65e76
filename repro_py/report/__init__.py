"""Report of a sweep run, rebuilt from its result files only (see docs/sweep.md)."""
