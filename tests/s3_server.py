"""moto's S3 API served on 127.0.0.1 (a real HTTP server, reached by s3fs and boto3 as any S3
endpoint), with a per-request latency and a count of the object bytes it sends.

moto's own ``ThreadedMotoServer`` binds where it is told but cannot add latency or count;
this wraps the same WSGI application (``moto.server.DomainDispatcherApplication``) in a small
middleware and serves it with werkzeug's threaded server. Credentials are moto's dummies;
nothing leaves the machine.
"""

from __future__ import annotations

import logging
import threading
import time

KEY, SECRET, REGION = "testing", "testing", "us-east-1"


class LocalS3:
    """``with LocalS3() as s3: s3.storage_options`` (for ``load_dataset(storage_options=...)``);
    ``s3.put(bucket, key, data)``; ``s3.sent`` maps object keys to bytes sent for GETs;
    ``s3.gets`` to the number of GETs."""

    def __init__(self, latency: float = 0.0):
        from moto.server import DomainDispatcherApplication, create_backend_app
        from werkzeug.serving import make_server

        logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one line per request otherwise
        self.latency = latency
        self.sent: dict[str, int] = {}
        self.gets: dict[str, int] = {}
        self._lock = threading.Lock()
        app = DomainDispatcherApplication(create_backend_app)

        def middleware(environ, start_response):
            if self.latency:
                time.sleep(self.latency)
            key = environ.get("PATH_INFO", "").split("/", 2)[-1]
            counting = environ.get("REQUEST_METHOD") == "GET" and "." in key
            if counting:
                with self._lock:
                    self.gets[key] = self.gets.get(key, 0) + 1
            result = app(environ, start_response)
            if not counting:
                return result
            return self._counted(key, result)

        self._server = make_server("127.0.0.1", 0, middleware, threaded=True)
        self.url = f"http://127.0.0.1:{self._server.server_port}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def _counted(self, key, result):
        for chunk in result:
            with self._lock:
                self.sent[key] = self.sent.get(key, 0) + len(chunk)
            yield chunk

    @property
    def storage_options(self) -> dict:
        return {"s3": {"endpoint_url": self.url, "key": KEY, "secret": SECRET,
                       "client_kwargs": {"region_name": REGION}}}

    def client(self):
        import boto3

        return boto3.client("s3", endpoint_url=self.url, aws_access_key_id=KEY, aws_secret_access_key=SECRET,
                            region_name=REGION)

    def put(self, bucket: str, key: str, data: bytes) -> None:
        client = self.client()
        try:
            client.create_bucket(Bucket=bucket)
        except client.exceptions.BucketAlreadyOwnedByYou:
            pass
        client.put_object(Bucket=bucket, Key=key, Body=data)

    def put_folder(self, bucket: str, folder, prefix: str = "") -> None:
        """Every file under ``folder`` as ``prefix/<relative path>``."""
        from pathlib import Path

        for path in sorted(Path(folder).rglob("*")):
            if path.is_file():
                self.put(bucket, (prefix.rstrip("/") + "/" if prefix else "") + path.relative_to(folder).as_posix(),
                         path.read_bytes())

    def __enter__(self) -> "LocalS3":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()
