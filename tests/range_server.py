"""A Range-capable HTTP file server on 127.0.0.1 that counts the bytes it sends.

Python's http.server ignores Range headers, so remote streaming could not be told apart
from a whole-file download; this one honours single ranges and records every request.
"""

from __future__ import annotations

import os
import re
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer


class _RangeHandler(SimpleHTTPRequestHandler):
    def log_message(self, *args):  # keep test output clean
        pass

    def _target(self):
        path = self.translate_path(self.path)
        return path if os.path.isfile(path) else None

    def do_HEAD(self):
        self._serve(body=False)

    def do_GET(self):
        self._serve(body=True)

    def _serve(self, body: bool):
        path = self._target()
        if path is None:
            self.send_error(404)
            return
        size = os.path.getsize(path)
        start, stop = 0, size
        match = re.fullmatch(r"bytes=(\d*)-(\d*)", self.headers.get("Range", "") or "")
        if match and (match.group(1) or match.group(2)):
            if match.group(1):
                start = int(match.group(1))
                stop = min(size, int(match.group(2)) + 1) if match.group(2) else size
            else:
                start = max(0, size - int(match.group(2)))
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{stop - 1}/{size}")
        else:
            self.send_response(200)
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("Content-Length", str(stop - start))
        self.end_headers()
        if not body:
            return
        # Stream in chunks and count what was written: a client that reads a response's
        # head and hangs up (fsspec's existence probe is such a GET) has not been sent the rest.
        name = os.path.basename(path)
        ranged = match is not None and bool(match.group(1) or match.group(2))
        counter = self.server.sent if ranged else self.server.unranged
        with open(path, "rb") as f:
            f.seek(start)
            remaining = stop - start
            while remaining:
                chunk = f.read(min(remaining, 16384))
                try:
                    self.wfile.write(chunk)
                except (BrokenPipeError, ConnectionResetError):
                    return
                counter[name] = counter.get(name, 0) + len(chunk)
                remaining -= len(chunk)
        if not ranged:
            self.server.whole_files_sent[name] = self.server.whole_files_sent.get(name, 0) + 1


class RangeServer:
    """``with RangeServer(folder) as server: server.url + "/file.bin"``; ``server.sent`` maps
    file names to bytes sent for Range requests, ``server.whole_files_sent`` to the number of
    responses without Range that were sent to the end (a whole-file download)."""

    def __init__(self, folder):
        folder = os.fspath(folder)

        def handler(*args, **kwargs):
            return _RangeHandler(*args, directory=folder, **kwargs)

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._httpd.sent = {}              # bytes answering Range requests, by file name
        self._httpd.unranged = {}          # bytes answering requests without Range
        self._httpd.whole_files_sent = {}  # responses without Range that were sent to the end
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}"
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def sent(self) -> dict:
        return self._httpd.sent

    @property
    def whole_files_sent(self) -> dict:
        return self._httpd.whole_files_sent

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._httpd.shutdown()
        self._httpd.server_close()
