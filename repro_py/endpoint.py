"""Where a server is and how to authenticate to it."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Endpoint:
    """An SGLang-compatible server: ``base_url`` like ``http://127.0.0.1:30001``.

    ``api_key`` is sent as ``Authorization: Bearer <key>`` on every request
    (sglang exempts ``/health*``, ``/ready`` and ``/metrics``; sending it there
    does no harm); ``admin_api_key`` instead on the admin routes (``/flush_cache``)
    when the server has one (``--admin-api-key``: sglang then accepts only it there).
    ``model`` is the name put in OpenAI-style request bodies. Neither key is ever
    part of the endpoint's ``repr`` (a message or log that prints it shows no key).
    """

    base_url: str
    api_key: str | None = dataclasses.field(default=None, repr=False)
    model: str = "default"
    admin_api_key: str | None = dataclasses.field(default=None, repr=False)

    def __post_init__(self) -> None:
        url = self.base_url.strip().rstrip("/")
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"base_url={self.base_url!r} must start with http:// or https://")
        object.__setattr__(self, "base_url", url)

    def url(self, path: str) -> str:
        """Absolute URL of ``path`` (``/metrics``, ``/v1/chat/completions``)."""
        return self.base_url + ("" if path.startswith("/") else "/") + path

    def headers(self, *, json_body: bool = False, admin: bool = False) -> dict[str, str]:
        """Request headers: auth when a key is set (the admin key on an admin route, when there is one),
        content type for JSON bodies."""
        out: dict[str, str] = {}
        key = (self.admin_api_key or self.api_key) if admin else self.api_key
        if key:
            out["Authorization"] = f"Bearer {key}"
        if json_body:
            out["Content-Type"] = "application/json"
        return out
