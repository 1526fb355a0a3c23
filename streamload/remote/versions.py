"""Version tags of listed objects: what keys a remote piece, so a replaced object is never
read from stale pieces."""

from __future__ import annotations

from typing import Any

__all__ = ["object_version"]


def object_version(info: dict[str, Any]) -> str:
    """A listed object's version tag, or ``""``: the ETag (S3, Azure, HTTP), generation
    (GCS), git blob id (Hugging Face), content MD5, or last modification time. The remote
    cache keys pieces by it, so a replaced object never reads stale pieces."""
    keys = ("ETag", "etag", "generation", "md5Hash", "blob_id", "Content-MD5", "LastModified",
            "Last-Modified", "last_modified", "mtime")  # fmt: skip
    for key in keys:
        value = info.get(key)
        if value not in (None, ""):
            return str(value)
    return ""
