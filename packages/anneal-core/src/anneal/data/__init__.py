"""Pinned datasets and weights: download once, verify by sha256, then read from the cache.

    from anneal.data import fetch
    path = fetch("tinyshakespeare")          # pathlib.Path of the verified input.txt

The table of assets (URL, size, sha256) is `ASSETS`; `anneal download <asset>` prefetches and
`anneal cache` lists, verifies and clears. Settings: `ANNEAL_CACHE_DIR` (else
`$XDG_CACHE_HOME/anneal`, else `~/.cache/anneal`; files go to its `data/` folder),
`ANNEAL_OFFLINE=1` (never touch the network), `ANNEAL_MIRROR` (download from
`<mirror>/<asset.filename>` instead of the pinned URLs: http(s)://, file:/// or a folder).
`sources(files=, mirror=)` points fetch at the user's own copies (`anneal train --data`) or a
mirror for a block; `used(installed)` and `needed_by(model, dataset)` say which assets matter.
"""

from anneal.data.assets import ASSETS, GROUPS, Asset, get_asset, names, needed_by, resolve, source_url, used
from anneal.data.cache import AssetStatus, asset_path, cache_root, clear, data_dir, human_size, status
from anneal.data.download import fetch, local_files, mirror_source, sources, verify_file, without_network
from anneal.data.errors import (
    CacheBusyError,
    DataError,
    DownloadError,
    IntegrityError,
    MirrorError,
    OfflineError,
    UnknownAssetError,
)

__all__ = [
    "ASSETS",
    "GROUPS",
    "Asset",
    "AssetStatus",
    "CacheBusyError",
    "DataError",
    "DownloadError",
    "IntegrityError",
    "MirrorError",
    "OfflineError",
    "UnknownAssetError",
    "asset_path",
    "cache_root",
    "clear",
    "data_dir",
    "fetch",
    "get_asset",
    "human_size",
    "local_files",
    "mirror_source",
    "names",
    "needed_by",
    "resolve",
    "source_url",
    "sources",
    "status",
    "used",
    "verify_file",
    "without_network",
]
