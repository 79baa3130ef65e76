"""Read the server's own description of itself (``/server_info``)."""

from __future__ import annotations

import dataclasses
from typing import Any

import aiohttp

from repro_py.endpoint import Endpoint
from repro_py.spec_config import FIELD_BY_KEY, FIELDS


class ServerInfoError(RuntimeError):
    pass


def _opt_int(value: object) -> int | None:
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    return None


#: The bench result's name of a field in its ``engine.speculative`` section, where it is not the short key (the
#: stored format, older than the contract's table).
_SUMMARY_NAMES = {"budget": "ddtree_budget", "topk": "ddtree_topk_cap"}


@dataclasses.dataclass(frozen=True)
class ServerInfo:
    raw: dict[str, Any]
    path: str

    def _echoed(self, key: str) -> object:
        """What the server reports for the contract's field ``key`` (under its echo key)."""
        return self.raw.get(FIELD_BY_KEY[key].echo)

    def settings(self) -> dict[str, str | int | None]:
        """Every field of the contract as the server reports it, by short key in ``FIELDS`` order: the algorithm
        as text (:attr:`speculative_algorithm`), every other setting as an int; None when unset."""
        return {
            f.key: self.speculative_algorithm if f.key == "algorithm" else _opt_int(self._echoed(f.key)) for f in FIELDS
        }

    @property
    def speculative_algorithm(self) -> str | None:
        algo = self._echoed("algorithm")
        return str(algo) if algo not in (None, "") else None

    @property
    def ddtree_budget(self) -> int | None:
        return _opt_int(self._echoed("budget"))

    @property
    def ddtree_topk_cap(self) -> int | None:
        return _opt_int(self._echoed("topk"))

    @property
    def block_size(self) -> int | None:
        return _opt_int(self._echoed("block_size"))

    @property
    def window(self) -> int | None:
        return _opt_int(self._echoed("window"))

    @property
    def num_draft_tokens(self) -> int | None:
        return _opt_int(self.raw.get("speculative_num_draft_tokens"))

    @property
    def max_total_num_tokens(self) -> int | None:
        return _opt_int(self.raw.get("max_total_num_tokens"))

    @property
    def context_length(self) -> int | None:
        return _opt_int(self.raw.get("context_length"))

    @property
    def simulated(self) -> bool:
        return self.raw.get("simulated") is True

    @property
    def sim_speed(self) -> float | None:
        sim = self.raw.get("sim")
        if not self.simulated or not isinstance(sim, dict):
            return None
        speed = sim.get("speed")
        return float(speed) if isinstance(speed, int | float) and not isinstance(speed, bool) else None

    @property
    def version(self) -> str | None:
        v = self.raw.get("version")
        return str(v) if v is not None else None

    @property
    def served_model_name(self) -> str | None:
        name = self.raw.get("served_model_name")
        return str(name) if name else None

    @property
    def running_cap(self) -> int | None:
        """Requests the server runs at once; more wait in its queue (DFLASH: 48 unless set).

        The scheduler's own figure, summed over DP ranks (``internal_states[i].
        effective_max_running_requests_per_dp``), else the resolved ``max_running_requests``.
        """
        states = self.raw.get("internal_states")
        if isinstance(states, list) and states:
            caps = [_opt_int(s.get("effective_max_running_requests_per_dp")) for s in states if isinstance(s, dict)]
            if caps and all(c is not None for c in caps):
                return sum(c for c in caps if c is not None)
        return _opt_int(self.raw.get("max_running_requests"))

    @property
    def avg_spec_accept_length(self) -> float | None:
        """Lifetime average from ``internal_states`` (for display only; cells use counter deltas)."""
        states = self.raw.get("internal_states")
        if isinstance(states, list) and states and isinstance(states[0], dict):
            val = states[0].get("avg_spec_accept_length")
            if isinstance(val, int | float) and not isinstance(val, bool):
                return float(val)
        return None

    def engine_summary(self) -> dict[str, Any]:
        """The ``engine`` section of a bench result."""
        return {
            "kind": "simulated" if self.simulated else "real",
            "version": self.version,
            "sim_speed": self.sim_speed,
            "max_total_num_tokens": self.max_total_num_tokens,
            "running_cap": self.running_cap,
            "context_length": self.context_length,
            "served_model_name": self.served_model_name,
            "speculative": {
                **{_SUMMARY_NAMES.get(key, key): value for key, value in self.settings().items()},
                "num_draft_tokens": self.num_draft_tokens,
            },
            "server_info_path": self.path,
        }


async def fetch_server_info(
    session: aiohttp.ClientSession, endpoint: Endpoint, *, timeout_s: float = 15.0
) -> ServerInfo:
    """GET ``/server_info``, falling back to the deprecated ``/get_server_info``."""
    problems: list[str] = []
    for path in ("/server_info", "/get_server_info"):
        try:
            async with session.get(
                endpoint.url(path), headers=endpoint.headers(), timeout=aiohttp.ClientTimeout(total=timeout_s)
            ) as resp:
                if resp.status == 404:
                    problems.append(f"{path}: 404")
                    continue
                if resp.status != 200:
                    text = await resp.text()
                    problems.append(f"{path}: HTTP {resp.status} {text[:200]!r}")
                    continue
                body = await resp.json(content_type=None)
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            problems.append(f"{path}: {type(exc).__name__}: {exc}")
            continue
        if not isinstance(body, dict):
            problems.append(f"{path}: body is not a JSON object")
            continue
        return ServerInfo(raw=body, path=path)
    raise ServerInfoError("server info unavailable (" + "; ".join(problems) + ")")
