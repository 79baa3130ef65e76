"""Read the server's own description of itself (``/server_info``)."""

from __future__ import annotations

import dataclasses
from typing import Any

import aiohttp

from repro_py.endpoint import Endpoint


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


@dataclasses.dataclass(frozen=True)
class ServerInfo:
    raw: dict[str, Any]
    path: str

    @property
    def speculative_algorithm(self) -> str | None:
        algo = self.raw.get("speculative_algorithm")
        return str(algo) if algo not in (None, "") else None

    @property
    def ddtree_budget(self) -> int | None:
        return _opt_int(self.raw.get("speculative_ddtree_budget"))

    @property
    def ddtree_topk_cap(self) -> int | None:
        return _opt_int(self.raw.get("speculative_ddtree_topk_cap"))

    @property
    def block_size(self) -> int | None:
        return _opt_int(self.raw.get("speculative_dflash_block_size"))

    @property
    def window(self) -> int | None:
        return _opt_int(self.raw.get("speculative_draft_window_size"))

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
                "algorithm": self.speculative_algorithm,
                "ddtree_budget": self.ddtree_budget,
                "ddtree_topk_cap": self.ddtree_topk_cap,
                "block_size": self.block_size,
                "window": self.window,
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
