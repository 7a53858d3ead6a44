"""Remote token files (``hf://``, ``http(s)://``, ``s3://``, anything fsspec opens) read at the
speed of many requests in flight, not of one round trip per piece.

A sample is a handful of pieces at random places of a ``.bin`` (Megatron shuffles documents),
so a table of 1,000 samples is ~5,000 small ranges. Read one after another, each costs a
round trip (25-100 ms to object storage): ~100x too slow for one GPU. Here every range of a
gather is planned at once and fetched together:

    pieces (token runs)  --plan_runs-->  byte runs  --RemoteAccess.fetch-->  bytes
      sorted by file and offset; the smallest   up to REQUESTS_IN_FLIGHT ranged GETs at once,
      gaps bridged first, within a byte budget  most urgent batch first (Requests): HTTP and
      (never more than 1.15x the bytes asked    the Hub's resolve URLs on the reader's own loop
      for: see plan_runs)                       (io_loop), S3 on fsspec's, a thread pool for
                                                synchronous filesystems; optionally through a
                                                local BlockCache

Exactly the bytes asked for are requested (no read-ahead blocks: fsspec's default file cache
fetched 14.8x the bytes over plain HTTP). Faults: a dropped connection, a 5xx, a timeout or
a short body is retried with backoff, ``retries`` times; a file whose ETag or size differs
from what it was when opened is a :class:`RemoteChangedError` naming the file and range
(HTTP sends ``If-Match``, or ``If-Unmodified-Since`` for a Last-Modified date, S3 ``IfMatch``
or the version id, and every answer's range, size and version are checked as well, whether or
not the server honoured them, an answer without the version included: answers.py);
never wrong or shifted tokens. A server that asks to be left alone (429/503 with
``Retry-After`` or ``RateLimit``) is waited out as it asks (server_waits.py); an answer
slower than the speed floor is abandoned.

The package, one module per concern, lowest first (each imports only those above it):

    objects.py        RemoteObject: a file as seen when opened (URL, size, version)
    process_state.py  what is made once per process; whether the interpreter is exiting
    server_waits.py   429/503 with Retry-After or RateLimit: the host's pause, within max_wait and max_waits
    answers.py        what an answer means: the range, a fault to retry, a changed file
    request_queue.py  batches by priority, REQUESTS_IN_FLIGHT at once, retries with backoff
    http.py           HTTP ranges on aiohttp (and what libcurl is given: HttpTarget)
    http_info.py      an HTTP file's size and version: a HEAD, or a GET of one byte
    curl.py           HTTP ranges through libcurl's multi interface, when pycurl is installed
    fetching.py       which client sends a filesystem's ranges
    hub_routes.py     a Hub file resolved once per process, its ranges sent where it redirects
    index_files.py    a remote .idx: in memory when small, else streamed to disk and mapped
    block_cache.py    the optional local block cache
    access.py         RemoteAccess: URL -> filesystem, stat, fetch, open a pair
    planning.py       pieces -> byte runs (plan_runs), read_ranges
    reader.py         RemoteBinReader, behind the reader seam (storage/bin_readers.py)

Nothing here imports ``datasets`` or knows a token format.
"""

from __future__ import annotations

from .access import RemoteAccess, remote_access_for
from .block_cache import BlockCache
from .objects import RemoteObject
from .planning import MERGE_BUDGET, MERGE_GAP_BYTES, plan_runs, read_ranges
from .reader import RemoteBinReader
from .request_queue import background_fetches, concurrently

__all__ = ["MERGE_BUDGET", "MERGE_GAP_BYTES", "BlockCache", "RemoteAccess", "RemoteBinReader", "RemoteObject",
           "background_fetches", "concurrently", "plan_runs", "read_ranges", "remote_access_for"]
