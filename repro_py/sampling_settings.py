"""The sampling settings a measurement sends with every request: temperature and top_p.

They are request parameters, not engine flags: the benchmark sends them in each
chat request, and a sweep or tuning run records them with every result. They
never reach the engine's command line, so they do not change what is restarted;
they are part of what was measured, so a setting other than the default greedy
one is part of a config's run label (``-temp0.7-topp0.95``) and of its config
digest (what ``--resume`` compares), and the report never puts two settings in
one table, plot or recommendation without saying so.

The default is greedy decoding (temperature 0, top_p 1): what every figure of
this bundle measured before the setting existed and the setting of the greedy
lossless gate. Every algorithm serves sampling, DDTree included (target-only
tree sampling, lossless in distribution; the sampled gate checks it). Clients
with defaults send temperature 1.0 (the OpenAI client sends none; sglang's
default is 1.0), chat UIs 0.6-1.0: sweep those settings explicitly
(``--temperature 0.7 --top-p 0.95``, or per grid entry); acceptance at T > 0 is
lower than greedy, and the benchmark measures it.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

DEFAULT_TEMPERATURE = 0.0
DEFAULT_TOP_P = 1.0
#: sglang treats a temperature below this as greedy (top_k 1)
GREEDY_BELOW = 1e-6
KEYS = ("temperature", "top_p")
ALLOWED = {
    "temperature": "a finite number >= 0 (0 = greedy decoding)",
    "top_p": "a number in (0, 1] (1 = the whole distribution)",
}


class SamplingError(ValueError):
    """Bad sampling settings; ``problems`` names each value and what is allowed."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


@dataclasses.dataclass(frozen=True)
class Sampling:
    temperature: float = DEFAULT_TEMPERATURE
    top_p: float = DEFAULT_TOP_P

    @property
    def default(self) -> bool:
        return self.temperature == DEFAULT_TEMPERATURE and self.top_p == DEFAULT_TOP_P

    @property
    def greedy(self) -> bool:
        return self.temperature < GREEDY_BELOW

    @property
    def text(self) -> str:
        """``T=0 (greedy), top_p=1`` or ``T=0.7, top_p=0.95``: how every table and plot title names it."""
        greedy = " (greedy)" if self.greedy else ""
        return f"T={self.temperature:g}{greedy}, top_p={self.top_p:g}"

    @property
    def label_suffix(self) -> str:
        """The run-label part: empty for the default greedy setting, else ``-temp0.7-topp0.95``."""
        return "" if self.default else f"-temp{self.temperature:g}-topp{self.top_p:g}"

    def as_dict(self) -> dict[str, float]:
        return {"temperature": self.temperature, "top_p": self.top_p}

    def short(self) -> dict[str, float]:
        """The keys a grid entry holds for it: none for the default (so old labels and digests stand)."""
        return {} if self.default else self.as_dict()


def _number(name: str, value: object, where: str) -> tuple[float | None, str | None]:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return None, f"{where}{name}={value!r}: must be {ALLOWED[name]}"
    try:
        number = float(value)
    except ValueError:
        return None, f"{where}{name}={value!r}: must be {ALLOWED[name]}"
    return number, None


def parse(temperature: object = None, top_p: object = None, *, where: str = "") -> Sampling:
    """Sampling settings from values (None: the default); :class:`SamplingError` names each bad one and
    the allowed range (``where`` prefixes the messages, e.g. ``--temperature`` or a grid entry)."""
    problems: list[str] = []
    values: dict[str, float] = {}
    for name, raw, default in (("temperature", temperature, DEFAULT_TEMPERATURE), ("top_p", top_p, DEFAULT_TOP_P)):
        if raw is None:
            values[name] = default
            continue
        number, problem = _number(name, raw, where)
        if problem is not None or number is None:
            problems.append(problem or f"{where}{name}={raw!r}: must be {ALLOWED[name]}")
            continue
        if name == "temperature" and not (math.isfinite(number) and number >= 0):
            problems.append(f"{where}temperature={raw!r}: must be {ALLOWED['temperature']}")
        elif name == "top_p" and not (math.isfinite(number) and 0 < number <= 1):
            problems.append(f"{where}top_p={raw!r}: must be {ALLOWED['top_p']}")
        values[name] = number
    if problems:
        raise SamplingError(problems)
    return Sampling(**values)


def of_result(result: Mapping[str, Any]) -> Sampling:
    """What a result measured: its ``sampling``, else its benchmark settings, else (results written before
    the setting existed, whose benchmark always sent temperature 0 and no top_p) the default."""
    recorded = result.get("sampling")
    if not isinstance(recorded, Mapping):
        recorded = (result.get("bench") or {}).get("settings") or {}
    temperature, top_p = recorded.get("temperature"), recorded.get("top_p")
    try:
        return parse(temperature, top_p)
    except SamplingError:
        return Sampling()


def distinct(samplings: list[Sampling]) -> list[Sampling]:
    """The distinct settings, greedy first then by temperature and top_p."""
    return sorted(set(samplings), key=lambda s: (s.temperature, s.top_p))
