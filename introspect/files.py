"""Every file the tool writes for the user (``--plot``) goes through here: one line naming
the path and the operating system's reason when it cannot be written, never a traceback.

:func:`check_writable` runs before any long work (a measured step), so a bad path is
refused before it costs anything; :func:`write_output` does the write and turns any
``OSError`` (``EISDIR`` a folder, ``ENOTDIR`` a path under a regular file, ``ENOENT`` a
missing folder or a dangling symlink, ``EACCES``/``EPERM``/``EROFS`` an unwritable place,
``ENOSPC``/``EDQUOT`` a full disk) into :class:`~introspect.errors.IntrospectError`.
A file that did not exist before and is left half-written by a failed write is removed.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from introspect.errors import IntrospectError


def display(path: str | os.PathLike[str]) -> str:
    """A path for a one-line message: as given, or quoted (``'a\\nb.png'``) when it holds
    a control character that would break the line."""
    text = os.fspath(path)
    return repr(text) if any(ord(c) < 32 or ord(c) == 127 for c in text) else text


def _where(path: Path) -> str:
    """The path as the user gave it, and where a symlink points (``a.png -> /x/b.png``)."""
    if os.path.islink(path):
        try:
            return f"{display(path)} (a symlink to {display(os.readlink(path))})"
        except OSError:
            pass
    return display(path)


def _reason(err: OSError) -> str:
    return err.strerror or type(err).__name__


#: What to do, by the errno a write failed with (the rest: :data:`_ELSE`).
_ADVICE = {
    errno.ENOSPC: "free space on that disk, or write elsewhere",
    errno.EDQUOT: "free space under your quota, or write elsewhere",
    errno.ENOENT: "give a path whose folders exist",
    errno.ENOTDIR: "give a path whose folders exist (a part of it is a file)",
    errno.EACCES: "give a file in a folder you can write to",
    errno.EPERM: "give a file in a folder you can write to",
    errno.EROFS: "give a file on a writable disk",
    errno.ENXIO: "give a regular file (this is a pipe or device nobody reads)",
}
_ELSE = "give another file name"


def write_error(path: str | os.PathLike[str], err: OSError, flag: str) -> IntrospectError:
    """The one line for a write to ``path`` (given with ``flag``) that failed with ``err``:
    the path, the OS's reason (``strerror``) and what to do."""
    p = Path(path)
    advice = _ADVICE.get(err.errno, _ELSE)
    return IntrospectError(f"{flag} {_where(p)}: cannot write it ({_reason(err)}); {advice}")


def _refuse_folder(p: Path, flag: str) -> None:
    if os.path.isdir(p):
        raise IntrospectError(
            f"{flag} {_where(p)}: that is a folder (Is a directory); give a file name, "
            f"e.g. {display(p / ('figure' + (p.suffix or '.png')))}"
        )


def check_writable(path: str | os.PathLike[str], *, flag: str = "--plot") -> None:
    """Raise :class:`IntrospectError` unless ``path`` can be opened for writing now.

    The file is opened for appending (nothing in an existing file changes) and, when it
    did not exist, removed again; so a folder, a path under a regular file, a missing
    folder, a dangling symlink into one, a read-only file or folder are all refused here,
    with the OS's own reason. A full disk shows only when bytes are written
    (:func:`write_output`)."""
    p = Path(path)
    _refuse_folder(p, flag)
    existed = os.path.exists(p)
    try:
        # O_NONBLOCK: a FIFO without a reader is refused (ENXIO) instead of waited on
        fd = os.open(p, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK, 0o666)
    except OSError as err:
        raise write_error(p, err, flag) from None
    os.close(fd)
    if not existed:
        _remove_quietly(p)


def write_output(
    path: str | os.PathLike[str],
    writer: Callable[[BinaryIO], object],
    *,
    flag: str = "--plot",
) -> Path:
    """Open ``path`` for writing, call ``writer(file)`` and close it; any ``OSError`` on the
    way (open, write, flush, close) is one :class:`IntrospectError` line naming ``flag``,
    the path and the OS's reason. A file this call created is removed when it fails."""
    p = Path(path)
    _refuse_folder(p, flag)
    existed = os.path.exists(p)
    try:
        f = open(p, "wb")
    except OSError as err:
        raise write_error(p, err, flag) from None
    try:
        with f:
            writer(f)
    except OSError as err:
        if not existed:
            _remove_quietly(p)
        raise write_error(p, err, flag) from None
    except BaseException:
        if not existed:
            _remove_quietly(p)
        raise
    return p


def _remove_quietly(p: Path) -> None:
    """Remove what we created at ``p``: the file itself, or the file a symlink led to
    (the user's symlink stays)."""
    target = Path(os.path.realpath(p))
    try:
        if os.path.isfile(target):
            target.unlink()
    except OSError:
        pass
