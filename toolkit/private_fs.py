"""Folders and files the toolkit creates (run folders, model weights, build caches) are owner-only.

Rules (docs/inputs.md): a run folder path with a `..` component is refused; only folders this process creates
are chmodded (an existing folder, say a 1777 /tmp or someone else's, is never changed); a run or sweep folder is
created fresh, or is an existing *empty* folder of ours, or (resume) one of ours; files are written with
O_EXCL|O_NOFOLLOW to a fresh temporary name and renamed into place, so a planted symlink is never followed.
"""

from __future__ import annotations

import os
import secrets
import stat
from pathlib import Path

from toolkit.errors import BadInput

PRIVATE_DIR_MODE = 0o700
PRIVATE_FILE_MODE = 0o600
_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


def _check_path(path: Path, field: str) -> None:
    if ".." in path.parts:
        raise BadInput(f"{field}: {str(path)!r} has a '..' component; give the folder without it")
    if "\0" in str(path):
        raise BadInput(f"{field}: {str(path)!r} holds a NUL character")


def make_private_dir(path: str | Path) -> Path:
    """Create `path` and any missing parents with mode 0700; folders that already exist are left as they are."""
    path = Path(path)
    missing = []
    probe = path
    while not os.path.lexists(probe):
        missing.append(probe)
        probe = probe.parent
    for folder in reversed(missing):
        try:
            folder.mkdir(mode=PRIVATE_DIR_MODE)
        except FileExistsError:
            continue  # another process created it first: not ours to chmod
        os.chmod(folder, PRIVATE_DIR_MODE)  # mkdir's mode is filtered by the umask
    if not path.is_dir():
        raise BadInput(f"folder: {str(path)!r} exists and is not a folder")
    return path


def create_run_dir(path: str | Path, *, resume: bool = False, field: str = "out") -> Path:
    """A run (or sweep) folder: created owner-only, or an existing empty folder of ours; with `resume`, any folder
    of ours. Refused: a symlink, a non-folder, a folder of another user, a non-empty folder without `resume`."""
    path = Path(path)
    _check_path(path, field)
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        make_private_dir(path.parent)
        try:
            os.mkdir(path, PRIVATE_DIR_MODE)
        except FileExistsError:
            raise BadInput(
                f"{field}: {str(path)!r} was created by someone else meanwhile; give another folder"
            ) from None
        os.chmod(path, PRIVATE_DIR_MODE)
        return path
    if stat.S_ISLNK(info.st_mode):
        raise BadInput(f"{field}: {str(path)!r} is a symbolic link; give the folder itself")
    if not stat.S_ISDIR(info.st_mode):
        raise BadInput(f"{field}: {str(path)!r} exists and is not a folder")
    if info.st_uid != os.geteuid():
        raise BadInput(f"{field}: {str(path)!r} belongs to another user (uid {info.st_uid}); give a folder of your own")
    if not resume and any(os.scandir(path)):
        raise BadInput(
            f"{field}: {str(path)!r} exists and is not empty; give a new folder (runs never mix with older files)"
        )
    return path


def unique_dir(parent: str | Path, stem: str) -> Path:
    """A new owner-only folder `parent/stem` (or `stem-2`, `stem-3`, ... when taken: two runs in one second)."""
    parent = make_private_dir(parent)
    for n in range(1, 1000):
        candidate = parent / (stem if n == 1 else f"{stem}-{n}")
        try:
            os.mkdir(candidate, PRIVATE_DIR_MODE)
        except FileExistsError:
            continue
        os.chmod(candidate, PRIVATE_DIR_MODE)
        return candidate
    raise BadInput(f"out: {parent}/{stem}-* are all taken; give --out")


def open_new_file(path: str | Path) -> int:
    """A file descriptor of a new 0600 file; refuses an existing file or a symlink at `path`."""
    fd = os.open(path, _NEW_FILE, PRIVATE_FILE_MODE)
    os.fchmod(fd, PRIVATE_FILE_MODE)  # the umask may have cleared bits we want, never added any
    return fd


def temp_name(path: Path) -> Path:
    return path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")


def write_private_file(path: str | Path, data: bytes | str) -> Path:
    """Write `path` atomically with mode 0600: a fresh O_EXCL|O_NOFOLLOW temporary file, then a rename."""
    path = Path(path)
    tmp = temp_name(path)
    fd = open_new_file(tmp)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data.encode("utf-8") if isinstance(data, str) else data)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def write_private_with(path: str | Path, write) -> Path:
    """Like `write_private_file`, for writers that take a binary file object (`write(handle)`, e.g. parquet)."""
    path = Path(path)
    tmp = temp_name(path)
    fd = open_new_file(tmp)
    try:
        with os.fdopen(fd, "wb") as handle:
            write(handle)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path
