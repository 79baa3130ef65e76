"""Sweep speculative-decoding configs on one host (see docs/sweep.md)."""
