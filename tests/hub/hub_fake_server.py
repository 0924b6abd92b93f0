"""A local Hugging Face Hub for tests: the HTTP endpoints huggingface_hub calls, on 127.0.0.1.

It answers what huggingface_hub 1.x sends (read from its source, ``file_download.py`` and
``utils/_http.py: hf_raise_for_status``):

- ``HEAD``/``GET /{repo}/resolve/{revision}/{filename}`` with ``X-Repo-Commit``, ``ETag`` (git blob sha1,
  or the LFS sha256 with ``X-Linked-Etag``/``X-Linked-Size`` for weight files), ``Content-Length`` and
  ``Range`` support (safetensors headers are read with ``Range: bytes=0-100000``);
- ``GET /api/models/{repo}[/revision/{rev}]`` (``model_info``: sha, siblings, gated, cardData) and
  ``GET /api/models/{repo}/tree/{rev}`` (``list_repo_tree``, used by ``snapshot_download`` as vLLM does);
- errors as the Hub sends them: ``X-Error-Code`` ``RepoNotFound`` (401), ``RevisionNotFound`` (404),
  ``EntryNotFound`` (404, with ``X-Repo-Commit``), ``GatedRepo`` (401 without a token, 403 with a token
  that has not accepted the license), plus an ``X-Error-Message``.

Weight files can be "virtual": only the real safetensors header is stored, and the declared size is the
full file's (the metadata API reads only the header). Hooks: ``hold`` blocks a file's responses until an
event is set; ``faults`` scripts the next GETs of a file: ``"truncate"`` sends half the body and drops the
connection, ``"error"`` answers 500.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlsplit

HOLD_LIMIT_S = 30.0  # a held request gives up after this long, so a failing test cannot hang the suite


@dataclass
class Blob:
    """A file's content; ``size`` may exceed ``len(data)`` for a virtual (header-only) weight file."""

    data: bytes
    size: int
    lfs: bool

    @classmethod
    def of(cls, data: bytes, *, size: int | None = None, lfs: bool | None = None) -> Blob:
        return cls(data, size if size is not None else len(data), lfs if lfs is not None else size is not None)

    @property
    def etag(self) -> str:
        if self.lfs:
            return hashlib.sha256(self.data + str(self.size).encode()).hexdigest()
        return hashlib.sha1(b"blob %d\0" % len(self.data) + self.data).hexdigest()


@dataclass
class Repo:
    repo_id: str
    commits: dict[str, dict[str, Blob]] = field(default_factory=dict)
    refs: dict[str, str] = field(default_factory=dict)  # branch or tag -> commit sha
    gated: bool = False
    license: str | None = None
    accepted_tokens: set[str] = field(default_factory=set)

    def commit(self, files: dict[str, bytes | Blob], *, ref: str | None = "main") -> str:
        blobs = {
            name: value if isinstance(value, Blob) else Blob.of(value, lfs=name.endswith(".safetensors"))
            for name, value in files.items()
        }
        sha = hashlib.sha1(
            repr(sorted((n, b.etag) for n, b in blobs.items())).encode() + str(len(self.commits)).encode()
        ).hexdigest()
        self.commits[sha] = blobs
        if ref is not None:
            self.refs[ref] = sha
        return sha

    def resolve(self, revision: str) -> str | None:
        if revision in self.commits:
            return revision
        return self.refs.get(revision)


@dataclass
class Request:
    method: str
    path: str
    range: str | None
    authorization: str | None


class FakeHub:
    def __init__(self) -> None:
        self.repos: dict[str, Repo] = {}
        self.requests: list[Request] = []
        self.hold: dict[str, threading.Event] = {}  # filename -> released when set
        self.holding = threading.Event()  # set while a request is held
        self.faults: dict[str, list[str]] = {}  # filename -> what the next GETs do ("truncate", "error")
        self.model_api = True  # False: /api/models answers a plain 404 (a mirror without the API)
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self.connections: set[socket.socket] = set()
        self.url = ""

    def add(self, repo: Repo) -> Repo:
        self.repos[repo.repo_id] = repo
        return repo

    def count(self, method: str | None = None, contains: str = "") -> int:
        with self._lock:
            return sum(1 for r in self.requests if (method is None or r.method == method) and contains in r.path)

    def reset_log(self) -> None:
        with self._lock:
            self.requests.clear()

    def _log(self, request: Request) -> None:
        with self._lock:
            self.requests.append(request)

    @contextmanager
    def running(self) -> Iterator[FakeHub]:
        hub = self

        class Handler(_Handler):
            fake = hub

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        server.daemon_threads = True
        self._server = server
        self.url = f"http://127.0.0.1:{server.server_address[1]}"
        thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        thread.start()
        try:
            yield self
        finally:
            for event in self.hold.values():
                event.set()
            server.shutdown()
            server.server_close()
            thread.join(timeout=5)

    def stop(self) -> None:
        """Stop answering: new connections are refused and kept-alive ones are dropped (the Hub is down)."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        with self._lock:
            connections = list(self.connections)
        for connection in connections:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)


class _Handler(BaseHTTPRequestHandler):
    fake: FakeHub
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:  # keep pytest output clean
        return None

    def setup(self) -> None:
        super().setup()
        with self.fake._lock:
            self.fake.connections.add(self.connection)

    def finish(self) -> None:
        with self.fake._lock:
            self.fake.connections.discard(self.connection)
        super().finish()

    # -- helpers ----------------------------------------------------------------------------------

    def _send(
        self, status: int, body: bytes = b"", headers: dict[str, str] | None = None, *, head: bool = False
    ) -> None:
        self.send_response(status)
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def _error(
        self, status: int, code: str | None, message: str, *, head: bool, extra: dict[str, str] | None = None
    ) -> None:
        headers = {"Content-Type": "application/json", "X-Error-Message": message, **(extra or {})}
        if code is not None:
            headers["X-Error-Code"] = code
        self._send(status, json.dumps({"error": message}).encode(), headers, head=head)

    def _token(self) -> str | None:
        auth = self.headers.get("authorization")
        return auth.split(" ", 1)[1] if auth and auth.lower().startswith("bearer ") else None

    def _find_repo(self, parts: list[str]) -> tuple[Repo | None, list[str]]:
        for width in (2, 1):
            repo = self.fake.repos.get("/".join(parts[:width]))
            if repo is not None:
                return repo, parts[width:]
        return None, parts[2:]

    def _gate(self, repo: Repo, *, head: bool) -> bool:
        """Answer 401/403 for a gated repo without an accepted token; True when access is granted."""
        if not repo.gated:
            return True
        token = self._token()
        if token is None:
            self._error(
                401,
                "GatedRepo",
                f"Access to model {repo.repo_id} is restricted. You must have access to "
                "it and be authenticated to access it. Please log in.",
                head=head,
            )
            return False
        if token not in repo.accepted_tokens:
            self._error(
                403,
                "GatedRepo",
                f"Access to model {repo.repo_id} is restricted and you are not in the "
                f"authorized list. Visit {self.fake.url}/{repo.repo_id} to ask for access.",
                head=head,
            )
            return False
        return True

    # -- routes -----------------------------------------------------------------------------------

    def do_HEAD(self) -> None:
        self._route(head=True)

    def do_GET(self) -> None:
        self._route(head=False)

    def _route(self, *, head: bool) -> None:
        path = urlsplit(self.path).path
        self.fake._log(Request(self.command, path, self.headers.get("range"), self.headers.get("authorization")))
        raw_parts = path.strip("/").split("/")
        if raw_parts[:2] == ["api", "models"]:
            self._model_info(raw_parts[2:], head=head)
        elif "resolve" in raw_parts:
            self._resolve(raw_parts, head=head)
        else:
            self._error(404, None, "Not Found", head=head)

    def _model_info(self, parts: list[str], *, head: bool) -> None:
        if not self.fake.model_api:
            self._error(404, None, "Not Found", head=head)
            return
        repo, rest = self._find_repo([unquote(p) for p in parts])
        if repo is None:
            self._error(401, "RepoNotFound", "Repository not found", head=head)
            return
        revision = unquote(rest[1]) if len(rest) >= 2 and rest[0] in ("revision", "tree") else "main"
        sha = repo.resolve(revision)
        if sha is None:
            self._error(404, "RevisionNotFound", f"Invalid rev id: {revision}", head=head)
            return
        if rest and rest[0] == "tree":  # list_repo_tree (snapshot_download): one page, every file
            tree = []
            for name, blob in sorted(repo.commits[sha].items()):
                entry: dict[str, object] = {
                    "type": "file",
                    "path": name,
                    "size": blob.size,
                    "oid": Blob.of(blob.data).etag,
                }
                if blob.lfs:
                    entry["lfs"] = {"size": blob.size, "oid": blob.etag, "pointerSize": 134}
                tree.append(entry)
            self._send(200, json.dumps(tree).encode(), {"Content-Type": "application/json"}, head=head)
            return
        info = {
            "_id": hashlib.md5(repo.repo_id.encode()).hexdigest()[:24],
            "id": repo.repo_id,
            "modelId": repo.repo_id,
            "sha": sha,
            "private": False,
            "gated": "manual" if repo.gated else False,
            "disabled": False,
            "tags": [f"license:{repo.license}"] if repo.license else [],
            "cardData": {"license": repo.license} if repo.license else {},
            "siblings": [{"rfilename": name} for name in sorted(repo.commits[sha])],
            "lastModified": "2025-01-01T00:00:00.000Z",
        }
        self._send(200, json.dumps(info).encode(), {"Content-Type": "application/json"}, head=head)

    def _resolve(self, raw_parts: list[str], *, head: bool) -> None:
        at = raw_parts.index("resolve")
        repo = self.fake.repos.get("/".join(unquote(p) for p in raw_parts[:at]))
        if repo is None:
            self._error(401, "RepoNotFound", "Repository not found", head=head)
            return
        if len(raw_parts) < at + 3:
            self._error(400, None, "Bad request", head=head)
            return
        revision = unquote(raw_parts[at + 1])
        filename = "/".join(unquote(p) for p in raw_parts[at + 2 :])
        sha = repo.resolve(revision)
        if sha is None:
            self._error(404, "RevisionNotFound", f"Invalid rev id: {revision}", head=head)
            return
        if not self._gate(repo, head=head):
            return
        blob = repo.commits[sha].get(filename)
        if blob is None:
            self._error(
                404,
                "EntryNotFound",
                f'{filename} does not exist on "{revision}"',
                head=head,
                extra={"X-Repo-Commit": sha},
            )
            return
        held = self.fake.hold.get(filename)
        if held is not None:
            self.fake.holding.set()
            held.wait(HOLD_LIMIT_S)
        headers = {"X-Repo-Commit": sha, "ETag": f'"{blob.etag}"', "Accept-Ranges": "bytes"}
        if blob.lfs:
            headers["X-Linked-Etag"] = f'"{blob.etag}"'
            headers["X-Linked-Size"] = str(blob.size)
        wanted = self.headers.get("range")
        if head:
            self.send_response(200)
            for key, value in headers.items():
                self.send_header(key, value)
            self.send_header("Content-Length", str(blob.size))
            self.end_headers()
            return
        script = self.fake.faults.get(filename)
        fault = script.pop(0) if script else None
        if fault == "error":
            self._error(500, None, "Internal Error", head=False)
            return
        if wanted:
            start, end = _parse_range(wanted, blob.size)
            if end >= len(blob.data) and end < blob.size:
                end = len(blob.data) - 1  # a virtual file only has its header: serve what exists
            headers["Content-Range"] = f"bytes {start}-{end}/{blob.size}"
            self._send(206, blob.data[start : end + 1], headers)
            return
        body = blob.data
        if fault == "truncate":
            self.send_response(200)
            for key, value in headers.items():
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body[: len(body) // 2])
            self.wfile.flush()
            self.close_connection = True
            return
        self._send(200, body, headers)


def _parse_range(value: str, size: int) -> tuple[int, int]:
    spec = value.split("=", 1)[1].split(",", maxsplit=1)[0].strip()
    first, _, last = spec.partition("-")
    if first == "":
        length = int(last)
        return max(size - length, 0), size - 1
    start = int(first)
    end = int(last) if last else size - 1
    return start, min(end, size - 1)
