#!/usr/bin/env python
"""Run an SGLang server module with its API keys kept out of the process list and the logs.

    python sglang-launch.py [--keys-file PATH] MODULE [ARGS...]

The unit starts the server through this file (installed by the sglang_service
role; stdlib only). With ``--keys-file`` (JSON ``{"api_key": ..., "admin_api_key": ...}``,
mode 0640 root:<service group> in a 0750 directory: the service user and root
can read it, nobody else):

1. ``--api-key`` / ``--admin-api-key`` are appended to ``sys.argv`` of this
   process only. The kernel's copy (``/proc/PID/cmdline``, what ``ps`` shows
   every user) keeps the words systemd started it with, which hold no key.
   sglang 0.5.23 reads the keys from its arguments only (a ``--config`` YAML
   is spliced into the same list; no environment variable is read).
2. ``sys.stdout`` and ``sys.stderr`` are wrapped so every occurrence of a key
   is written as ``<redacted>``: sglang 0.5.23 logs ``server_args={...}`` with
   both keys at startup (entrypoints/engine.py), and the journal keeps it.
3. MODULE runs as ``__main__`` in this process (runpy), so the server's PID is
   the unit's MainPID and systemd's stop signal reaches it directly.

Without a keys file it only runs MODULE.
"""

from __future__ import annotations

import io
import json
import runpy
import sys
from pathlib import Path

FLAGS = (("api_key", "--api-key"), ("admin_api_key", "--admin-api-key"))
REDACTED = "<redacted>"


class RedactingStream(io.TextIOBase):
    """A text stream that writes through to ``inner`` with every secret replaced."""

    def __init__(self, inner: io.TextIOBase, secrets: list[str]) -> None:
        super().__init__()
        self._inner = inner
        # longest first, so a key that contains another is replaced whole
        self._secrets = sorted({s for s in secrets if s}, key=len, reverse=True)

    def redact(self, text: str) -> str:
        for secret in self._secrets:
            text = text.replace(secret, REDACTED)
        return text

    def write(self, text: str) -> int:
        self._inner.write(self.redact(text))
        return len(text)

    def flush(self) -> None:
        self._inner.flush()

    def fileno(self) -> int:
        return self._inner.fileno()

    def isatty(self) -> bool:
        return self._inner.isatty()

    def writable(self) -> bool:
        return True

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return getattr(self._inner, "encoding", "utf-8")

    @property
    def errors(self) -> str | None:  # type: ignore[override]
        return getattr(self._inner, "errors", None)


def read_keys(path: str) -> dict[str, str]:
    """The keys from the keys file; a missing or unreadable file stops the start with the cause."""
    try:
        with Path(path).open(encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError) as exc:
        raise SystemExit(f"sglang-launch: cannot read the keys file {path}: {exc}") from exc
    if not isinstance(data, dict):
        raise SystemExit(f"sglang-launch: the keys file {path} is not a JSON object")
    return {name: str(data[name]) for name, _flag in FLAGS if data.get(name)}


def main(argv: list[str]) -> None:
    keys: dict[str, str] = {}
    if argv[:1] == ["--keys-file"] and len(argv) >= 2:
        keys, argv = read_keys(argv[1]), argv[2:]
    if not argv or argv[0].startswith("-"):
        raise SystemExit("usage: sglang-launch.py [--keys-file PATH] MODULE [ARGS...]")
    module, args = argv[0], argv[1:]
    for flag in ("--api-key", "--admin-api-key"):
        if any(a == flag or a.startswith(flag + "=") for a in args):
            raise SystemExit(f"sglang-launch: {flag} on the command line is visible to every user; use --keys-file")
    if keys:
        sys.stdout = RedactingStream(sys.stdout, list(keys.values()))  # type: ignore[assignment]
        sys.stderr = RedactingStream(sys.stderr, list(keys.values()))  # type: ignore[assignment]
        for name, flag in FLAGS:
            if name in keys:
                args += [flag, keys[name]]
    sys.argv = [module, *args]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main(sys.argv[1:])
