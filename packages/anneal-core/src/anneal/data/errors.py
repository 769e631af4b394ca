"""Errors of the data layer; each message is complete (what failed, which file, the fix)."""

from __future__ import annotations


class DataError(RuntimeError):
    """Base class: a pinned asset could not be provided."""


class UnknownAssetError(DataError, LookupError):
    """A name that is not in the asset table."""

    def __init__(self, name: str, known: list[str]) -> None:
        self.name, self.known = name, known
        super().__init__(f"unknown asset {name!r}; known assets: {', '.join(known)}")


class OfflineError(DataError):
    """ANNEAL_OFFLINE=1 and the file is missing or corrupt."""


class IntegrityError(DataError):
    """A download's size or sha256 did not match the pinned value (the partial file was deleted)."""


class DownloadError(DataError):
    """The server answered with an error, or the connection failed repeatedly."""


class CacheBusyError(DataError):
    """Another process holds the asset's lock (only raised where waiting makes no sense)."""


class MirrorError(DataError, ValueError):
    """A mirror (ANNEAL_MIRROR, --mirror) that is not an http(s) URL, a file:/// URL or an existing folder."""
