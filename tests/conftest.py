"""Settings for every test.

Hypothesis's own timing limits (the per-example deadline and the "input generation is slow" health check) measure
the machine's load, not the code: ``make unit`` runs two workers beside a side lane of test hosts on two cores, where
generating one list of floats once took 1.1 s. Every property still runs its examples."""

from __future__ import annotations

try:
    from hypothesis import HealthCheck, settings
except ModuleNotFoundError:  # the CPU sglang venv runs the patch checks under tests/ and has no hypothesis
    pass
else:
    settings.register_profile("shared-machine", deadline=None, suppress_health_check=[HealthCheck.too_slow])
    settings.load_profile("shared-machine")
