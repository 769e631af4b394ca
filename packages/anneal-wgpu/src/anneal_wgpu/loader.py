"""Loading wgpu: one place, so the Vulkan loader never starts without a runtime directory.

Mesa's Vulkan drivers print "error: XDG_RUNTIME_DIR is invalid or not set in the environment" on every start
when the variable is missing or names no private directory (containers, cron, CI, ssh without a session).
Before wgpu's native library is loaded, such an environment gets a private one (mode 0700, owned by this user,
under the temp folder); a valid XDG_RUNTIME_DIR is left as it is.
"""

from __future__ import annotations

import os
import stat
import sys
import tempfile
from pathlib import Path
from types import ModuleType


def _is_private_dir(path: str) -> bool:
    try:
        info = os.stat(path)
    except OSError:
        return False
    return stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid() and stat.S_IMODE(info.st_mode) & 0o077 == 0


def ensure_runtime_dir(environ: dict[str, str] | None = None) -> str | None:
    """Set XDG_RUNTIME_DIR to a private folder when it is unset or unusable (Linux only); the folder set, or None."""
    env = os.environ if environ is None else environ
    if not sys.platform.startswith("linux") or _is_private_dir(env.get("XDG_RUNTIME_DIR", "")):
        return None
    folder = Path(tempfile.gettempdir()) / f"anneal-runtime-{os.getuid()}"
    try:
        folder.mkdir(mode=0o700, exist_ok=True)
    except OSError:
        return None
    if not _is_private_dir(str(folder)):  # someone else's, or widened: a fresh one of our own
        folder = Path(tempfile.mkdtemp(prefix="anneal-runtime-"))
    env["XDG_RUNTIME_DIR"] = str(folder)
    return str(folder)


def load_wgpu() -> ModuleType:
    """Import wgpu (a native library: deferred until a WebGPU device or adapter list is wanted)."""
    ensure_runtime_dir()
    import wgpu

    return wgpu
