"""A remote ``.idx``, held so that memory stays bounded whatever size the server claims.

An index up to IN_MEMORY_BYTES is fetched into memory in one go (its parts in parallel), as
before. A larger one is streamed to a file on local disk, WINDOW_BYTES at a time, under a
temporary name and then renamed (a reader never sees half an index), after checking that the
disk has room for it; it is then memory-mapped, so its pages are the page cache's, not the
process's. The file is named by content (URL, size, ETag: RemoteObject.content_key), so a
later opening of the same version maps it again without a request, and a changed file gets
a file of its own. Before, a 2.7 GB ``.idx`` was held whole in memory (in 8 MiB pieces,
joined), and one a server claimed was 20 TiB was fetched until memory ran out.
"""

from __future__ import annotations

import mmap
import os
import shutil

from ...errors import RemoteReadError
from ..files import remove_quietly, temporary_path
from .objects import RemoteObject

IN_MEMORY_BYTES = 64 << 20  # a larger .idx is streamed to disk and mapped
WINDOW_BYTES = 64 << 20  # bytes of an index fetched (and held) at once while streaming it to disk
FREE_SPACE_MARGIN_BYTES = 1 << 30  # left free on the disk after the index is written


def default_folder() -> str:
    """Where indices are kept without a ``cache_dir``: ``$XDG_CACHE_HOME/mmidx_builder/remote_indices``."""
    root = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(root, "mmidx_builder", "remote_indices")


def index_bytes(access, idx: RemoteObject):
    """The bytes of the remote index ``idx``: ``bytes`` when small, else a read-only ``mmap`` of
    its copy on disk (in ``access.cache_dir``'s ``indices`` folder, else default_folder())."""
    if idx.size <= IN_MEMORY_BYTES:
        (data,) = access.fetch([idx], [0], [idx.size]) if idx.size else (b"",)
        return data
    folder = os.path.join(access.cache_dir, "indices") if access.cache_dir else default_folder()
    path = os.path.join(folder, idx.content_key + ".idx")
    if not (os.path.isfile(path) and os.path.getsize(path) == idx.size):
        _stream_to(access, idx, folder, path)
    with open(path, "rb") as f:
        return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)


def _stream_to(access, idx: RemoteObject, folder: str, path: str) -> None:
    os.makedirs(folder, exist_ok=True)
    free = shutil.disk_usage(folder).free
    if idx.size + FREE_SPACE_MARGIN_BYTES > free:
        raise RemoteReadError(idx.url, 0, idx.size, f"the index is {idx.size:,} bytes and {folder} has {free:,} bytes "
                                                    f"free (it keeps {FREE_SPACE_MARGIN_BYTES:,} free): make room, or "
                                                    "set remote_cache_dir to a larger disk")
    temporary = temporary_path(path)
    try:
        with open(temporary, "wb") as f:
            for begin in range(0, idx.size, WINDOW_BYTES):
                (data,) = access.fetch_remote([idx], [begin], [min(idx.size, begin + WINDOW_BYTES)])
                f.write(data)
        os.replace(temporary, path)
    except BaseException:
        remove_quietly(temporary)
        raise
