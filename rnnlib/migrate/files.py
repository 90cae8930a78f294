"""The files a run reads and ``--fix`` rewrites, handled as a user's files deserve.

Reading:

* A path on the command line is read whatever its name; a directory is walked for ``*.py`` and
  ``*.ipynb``, skipping hidden directories and ``_SKIP_DIRS``, following symbolic links to
  directories (each real directory once, so a link cycle ends) and to files.
* A file reached twice (a link and its target, two hard links, a path named twice) is read
  once, under the first name it was reached by.
* Before a file is opened its type is checked: a FIFO, a socket or a device is reported and
  never opened, so the run cannot block on it. The file is opened without blocking and checked
  again on the open descriptor.
* Whatever cannot be read (a missing path, a broken link, no permission, a directory that
  cannot be listed) becomes one :class:`~rnnlib.migrate.findings.Error`, and the run goes on.

Writing (``--fix``) goes to the file a link points to, never replaces the link, and refuses,
with the reason, rather than guess:

* a read-only file (no write permission bits, or none for this user) is not rewritten;
* a file that changed since it was read is not rewritten: its inode, size and mtime are compared
  with those it was read with, and then its bytes with the bytes that were read, so that an edit
  of the same size made within the mtime's resolution is noticed too (checked again just before
  the temporary file replaces it, and before a write in place);
* the new text goes into a temporary file of the fixer's own, made with
  :func:`tempfile.mkstemp` next to the target (a fresh, hidden name that no other file has),
  given the target's mode, owner, group and extended attributes, flushed to disk, and moved over
  the target in one step; on any failure the temporary file is removed (it is the only file the
  fixer ever removes) and the target is left as it was;
* a file with more than one hard link, or whose owner, group or extended attributes the
  temporary file cannot take on, is rewritten in place instead, so that every name and every
  attribute stays with it; should that write fail, the original bytes are written back.
"""

from __future__ import annotations

import errno
import os
import stat
import tempfile

from rnnlib.migrate.findings import Error

_SKIP_DIRS = frozenset({"__pycache__", "site-packages", "node_modules", "venv"})
_SUFFIXES = (".py", ".ipynb")
TEMP_SUFFIX = ".rnnlib-migrate.tmp"


class Refused(Exception):
    """A file the run will not read or write, with the reason in a few words."""


def _why(exc: OSError) -> str:
    return exc.strerror or str(exc)


def _kind(mode: int) -> str | None:
    """What a file that is not a regular file is, in words; None for a regular file."""
    for test, name in (
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISDIR, "a directory"),
    ):
        if test(mode):
            return name
    return None if stat.S_ISREG(mode) else "not a regular file"


def iter_inputs(paths, errors: list):
    """Yield each file to check once: (the path it was reached by, its os.stat_result)."""
    seen: set[tuple[int, int]] = set()
    for path in paths:
        path = os.fspath(path)
        for found in _expand(path, errors):
            try:
                st = os.stat(found)
            except OSError as exc:
                errors.append(Error(found, _missing(found, exc)))
                continue
            key = (st.st_dev, st.st_ino)
            if key in seen:
                continue
            seen.add(key)
            yield found, st


def _missing(path: str, exc: OSError) -> str:
    if os.path.islink(path):
        try:
            target = os.readlink(path)
        except OSError:
            target = "?"
        return f"broken symbolic link (to {target})"
    if exc.errno == errno.ENOENT:
        return "no such file or directory"
    return f"cannot read: {_why(exc)}"


def _expand(path: str, errors: list):
    if not os.path.isdir(path):
        yield path
        return
    found: list[str] = []
    visited: set[tuple[int, int]] = set()

    def failed(exc: OSError):
        errors.append(Error(exc.filename or path, f"cannot read directory: {_why(exc)}"))

    for root, dirs, files in os.walk(path, onerror=failed, followlinks=True):
        try:
            st = os.stat(root)
        except OSError as exc:
            failed(exc)
            dirs[:] = []
            continue
        if (st.st_dev, st.st_ino) in visited:  # a link back up the tree
            dirs[:] = []
            continue
        visited.add((st.st_dev, st.st_ino))
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in _SKIP_DIRS)
        found += [os.path.join(root, name) for name in files if name.endswith(_SUFFIXES)]
    yield from sorted(found)


def read_bytes(path: str, expected: os.stat_result) -> bytes:
    """The bytes of the regular file `path`; raises Refused (with the reason) for anything
    else. Opened without blocking, and checked on the open descriptor, so a FIFO or device put
    in its place cannot block the run."""
    kind = _kind(expected.st_mode)
    if kind is not None:
        raise Refused(f"{kind}, not a file to check; skipped")
    fd = _open(path, os.O_RDONLY, expected, "cannot read:", "while it was read; skipped")
    try:
        chunks = []
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
        return b"".join(chunks)
    except OSError as exc:
        raise Refused(f"cannot read: {_why(exc)}") from None
    finally:
        os.close(fd)


def _open(path: str, flags: int, expected: os.stat_result, failed: str, when: str) -> int:
    """A descriptor on `path`, opened without blocking (a FIFO cannot stall the run) and
    checked to be the regular file `expected` describes; raises Refused, its message starting
    with `failed`, when it cannot be opened or something else took the file's place."""
    flags |= getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOCTTY", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        raise Refused(f"{failed} {_why(exc)}") from None
    try:
        st = os.fstat(fd)
    except OSError as exc:
        os.close(fd)
        raise Refused(f"{failed} {_why(exc)}") from None
    kind = _kind(st.st_mode)
    if kind is not None or (st.st_dev, st.st_ino) != (expected.st_dev, expected.st_ino):
        os.close(fd)
        raise Refused(f"{failed} {kind or 'another file'} took its place {when}")
    return fd


# --------------------------------------------------------------------------------- writing


def write_back(path: str, data: bytes, original: bytes, read_stat: os.stat_result) -> None:
    """Replace the content of the file `path` (or of the file it links to) with `data`.
    Raises Refused, with the reason, when it will not or could not; the file is then as it
    was. `original` and `read_stat` are what was read, to notice a change since."""
    target = os.path.realpath(path)
    try:
        st = os.stat(target)
    except OSError as exc:
        raise Refused(f"not rewritten: {_why(exc)}") from None
    if (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns) != (
        read_stat.st_dev,
        read_stat.st_ino,
        read_stat.st_size,
        read_stat.st_mtime_ns,
    ):
        raise Refused("not rewritten: the file changed while it was being checked")
    _same_bytes(target, st, original, "while it was being checked")
    mode = stat.S_IMODE(st.st_mode)
    if not mode & 0o222:
        raise Refused(
            f"not rewritten: the file is read-only (mode {mode:04o}); make it writable "
            f"to let --fix change it"
        )
    if not os.access(target, os.W_OK):
        raise Refused(
            f"not rewritten: the file is read-only for this user (mode {mode:04o}, owner "
            f"uid {st.st_uid})"
        )
    if st.st_nlink > 1:
        _write_in_place(target, data, original, st)
        return
    if not _write_via_temporary(target, data, original, st):
        _write_in_place(target, data, original, st)


def _same_bytes(target: str, st: os.stat_result, original: bytes, when: str) -> None:
    """Raise Refused unless `target` still holds exactly the bytes `original` that were read
    (its size and mtime can stay the same through an edit)."""
    try:
        now = read_bytes(target, st)
    except Refused as exc:
        raise Refused(f"not rewritten: cannot read it again to compare ({exc})") from None
    if now != original:
        raise Refused(f"not rewritten: the file's content changed {when}")


def _write_via_temporary(target: str, data: bytes, original: bytes, st: os.stat_result) -> bool:
    """Write `data` to a fresh temporary file beside `target`, give it `target`'s mode, owner
    and extended attributes, and move it over `target`. False (nothing changed) when the
    temporary file cannot take on the owner or the attributes; raises Refused on failure."""
    folder, name = os.path.split(target)
    try:
        fd, temp = tempfile.mkstemp(prefix=f".{name}.", suffix=TEMP_SUFFIX, dir=folder or ".")
    except OSError as exc:
        raise Refused(
            f"not rewritten: cannot create a temporary file in {folder or '.'} "
            f"({_why(exc)}); the file is unchanged"
        ) from None
    try:
        try:
            _write_all(fd, data)
            os.fchmod(fd, stat.S_IMODE(st.st_mode))
            if not _same_owner(fd, st) or not _copy_xattrs(target, fd):
                os.close(fd)
                fd = -1
                os.unlink(temp)
                return False
            os.fsync(fd)
        finally:
            if fd >= 0:
                os.close(fd)
        now = os.stat(target)
        if (now.st_ino, now.st_size, now.st_mtime_ns) != (st.st_ino, st.st_size, st.st_mtime_ns):
            raise Refused("not rewritten: the file changed while it was being fixed")
        _same_bytes(target, st, original, "while it was being fixed")
        os.replace(temp, target)
    except BaseException as exc:
        try:
            os.unlink(temp)
        except FileNotFoundError:
            pass
        if isinstance(exc, OSError):
            raise Refused(f"not rewritten: {_why(exc)}; the file is unchanged") from None
        raise
    return True


def _same_owner(fd: int, st: os.stat_result) -> bool:
    """Give the temporary file `st`'s owner and group; False when that is not allowed."""
    mine = os.fstat(fd)
    if (mine.st_uid, mine.st_gid) == (st.st_uid, st.st_gid):
        return True
    try:
        os.fchown(fd, st.st_uid, st.st_gid)
    except OSError:
        return False
    return True


def _copy_xattrs(target: str, fd: int) -> bool:
    """Copy `target`'s extended attributes (ACLs among them) to `fd`; False if one cannot be."""
    if not hasattr(os, "listxattr"):
        return True
    try:
        names = os.listxattr(target)
    except OSError as exc:
        return exc.errno in (errno.ENOTSUP, errno.EOPNOTSUPP)
    try:
        for attr in names:
            os.setxattr(fd, attr, os.getxattr(target, attr))
    except OSError:
        return False
    return True


def _write_in_place(target: str, data: bytes, original: bytes, st: os.stat_result) -> None:
    """Overwrite `target`'s own bytes (its inode, links, owner and attributes stay); on a
    failure the original bytes are written back."""
    _same_bytes(target, st, original, "while it was being fixed")
    fd = _open(target, os.O_WRONLY, st, "not rewritten:", "while it was being fixed")
    try:
        try:
            _write_all(fd, data, truncate=True)
        except OSError as exc:
            try:
                _write_all(fd, original, truncate=True)
            except OSError:
                raise Refused(
                    f"writing failed ({_why(exc)}) and so did writing its old content back: "
                    f"the file may be damaged"
                ) from None
            raise Refused(
                f"not rewritten: writing failed ({_why(exc)}); its old content was written back"
            ) from None
    finally:
        os.close(fd)


def _write_all(fd: int, data: bytes, truncate: bool = False) -> None:
    if truncate:
        os.lseek(fd, 0, os.SEEK_SET)
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
    if truncate:
        os.ftruncate(fd, len(data))
    os.fsync(fd)
