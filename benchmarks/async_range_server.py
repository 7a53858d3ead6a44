"""A Range-capable HTTP file server for benchmarks, answering many requests at once.

tests/range_server.py answers with one Python thread per connection and sleeps its latency
in that thread: on a 2-core machine it tops out near 1,700 requests/s, so a client with
hundreds of requests in flight measures the server. Object stores (S3, the Hub's CDN) answer
thousands of requests at once per prefix. This server is aiohttp in its own process: every
request still waits the injected latency (``await asyncio.sleep``), but the waits overlap, as
they do at a real endpoint, and the server's Python does not share the client's GIL.

    with AsyncRangeServer(folder) as server:       # starts the process, waits for its port
        server.configure(latency=0.025)            # seconds before each answer; bandwidth=bytes/s
        ... server.url + "/file.bin" ...
        server.stats()      # {"requests": {name: GETs}, "sent": {name: bytes of ranged answers}, "unranged": ...}

Answers as tests/range_server.py does: single ranges (206 + Content-Range), ETag from size
and mtime, 412 for a mismatching If-Match; counts GETs and body bytes by file name.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import subprocess
import sys
import time
import urllib.request


sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))


def serve(folder: str) -> None:
    from aiohttp import web
    from range_server import byte_range

    state = {"latency": 0.0, "bandwidth": None, "requests": {}, "sent": {}, "unranged": {}, "in_flight": 0,
             "max_in_flight": 0}

    async def control(request):
        settings = await request.json()
        if settings.pop("reset", False):
            state["requests"], state["sent"], state["unranged"], state["max_in_flight"] = {}, {}, {}, 0
        state.update({k: v for k, v in settings.items() if k in ("latency", "bandwidth")})
        return web.json_response({})

    async def stats(request):
        return web.json_response({k: state[k] for k in ("requests", "sent", "unranged", "max_in_flight")})

    async def file(request):
        state["in_flight"] += 1
        state["max_in_flight"] = max(state["max_in_flight"], state["in_flight"])
        try:
            return await answer(request)
        finally:
            state["in_flight"] -= 1

    async def answer(request):
        if state["latency"]:
            await asyncio.sleep(state["latency"])
        name = request.match_info["name"]
        path = os.path.join(folder, name)
        if "/" in name or not os.path.isfile(path):
            return web.Response(status=404)
        stat = os.stat(path)
        size = stat.st_size
        etag = f'"{size:x}-{stat.st_mtime_ns:x}"'
        wanted = request.headers.get("If-Match")
        if wanted and wanted != "*" and etag not in [t.strip() for t in wanted.split(",")]:
            return web.Response(status=412)
        headers = {"Accept-Ranges": "bytes", "ETag": etag}
        start, stop, ranged = byte_range(request.headers.get("Range"), size)
        status = 200
        if ranged:
            if start >= size and size:
                return web.Response(status=416, headers={"Content-Range": f"bytes */{size}"})
            status = 206
            headers["Content-Range"] = f"bytes {start}-{stop - 1}/{size}"
        if request.method == "HEAD":
            headers["Content-Length"] = str(stop - start)
            return web.Response(status=status, headers=headers)
        # Streamed in chunks and counted as written: a client that reads a response's head and
        # hangs up (fsspec's existence probe is a GET without Range) has not been sent the rest.
        state["requests"][name] = state["requests"].get(name, 0) + 1
        counter = state["sent"] if status == 206 else state["unranged"]
        response = web.StreamResponse(status=status, headers=headers)
        response.content_length = stop - start
        await response.prepare(request)
        with open(path, "rb") as f:
            for at in range(start, stop, 1 << 20):
                chunk = os.pread(f.fileno(), min(1 << 20, stop - at), at)
                if state["bandwidth"]:
                    await asyncio.sleep(len(chunk) / state["bandwidth"])
                try:
                    await response.write(chunk)
                except (ConnectionError, RuntimeError):  # the client hung up
                    return response
                counter[name] = counter.get(name, 0) + len(chunk)
        await response.write_eof()
        return response

    app = web.Application()
    app.router.add_post("/__control", control)
    app.router.add_get("/__stats", stats)
    app.router.add_route("GET", "/{name}", file)
    app.router.add_route("HEAD", "/{name}", file)

    async def main():
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0, backlog=1024)
        await site.start()
        print(site._server.sockets[0].getsockname()[1], flush=True)
        await asyncio.Event().wait()

    # A client that stops mid-stream hangs up on the requests it had in flight: not an error here.
    logging.getLogger("aiohttp.server").setLevel(logging.CRITICAL)
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
