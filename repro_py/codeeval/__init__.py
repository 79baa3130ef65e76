"""Coding-correctness evaluation: problems (``problems.yaml``) and their runner."""
