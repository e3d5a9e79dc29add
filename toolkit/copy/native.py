"""Builds and loads kernels/cpu_block_copy.c (batched host memcpy) through ctypes.

Compiled once per source version with the system C compiler into a per-user cache directory
(`$KVTK_CACHE_DIR` or `~/.cache/kvtk`); when no compiler is available, `load_native_copy()` returns None and the
CPU backend falls back to torch copies (slower for small blocks; same bytes).
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import logging
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from toolkit import locations
from toolkit.copy.kernel_sources import KernelSourceMissing, kernel_source
from toolkit.private_fs import make_private_dir

log = logging.getLogger(__name__)

SOURCE_NAME = "cpu_block_copy.c"


def __getattr__(name: str) -> Path:
    # `SOURCE`, the C file's path, resolved on first access rather than at import (kernel_sources.py says why).
    if name == "SOURCE":
        return kernel_source(SOURCE_NAME)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _cache_dir() -> Path:
    return locations.user_cache_dir() / "native"


def _cpu_identity() -> bytes:
    """The CPU model and feature flags (Linux), so a shared cache never hands one CPU another's build."""
    try:
        with open("/proc/cpuinfo", "rb") as cpuinfo:
            lines = [line for line in cpuinfo if line.startswith((b"model name", b"flags"))]
        return b"".join(sorted(set(lines)))
    except OSError:
        return b""


def _owned_and_private(path: Path) -> bool:
    """A library we load must belong to us and be writable by nobody else (nor may its folder be)."""
    for item in (path, path.parent):
        info = item.stat()
        if info.st_uid != os.getuid() or info.st_mode & 0o022:
            return False
    return True


@functools.lru_cache(maxsize=1)
def _load_library() -> "ctypes.CDLL | None":
    if os.environ.get("KVTK_NO_NATIVE") == "1":
        return None
    try:
        source_path = kernel_source(SOURCE_NAME)  # resolved here, not at import: a bare source tree imports too
        source = source_path.read_bytes()
    except (OSError, KernelSourceMissing) as exc:
        log.warning("native copy: source %s unreadable (%s); using torch copies", SOURCE_NAME, exc)
        return None
    # -march=native code is only valid on this CPU model: key the build by the CPU's identity, not just the arch.
    digest = hashlib.sha256(source + b"-march=native" + os.uname().machine.encode() + _cpu_identity()).hexdigest()[:16]
    target = _cache_dir() / f"kvtk_cpu_block_copy_{digest}.so"
    # A build with no recorded hash (made before hashes were recorded, or half-removed) is built again.
    if not (target.exists() and _sidecar(target).exists()) and not _build(source_path, target):
        return None
    return _open_verified(target)


def _sidecar(target: Path) -> Path:
    return target.with_suffix(".so.sha256")


def _build(source_path: Path, target: Path) -> bool:
    """Compile to a temporary name, record its SHA-256 beside it, then rename both into place (several processes
    may build at once); a failed build leaves nothing behind."""
    compiler = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
    if compiler is None:
        log.warning("native copy: no C compiler; using torch copies")
        return False
    tmp = tmp_hash = None
    try:
        make_private_dir(target.parent)
        os.chmod(target.parent, 0o700)  # we load code from here: nobody else may write into it
        fd, tmp = tempfile.mkstemp(suffix=".so", dir=target.parent)
        os.close(fd)
        subprocess.run(
            [
                compiler,
                "-O3",
                "-march=native",
                "-fno-tree-loop-distribute-patterns",
                "-shared",
                "-fPIC",
                "-pthread",
                "-o",
                tmp,
                str(source_path),
            ],
            check=True,
            capture_output=True,
            timeout=120,
        )
        digest = hashlib.sha256(Path(tmp).read_bytes()).hexdigest()
        fd, tmp_hash = tempfile.mkstemp(suffix=".sha256", dir=target.parent)
        with os.fdopen(fd, "w") as out:
            out.write(digest + "\n")
        os.replace(tmp_hash, _sidecar(target))
        tmp_hash = None
        os.replace(tmp, target)
        tmp = None
        return True
    except (OSError, subprocess.SubprocessError) as exc:
        log.warning("native copy: build failed (%s); using torch copies", exc)
        return False
    finally:
        for leftover in (tmp, tmp_hash):
            if leftover is not None:
                try:
                    os.unlink(leftover)
                except OSError:
                    pass


def _open_verified(target: Path) -> "ctypes.CDLL | None":
    """Load `target` only if it and its folder are ours and private and its bytes hash to the recorded SHA-256.
    The hash is read from an open file, and the path is loaded only while it still names that file (same inode):
    only this user can write into the private folder, so nothing can swap it in between. (Loading through
    `/proc/self/fd/N` instead would let the dynamic loader hand back an earlier library opened under the same
    fd number: it matches loaded objects by name.)"""
    try:
        fd = os.open(target, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        log.warning("native copy: cannot open %s (%s); using torch copies", target, exc)
        return None
    try:
        if not _owned_and_private(target):
            log.warning(
                "native copy: %s is not owned by this user or is writable by others; using torch copies", target
            )
            return None
        with open(f"/proc/self/fd/{fd}", "rb") as lib_file:
            actual = hashlib.sha256(lib_file.read()).hexdigest()
        try:
            expected = _sidecar(target).read_text().strip()
        except OSError:
            expected = None
        if actual != expected:
            log.warning(
                "native copy: %s does not match its recorded SHA-256; using torch copies (remove it to rebuild)", target
            )
            return None
        opened, named = os.fstat(fd), os.stat(target)
        if (opened.st_dev, opened.st_ino) != (named.st_dev, named.st_ino):
            log.warning("native copy: %s changed while it was checked; using torch copies", target)
            return None
        return ctypes.CDLL(str(target))
    except OSError as exc:
        log.warning("native copy: cannot load %s (%s); using torch copies", target, exc)
        return None
    finally:
        os.close(fd)


@functools.lru_cache(maxsize=1)
def load_native_copy() -> "ctypes._CFuncPtr | None":
    """The `kvtk_copy_batch(srcs, dsts, sizes, count, num_threads, nt_min_bytes)` entry point, or None (logged once).

    `nt_min_bytes`: batches of at least this many bytes use non-temporal stores (negative: never).
    """
    lib = _load_library()
    if lib is None:
        return None
    fn = lib.kvtk_copy_batch
    fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int, ctypes.c_int64]
    fn.restype = ctypes.c_int
    return fn


def native_has_streaming_stores() -> bool:
    """Whether the loaded native copy can use non-temporal stores (False without the native library)."""
    lib = _load_library()
    if lib is None:
        return False
    fn = lib.kvtk_copy_has_streaming_stores
    fn.argtypes, fn.restype = [], ctypes.c_int
    return bool(fn())
