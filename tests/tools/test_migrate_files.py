"""``python -m rnnlib.migrate`` (and ``--fix``) on any file a user may have: links, hard links,
modes, owners, read-only files and folders, unreadable and unparsable files, FIFOs, sockets and
devices, and a file of the user's that happens to be named like a temporary file.

The command line runs in a subprocess as an unprivileged user: root ignores permissions, and
this machine and CI run as root, so there the subprocess drops to uid/gid 65534 (``nobody``)
before it reads anything. It imports a copy of ``rnnlib/migrate`` (with an empty ``rnnlib``
package around it, so that it needs no jax) while it may still read the interpreter's files,
then drops its privileges. When the tests themselves run as a user, the CLI runs as that user.
A test that cannot get an unprivileged CLI fails, with the reason; none is skipped.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from rnnlib.migrate import files

REPO = Path(__file__).resolve().parents[2]
NOBODY = 65534
TIMEOUT_S = 120  # a run takes well under a second; a hang fails the test instead of the suite

OLD = (
    "import flax.linen as nn\nimport jax\n\n"
    "carry = nn.LSTMCell.initialize_carry(jax.random.PRNGKey(0), (2,), 4)\n"
)
FIXED_MARK = "nn.LSTMCell(features=4, parent=None).initialize_carry("

# The child: import the CLI while privileged, drop to the given user, run it.
CHILD = """
import os, sys
sys.path.insert(0, sys.argv[1])
import encodings.ascii, encodings.latin_1, encodings.utf_8_sig, locale  # loaded lazily
from rnnlib.migrate.cli import main
uid, gid = int(sys.argv[2]), int(sys.argv[3])
if os.geteuid() == 0:
    try:
        os.setgroups([])
        os.setgid(gid)
        os.setuid(uid)
    except OSError as exc:
        sys.exit(f"could not leave root: {exc}")
if os.geteuid() == 0 or os.getegid() == 0:
    sys.exit("could not leave root")
sys.exit(main(sys.argv[4:]))
"""


def unprivileged_ids() -> tuple[int, int]:
    if os.geteuid() != 0:
        return os.geteuid(), os.getegid()
    return NOBODY, NOBODY


@pytest.fixture(scope="module")
def package(tmp_path_factory):
    """A copy of rnnlib/migrate inside an empty rnnlib package, readable by anyone."""
    root = Path(tempfile.mkdtemp(prefix="rnnlib-migrate-pkg-"))
    os.chmod(root, 0o755)
    shutil.copytree(
        REPO / "rnnlib" / "migrate",
        root / "rnnlib" / "migrate",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    (root / "rnnlib" / "__init__.py").write_text("", encoding="utf-8")
    for path in root.rglob("*"):
        os.chmod(path, 0o755 if path.is_dir() else 0o644)
    yield root
    shutil.rmtree(root)


@pytest.fixture
def work():
    """A folder of the unprivileged user's (outside pytest's root-only temporary folders)."""
    root = Path(tempfile.mkdtemp(prefix="rnnlib-migrate-files-"))
    uid, gid = unprivileged_ids()
    os.chown(root, uid, gid)
    yield root
    for path in [root, *root.rglob("*")]:  # put back what the tests took away
        if not path.is_symlink() and path.is_dir():
            os.chmod(path, 0o755)
    shutil.rmtree(root)


def own(*paths):
    """Hand `paths` (made by the test, as root where it runs as root) to the user."""
    uid, gid = unprivileged_ids()
    for path in paths:
        os.chown(path, uid, gid, follow_symlinks=False)


def make(path: Path, text: str = OLD, mode: int = 0o644) -> Path:
    """Write `path` (and the folders it needs) as the user's file, with `mode`."""
    missing = [p for p in path.parents if not p.exists()]
    path.parent.mkdir(parents=True, exist_ok=True)
    own(*missing)
    path.write_bytes(text.encode("utf-8") if isinstance(text, str) else text)
    os.chmod(path, mode)
    own(path)
    return path


def cli(package, cwd, *args):
    """Run the command line as the unprivileged user: (exit status, JSON report, stderr)."""
    uid, gid = unprivileged_ids()
    command = [sys.executable, "-I", "-B", "-c", CHILD, str(package), str(uid), str(gid)]
    proc = subprocess.run(
        [*command, *map(str, args), "--format", "json"],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        cwd=cwd,
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    assert "could not leave root" not in proc.stderr, (
        f"cannot run the CLI as uid {uid}: {proc.stderr.strip()}; the permission tests need a "
        f"user root can switch to"
    )
    try:
        report = json.loads(proc.stdout)
    except json.JSONDecodeError:
        pytest.fail(f"no JSON report (status {proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc.returncode, report, proc.stderr


def cli_text(package, cwd, *args):
    uid, gid = unprivileged_ids()
    command = [sys.executable, "-I", "-B", "-c", CHILD, str(package), str(uid), str(gid)]
    proc = subprocess.run(
        [*command, *map(str, args)], capture_output=True, text=True, timeout=TIMEOUT_S, cwd=cwd
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc.returncode, proc.stdout, proc.stderr


def errors_of(report):
    return {Path(e["path"]).name: e["message"] for e in report["errors"]}


def listing(folder: Path):
    return sorted(p.name for p in folder.iterdir())


# --------------------------------------------------------------------------- who runs the CLI


def test_the_cli_runs_unprivileged(package, work):
    """The premise of every permission test here: the CLI cannot write a file of root's."""
    guarded = make(work / "guarded.py")
    if os.geteuid() == 0:
        os.chown(guarded, 0, 0)
    code, report, _ = cli(package, work, guarded, "--fix")
    if os.geteuid() == 0:
        assert (
            code == 2
            and "read-only for this user (mode 0644, owner uid 0)"
            in (errors_of(report)["guarded.py"])
        )
        assert guarded.read_text() == OLD
    else:
        assert code == 0 and FIXED_MARK in guarded.read_text()


# --------------------------------------------------------------------------- links


@pytest.mark.parametrize("how", ["named", "walked"])
def test_fix_follows_a_symlink_to_its_target_and_keeps_the_link(how, package, work):
    target = make(work / "real" / "model.py")
    link_dir = work / "project"
    link_dir.mkdir()
    own(link_dir)
    link = link_dir / "model_link.py"
    link.symlink_to(target)
    own(link)
    code, report, _ = cli(package, work, link if how == "named" else link_dir, "--fix")
    assert code == 0 and report["fixed_files"] == [str(link)], report["errors"]
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert FIXED_MARK in target.read_text()


def test_a_symlinked_folder_is_walked_once_and_a_link_cycle_ends(package, work):
    real = work / "src"
    make(real / "a.py")
    (real / "again").symlink_to(real)  # a cycle
    (work / "alias").symlink_to(real)
    own(real, real / "again", work / "alias")
    code, report, _ = cli(package, work, work, "--fix")
    # src/a.py is reached three ways (alias/, src/, src/again/): checked and fixed once.
    assert code == 0 and len(report["findings"]) == 1 and len(report["fixed_files"]) == 1
    assert FIXED_MARK in (real / "a.py").read_text()


def test_a_file_and_a_link_to_it_in_one_walk_are_checked_once(package, work):
    make(work / "a.py")
    (work / "b.py").symlink_to(work / "a.py")
    own(work / "b.py")
    code, report, _ = cli(package, work, work)
    assert code == 1 and [Path(f["path"]).name for f in report["findings"]] == ["a.py"]


def test_a_broken_symlink_is_one_error_and_the_run_goes_on(package, work):
    (work / "gone.py").symlink_to(work / "nowhere.py")
    own(work / "gone.py")
    make(work / "z.py")
    code, report, _ = cli(package, work, work / "gone.py", work / "z.py", "--fix")
    assert code == 2 and errors_of(report) == {
        "gone.py": f"broken symbolic link (to {work}/nowhere.py)"
    }
    assert FIXED_MARK in (work / "z.py").read_text()


def test_hard_links_stay_one_file(package, work):
    first = make(work / "a" / "model.py")
    second = work / "b" / "model.py"
    second.parent.mkdir()
    own(first.parent, second.parent)
    os.link(first, second)
    inode = first.stat().st_ino
    code, report, _ = cli(package, work, work, "--fix")
    assert code == 0 and len(report["fixed_files"]) == 1
    for path in (first, second):
        assert path.stat().st_ino == inode and path.stat().st_nlink == 2
        assert FIXED_MARK in path.read_text()


# --------------------------------------------------------------------------- what a file keeps


def test_fix_keeps_mode_owner_group_and_extended_attributes(package, work):
    path = make(work / "tool.py", "#!/usr/bin/env python\n" + OLD, mode=0o751)
    os.setxattr(path, "user.origin", b"kept")
    before = path.stat()
    code, _, _ = cli(package, work, path, "--fix")
    after = path.stat()
    assert code == 0 and FIXED_MARK in path.read_text()
    assert stat.S_IMODE(after.st_mode) == 0o751
    assert (after.st_uid, after.st_gid) == (before.st_uid, before.st_gid)
    assert os.getxattr(path, "user.origin") == b"kept"


def test_a_file_of_another_owner_keeps_its_owner(package, work):
    """Writable by the user through its mode, but owned by root (where the tests run as root):
    a temporary file of the user's cannot take that owner, so the file is written in place."""
    path = make(work / "shared.py", mode=0o666)
    if os.geteuid() == 0:
        os.chown(path, 0, 0)
    before = path.stat()
    code, _, _ = cli(package, work, path, "--fix")
    after = path.stat()
    assert code == 0 and FIXED_MARK in path.read_text()
    assert (after.st_ino, after.st_uid, after.st_gid) == (
        before.st_ino,
        before.st_uid,
        before.st_gid,
    )
    assert stat.S_IMODE(after.st_mode) == 0o666


def test_a_user_file_named_like_a_temporary_file_is_never_touched(package, work):
    path = make(work / "model.py")
    mine = make(work / "model.py.rnnlib-migrate.tmp", "my notes\n", mode=0o600)
    hidden = make(work / ".model.py.rnnlib-migrate.tmp", "more notes\n", mode=0o600)
    before = {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in (mine, hidden)}
    code, _, _ = cli(package, work, work, "--fix")
    assert code == 0 and FIXED_MARK in path.read_text()
    assert {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in (mine, hidden)} == before
    # Nothing left behind: the fixer removes only its own temporary file.
    assert listing(work) == sorted(["model.py", mine.name, hidden.name])


# --------------------------------------------------------------------------- refusals


def test_a_read_only_file_is_refused_with_a_message(package, work):
    locked = make(work / "locked.py", mode=0o444)
    other = make(work / "other.py")
    code, report, _ = cli(package, work, work, "--fix")
    assert code == 2 and "read-only (mode 0444)" in errors_of(report)["locked.py"]
    assert locked.read_text() == OLD and stat.S_IMODE(locked.stat().st_mode) == 0o444
    assert FIXED_MARK in other.read_text()  # the run went on
    [left] = [f for f in report["findings"] if f["path"] == str(locked)]
    assert not left["fixed"] and "read-only" in left["reason"]


def test_a_file_in_a_read_only_folder_is_reported(package, work):
    folder = work / "frozen"
    path = make(folder / "model.py")
    own(folder)
    os.chmod(folder, 0o555)
    code, report, _ = cli(package, work, folder, "--fix")
    assert code == 2 and "cannot create a temporary file" in errors_of(report)["model.py"]
    assert path.read_text() == OLD and listing(folder) == ["model.py"]


def test_text_output_of_a_refusal_is_one_line_on_stderr(package, work):
    make(work / "locked.py", mode=0o444)
    code, out, err = cli_text(package, work, work / "locked.py", "--fix")
    assert code == 2
    [line] = err.splitlines()
    assert line.startswith(
        f"{work / 'locked.py'}: error: --fix: not rewritten: the file is read-only"
    )
    assert "[not fixed]" in out


# --------------------------------------------------------------------------- unreadable inputs

BAD = {
    "syntax.py": ("def f(:\n", "cannot parse"),
    "deep.py": ("x = " + " + ".join(["1"] * 30000) + "\n", "nested too deeply"),
    "latin.py": (b"x = '\xe9'\n", "cannot read"),
    "cookie.py": ("# -*- coding: no-such-codec -*-\nx = 1\n", "cannot read"),
    "broken.ipynb": ('{"cells": [', "invalid JSON"),
    "metadata.ipynb": (
        json.dumps({"cells": [], "metadata": "python", "nbformat": 4}),
        "'metadata' is a string, not an object",
    ),
    "info.ipynb": (
        json.dumps({"cells": [], "metadata": {"language_info": []}, "nbformat": 4}),
        "'metadata.language_info' is a list, not an object",
    ),
    "cells.ipynb": (json.dumps({"cells": ["x = 1"], "nbformat": 4}), "not an object"),
    "bytes.ipynb": (b'{"cells": []}\xff', "not UTF-8"),
}


@pytest.mark.parametrize("fix", [False, True], ids=["report", "fix"])
def test_every_unreadable_input_is_one_error_and_the_run_goes_on(fix, package, work):
    for name, (content, _) in BAD.items():
        make(work / name, content)
    unreadable = make(work / "secret.py", mode=0o000)
    closed = work / "closed"
    make(closed / "inside.py")
    own(closed)
    os.chmod(closed, 0o000)
    last = make(work / "z_last.py")
    code, report, _ = cli(package, work, work, *(["--fix"] if fix else []))
    got = errors_of(report)
    assert code == 2
    for name, (_, message) in BAD.items():
        assert message in got.pop(name), name
    assert got.pop("secret.py") == "cannot read: Permission denied"
    assert got.pop("closed") == "cannot read directory: Permission denied"
    assert got == {}
    assert [Path(f["path"]).name for f in report["findings"]] == ["z_last.py"]
    assert (FIXED_MARK in last.read_text()) == fix
    os.chmod(unreadable, 0o644)
    assert unreadable.read_text() == OLD


def test_a_notebook_whose_language_info_is_null_is_read_as_python(package, work):
    cell = {"cell_type": "code", "metadata": {}, "source": OLD, "outputs": [], "execution_count": 1}
    notebook = {
        "cells": [cell],
        "metadata": {"language_info": None},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    path = make(work / "nb.ipynb", json.dumps(notebook, indent=1) + "\n")
    code, report, _ = cli(package, work, path, "--fix")
    assert code == 0 and report["errors"] == [] and report["fixed_files"] == [str(path)]
    assert FIXED_MARK in json.loads(path.read_text())["cells"][0]["source"]


# --------------------------------------------------------------------------- special files


@pytest.mark.parametrize("fix", [False, True], ids=["report", "fix"])
def test_fifos_sockets_and_devices_are_reported_never_opened(fix, package, work):
    os.mkfifo(work / "pipe.py")
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(work / "sock.py"))
    (work / "null.py").symlink_to("/dev/null")
    own(work / "pipe.py", work / "sock.py", work / "null.py")
    try:
        # Named on the command line and found by the walk: a FIFO must not block either way.
        for args in ([work / "pipe.py", work / "z.py"], [work]):
            make(work / "z.py")
            code, report, _ = cli(package, work, *args, *(["--fix"] if fix else []))
            got = errors_of(report)
            assert code == 2 and "a FIFO" in got.pop("pipe.py")
            if args == [work]:
                assert "a socket" in got.pop("sock.py")
                assert "a character device" in got.pop("null.py")
            assert got == {} and [Path(f["path"]).name for f in report["findings"]] == ["z.py"]
    finally:
        server.close()
    assert stat.S_ISFIFO(os.lstat(work / "pipe.py").st_mode)


# --------------------------------------------------------------------------- writing, in process


def read(path: Path):
    st = os.stat(path)
    return files.read_bytes(str(path), st), st


def test_a_file_changed_after_it_was_read_is_not_rewritten(tmp_path):
    path = tmp_path / "m.py"
    path.write_text(OLD)
    original, st = read(path)
    path.write_text(OLD + "# edited meanwhile\n")
    with pytest.raises(files.Refused, match="changed while it was being checked"):
        files.write_back(str(path), b"new\n", original, st)
    assert path.read_text().endswith("# edited meanwhile\n")


def same_size_edit(path: Path, old: str, new: str) -> None:
    """Replace `old` by `new` (as long) in `path` and put its mtime back, as an edit made
    within the mtime's resolution would leave it."""
    before = os.stat(path)
    text = path.read_text()
    assert len(old) == len(new) and old in text
    path.write_text(text.replace(old, new))
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = os.stat(path)
    assert (after.st_size, after.st_mtime_ns) == (before.st_size, before.st_mtime_ns)


def test_a_same_size_edit_with_the_same_mtime_is_not_overwritten(tmp_path):
    path = tmp_path / "m.py"
    path.write_text(OLD)
    original, st = read(path)
    same_size_edit(path, "nn.", "xx.")
    with pytest.raises(files.Refused, match="content changed while it was being checked"):
        files.write_back(str(path), b"new\n", original, st)
    assert path.read_text() == OLD.replace("nn.", "xx.")


@pytest.mark.parametrize("links", [1, 2], ids=["via-temporary", "in-place"])
def test_a_same_size_edit_during_the_write_is_not_overwritten(tmp_path, monkeypatch, links):
    path = tmp_path / "m.py"
    path.write_text(OLD)
    if links == 2:
        os.link(path, tmp_path / "twin.py")
    original, st = read(path)
    real_same_bytes = files._same_bytes
    calls = []

    def edit_then_compare(target, st, original, when):
        calls.append(when)
        if len(calls) == 2:  # past the first comparison: the user saves an edit now
            same_size_edit(path, "nn.", "xx.")
        return real_same_bytes(target, st, original, when)

    monkeypatch.setattr(files, "_same_bytes", edit_then_compare)
    with pytest.raises(files.Refused, match="content changed while it was being fixed"):
        files.write_back(str(path), b"new\n", original, st)
    assert path.read_text() == OLD.replace("nn.", "xx.")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.py", "twin.py"][:links]


def test_fix_keeps_a_same_size_edit_made_between_read_and_write(tmp_path, monkeypatch, capsys):
    from rnnlib.migrate import cli

    path = tmp_path / "m.py"
    path.write_text(OLD)
    real_check = cli.check_document

    def check_then_edit(name, doc):
        found = real_check(name, doc)
        same_size_edit(path, "nn.", "xx.")
        return found

    monkeypatch.setattr(cli, "check_document", check_then_edit)
    assert cli.main([str(path), "--fix"]) == 2
    assert path.read_text() == OLD.replace("nn.", "xx.")
    assert "content changed while it was being checked" in capsys.readouterr().err


def test_a_failed_write_leaves_the_file_and_no_temporary_file(tmp_path, monkeypatch):
    path = tmp_path / "m.py"
    path.write_text(OLD)
    original, st = read(path)

    def full(fd, data, truncate=False):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(files, "_write_all", full)
    with pytest.raises(files.Refused, match="No space left on device; the file is unchanged"):
        files.write_back(str(path), b"new\n", original, st)
    assert path.read_text() == OLD and listing(tmp_path) == ["m.py"]


def test_a_failed_write_in_place_puts_the_old_bytes_back(tmp_path, monkeypatch):
    path = tmp_path / "m.py"
    path.write_text(OLD)
    os.link(path, tmp_path / "twin.py")  # two links: written in place
    original, st = read(path)
    real_write = os.write
    calls = []

    def half_then_full(fd, data):
        calls.append(len(data))
        if len(calls) == 1:  # the new text: part of it lands, then the disk is full
            real_write(fd, bytes(data[:5]))
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", half_then_full)
    with pytest.raises(files.Refused, match="old content was written back"):
        files.write_back(str(path), b"a much longer new text\n" * 3, original, st)
    assert path.read_text() == OLD == (tmp_path / "twin.py").read_text()


def test_temporary_files_are_fresh_hidden_names_beside_the_target(tmp_path, monkeypatch):
    path = tmp_path / "m.py"
    path.write_text(OLD)
    original, st = read(path)
    made = []
    real_mkstemp = tempfile.mkstemp

    def spy(**kwargs):
        made.append(kwargs)
        return real_mkstemp(**kwargs)

    monkeypatch.setattr(files.tempfile, "mkstemp", spy)
    files.write_back(str(path), b"x = 1\n", original, st)
    assert path.read_text() == "x = 1\n" and listing(tmp_path) == ["m.py"]
    assert made == [{"prefix": ".m.py.", "suffix": files.TEMP_SUFFIX, "dir": str(tmp_path)}]


def test_the_summary_counts_unread_and_unwritten_files_apart(package, work):
    make(work / "locked.py", mode=0o444)
    make(work / "syntax.py", "def f(:\n")
    make(work / "z.py")
    code, out, err = cli_text(package, work, work, "--fix")
    assert code == 2 and len(err.splitlines()) == 2
    assert out.splitlines()[-1] == (
        "2 finding(s) in 2 file(s); fixed 1 in 1 file(s), 1 left; 1 input(s) could not be "
        "read; 1 file(s) not rewritten by --fix"
    )


def test_a_file_name_that_is_not_utf_8_is_printed_escaped(package, work):
    name = os.path.join(os.fsencode(work), b"caf\xe9.py")
    with open(name, "wb") as fh:
        fh.write(OLD.encode("utf-8"))
    own(name)
    code, out, err = cli_text(package, work, work)
    assert code == 1 and err == ""
    assert "caf\\udce9.py:4:" in out  # the undecodable byte, escaped
