"""A Range-capable HTTP file server for benchmarks, answering many requests at once.

tests/range_server.py answers with one Python thread per connection and sleeps its latency
in that thread: on a 2-core machine it tops out near 1,700 requests/s, so a client with
hundreds of requests in flight measures the server. Object stores (S3, the Hub's CDN) answer
thousands of requests at once per prefix. This server runs in its own process (its Python
does not share the client's GIL) and every request still waits the injected latency, but the
waits overlap, as they do at a real endpoint (a ``loop.call_later`` per request).

It is HTTP/1.1 written on ``asyncio.Protocol`` (on uvloop when importable), not a web
framework: on the machine's 2 cores the server's CPU is taken from the client being measured.
aiohttp's web server cost ~65 us of CPU per request (on uvloop); this one ~20 us, about half of
it the kernel's socket and file calls (100,000 ranges of 200-3,000 bytes, 512 in flight,
25 ms latency, pycurl client).

    with AsyncRangeServer(folder) as server:       # starts the process, waits for its port
        server.configure(latency=0.025)            # seconds before each answer; bandwidth=bytes/s
        ... server.url + "/file.bin" ...
        server.stats()      # {"requests": {name: GETs}, "sent": {name: bytes of ranged answers}, "unranged": ...}

Answers as tests/range_server.py does: GET and HEAD of the files directly in the folder,
single ranges (206 + Content-Range, 416 past the end), ETag from size and mtime, 412 for a
mismatching If-Match; counts GETs and the body bytes written by file name. Keep-alive,
``Connection: close``, requests answered in order on a connection; a malformed request is
answered 400 and the connection closed. ``POST /__control`` (JSON) and ``GET /__stats`` are
what ``configure`` and ``stats`` call.
"""

from __future__ import annotations

import asyncio
import collections
import json
import os
import re
import subprocess
import sys
import time
import traceback
import urllib.request
from stat import S_ISREG
from urllib.parse import unquote


sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))


_REASONS = {200: "OK", 206: "Partial Content", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed",
            412: "Precondition Failed", 416: "Range Not Satisfiable", 500: "Internal Server Error"}
_CHUNK = 1 << 20  # bodies over this are written a chunk at a time, as the client reads them
_MAX_HEAD = 1 << 16
# A request's head, whole: the request line (origin-form target, printable ASCII) and header
# fields (token, colon, a value of visible characters, spaces and tabs), each line ending in
# CRLF, then an empty line. Group 4 is the header block with the request line's CRLF before
# it, so that every field starts with CRLF (the keys _field looks for).
_HEAD = re.compile(rb"([A-Z]+) (/[!-~]*+) HTTP/1\.([01])"
                   rb"(\r\n(?:[!#$%&'*+.^_`|~0-9A-Za-z-]++:[\t -~\x80-\xff]*+\r\n)*+)\r\n")


def _field(block: bytes, low: bytes, key: bytes) -> bytes | None:
    """The value of the first header field ``key`` (CRLF, its name in lower case, colon) in a header block."""
    at = low.find(key)
    if at < 0:
        return None
    at += len(key)
    return block[at:low.find(b"\r\n", at)].strip(b" \t")


def serve(folder: str) -> None:
    from range_server import byte_range

    prefix = os.path.join(folder, "")
    latency, bandwidth = 0.0, None
    requests, sent, unranged = {}, {}, {}
    in_flight = max_in_flight = 0
    files = {}  # name -> (st_dev, st_ino, fd): kept open, reopened when the name is another file
    loop = None

    def open_file(name, stat):
        known = files.get(name)
        if known is not None and known[1] == stat.st_ino and known[0] == stat.st_dev:
            return known[2]
        fd = os.open(prefix + name, os.O_RDONLY)
        if known is not None:
            os.close(known[2])
        elif len(files) >= 256:
            for _, _, old in files.values():
                os.close(old)
            files.clear()
        files[name] = (stat.st_dev, stat.st_ino, fd)
        return fd

    def control(body: bytes) -> bytes:
        nonlocal latency, bandwidth, requests, sent, unranged, max_in_flight
        settings = json.loads(body)
        if settings.pop("reset", False):
            requests, sent, unranged, max_in_flight = {}, {}, {}, 0
        if "latency" in settings:
            latency = float(settings["latency"] or 0)
        bandwidth = settings.get("bandwidth", bandwidth)
        return b"{}"

    class Connection(asyncio.Protocol):
        """One client connection. Requests are tuples ``(method, target, range, if_match,
        keep_alive, body, deadline)``, answered in order, each at its deadline (arrival +
        latency; None: not a file request, answered at once). method None: malformed (400)."""

        def connection_made(self, transport):
            self.transport = transport
            self.buffer = b""
            self.queue = collections.deque()  # requests that arrived while another was answered
            self.busy = self.closed = self.broken = self.paused = False
            self.timer = None
            self.drained = None  # a future the chunked path waits on while the transport is paused
            self.counted = 0  # this connection's file requests in in_flight

        def connection_lost(self, exc):
            nonlocal in_flight
            self.closed = True
            if self.timer is not None:
                self.timer.cancel()
                self.timer = None
            self.queue.clear()
            in_flight -= self.counted
            self.counted = 0
            if self.drained is not None and not self.drained.done():
                self.drained.set_result(None)

        def pause_writing(self):
            self.paused = True

        def resume_writing(self):
            self.paused = False
            if self.drained is not None and not self.drained.done():
                self.drained.set_result(None)

        def data_received(self, data):
            nonlocal in_flight, max_in_flight
            if self.buffer:
                data, self.buffer = self.buffer + data, b""
            elif self.broken:
                return
            at, size = 0, len(data)
            while at < size:
                end = data.find(b"\r\n\r\n", at)
                if end < 0:
                    if size - at > _MAX_HEAD:
                        return self._bad()
                    self.buffer = data[at:]
                    break
                match = _HEAD.fullmatch(data, at, end + 4)
                if match is None:
                    return self._bad()
                method, target, minor, block = match.groups()
                low = block.lower()
                body = b""
                if b"\r\ncontent-length:" in low or b"\r\ntransfer-encoding:" in low:
                    length = _field(block, low, b"\r\ncontent-length:")
                    if length is None or not length.isdigit() or b"\r\ntransfer-encoding:" in low \
                            or low.count(b"\r\ncontent-length:") > 1:
                        return self._bad()
                    if end + 4 + int(length) > size:  # parsed again with its body
                        if end + 4 + int(length) - at > _MAX_HEAD:
                            return self._bad()
                        self.buffer = data[at:]
                        break
                    body = data[end + 4:end + 4 + int(length)]
                # HTTP/1.0: one request per connection (no "Connection: keep-alive" in answers)
                keep_alive = minor == b"1" and (b"\r\nconnection:" not in low or
                                                b"close" not in _field(low, low, b"\r\nconnection:"))
                deadline = None
                if (method == b"GET" or method == b"HEAD") and target != b"/__stats" \
                        and not target.startswith(b"/__stats?"):
                    deadline = loop.time() + latency  # a file request: waits the latency, counted in flight
                    self.counted += 1
                    in_flight += 1
                    if in_flight > max_in_flight:
                        max_in_flight = in_flight
                request = (method, target, _field(block, low, b"\r\nrange:"),
                           _field(block, low, b"\r\nif-match:") if b"\r\nif-match:" in low else None,
                           keep_alive, body, deadline)
                if self.busy or self.queue:
                    self.queue.append(request)
                else:
                    self._start(request)
                at = end + 4 + len(body)
            if self.queue and not self.busy:
                self._pump()

        def _bad(self):
            self.broken = True
            self.buffer = b""
            request = (None, b"", None, None, False, b"", None)
            if self.busy or self.queue:
                self.queue.append(request)
            else:
                self._start(request)

        def _pump(self):
            while self.queue and not self.busy and not self.closed:
                self._start(self.queue.popleft())

        def _start(self, request):
            self.busy = True
            if request[6] is not None:
                delay = request[6] - loop.time()
                if delay > 0:
                    self.timer = loop.call_later(delay, self._fire, request)
                    return
            self._answer(request)

        def _fire(self, request):
            self.timer = None
            self._answer(request)
            if self.queue and not self.busy:
                self._pump()

        def _done(self, request):
            nonlocal in_flight
            self.busy = False
            if request[6] is not None and self.counted:
                self.counted -= 1
                in_flight -= 1
            if not request[4] and not self.closed:
                self.closed = True
                self.transport.close()

        def _answer(self, request):
            if self.closed:
                return self._done(request)
            try:
                self._respond(request)
            except Exception:
                traceback.print_exc()
                if not self.closed:
                    self._simple(request, 500, close=True)
                self._done(request[:4] + (False,) + request[5:])

        def _simple(self, request, status, extra="", body=b"", close=False):
            close = close or not request[4]
            head = f"HTTP/1.1 {status} {_REASONS[status]}\r\n{extra}Content-Length: {len(body)}\r\n"
            head += "Connection: close\r\n\r\n" if close else "\r\n"
            self.transport.write(head.encode() + (b"" if request[0] == b"HEAD" else body))

        def _respond(self, request):
            method, target, range_header, if_match, keep_alive, body, deadline = request
            if method is None:
                self._simple(request, 400)
                return self._done(request)
            if deadline is None:  # control, stats
                if method == b"POST" and target == b"/__control":
                    try:
                        answer = control(body)
                    except (ValueError, TypeError, AttributeError):
                        self._simple(request, 400)
                    else:
                        self._simple(request, 200, "Content-Type: application/json\r\n", answer)
                elif method == b"GET" or method == b"HEAD":  # /__stats
                    answer = json.dumps({"requests": requests, "sent": sent, "unranged": unranged,
                                         "max_in_flight": max_in_flight}).encode()
                    self._simple(request, 200, "Content-Type: application/json\r\n", answer)
                else:
                    self._simple(request, 405, "Allow: GET, HEAD\r\n")
                return self._done(request)
            try:
                name = target[1:].partition(b"?")[0].decode()
                if "%" in name:
                    name = unquote(name, errors="strict")
                stat = os.stat(prefix + name) if name and "/" not in name else None
            except (OSError, ValueError):  # also not UTF-8 once unquoted, or a NUL
                stat = None
            if stat is None or not S_ISREG(stat.st_mode):
                self._simple(request, 404)
                return self._done(request)
            size = stat.st_size
            etag = f'"{size:x}-{stat.st_mtime_ns:x}"'
            if if_match:
                wanted = if_match.decode("latin-1")
                if wanted != "*" and etag not in [t.strip() for t in wanted.split(",")]:
                    self._simple(request, 412)
                    return self._done(request)
            start, stop, ranged = byte_range(range_header and range_header.decode("latin-1"), size)
            if ranged and start >= size and size:
                self._simple(request, 416, f"Content-Range: bytes */{size}\r\n")
                return self._done(request)
            if stop < start:  # bytes=5-2: not a valid range, so ignored (RFC 9110): the whole file
                start, stop, ranged = 0, size, False
            if ranged:
                head = (f"HTTP/1.1 206 Partial Content\r\nContent-Range: bytes {start}-{stop - 1}/{size}\r\n"
                        f"Accept-Ranges: bytes\r\nETag: {etag}\r\nContent-Type: application/octet-stream\r\n"
                        f"Content-Length: {stop - start}\r\n")
            else:
                head = (f"HTTP/1.1 200 OK\r\nAccept-Ranges: bytes\r\nETag: {etag}\r\n"
                        f"Content-Type: application/octet-stream\r\nContent-Length: {stop - start}\r\n")
            head = (head + "\r\n" if keep_alive else head + "Connection: close\r\n\r\n").encode()
            if method == b"HEAD":
                self.transport.write(head)
                return self._done(request)
            requests[name] = requests.get(name, 0) + 1
            counter = sent if ranged else unranged
            if stop - start <= _CHUNK and not bandwidth:
                chunk = os.pread(open_file(name, stat), stop - start, start)
                self.transport.write(head + chunk)
                if chunk:
                    counter[name] = counter.get(name, 0) + len(chunk)
                if len(chunk) < stop - start:  # the file shrank: the answer cannot be completed
                    request = request[:4] + (False,) + request[5:]
                return self._done(request)
            # Large bodies and a bandwidth: a chunk at a time, counted as written. A client that
            # reads a response's head and hangs up (fsspec's existence probe is a GET without
            # Range) has not been sent the rest.
            self.transport.write(head)
            loop.create_task(self._stream(request, name, start, stop, counter))

        async def _stream(self, request, name, start, stop, counter):
            complete = False
            try:
                with open(prefix + name, "rb") as f:
                    for at in range(start, stop, _CHUNK):
                        chunk = os.pread(f.fileno(), min(_CHUNK, stop - at), at)
                        if bandwidth:
                            await asyncio.sleep(len(chunk) / bandwidth)
                        if self.closed:
                            return
                        self.transport.write(chunk)
                        counter[name] = counter.get(name, 0) + len(chunk)
                        if len(chunk) < min(_CHUNK, stop - at):
                            return
                        if self.paused:
                            self.drained = loop.create_future()
                            await self.drained
                            self.drained = None
                complete = True
            except Exception:
                traceback.print_exc()
            finally:
                self._done(request if complete else request[:4] + (False,) + request[5:])
                self._pump()

    def quiet(loop, context):  # a client that stops mid-stream hangs up on what it had in flight
        if not isinstance(context.get("exception"), (ConnectionError, TimeoutError)):
            loop.default_exception_handler(context)

    async def main():
        nonlocal loop
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(quiet)
        server = await loop.create_server(Connection, "127.0.0.1", 0, backlog=1024)
        print(server.sockets[0].getsockname()[1], flush=True)
        await asyncio.Event().wait()

    try:  # uvloop's transports cost the server less per request, leaving the shared cores to the client
        from uvloop import run
    except ImportError:
        run = asyncio.run
    run(main())


class AsyncRangeServer:
    """The server in its own process (see the module docstring)."""

    def __init__(self, folder, latency: float = 0.0, bandwidth: float | None = None):
        self._folder = os.fspath(folder)
        self._settings = {"latency": latency, "bandwidth": bandwidth}
        self._process = None
        self.url = None

    def __enter__(self):
        self._process = subprocess.Popen([sys.executable, os.path.abspath(__file__), self._folder],
                                         stdout=subprocess.PIPE, text=True)
        self.url = f"http://127.0.0.1:{int(self._process.stdout.readline())}"
        self.configure(**self._settings)
        return self

    def __exit__(self, *exc):
        self._process.terminate()
        self._process.wait(10)

    def _call(self, path: str, payload: dict | None = None) -> dict:
        data = None if payload is None else json.dumps(payload).encode()
        for attempt in range(50):
            try:
                with urllib.request.urlopen(urllib.request.Request(self.url + path, data=data), timeout=10) as answer:
                    return json.loads(answer.read())
            except ConnectionError:
                time.sleep(0.1)
        raise RuntimeError(f"the benchmark server at {self.url} does not answer")

    def configure(self, latency: float | None = None, bandwidth: float | None = None, reset: bool = True) -> None:
        """Sets the latency (s) and bandwidth (bytes/s per response) and, by default, zeroes the counts."""
        settings = {"reset": reset}
        if latency is not None:
            settings["latency"] = latency
        settings["bandwidth"] = bandwidth
        self._call("/__control", settings)

    def stats(self) -> dict:
        return self._call("/__stats")


if __name__ == "__main__":
    serve(sys.argv[1])
