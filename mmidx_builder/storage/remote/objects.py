"""A remote file as seen when it was opened: the version every later read must match."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass


@dataclass(frozen=True)
class RemoteObject:
    """A remote file as seen when opened: its URL, size and version (ETag, S3 version id, or
    None when the store gives neither)."""

    url: str
    size: int
    version: str | None = None
    version_id: str | None = None  # S3 VersionId: pinned reads on a versioned bucket

    @property
    def content_key(self) -> str:
        return hashlib.sha256(f"{self.url}\0{self.size}\0{self.version}\0{self.version_id}".encode()).hexdigest()[:32]
