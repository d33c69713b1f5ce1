"""A real HTTP server on 127.0.0.1 that answers the few Hub endpoints huggingface_hub uses
to fetch a config.json and safetensors headers, so tests run the library's real code
path with ``HF_ENDPOINT`` pointing here and never touch the network.

Served, as the Hub does (huggingface_hub 2.x ``file_download`` / ``hf_api`` /
``utils/_http.hf_raise_for_status``):

- ``GET /api/models/{repo}[/revision/{rev}]`` → ``{"id", "sha", "siblings"}``;
- ``HEAD|GET /{repo}/resolve/{rev}/{file}`` with ``ETag``, ``X-Repo-Commit`` and
  ``Content-Length``; GET honours ``Range: bytes=a-b`` with a 206;
- errors carry ``X-Error-Code`` (``RepoNotFound``, ``RevisionNotFound``,
  ``EntryNotFound``, ``GatedRepo``) like the Hub, so the library raises its own types.

Each repo can be made gated (401 unless ``Authorization: Bearer <token>``), failing
(500 on every request), silent (the connection is accepted and never answered) or
trickling (a 200 whose body comes one byte at a time, never complete) or short (a 200
whose body stops halfway and the connection closes: a truncated answer). Bytes served
from ``.safetensors`` files are counted per repo so a test can assert no tensor data was
fetched.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from collections import Counter
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit


@dataclass
class Repo:
    """One model repo: revision name → (commit sha, {filename: bytes or a Path on disk,
    served by range without reading the rest — for full-size sparse checkpoints})."""

    revisions: dict[str, tuple[str, dict[str, bytes | Path]]]
    gated_token: str | None = None
    failing: bool = False
    #: "silent", "trickle" or "short": a faulty server (see the module docstring).
    fault: str | None = None

    def resolve(self, rev: str) -> tuple[str, dict[str, bytes | Path]] | None:
        if rev in self.revisions:
            return self.revisions[rev]
        return next((r for r in self.revisions.values() if r[0] == rev), None)


def commit_sha(label: str) -> str:
    """A 40-hex commit id (huggingface_hub checks the format)."""
    return hashlib.sha1(label.encode()).hexdigest()


def folder_files(folder: Path, *, by_path: bool = False) -> dict[str, bytes | Path]:
    """Every file in ``folder`` (not recursive), as the repo would hold them: their bytes,
    or with ``by_path`` the paths themselves (read by range when asked)."""
    files = sorted(p for p in folder.iterdir() if p.is_file())
    return {p.name: p if by_path else p.read_bytes() for p in files}


def _size(content: bytes | Path) -> int:
    return content.stat().st_size if isinstance(content, Path) else len(content)


def _read(content: bytes | Path, start: int, end: int) -> bytes:
    """Bytes ``start`` to ``end`` inclusive."""
    if isinstance(content, bytes):
        return content[start : end + 1]
    with content.open("rb") as f:
        f.seek(start)
        return f.read(end - start + 1)


@dataclass
class HubServer:
    repos: dict[str, Repo] = field(default_factory=dict)
    safetensors_bytes: Counter = field(default_factory=Counter)
    requests: list[tuple[str, str, str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        #: Set on exit: silent and trickling handlers stop holding their clients.
        self.stopping = threading.Event()

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    def add(
        self, repo_id: str, files: dict[str, bytes | Path], *, revision: str = "main", **kw
    ) -> str:
        """Add (or extend) a repo; returns the commit sha of ``revision``."""
        sha = commit_sha(f"{repo_id}@{revision}")
        repo = self.repos.setdefault(repo_id, Repo(revisions={}))
        repo.revisions[revision] = (sha, files)
        for key, value in kw.items():
            setattr(repo, key, value)
        return sha

    def __enter__(self) -> HubServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopping.set()
        self._httpd.shutdown()
        self._httpd.server_close()


#: The largest read served; a client asking for more (weights) gets a 500 and a failing test.
MAX_SERVED = 64 * 2**20

_MODEL_INFO = re.compile(r"^/api/models/(?P<repo>[^/]+/[^/]+)(?:/revision/(?P<rev>[^/]+))?$")
_RESOLVE = re.compile(r"^/(?P<repo>[^/]+/[^/]+)/resolve/(?P<rev>[^/]+)/(?P<file>.+)$")
_RANGE = re.compile(r"bytes=(\d+)-(\d*)$")


def _handler(server: HubServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:  # keep test output clean
            pass

        def do_HEAD(self) -> None:
            self._serve(body=False)

        def do_GET(self) -> None:
            self._serve(body=True)

        def _send(self, status: int, headers: dict[str, str], data: bytes, body: bool) -> None:
            self.send_response(status)
            for k, v in headers.items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if body:
                self.wfile.write(data)

        def _error(self, status: int, code: str | None, message: str, body: bool, **extra) -> None:
            headers = {"Content-Type": "application/json", **extra}
            if code:
                headers |= {"X-Error-Code": code, "X-Error-Message": message}
            if status >= 500:
                headers["Retry-After"] = "0"  # the library's backoff retries; keep it short
            self._send(status, headers, json.dumps({"error": message}).encode(), body)

        def _send_short(self, status: int, headers: dict[str, str], data: bytes) -> None:
            self.send_response(status)
            for k, v in headers.items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(data)))
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(data[: len(data) // 2])
            self.wfile.flush()

        def _trickle(self) -> None:
            """A 200 promising a megabyte, then one byte every 0.2 s until the server stops."""
            try:
                self.send_response(200)
                self.send_header("Content-Length", str(2**20))
                self.send_header("ETag", '"trickle"')
                self.send_header("X-Repo-Commit", commit_sha("trickle"))
                self.end_headers()
                while not server.stopping.wait(0.2):
                    self.wfile.write(b"{")
                    self.wfile.flush()
            except OSError:  # the client gave up
                pass

        def _serve(self, body: bool) -> None:
            path = urlsplit(self.path).path
            server.requests.append((self.command, path, self.headers.get("Range", "")))
            info, resolve = _MODEL_INFO.match(path), _RESOLVE.match(path)
            match = info or resolve
            if match is None:
                return self._error(404, None, "unknown endpoint", body)
            repo_id, rev = match["repo"], unquote(match["rev"] or "main")
            repo = server.repos.get(repo_id)
            if repo is None:
                return self._error(404, "RepoNotFound", "Repository not found", body)
            if repo.failing:
                return self._error(500, None, "Internal Error", body)
            if repo.fault == "silent":
                server.stopping.wait(120)
                return None
            if repo.fault == "trickle":
                return self._trickle()
            if repo.gated_token is not None:
                if self.headers.get("Authorization") != f"Bearer {repo.gated_token}":
                    msg = f"Access to model {repo_id} is restricted. You must have access to it."
                    return self._error(401, "GatedRepo", msg, body)
            found = repo.resolve(rev)
            if found is None:
                return self._error(404, "RevisionNotFound", "Invalid rev id: " + rev, body)
            sha, files = found
            if info:
                data = {"id": repo_id, "sha": sha, "siblings": [{"rfilename": f} for f in files]}
                return self._send(
                    200, {"Content-Type": "application/json"}, json.dumps(data).encode(), body
                )
            name = unquote(resolve["file"])
            if name not in files:
                return self._error(
                    404, "EntryNotFound", f"{name} does not exist", body, **{"X-Repo-Commit": sha}
                )
            content = files[name]
            size = _size(content)
            # a real Hub ETag is the blob's hash; a path's name and size stand in for it so a
            # sparse multi-GB file is never read whole
            tag = content if isinstance(content, bytes) else f"{name}:{size}".encode()
            headers = {
                "ETag": '"' + hashlib.sha256(tag).hexdigest() + '"',
                "X-Repo-Commit": sha,
                "Accept-Ranges": "bytes",
                "Content-Type": "application/octet-stream",
            }
            if not body:  # HEAD: the whole file's size, no body
                self.send_response(200)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(size))
                self.end_headers()
                return None
            status, start, end = 200, 0, size - 1
            if m := _RANGE.match(self.headers.get("Range", "")):
                start, end = int(m[1]), min(int(m[2]) if m[2] else size - 1, size - 1)
                status = 206
                headers["Content-Range"] = f"bytes {start}-{end}/{size}"
            if name.endswith(".safetensors"):
                server.safetensors_bytes[repo_id] += end - start + 1
            if repo.fault == "short":  # promise every byte, send half, hang up
                self.close_connection = True
                return self._send_short(status, headers, _read(content, start, end))
            if end - start + 1 > MAX_SERVED:  # a test machine is shared: never stream GBs
                return self._error(500, None, "test server refuses reads over 64 MiB", body)
            part = _read(content, start, end)
            return self._send(status, headers, part, body)

    return Handler
