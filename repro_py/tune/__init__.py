"""Closed-loop tuning of the speculative-decoding config of one host (``python -m repro_py.tune``)."""
