#!/usr/bin/env python3
"""A local mirror of Hugging Face model repositories, for REPRODUCE.md's weight downloads without the Hub.

``hf download REPO --revision SHA --local-dir DIR`` talks to ``$HF_ENDPOINT``; this
server answers the requests it makes for a model repository (the repository's
revision and file list, each file's metadata and content) from a directory of
repositories, ``ROOT/<org>/<name>/`` with each file as it is. Every repository
has one revision, ``--sha`` (40 hex digits), which ``main`` names too. Stdlib only.
The files it serves are the rehearsal's SIMULATED model directories: no weights.

Usage: hf_mirror.py ROOT --sha SHA [--bind 0.0.0.0] [--port 0]   (prints "listening on PORT")
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlparse


def make_handler(root: Path, sha: str) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, fmt: str, *args: object) -> None:
            sys.stderr.write("hf-mirror: " + fmt % args + "\n")

        def _repo_files(self, repo: str) -> list[Path] | None:
            base = root / repo
            if not base.is_dir():
                return None
            return sorted(p for p in base.rglob("*") if p.is_file())

        def _json(self, doc: object, status: int = 200) -> None:
            body = json.dumps(doc).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def _not_found(self, what: str) -> None:
            self.send_response(404)
            self.send_header("X-Error-Code", "EntryNotFound" if "/resolve/" in self.path else "RepoNotFound")
            self.send_header("X-Error-Message", what)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def _api(self, parts: list[str]) -> None:
            # /api/models/<org>/<name>[/revision/<rev>|/tree/<rev>[/path]]
            repo = "/".join(parts[2:4])
            files = self._repo_files(repo)
            if files is None:
                self._not_found(f"repository {repo} not found")
                return
            rest = parts[4:]
            if rest[:1] == ["revision"] or not rest:
                if rest[1:2] and rest[1] not in (sha, "main"):
                    self._not_found(f"revision {rest[1]} not found")
                    return
                siblings = [{"rfilename": str(p.relative_to(root / repo))} for p in files]
                self._json({"id": repo, "modelId": repo, "sha": sha, "siblings": siblings, "private": False})
            elif rest[:1] == ["tree"]:
                entries = [
                    {"type": "file", "path": str(p.relative_to(root / repo)), "size": p.stat().st_size,
                     "oid": hashlib.sha1(p.read_bytes()).hexdigest()}
                    for p in files
                ]
                self._json(entries)
            else:
                self._not_found("unknown API route")

        def _resolve(self, parts: list[str]) -> None:
            # /<org>/<name>/resolve/<rev>/<path...>
            repo, rev, rel = "/".join(parts[:2]), parts[3], "/".join(parts[4:])
            path = root / repo / rel
            if rev not in (sha, "main") or not path.is_file() or root / repo not in path.parents:
                self._not_found(f"{repo}@{rev}: {rel} not found")
                return
            data = path.read_bytes()
            self.send_response(200)
            self.send_header("X-Repo-Commit", sha)
            self.send_header("ETag", '"' + hashlib.sha256(data).hexdigest() + '"')
            self.send_header("Content-Length", str(len(data)))
            self.send_header("Content-Type", "application/octet-stream")
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)

        def do_GET(self) -> None:
            parts = [unquote(p) for p in urlparse(self.path).path.strip("/").split("/")]
            if parts[:2] == ["api", "models"] and len(parts) >= 4:
                self._api(parts)
            elif len(parts) >= 5 and parts[2] == "resolve":
                self._resolve(parts)
            else:
                self._not_found("unknown route")

        do_HEAD = do_GET

    return Handler


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("root", type=Path)
    parser.add_argument("--sha", required=True)
    parser.add_argument("--bind", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args(argv)
    server = ThreadingHTTPServer((args.bind, args.port), make_handler(args.root.resolve(), args.sha))
    print(f"listening on {server.server_address[1]}", flush=True)
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
