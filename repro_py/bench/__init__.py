"""Client-side serving benchmark: a context x concurrency matrix against one server.

Public API: ``run_matrix(endpoint, settings) -> dict`` and ``BenchSettings``
(``repro_py.bench.matrix``); ``main(argv)`` (``repro_py.bench.cli``).
"""
