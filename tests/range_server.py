"""A Range-capable HTTP file server on 127.0.0.1 that counts the bytes it sends, and can be
slow or faulty on purpose.

Python's http.server ignores Range headers, so remote streaming could not be told apart
from a whole-file download; this one honours single ranges and records every request.
It sends an ``ETag`` (from the file's size and mtime) and answers ``If-Match`` with a
mismatching ETag by 412, as object stores do.

Faults and conditions, set on the server while it runs (counts are used up one response
at a time, by requests whose file name contains the key):
    latency        seconds added before each answer (a round trip to object storage)
    bandwidth      bytes per second per response (None: as fast as loopback goes)
    fail[name]     answers 503 this many times
    drop[name]     closes the connection without an answer this many times
    cut[name]      sends the headers and half the body, then closes, this many times
    stall[name]    waits ``stall_seconds`` before answering this many times (client timeouts)
    shift[name]    answers 206 with the right length but the bytes and ``Content-Range`` of
                   ``shift_bytes`` further on (a proxy serving another request's bytes)
    whole[name]    ignores ``Range``: answers 200 with the whole file
    gzip[name]     answers ``Content-Encoding: gzip`` (the range's bytes gzipped), whatever
                   the request's ``Accept-Encoding``
    unversioned[name]  answers without ``ETag`` (a cache stripping it) this many times
    limit[name]    answers ``limit_status`` (429) with ``limit_headers`` (``Retry-After``,
                   ``RateLimit``...) this many times
    trickle[name]  sends the body one byte a second (headers at once), this many times
    no_head        True: HEAD is answered 405 (a server that answers only GETs)
    capacity       None, or the most requests answered at once: more get 503 at once, without
                   ``Retry-After`` (an overloaded server); ``refused`` counts them
    ignore_if_match  True: ``If-Match`` and ``If-Unmodified-Since`` are ignored (a changed file is
                   served with its new ETag)
    etags          False: no ``ETag`` header at all (a server without versions: only the size
                   in ``Content-Range`` tells a replaced file); ``If-Match`` is then answered
                   412, as nginx and Apache answer it when they send no ETag
    last_modified  True: a ``Last-Modified`` header (the file's mtime), and ``If-Unmodified-Since``
                   honoured (412 when the file is newer), as nginx and Apache do
Records: ``sent`` / ``unranged`` (bytes by file name), ``whole_files_sent``, ``requests``
(file name -> number of GETs), ``statuses`` (file name -> list of statuses answered),
``encodings`` (``Accept-Encoding`` headers of GETs -> count), ``max_in_flight`` (the most
requests being answered or refused at once; settable, to measure again from 0), ``answered``
(every request, HEADs included: ``(method, file name, time received, time answered)`` on the
monotonic clock, to count and overlap them).
"""

from __future__ import annotations

import email.utils
import gzip
import os
import re
import threading
import time
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

import pytest


def require_remote_extra() -> None:
    """Streaming http(s):// and hf:// files goes through fsspec's HTTP filesystem, which needs
    aiohttp: the remote extra. Skips without it (fails under MMIDX_REQUIRE_ORACLE=1, as CI
    installs it)."""
    pytest.importorskip("aiohttp", reason="the remote extra (pip install 'mmidx-builder[remote]'): "
                                          "streaming http(s):// and hf:// files needs aiohttp")


def byte_range(header: str | None, size: int) -> tuple[int, int, bool]:
    """``(start, stop, ranged)`` for a ``Range`` header of one range over ``size`` bytes (the
    whole file, not ranged, when there is none); ``start >= size > 0`` is unsatisfiable (416)."""
    match = re.fullmatch(r"bytes=(\d*)-(\d*)", header or "")
    if not match or not (match.group(1) or match.group(2)):
        return 0, size, False
    if match.group(1):
        start = int(match.group(1))
        return start, min(size, int(match.group(2)) + 1) if match.group(2) else size, True
    return max(0, size - int(match.group(2))), size, True


def _take(faults: dict, name: str, lock) -> bool:
    with lock:
        for key, count in faults.items():
            if key in name and count > 0:
                faults[key] = count - 1
                return True
    return False


class _RangeHandler(SimpleHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as real servers; every answer has a Content-Length

    def log_message(self, *args):  # keep test output clean
        pass

    def _target(self):
        path = self.translate_path(self.path)
        return path if os.path.isfile(path) else None

    def do_HEAD(self):
        if self.server.no_head:  # a server that answers no HEAD
            self.send_response(405)
            self.send_header("Allow", "GET")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self._serve(body=False)

    def do_GET(self):
        self._serve(body=True)

    def _status(self, name: str, status: int) -> None:
        with self.server.lock:
            self.server.statuses.setdefault(name, []).append(status)

    def _serve(self, body: bool):
        server = self.server
        received = time.monotonic()
        with server.lock:
            server.in_flight += 1
            server.max_in_flight = max(server.max_in_flight, server.in_flight)
            over = server.capacity is not None and server.in_flight > server.capacity
            if over:
                server.refused += 1
        try:
            if over:
                self.send_response(503)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            self._answer(body)
        finally:
            with server.lock:
                server.in_flight -= 1
                name = os.path.basename(self.path.split("?")[0])
                server.answered.append((self.command, name, received, time.monotonic()))

    def _answer(self, body: bool):
        server = self.server
        if server.latency:
            time.sleep(server.latency)
        path = self._target()
        if path is None:
            self.send_error(404)
            return
        name = os.path.basename(path)
        if body:
            with server.lock:
                server.requests[name] = server.requests.get(name, 0) + 1
                login = self.headers.get("Authorization")
                server.logins[login] = server.logins.get(login, 0) + 1
                encoding = self.headers.get("Accept-Encoding")
                server.encodings[encoding] = server.encodings.get(encoding, 0) + 1
        if _take(server.stall, name, server.lock):
            time.sleep(server.stall_seconds)
        if _take(server.drop, name, server.lock):
            self._status(name, 0)
            self.close_connection = True
            return
        if _take(server.fail, name, server.lock):
            self._status(name, 503)
            self.send_response(503)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if _take(server.limit, name, server.lock):
            self._status(name, server.limit_status)
            self.send_response(server.limit_status)
            for key, value in server.limit_headers.items():
                self.send_header(key, value)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        stat = os.stat(path)
        size = stat.st_size
        etag = f'"{size:x}-{stat.st_mtime_ns:x}"'
        wanted = None if server.ignore_if_match else self.headers.get("If-Match")
        unmodified = None if server.ignore_if_match else self.headers.get("If-Unmodified-Since")
        modified = email.utils.formatdate(stat.st_mtime, usegmt=True)
        if unmodified is not None and server.last_modified:
            try:
                newer = int(stat.st_mtime) > email.utils.parsedate_to_datetime(unmodified).timestamp()
            except (TypeError, ValueError):  # a date that is no date: ignored (RFC 9110 13.1.4)
                newer = False
        else:
            newer = False
        # Without ETags, If-Match can match nothing (nginx, Apache): 412, whatever it holds.
        if newer or (wanted and wanted != "*" and (not server.etags
                                                   or etag not in [t.strip() for t in wanted.split(",")])):
            self._status(name, 412)
            self.send_response(412)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        start, stop, ranged = byte_range(self.headers.get("Range"), size)
        if ranged and _take(server.whole, name, server.lock):
            start, stop, ranged = 0, size, False
        if ranged and _take(server.shift, name, server.lock):  # the same length, elsewhere in the file
            length = stop - start
            start = min(start + server.shift_bytes, size - length)
            stop = start + length
        if ranged:
            if start >= size and size:
                self._status(name, 416)
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{size}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{stop - 1}/{size}")
        else:
            self.send_response(200)
        self._status(name, 206 if ranged else 200)
        self.send_header("Accept-Ranges", "bytes")
        if server.etags and not (body and _take(server.unversioned, name, server.lock)):
            self.send_header("ETag", etag)
        if server.last_modified:
            self.send_header("Last-Modified", modified)
        if body and _take(server.gzip, name, server.lock):
            with open(path, "rb") as f:
                f.seek(start)
                encoded = gzip.compress(f.read(stop - start))
            self.send_header("Content-Encoding", "gzip")
            self.send_header("Content-Length", str(len(encoded)))
            self.end_headers()
            self.wfile.write(encoded)
            return
        self.send_header("Content-Length", str(stop - start))
        self.end_headers()
        if not body:
            return
        if _take(server.trickle, name, server.lock):
            with open(path, "rb") as f:
                f.seek(start)
                body = f.read(stop - start)
            for i in range(len(body)):
                time.sleep(1.0)
                try:
                    self.wfile.write(body[i:i + 1])
                    self.wfile.flush()
                except (BrokenPipeError, ConnectionResetError):
                    self.close_connection = True
                    return
            return
        cut = _take(server.cut, name, server.lock)
        remaining = stop - start
        if cut:
            remaining //= 2
        # Stream in chunks and count what was written: a client that reads a response's
        # head and hangs up (fsspec's existence probe is such a GET) has not been sent the rest.
        counter = server.sent if ranged else server.unranged
        chunk_size = 16384
        with open(path, "rb") as f:
            f.seek(start)
            while remaining:
                chunk = f.read(min(remaining, chunk_size))
                if server.bandwidth:
                    time.sleep(len(chunk) / server.bandwidth)
                try:
                    self.wfile.write(chunk)
                except (BrokenPipeError, ConnectionResetError):
                    self.close_connection = True
                    return
                with server.lock:
                    counter[name] = counter.get(name, 0) + len(chunk)
                remaining -= len(chunk)
        if cut:
            self.wfile.flush()
            self.close_connection = True
            return
        if not ranged:
            with server.lock:
                server.whole_files_sent[name] = server.whole_files_sent.get(name, 0) + 1


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    # The listen backlog: 5 by default, and a client with 64 requests in flight then waits
    # seconds for SYN retransmits. Real servers accept hundreds of connections at once.
    request_queue_size = 256


class RangeServer:
    """``with RangeServer(folder) as server: server.url + "/file.bin"``; ``server.sent`` maps
    file names to bytes sent for Range requests, ``server.whole_files_sent`` to the number of
    responses without Range that were sent to the end (a whole-file download). Faults: see
    the module docstring (``server.fail["x.bin"] = 2``...)."""

    def __init__(self, folder, latency: float = 0.0, bandwidth: float | None = None, ssl_context=None):
        folder = os.fspath(folder)

        def handler(*args, **kwargs):
            return _RangeHandler(*args, directory=folder, **kwargs)

        self._httpd = _Server(("127.0.0.1", 0), handler)
        httpd = self._httpd
        httpd.lock = threading.Lock()
        httpd.sent = {}              # bytes answering Range requests, by file name
        httpd.unranged = {}          # bytes answering requests without Range
        httpd.whole_files_sent = {}  # responses without Range that were sent to the end
        httpd.requests = {}          # GETs by file name
        httpd.logins = {}            # GETs by Authorization header (None: without one)
        httpd.statuses = {}          # statuses answered, by file name (0: dropped)
        httpd.in_flight = httpd.max_in_flight = 0  # requests being answered at once, and the most seen
        httpd.answered = []          # (method, file name, received, answered) of every request
        httpd.latency, httpd.bandwidth = latency, bandwidth
        httpd.encodings = {}         # GETs by Accept-Encoding header
        httpd.fail, httpd.drop, httpd.cut, httpd.stall = {}, {}, {}, {}
        httpd.shift, httpd.whole, httpd.gzip, httpd.limit, httpd.trickle = {}, {}, {}, {}, {}
        httpd.unversioned = {}
        httpd.stall_seconds = 3.0
        httpd.shift_bytes = 4096
        httpd.limit_status, httpd.limit_headers = 429, {"Retry-After": "1"}
        httpd.ignore_if_match = False
        httpd.etags = True
        httpd.last_modified = False
        httpd.no_head = False
        httpd.capacity, httpd.refused = None, 0
        if ssl_context is not None:  # HTTPS: each connection's TLS handshake in its own thread
            httpd.socket = ssl_context.wrap_socket(httpd.socket, server_side=True, do_handshake_on_connect=False)
        scheme = "https" if ssl_context is not None else "http"
        self.url = f"{scheme}://127.0.0.1:{self._httpd.server_address[1]}"
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    def __getattr__(self, name):
        # sent, unranged, whole_files_sent, requests, statuses, latency, bandwidth, fail, drop, cut, stall, shift...
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._httpd, name)

    def __setattr__(self, name, value):
        if name in ("latency", "bandwidth", "stall_seconds", "shift_bytes", "limit_status", "limit_headers",
                    "ignore_if_match", "etags", "last_modified", "no_head", "capacity", "max_in_flight"):
            setattr(self._httpd, name, value)
        else:
            super().__setattr__(name, value)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._httpd.shutdown()
        self._httpd.server_close()
