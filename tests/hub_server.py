"""A Hub-compatible HTTP server on 127.0.0.1 for tests: huggingface_hub's and datasets' real
client code talks to it, uploads and downloads alike, with no network.

Why not a server from PyPI: ``hf-local-hub`` wraps a Go binary that its wheel does not ship,
and ``olah`` is a caching mirror of huggingface.co (FastAPI, GitPython and a dozen more
dependencies) with no upload endpoints; neither counts the bytes it serves or can cut a
response short on purpose, which is what these tests are for. This module uses only the
standard library.

What it answers, in the shapes huggingface_hub 2.x parses (``hf_api.py``, ``file_download.py``,
``hf_file_system.py``):

    POST /api/repos/create                            create a repo (``private`` honoured)
    POST /api/validate-yaml                           the card's YAML check: always fine
    POST /api/datasets/{repo}/branch/{name}           create a branch at main's head
    POST /api/datasets/{repo}/preupload/{rev}         always "regular" upload mode
    POST /api/datasets/{repo}/commit/{rev}            ndjson commit, files inline (base64)
    GET  /api/datasets/{repo}[/revision/{rev}]        repo info: sha, private, siblings
    GET  /api/datasets/{repo}/tree/{rev}[/{path}]     listing (``recursive``), one page
    POST /api/datasets/{repo}/paths-info/{rev}        listing of named paths
    HEAD|GET /datasets/{repo}/resolve/{rev}/{path}    file bytes; one HTTP Range honoured

With ``redirect`` set, ``/resolve/`` answers as the Hub does for files in LFS or Xet storage:
302 to a second server on another loopback port (the CDN), at a signed URL that expires
after ``signed_seconds`` (``?Expires=<unix time>&Signature=<hmac>``; expired or forged: 403,
as CloudFront answers), with the file's ``X-Linked-Etag`` (its sha256), ``X-Linked-Size`` and
``X-Repo-Commit``. The CDN's own ``ETag`` is the file's md5, as S3's, not the Hub's.
``revoke_after = n`` refuses every URL signed so far once the CDN has had n requests (a key
rotation). ``resolver_limit = (quota, window seconds)`` rate-limits ``/resolve/`` requests as the Hub's
"resolvers" bucket: a fixed window, ``RateLimit: "resolvers";r=<left>;t=<seconds to reset>``
and ``RateLimit-Policy`` on every resolver answer, and 429 with ``Retry-After`` once the quota
is spent.

Revisions are branch names or commit shas. A private repo answers 401 ``RepoNotFound`` (as
the Hub does) unless the request carries ``Authorization: Bearer <token>`` with the token
the server was made with. Files carry no Xet or LFS metadata, so huggingface_hub reads them
over plain HTTP: the Xet transfer the real Hub uses for large files is not exercised here.

Records: ``requests`` (every request: method, path, authorization header, body), ``cdn_requests``
(every request to the CDN: method, path, authorization header, range, status), ``downloads``
(every file response: path, byte range, bytes actually written) and ``committed`` (the files
of the last commit). Faults: ``fail`` (path fragment -> (status, message)), ``drop`` (path
fragments whose connection is closed without an answer), ``cut`` (path regex -> number of
file responses to break off halfway through the body) and ``stall`` (path regex -> number
of file responses held back ``stall_seconds`` before the first byte, for client
timeouts; bounded, so a client without a timeout still gets its answer). ``latency``: seconds
added before every answer.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import hashlib
import hmac
import json
import math
import re
import socket
import threading
import time
import traceback
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from range_server import byte_range

CHUNK = 64 * 1024  # bytes per socket write, so a client hanging up stops the count early


@dataclasses.dataclass
class HubRepo:
    private: bool = False
    branches: dict[str, str] = dataclasses.field(default_factory=dict)  # name -> commit sha
    commits: dict[str, dict[str, bytes]] = dataclasses.field(default_factory=dict)  # sha -> path -> bytes
    # Digests of every file, computed once at commit: hashing a 40 MB .bin on each ranged
    # read made every request cost 50 ms.
    etags: dict[str, dict[str, str]] = dataclasses.field(default_factory=dict)  # sha -> path -> sha256
    oids: dict[str, dict[str, str]] = dataclasses.field(default_factory=dict)  # sha -> path -> git blob sha1

    def resolve(self, revision: str) -> str | None:
        """The commit sha of a branch name or a sha, else None."""
        if revision in self.branches:
            return self.branches[revision]
        return revision if revision in self.commits else None


@dataclasses.dataclass
class Download:
    """One file response: ``[start, stop)`` of a file of ``size`` bytes; ``sent`` were written."""

    path: str  # repo_id/revision/path_in_repo
    name: str  # path_in_repo
    start: int
    stop: int
    size: int
    ranged: bool
    sent: int = 0
    cut: bool = False  # the server dropped the connection mid-body on purpose (a ``cut`` fault)

    @property
    def whole_file(self) -> bool:
        return self.start == 0 and self.stop == self.size and self.sent == self.size


def _git_blob_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


class LocalHub(ThreadingHTTPServer):
    """``with LocalHub(token=...) as hub: hub.url``; see the module docstring."""

    daemon_threads = True
    request_queue_size = 256  # clients with many requests in flight (default 5: SYN retransmits)

    def __init__(self, token: str | None = None):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.token = token
        self.repos: dict[str, HubRepo] = {}
        self.requests: list[dict] = []
        self.errors: list[str] = []  # tracebacks of requests this server failed to handle
        self.downloads: list[Download] = []
        self.committed: dict[str, bytes] = {}
        self.fail: dict[str, tuple[int, str]] = {}
        self.drop: set[str] = set()
        self.cut: dict[str, int] = {}
        self.stall: dict[str, int] = {}
        self.stall_seconds = 3.0
        self.latency = 0.0  # seconds added before every answer
        self.redirect = False  # /resolve/ answers 302 to the CDN (see the module docstring)
        self.signed_seconds = 3600.0
        self.resolver_limit: tuple[int, float] | None = None  # (quota, window seconds)
        self.revoke_after: int | None = None  # after this many CDN requests, every URL signed so far is refused
        self._resolver_window = (0.0, 0)  # (start, resolver requests in it)
        self.cdn_requests: list[dict] = []
        self._cdn_etags: dict[str, str] = {}
        self._secret = hashlib.sha256(str(id(self)).encode()).digest()
        self.cdn = _Cdn(self)
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._commit_counter = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def handle_error(self, request, client_address) -> None:
        """A bug in this server would reach the client as a dropped connection, which the
        clients retry: keep it in ``errors`` for the tests to check instead."""
        self.errors.append(traceback.format_exc())

    def start(self) -> "LocalHub":
        self._thread = threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        threading.Thread(target=self.cdn.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        return self

    def stop(self) -> None:
        self._stopping.set()  # releases stalled answers at once
        self.shutdown()
        self.server_close()
        self.cdn.shutdown()
        self.cdn.server_close()

    # --- the CDN's signed URLs ----------------------------------------------------------

    def _signature(self, path: str, expires: int) -> str:
        return hmac.new(self._secret, f"{path}:{expires}".encode(), hashlib.sha256).hexdigest()

    def signed_url(self, sha256: str) -> str:
        path = f"/blobs/{sha256}"
        expires = math.ceil(time.time() + self.signed_seconds)  # at least signed_seconds from now
        return f"{self.cdn.url}{path}?Expires={expires}&Signature={self._signature(path, expires)}"

    def _blob(self, sha256: str) -> bytes | None:
        with self._lock:
            for repo in self.repos.values():
                for sha, etags in repo.etags.items():
                    for path, digest in etags.items():
                        if digest == sha256:
                            return repo.commits[sha][path]
        return None

    def cdn_etag(self, sha256: str, data: bytes) -> str:
        """The CDN's ETag of a blob: its md5 (as S3's), computed once (hashing a 20 MB .bin per
        ranged read made every request cost tens of ms)."""
        with self._lock:
            etag = self._cdn_etags.get(sha256)
        if etag is None:
            etag = hashlib.md5(data).hexdigest()
            with self._lock:
                self._cdn_etags[sha256] = etag
        return etag

    def _take_resolver_request(self) -> tuple[int, int, int, float] | None:
        """(quota, left, seconds to reset, window) after counting one resolver request, None
        without a limit; ``left`` < 0: over the quota."""
        if self.resolver_limit is None:
            return None
        quota, window = self.resolver_limit
        with self._lock:
            start, count = self._resolver_window
            now = time.monotonic()
            if now - start >= window:
                start, count = now, 0
            count += 1
            self._resolver_window = (start, count)
        return quota, quota - count, max(1, int(start + window - now + 0.999)), window

    def __enter__(self) -> "LocalHub":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # --- repos, as the tests set them up ------------------------------------------------

    def create_repo(self, repo_id: str, private: bool = False) -> HubRepo:
        with self._lock:
            return self.repos.setdefault(repo_id, HubRepo(private=private))

    def commit(self, repo_id: str, files: dict[str, bytes], branch: str = "main",
               deleted: tuple[str, ...] = ()) -> str:
        """A new commit on ``branch`` (created from main when new): the parent's files, then
        ``files`` added or replaced and ``deleted`` removed. Returns its sha."""
        repo = self.create_repo(repo_id)
        with self._lock:
            parent = repo.branches.get(branch) or repo.branches.get("main")
            tree = dict(repo.commits[parent]) if parent else {}
            etags = dict(repo.etags[parent]) if parent else {}
            oids = dict(repo.oids[parent]) if parent else {}
            tree.update(files)
            etags.update({path: hashlib.sha256(data).hexdigest() for path, data in files.items()})
            oids.update({path: _git_blob_sha1(data) for path, data in files.items()})
            for path in deleted:
                for table in (tree, etags, oids):
                    table.pop(path, None)
            self._commit_counter += 1
            sha = hashlib.sha1(f"{repo_id}:{branch}:{self._commit_counter}".encode()).hexdigest()
            repo.commits[sha] = tree
            repo.etags[sha] = etags
            repo.oids[sha] = oids
            repo.branches[branch] = sha
            return sha

    def files(self, repo_id: str, revision: str = "main") -> dict[str, bytes]:
        repo = self.repos[repo_id]
        return repo.commits[repo.resolve(revision)]

    # --- what was served ------------------------------------------------------------------

    def downloads_of(self, suffix: str) -> list[Download]:
        return [d for d in self.downloads if d.name.endswith(suffix)]

    def bytes_served(self, suffix: str) -> int:
        return sum(d.sent for d in self.downloads_of(suffix))


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as the Hub; every answer sets Content-Length
    # Headers and body leave in two writes; with Nagle's algorithm on, the body waits for
    # the client's delayed ACK (40 ms on Linux), which made each ranged read cost 40 ms.
    disable_nagle_algorithm = True
    server: LocalHub

    def log_message(self, *args):  # keep test output clean
        pass

    # --- plumbing ---------------------------------------------------------------------

    def _send(self, status: int, body: bytes = b"", headers: dict | None = None, head: bool = False) -> None:
        self.send_response(status)
        for key, value in (headers or {}).items():
            self.send_header(key, str(value))
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def _json(self, status: int, payload, headers: dict | None = None, head: bool = False) -> None:
        self._send(status, json.dumps(payload).encode(), {"Content-Type": "application/json", **(headers or {})},
                   head=head)

    def _error(self, status: int, code: str | None, message: str, head: bool = False) -> None:
        headers = {"X-Error-Message": message}
        if code:
            headers["X-Error-Code"] = code
        self._json(status, {"error": message}, headers, head=head)

    def _authorized(self) -> bool:
        """A hub made without a token takes any bearer token (the upload tests need no more)."""
        header = self.headers.get("Authorization") or ""
        if self.server.token is None:
            return header.startswith("Bearer ")
        return header == f"Bearer {self.server.token}"

    def _visible_repo(self, repo_id: str, head: bool = False) -> HubRepo | None:
        """The repo, or None after answering as the Hub does for missing and private repos."""
        repo = self.server.repos.get(repo_id)
        if repo is None or (repo.private and not self._authorized()):
            # The Hub answers 401 for both, so that a private repo's existence is not revealed.
            self._error(401, "RepoNotFound", "Repository not found", head=head)
            return None
        return repo

    def _commit_of(self, repo: HubRepo, revision: str, head: bool = False) -> str | None:
        sha = repo.resolve(urllib.parse.unquote(revision))
        if sha is None:
            self._error(404, "RevisionNotFound", f"Invalid rev id: {urllib.parse.unquote(revision)}", head=head)
        return sha

    def do_HEAD(self):
        self._handle(head=True)

    def do_GET(self):
        self._handle()

    def do_POST(self):
        self._handle()

    def _handle(self, head: bool = False):
        hub = self.server
        if hub.latency:  # a round trip to a distant Hub (benchmarks/bench_remote.py)
            time.sleep(hub.latency)
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        hub.requests.append({"method": self.command, "path": self.path,
                             "authorization": self.headers.get("Authorization"), "body": body,
                             "range": self.headers.get("Range")})
        for fragment in hub.drop:
            if fragment in self.path:
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_RDWR)
                return
        for fragment, (status, message) in hub.fail.items():
            if fragment in self.path:
                # The Hub's 409 for an existing repo carries its URL, which huggingface_hub reads.
                return self._json(status, {"error": message, "url": f"{hub.url}/datasets/me/tokens"},
                                  {"X-Error-Message": message}, head=head)
        path, _, query = self.path.partition("?")
        params = urllib.parse.parse_qs(query)
        try:
            self._route(path, params, body, head)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def _route(self, path: str, params: dict, body: bytes, head: bool) -> None:
        hub = self.server
        if path == "/api/repos/create" and self.command == "POST":
            if not self._authorized():
                return self._error(401, None, "Invalid credentials in Authorization header")
            payload = json.loads(body)
            repo_id = f"{payload['organization']}/{payload['name']}" if payload.get("organization") else payload["name"]
            if repo_id in hub.repos:
                return self._json(409, {"error": "You already created this dataset repo",
                                        "url": f"{hub.url}/datasets/{repo_id}"})
            hub.create_repo(repo_id, private=payload.get("private") or payload.get("visibility") == "private")
            return self._json(200, {"url": f"{hub.url}/datasets/{repo_id}"})
        if path == "/api/validate-yaml":
            return self._json(200, {"errors": [], "warnings": []})
        match = re.fullmatch(r"/datasets/([^/]+/[^/]+)/resolve/([^/]+)/(.+)", path)
        if match:
            return self._resolve(match.group(1), match.group(2), urllib.parse.unquote(match.group(3)), head)
        match = re.fullmatch(r"/api/datasets/([^/]+/[^/]+)(?:/(revision|tree|paths-info|branch|preupload|commit)"
                             r"/([^/]+)(/.*)?)?", path)
        if not match:
            return self._error(404, None, f"local hub does not know {self.command} {path}", head=head)
        repo_id, action, revision, rest = match.groups()
        repo = self._visible_repo(repo_id, head=head)
        if repo is None:
            return
        if action in (None, "revision") and self.command in ("GET", "HEAD"):
            sha = self._commit_of(repo, revision or "main", head=head)
            if sha is not None:
                self._json(200, self._repo_info(repo_id, repo, sha), head=head)
            return
        if action == "tree":
            sha = self._commit_of(repo, revision)
            if sha is not None:
                recursive = params.get("recursive", ["False"])[0].lower() == "true"
                self._tree(repo, sha, urllib.parse.unquote((rest or "").lstrip("/")), recursive)
            return
        if action == "paths-info":
            sha = self._commit_of(repo, revision)
            if sha is not None:
                wanted = urllib.parse.parse_qs(body.decode()).get("paths", [])
                self._paths_info(repo, sha, wanted)
            return
        if action in ("branch", "preupload", "commit") and not self._authorized():
            return self._error(401, None, "Invalid credentials in Authorization header")
        if action == "branch":
            starting = json.loads(body).get("startingPoint") if body else None
            base = repo.resolve(starting or "main")
            with hub._lock:
                repo.branches.setdefault(urllib.parse.unquote(revision), base)
            return self._json(200, {})
        if action == "preupload":
            files = json.loads(body)["files"]
            return self._json(200, {"files": [{"path": f["path"], "uploadMode": "regular", "shouldIgnore": False,
                                               "oid": None} for f in files]})
        if action == "commit":
            return self._commit(repo_id, urllib.parse.unquote(revision), body)
        return self._error(404, None, f"local hub does not know {self.command} {path}")

    def _take_fault(self, faults: dict[str, int]) -> bool:
        """Whether this request's path matches (``re.search``) a fault with uses left; takes one."""
        with self.server._lock:
            for pattern, remaining in faults.items():
                if remaining > 0 and re.search(pattern, self.path):
                    faults[pattern] = remaining - 1
                    return True
        return False

    # --- the answers ------------------------------------------------------------------

    def _entry(self, repo: HubRepo, sha: str, path: str) -> dict:
        return {"type": "file", "path": path, "size": len(repo.commits[sha][path]), "oid": repo.oids[sha][path]}

    def _repo_info(self, repo_id: str, repo: HubRepo, sha: str) -> dict:
        return {"id": repo_id, "author": repo_id.split("/")[0], "sha": sha, "private": repo.private,
                "gated": False, "disabled": False, "downloads": 0, "likes": 0, "tags": [],
                "lastModified": "2026-01-01T00:00:00.000Z", "createdAt": "2026-01-01T00:00:00.000Z",
                "siblings": [{"rfilename": p} for p in sorted(repo.commits[sha])]}

    def _tree(self, repo: HubRepo, sha: str, folder: str, recursive: bool) -> None:
        files = repo.commits[sha]
        prefix = folder + "/" if folder else ""
        entries, folders = [], set()
        for path in sorted(files):
            if not path.startswith(prefix):
                continue
            rest = path[len(prefix):]
            if "/" in rest and not recursive:
                folders.add(prefix + rest.split("/")[0])
                continue
            if recursive:
                parts = rest.split("/")[:-1]
                folders.update(prefix + "/".join(parts[:i + 1]) for i in range(len(parts)))
            entries.append(self._entry(repo, sha, path))
        if folder and not entries and not folders:
            return self._error(404, "EntryNotFound", f"{folder} does not exist")
        entries += [{"type": "directory", "path": f, "oid": hashlib.sha1(f.encode()).hexdigest()}
                    for f in sorted(folders)]
        self._json(200, entries)

    def _paths_info(self, repo: HubRepo, sha: str, wanted: list[str]) -> None:
        files = repo.commits[sha]
        answer = []
        for path in wanted:
            path = path.strip("/")
            if path in files:
                answer.append(self._entry(repo, sha, path))
            elif any(f.startswith(path + "/") for f in files):
                answer.append({"type": "directory", "path": path, "oid": hashlib.sha1(path.encode()).hexdigest()})
        self._json(200, answer)

    def _commit(self, repo_id: str, branch: str, body: bytes) -> None:
        hub = self.server
        files, deleted = {}, []
        for line in body.decode().splitlines():
            item = json.loads(line)
            if item["key"] == "file":
                files[item["value"]["path"]] = base64.b64decode(item["value"]["content"])
            elif item["key"] == "deletedFile":
                deleted.append(item["value"]["path"])
        hub.committed.update(files)
        sha = hub.commit(repo_id, files, branch=branch, deleted=tuple(deleted))
        self._json(200, {"commitUrl": f"{hub.url}/datasets/{repo_id}/commit/{sha}", "commitOid": sha,
                         "pullRequestUrl": None})

    def _resolve(self, repo_id: str, revision: str, name: str, head: bool) -> None:
        hub = self.server
        limit = hub._take_resolver_request()
        rate_headers = {}
        if limit is not None:
            quota, left, reset, window = limit
            rate_headers = {"RateLimit": f'"resolvers";r={max(0, left)};t={reset}',
                            "RateLimit-Policy": f'"fixed window";"resolvers";q={quota};w={int(window)}'}
            if left < 0:
                return self._json(429, {"error": "You have exceeded the rate limit for resolvers"},
                                  {**rate_headers, "Retry-After": str(reset),
                                   "X-Error-Message": "rate limit for resolvers"}, head=head)
        repo = self._visible_repo(repo_id, head=head)
        if repo is None:
            return
        sha = self._commit_of(repo, revision, head=head)
        if sha is None:
            return
        data = repo.commits[sha].get(name)
        if data is None:
            return self._error(404, "EntryNotFound", f"{name} does not exist at {revision}", head=head)
        if hub.redirect:
            etag = repo.etags[sha][name]
            return self._send(302, headers={**rate_headers, "Location": hub.signed_url(etag),
                                            "X-Linked-Etag": f'"{etag}"', "X-Linked-Size": len(data),
                                            "X-Repo-Commit": sha, "ETag": f'"{repo.oids[sha][name]}"'}, head=head)
        if not head and self._take_fault(hub.stall):
            hub._stopping.wait(hub.stall_seconds)
        size = len(data)
        start, stop, ranged = byte_range(self.headers.get("Range"), size)
        if ranged:
            if start >= size and size:
                return self._send(416, headers={"Content-Range": f"bytes */{size}"})
        etag = repo.etags[sha][name]
        self._send_file_head(start, stop, size, ranged, {**rate_headers, "ETag": f'"{etag}"', "X-Repo-Commit": sha})
        if head:
            return
        record = Download(path=f"{repo_id}/{revision}/{name}", name=name, start=start, stop=stop, size=size,
                          ranged=ranged)
        hub.downloads.append(record)
        self._send_body(data, start, stop, record)

    def _send_file_head(self, start: int, stop: int, size: int, ranged: bool, headers: dict) -> None:
        """The status line and headers of an answer with a file's bytes ``[start, stop)``."""
        self.send_response(206 if ranged else 200)
        for key, value in headers.items():
            self.send_header(key, value)
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("Content-Type", "application/octet-stream")
        if ranged:
            self.send_header("Content-Range", f"bytes {start}-{stop - 1}/{size}")
        self.send_header("Content-Length", str(stop - start))
        self.end_headers()

    def _send_body(self, data: bytes, start: int, stop: int, record: "Download") -> None:
        hub = self.server
        record.cut = self._take_fault(hub.cut)
        cut_at = start + (stop - start) // 2 if record.cut else stop
        position = start
        while position < cut_at:
            chunk = data[position:min(position + CHUNK, cut_at)]
            try:
                self.wfile.write(chunk)
            except (BrokenPipeError, ConnectionResetError):
                self.close_connection = True
                return
            record.sent += len(chunk)
            position += len(chunk)
        if cut_at < stop:  # a connection dropped mid-body: the client sees fewer bytes than promised
            self.close_connection = True
            # The client may be gone already (its own timeout under load): nothing to cut then.
            with contextlib.suppress(OSError):
                self.wfile.flush()
                self.connection.shutdown(socket.SHUT_RDWR)


class _Cdn(ThreadingHTTPServer):
    """The second host ``/resolve/`` redirects to (LocalHub.redirect): ``/blobs/<sha256>`` at
    URLs the hub signed, Range honoured, the file's md5 as ``ETag``."""

    daemon_threads = True
    request_queue_size = 256

    def __init__(self, hub: LocalHub):
        super().__init__(("127.0.0.1", 0), _CdnHandler)
        self.hub = hub

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def handle_error(self, request, client_address) -> None:
        import sys

        if not isinstance(sys.exc_info()[1], ConnectionError):  # a client that hung up (a stream that stopped)
            self.hub.errors.append(traceback.format_exc())

    def __getattr__(self, name):  # the hub's faults (cut, stall) and its lock
        if name in ("cut", "stall", "stall_seconds", "_lock", "_stopping"):
            return getattr(self.hub, name)
        raise AttributeError(name)


class _CdnHandler(_Handler):
    server: _Cdn

    def do_POST(self):
        self._send(405)

    def _handle(self, head: bool = False):
        hub = self.server.hub
        if hub.latency:
            time.sleep(hub.latency)
        path, _, query = self.path.partition("?")
        params = {k: v[0] for k, v in urllib.parse.parse_qs(query).items()}
        record = {"method": self.command, "path": path, "authorization": self.headers.get("Authorization"),
                  "range": self.headers.get("Range"), "status": None}
        hub.cdn_requests.append(record)
        with hub._lock:
            if hub.revoke_after is not None and len(hub.cdn_requests) > hub.revoke_after:
                hub.revoke_after = None
                hub._secret = hashlib.sha256(hub._secret).digest()  # a new key: old signatures no longer hold
        try:
            expires = int(params.get("Expires", "0"))
        except ValueError:
            expires = 0
        if not hmac.compare_digest(params.get("Signature", ""), hub._signature(path, expires)):
            record["status"] = 403
            return self._send(403, b"<Error><Code>AccessDenied</Code></Error>", head=head)
        if time.time() > expires:
            record["status"] = 403
            return self._send(403, b"<Error><Code>AccessDenied</Code><Message>Request has expired</Message></Error>",
                              head=head)
        match = re.fullmatch(r"/blobs/([0-9a-f]{64})", path)
        data = hub._blob(match.group(1)) if match else None
        if data is None:
            record["status"] = 404
            return self._send(404, head=head)
        size = len(data)
        start, stop, ranged = byte_range(self.headers.get("Range"), size)
        if ranged and start >= size and size:
            record["status"] = 416
            return self._send(416, headers={"Content-Range": f"bytes */{size}"}, head=head)
        record["status"] = 206 if ranged else 200
        self._send_file_head(start, stop, size, ranged, {"ETag": f'"{hub.cdn_etag(match.group(1), data)}"'})
        if head:
            return
        name = next((n for r in hub.repos.values() for c in r.commits.values() for n, d in c.items() if d is data),
                    match.group(1))
        record_download = Download(path=path, name=name, start=start, stop=stop, size=size, ranged=ranged)
        hub.downloads.append(record_download)
        try:
            self._send_body(data, start, stop, record_download)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True


# --- pointing the clients at the server ----------------------------------------------------

LOOPBACK = ("127.0.0.1", "localhost", "::1")


def point_clients_at(monkeypatch, url: str) -> None:
    """What ``HF_ENDPOINT=url`` does when set before Python starts, done after the imports.

    huggingface_hub and datasets copy the endpoint into module constants when they are
    imported: ``huggingface_hub.constants.ENDPOINT`` and the resolve-URL template built from
    it (``hf_hub_url`` fills the template, then swaps only a prefix equal to ``ENDPOINT``),
    and ``datasets.config.HF_ENDPOINT`` / ``HUB_DATASETS_URL`` (``datasets`` hands its own
    copy to every ``HfApi`` and ``HfFileSystem`` it makes). Patching ``ENDPOINT`` alone
    sends the README download to huggingface.co. The download-count ping that ``datasets``
    sends to S3 on each Hub load is switched off, as ``HF_UPDATE_DOWNLOAD_COUNTS=0`` does.
    """
    import datasets.config
    import huggingface_hub.constants as constants

    monkeypatch.setattr(constants, "ENDPOINT", url)
    monkeypatch.setattr(constants, "HUGGINGFACE_CO_URL_TEMPLATE", url + "/{repo_id}/resolve/{revision}/{filename}")
    monkeypatch.setattr(constants, "HF_URL_HOSTS", constants.HF_URL_HOSTS | {"127.0.0.1"})
    monkeypatch.setattr(datasets.config, "HF_ENDPOINT", url)
    monkeypatch.setattr(datasets.config, "HUB_DATASETS_URL", url + "/datasets/{repo_id}/resolve/{revision}/{path}")
    monkeypatch.setattr(datasets.config, "HF_UPDATE_DOWNLOAD_COUNTS", False)


def loopback_only(monkeypatch) -> list[str]:
    """Refuses, at once, every connection and name lookup that is not for this machine, and
    returns the list of refused hosts (a test can check it). Without it a missed endpoint
    would try huggingface.co: with no network that fails, but only after a DNS timeout."""
    refused: list[str] = []
    real_getaddrinfo = socket.getaddrinfo
    real_connect = socket.socket.connect

    def getaddrinfo(host, *args, **kwargs):
        name = host.decode() if isinstance(host, bytes) else str(host)
        if name not in LOOPBACK:
            refused.append(name)
            raise socket.gaierror(socket.EAI_NONAME, f"tests reach only 127.0.0.1, not {name}")
        return real_getaddrinfo(host, *args, **kwargs)

    def connect(sock, address):
        host = address[0] if isinstance(address, tuple) else address
        if isinstance(address, tuple) and host not in LOOPBACK:
            refused.append(str(host))
            raise ConnectionRefusedError(f"tests reach only 127.0.0.1, not {host}")
        return real_connect(sock, address)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    monkeypatch.setattr(socket.socket, "connect", connect)
    return refused


def isolate_hf_home(monkeypatch, folder) -> None:
    """huggingface_hub's caches and token files under ``folder`` instead of ~/.cache/huggingface. Like the
    endpoint, these paths are fixed at import from HF_HOME, so setting the variable later
    does nothing; ``hf_hub_download`` reads ``HF_HUB_CACHE`` at each call."""
    import os

    import huggingface_hub.constants as constants

    folder = os.fspath(folder)
    monkeypatch.setenv("HF_HOME", folder)
    monkeypatch.setattr(constants, "HF_HOME", folder)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", os.path.join(folder, "hub"))
    monkeypatch.setattr(constants, "HF_ASSETS_CACHE", os.path.join(folder, "assets"))
    monkeypatch.setattr(constants, "AGENT_HARNESSES_PATH", os.path.join(folder, ".agent_harnesses.json"))
    # A token stored on this machine by `hf auth login` must not stand in for the test's own.
    monkeypatch.setattr(constants, "HF_TOKEN_PATH", os.path.join(folder, "token"))
    monkeypatch.setattr(constants, "HF_STORED_TOKENS_PATH", os.path.join(folder, "stored_tokens"))


@contextlib.contextmanager
def hub_for_clients(home, token: str | None = None):
    """A running LocalHub that huggingface_hub and datasets talk to, for a test module's
    fixture: HF_HOME in ``home``, ``token`` as HF_TOKEN when given, nothing but loopback
    reachable. Leaving it checks that no other host was tried (datasets' viewer lookup aside)
    and that the server's handlers raised nothing."""
    import pytest

    with pytest.MonkeyPatch.context() as mp, LocalHub(token=token) as server:
        if token is not None:
            mp.setenv("HF_TOKEN", token)
        isolate_hf_home(mp, home)
        point_clients_at(mp, server.url)
        server.refused = loopback_only(mp)
        yield server
        assert set(server.refused) <= {"datasets-server.127.0.0.1"}, server.refused
        assert server.errors == [], server.errors[0]
