"""The error a sweep plan is refused with, and the one an interrupted config unwinds with."""

from __future__ import annotations


class PlanError(Exception):
    """The plan cannot be made; ``problems`` lists every reason."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems


class Interrupted(Exception):
    """SIGINT arrived; the run is left resumable."""
