"""Checked zip archives and atomic file writes (the machinery under :mod:`budro.persist`).

An archive is a zip file holding ``manifest.json`` and any number of other members.  The manifest
lists every other member under ``"members"`` with its SHA-256 and size::

    "members": {"model/booster.json": {"sha256": "9f2c...", "size": 48213}, ...}

:func:`read_archive` returns the members only after all of these hold: the zip is readable, the
manifest is present and valid JSON (a JSON object, standard JSON: no ``NaN``/``Infinity``), the
caller's check of the manifest passes, every zip entry is listed, every listed member is present
exactly once, and each member's size and SHA-256 match.  Nothing in the archive is executed; the
members come back as bytes for the caller to parse.

:func:`atomic_writer` writes a file through a temporary file in the same folder (flushed, fsynced,
then ``os.replace``), so a failed write leaves the previous file as it was and no temporary file.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import re
import secrets
import zipfile
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

from budro.exceptions import ModelFileError, ValidationError

__all__ = ["MANIFEST", "atomic_writer", "write_atomic", "save_figure", "write_archive", "read_archive", "sha256",
           "check_member_name"]

#: Name of the manifest member.
MANIFEST = "manifest.json"
#: Largest manifest read (bytes): a manifest holds metadata and small arrays only.
MAX_MANIFEST_BYTES = 64 << 20
#: Largest member read (bytes), a guard against zip bombs before any size is trusted.
MAX_MEMBER_BYTES = 4 << 30
#: Member names: slash-separated parts of letters, digits, ``.``, ``_``, ``-`` (no ``..``, no
#: absolute paths, nothing a zip tool could extract outside its folder).
_NAME = re.compile(r"^[A-Za-z0-9_-][A-Za-z0-9._-]*(/[A-Za-z0-9_-][A-Za-z0-9._-]*)*$")
_ZIP_MAGIC = b"PK\x03\x04"


def sha256(data: bytes) -> str:
    """Hex SHA-256 of ``data``."""
    return hashlib.sha256(data).hexdigest()


def check_member_name(name: str, what: str = "member name") -> str:
    """``name`` if it is a safe member name (see ``_NAME``), else :class:`ValidationError`."""
    if not isinstance(name, str) or not _NAME.match(name) or len(name) > 200 or name == MANIFEST:
        raise ValidationError(
            f"{what} {name!r} is not usable in a model file: use 1-200 characters from letters, digits, "
            "'.', '_', '-' in '/'-separated parts (not starting with '.'), and not 'manifest.json'"
        )
    return name


def is_zip(path: str | os.PathLike) -> bool:
    """Whether the file starts like a zip archive (local file header)."""
    with open(path, "rb") as fh:
        return fh.read(4) == _ZIP_MAGIC


@contextlib.contextmanager
def atomic_writer(path: str | os.PathLike) -> Iterator[io.BufferedWriter]:
    """Open ``path`` for binary writing, atomically.

    Yields a file object on a temporary file in the same folder (created with the usual
    permissions, i.e. ``0o666`` less the umask).  When the block ends normally the file is
    flushed, fsynced and moved over ``path`` with :func:`os.replace` (then the folder is fsynced
    where the platform allows); when it raises, the temporary file is removed and ``path`` is
    left as it was.
    """
    path = Path(path)
    if path.is_dir():
        raise ValidationError(f"cannot write {str(path)!r}: it is a directory; give a file name")
    folder = path.parent
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f".{path.name}.{secrets.token_hex(6)}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666)
    try:
        with os.fdopen(fd, "wb") as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    _fsync_folder(folder)


def write_atomic(path: str | os.PathLike, data: bytes) -> Path:
    """Write ``data`` to ``path`` through :func:`atomic_writer`: an interrupted or failed write
    leaves the file that was there before (or none), never part of the new one."""
    with atomic_writer(path) as fh:
        fh.write(data)
    return Path(path)


def save_figure(fig: Any, path: str | os.PathLike, *, dpi: int) -> Path:
    """A matplotlib figure saved to ``path`` through :func:`atomic_writer`, in the format its
    suffix names (PNG without one)."""
    path = Path(path)
    with atomic_writer(path) as fh:
        fig.savefig(fh, dpi=dpi, format=path.suffix[1:].lower() or "png")
    return path


def _fsync_folder(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:  # pragma: no cover - platforms without directory handles (Windows)
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover - file systems that refuse it
        pass
    finally:
        os.close(fd)


def write_archive(path: str | os.PathLike, manifest: Mapping[str, Any], members: Mapping[str, bytes]) -> Path:
    """Write ``manifest`` (with ``"members"`` filled in) and ``members`` as a zip, atomically.

    ``manifest`` must be JSON-serialisable as standard JSON; a value that is not (a NaN, an
    object) raises :class:`ValidationError` before the file is touched.
    """
    path = Path(path)
    table = {}
    for name, data in members.items():
        check_member_name(name)
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise ValidationError(f"archive member {name!r} must be bytes, got {type(data).__name__}")
        table[name] = {"sha256": sha256(bytes(data)), "size": len(data)}
    full = {**manifest, "members": table}
    try:
        text = json.dumps(full, indent=1, allow_nan=False, ensure_ascii=False)
    except (TypeError, ValueError) as exc:
        raise ValidationError(f"the model's description cannot be written as JSON: {exc}") from None
    with atomic_writer(path) as fh:
        with zipfile.ZipFile(fh, "w", compression=zipfile.ZIP_DEFLATED) as zf:
            zf.writestr(MANIFEST, text.encode("utf-8"))
            for name, data in members.items():
                zf.writestr(name, bytes(data))
    return path


def _reject_constant(name: str) -> Any:
    raise ValueError(f"non-standard JSON constant {name}")


def read_archive(
    path: str | os.PathLike,
    check_manifest: Callable[[dict[str, Any]], None] | None = None,
    *,
    what: str = "archive",
) -> tuple[dict[str, Any], dict[str, bytes]]:
    """Read and verify an archive written by :func:`write_archive`.

    ``check_manifest(manifest)`` runs right after the manifest is parsed, before the member table
    is looked at (a format or version check belongs there, so that an unknown format is reported
    as such).  Returns ``(manifest, members)`` with every member's bytes checked against its
    listed size and SHA-256.  Every failure is :class:`~budro.exceptions.ModelFileError` naming
    the file and what is wrong.
    """
    label = str(path)

    def fail(msg: str) -> ModelFileError:
        return ModelFileError(f"{label!r}: {msg}")

    try:
        zf = zipfile.ZipFile(path, "r")
    except FileNotFoundError:
        raise fail("no such file") from None
    except IsADirectoryError:
        raise fail("is a directory, not a model file") from None
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, ValueError, EOFError, NotImplementedError) as exc:
        raise fail(f"not a readable {what} (zip): {exc}") from None
    with zf:
        try:
            infos = zf.infolist()
        except Exception as exc:  # pragma: no cover - infolist is a plain list
            raise fail(f"not a readable {what} (zip): {exc}") from None
        names = [info.filename for info in infos]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise fail(f"the zip holds {', '.join(map(repr, dupes))} more than once")
        by_name = {info.filename: info for info in infos}
        if MANIFEST not in by_name:
            raise fail(f"not a budro {what}: it has no {MANIFEST}")
        raw = _read_member(zf, by_name[MANIFEST], MAX_MANIFEST_BYTES, fail)
        try:
            manifest = json.loads(raw.decode("utf-8"), parse_constant=_reject_constant)
        except (UnicodeDecodeError, ValueError, RecursionError) as exc:
            raise fail(f"{MANIFEST} is not valid JSON: {exc}") from None
        if not isinstance(manifest, dict):
            raise fail(f"{MANIFEST} must hold a JSON object, got {type(manifest).__name__}")
        if check_manifest is not None:
            check_manifest(manifest)
        table = manifest.get("members")
        if not isinstance(table, dict):
            raise fail(f"{MANIFEST} has no 'members' table (an object: name -> {{sha256, size}})")
        for name, entry in table.items():
            if not (isinstance(entry, dict) and set(entry) == {"sha256", "size"}
                    and isinstance(entry["sha256"], str) and re.fullmatch(r"[0-9a-f]{64}", entry["sha256"])
                    and type(entry["size"]) is int and 0 <= entry["size"] <= MAX_MEMBER_BYTES):
                raise fail(f"{MANIFEST}: the entry of member {name!r} must be {{'sha256': 64 hex digits, 'size': bytes}}, "
                           f"got {entry!r}")
        unlisted = sorted(set(by_name) - set(table) - {MANIFEST})
        if unlisted:
            raise fail(f"the zip holds member(s) the manifest does not list: {', '.join(map(repr, unlisted))}")
        missing = sorted(set(table) - set(by_name))
        if missing:
            raise fail(f"member(s) listed in the manifest are missing: {', '.join(map(repr, missing))}")
        members: dict[str, bytes] = {}
        for name, entry in table.items():
            info = by_name[name]
            if info.file_size != entry["size"]:
                raise fail(f"member {name!r} has {info.file_size} bytes, the manifest says {entry['size']}")
            data = _read_member(zf, info, entry["size"], fail)
            if len(data) != entry["size"] or sha256(data) != entry["sha256"]:
                raise fail(f"member {name!r} does not match its SHA-256 in the manifest (the file is damaged or was edited)")
            members[name] = data
    return manifest, members


def _read_member(zf: zipfile.ZipFile, info: zipfile.ZipInfo, limit: int, fail) -> bytes:
    if info.file_size > limit:
        raise fail(f"member {info.filename!r} is {info.file_size} bytes, more than the {limit} allowed")
    try:
        with zf.open(info) as fh:
            data = fh.read(limit + 1)
    except Exception as exc:  # zipfile raises many types on damaged data (BadZipFile, zlib.error, EOFError, ...)
        raise fail(f"member {info.filename!r} cannot be read (damaged zip): {type(exc).__name__}: {exc}") from None
    if len(data) > limit:
        raise fail(f"member {info.filename!r} is larger than the {limit} bytes allowed")
    return data
