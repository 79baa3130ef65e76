"""A SIMULATED SGLang 0.5.23 engine (DFlash drafter + DDTree verification).

``python -m repro_py.simengine`` takes the same command line as
``python -m sglang.launch_server`` and serves the same HTTP API; its figures
come from a performance model of published numbers (``perf_model``), not from
a GPU. See ``docs/simengine.md``.
"""
