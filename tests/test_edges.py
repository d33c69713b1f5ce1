"""Filesystem and numeric edges: each is one line on stderr and exit code 2, never a
traceback (issue 25, item 6).

Writes: a folder, a path under a regular file (ENOTDIR), a dangling symlink into a
missing folder (ENOENT), a full disk (a symlink to /dev/full: ENOSPC), a FIFO nobody reads
(ENXIO), an immutable file and folder (``chattr +i``: EPERM even for root, who bypasses
permission bits), a missing or broken matplotlib — all refused before a measured step
runs, except the full disk, which shows only when bytes are written. Numbers: each
bounded flag names itself and the allowed range.
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from corpus.cases import CONFIG, HUB_ID
from hubserver import HubServer

from introspect import bounds, files
from introspect.cli import main
from introspect.errors import IntrospectError

ROOT = Path(__file__).resolve().parents[1]
FIT = ["fit", "40M", "--budget", "24GB"]
#: A tiny torch step with rotary positions (the shape flags' default).
TINY = ["measure", "--layers", "1", "--d-emb", "8", "--heads", "2", "--vocab", "64"]
TINY += ["--seq", "8", "--framework", "torch", "--device", "cpu", "--no-census"]


def one_line(capsys) -> str:
    captured = capsys.readouterr()
    assert captured.err.count("\n") == 1, captured.err
    assert "Traceback" not in captured.err
    return captured.err


def run(*argv: str, env: dict[str, str] | None = None, code: str | None = None):
    """``python -m introspect ARGV`` (or ``-c CODE``) in a fresh interpreter."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "INTROSPECT_"))}
    base["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), base.get("PYTHONPATH")]))
    cmd = [sys.executable, "-c", code, *argv] if code else [sys.executable, "-m", "introspect"]
    return subprocess.run(
        cmd if code else [*cmd, *argv],
        env=base | (env or {}),
        capture_output=True,
        text=True,
        timeout=120,
    )


# ---- --plot: the write -----------------------------------------------------------------


def _folder(tmp: Path) -> tuple[Path, int]:
    (tmp / "figure.png").mkdir()
    return tmp / "figure.png", errno.EISDIR


def _under_a_file(tmp: Path) -> tuple[Path, int]:
    (tmp / "notes.txt").write_text("x")
    return tmp / "notes.txt" / "figure.png", errno.ENOTDIR


def _dangling(tmp: Path) -> tuple[Path, int]:
    link = tmp / "figure.png"
    link.symlink_to(tmp / "missing" / "folder" / "figure.png")
    return link, errno.ENOENT


def _fifo(tmp: Path) -> tuple[Path, int]:
    os.mkfifo(tmp / "figure.png")
    return tmp / "figure.png", errno.ENXIO


@pytest.mark.parametrize("make", [_folder, _under_a_file, _dangling, _fifo])
def test_plot_path_that_cannot_be_written_is_one_line_with_the_os_reason(tmp_path, capsys, make):
    pytest.importorskip("matplotlib")
    path, code = make(tmp_path)
    before = sorted(p.name for p in tmp_path.iterdir())
    assert main([*FIT, "--plot", str(path)]) == 2
    err = one_line(capsys)
    assert str(path) in err and os.strerror(code) in err
    assert capsys.readouterr().out == ""  # refused before the analysis printed anything
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_a_full_disk_is_one_line_and_leaves_the_link(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full here")
    link = tmp_path / "figure.svg"
    link.symlink_to("/dev/full")
    assert main([*FIT, "--plot", str(link)]) == 2
    err = one_line(capsys)
    assert str(link) in err and os.strerror(errno.ENOSPC) in err and "/dev/full" in err
    assert link.is_symlink()


@pytest.fixture
def immutable(tmp_path):
    """A file and a folder under ``chattr +i`` (EPERM on any write, root included)."""
    if shutil.which("chattr") is None:
        pytest.skip("no chattr")
    made = [tmp_path / "locked.png", tmp_path / "locked"]
    made[0].write_bytes(b"old")
    made[1].mkdir()
    done = subprocess.run(["chattr", "+i", *map(str, made)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"chattr +i is refused here: {done.stderr.decode().strip()}")
    yield made
    subprocess.run(["chattr", "-i", *map(str, made)], check=True)


def test_a_read_only_file_and_folder_are_one_line(immutable, capsys):
    pytest.importorskip("matplotlib")
    locked_file, locked_folder = immutable
    for path in (locked_file, locked_folder / "figure.png"):
        assert main([*FIT, "--plot", str(path)]) == 2
        err = one_line(capsys)
        assert str(path) in err and os.strerror(errno.EPERM) in err
    assert locked_file.read_bytes() == b"old"


def test_write_output_removes_what_a_failed_write_created(tmp_path):
    target = tmp_path / "out.png"

    def half_then_fail(f):
        f.write(b"half")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    with pytest.raises(IntrospectError, match="No space left on device") as e:
        files.write_output(target, half_then_fail)
    assert str(target) in str(e.value) and not target.exists()
    target.write_bytes(b"keep")  # an existing file is the user's: never removed
    with pytest.raises(IntrospectError):
        files.write_output(target, half_then_fail)
    assert target.exists()
    assert files.write_output(target, lambda f: f.write(b"new")) == target
    assert target.read_bytes() == b"new"


def test_check_writable_leaves_no_file_behind(tmp_path):
    files.check_writable(tmp_path / "fresh.png")
    assert list(tmp_path.iterdir()) == []
    kept = tmp_path / "kept.png"
    kept.write_bytes(b"abc")
    files.check_writable(kept)
    assert kept.read_bytes() == b"abc"


# ---- --plot: matplotlib, before the step ---------------------------------------------

#: Runs ``measure`` after making matplotlib missing (None in sys.modules) or broken (a
#: package whose import raises), then says whether torch was imported: the refusal must
#: come before the step, which needs torch.
MEASURE_THEN_SAY = """
import sys
how = sys.argv[1]
if how == "missing":
    sys.modules["matplotlib"] = None
from introspect.cli import main
rc = main(sys.argv[2:])
print("torch" in sys.modules)
sys.exit(rc)
"""


@pytest.mark.parametrize("how", ["missing", "broken", "bad-path"])
def test_measure_plot_is_refused_before_the_step(tmp_path, how):
    env = {}
    plot = tmp_path / "figure.png"
    if how == "broken":
        fake = tmp_path / "site" / "matplotlib"
        fake.mkdir(parents=True)
        (fake / "__init__.py").write_text("raise RuntimeError('a broken install')\n")
        env["PYTHONPATH"] = f"{tmp_path / 'site'}{os.pathsep}{ROOT}"
    if how == "bad-path":
        pytest.importorskip("matplotlib")
        plot.mkdir()
    done = run(how, *TINY, "--plot", str(plot), code=MEASURE_THEN_SAY, env=env)
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert done.stdout.strip() == "False"  # torch never imported: no step ran
    expected = {
        "missing": "needs matplotlib, which is not installed",
        "broken": "RuntimeError: a broken install",
        "bad-path": str(plot),
    }
    assert expected[how] in done.stderr


# ---- numbers: parsed once, with bounds -------------------------------------------------


@pytest.mark.parametrize(
    "argv, flag, allowed",
    [
        ([*FIT[:2], "--budget", "1e400GB"], "--budget", "1,000,000,000 GB"),
        ([*FIT[:2], "--budget", "0.2B"], "--budget", "less than one byte"),
        ([*FIT, "--max-devices", "1e9"], "--max-devices", "1 to 1,000,000 devices"),
        ([*FIT, "--max-devices", "10^9"], "--max-devices", "1 to 1,000,000 devices"),
        ([*FIT, "--timeout", "1e10"], "--timeout", "at most 86,400 seconds"),
        ([*FIT, "--timeout", "inf"], "--timeout", "at most 86,400 seconds"),
        ([*FIT, "--seq", "1e400"], "--seq", "too large"),
        ([*TINY, "--repeats", "1e8"], "--repeats", f"1 to {bounds.MAX_REPEATS} steps"),
        ([*TINY, "--repeats", "0"], "--repeats", f"1 to {bounds.MAX_REPEATS} steps"),
    ],
)
def test_out_of_bound_numbers_name_the_flag_and_the_range(capsys, argv, flag, allowed):
    try:
        rc = main(argv)
    except SystemExit as e:  # argparse's one line
        rc = e.code
    assert rc == 2
    err = one_line(capsys)
    assert flag in err and allowed in err


def test_the_environments_timeout_is_bounded_too(tmp_path):
    done = run(
        "profile",
        HUB_ID,
        env={
            "INTROSPECT_TIMEOUT": "1e308",
            "HF_HOME": str(tmp_path),
            "HF_ENDPOINT": "http://127.0.0.1:9",
        },
    )
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert "INTROSPECT_TIMEOUT='1e308'" in done.stderr and "86,400" in done.stderr


def test_the_largest_max_devices_is_answered(capsys):
    """--max-devices at its bound: the ZeRO-1 partition is a heap over the tensors, so
    10^6 devices cost what 8 do (it was a scan of every rank per tensor)."""
    argv = [*FIT, "--max-devices", str(bounds.MAX_FIT_DEVICES), "--json"]
    assert main(argv) == 0
    assert json.loads(capsys.readouterr().out)["budget_bytes"] == 24 * 10**9


def test_zero_partition_matches_torchs_greedy_rule():
    """ZeroRedundancyOptimizer._partition_parameters, written as torch writes it (a scan
    for the first rank with the smallest total), against the heap."""
    from hypothesis import given
    from hypothesis import strategies as st

    from introspect.refined.sharding import zero_partition

    def scan(sizes, devices):
        totals = [0] * devices
        for n in sorted(sizes, reverse=True):
            totals[totals.index(min(totals))] += n
        return totals

    @given(st.lists(st.integers(0, 10**6), max_size=40), st.integers(1, 50))
    def check(sizes, devices):
        got, want = zero_partition(sizes, devices), scan(sizes, devices)
        assert want[: len(got)] == got and not any(want[len(got) :])

    check()


def test_an_odd_rotary_head_is_one_line(capsys):
    assert main([*TINY, "--head-dim", "3"]) == 2
    err = one_line(capsys)
    assert "--head-dim 3" in err and "even" in err
    assert main([*TINY[:4], "6", *TINY[5:]]) == 2  # d=6 over 2 heads: 3 wide
    err = one_line(capsys)
    assert "--d-emb 6 / --heads 2" in err


# ---- messages --------------------------------------------------------------------------


def test_table_with_only_bad_sources_prints_one_line_only(tmp_path, capsys):
    bad = tmp_path / "config.json"
    bad.write_text("{")
    assert main(["table", str(bad)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1 and str(bad) in captured.err
    assert main(["table", str(bad), str(tmp_path / "absent")]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1
    assert "all 2 sources failed" in captured.err


def _hub(home: Path, server: HubServer, *argv: str) -> subprocess.CompletedProcess:
    env = {
        "HF_HOME": str(home),
        "HF_ENDPOINT": server.url,
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "HF_HUB_DISABLE_XET": "1",
    }
    return run(*argv, env=env)


def test_a_hub_answer_that_breaks_off_is_one_line_without_retry_chatter(tmp_path):
    with HubServer() as server:
        server.add(HUB_ID, {"config.json": json.dumps(CONFIG).encode()}, fault="short")
        done = _hub(tmp_path / "home", server, "profile", HUB_ID)
        gets = [r for r in server.requests if r[0] == "GET"]
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1, done.stderr
    assert "broke off its answer for config.json" in done.stderr
    assert "resumed download" in done.stderr  # the retries, said once
    assert len(gets) > 1  # huggingface_hub did resume: the chatter had something to say


@pytest.mark.parametrize("revision", ["main\nevil", "main\r", "v1\x1b[31m"])
def test_a_control_character_in_revision_blames_the_argument(tmp_path, revision):
    with HubServer() as server:
        server.add(HUB_ID, {"config.json": json.dumps(CONFIG).encode()})
        done = _hub(tmp_path / "home", server, "profile", HUB_ID, "--revision", revision)
        asked = list(server.requests)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1, done.stderr
    assert "--revision" in done.stderr and "control character" in done.stderr
    assert "connection" not in done.stderr
    assert asked == []  # refused before any request


# ---- --force: values past a float's range -----------------------------------------------

HUGE = ["--seq", "1e300", "--force"]


@pytest.mark.parametrize(
    "argv",
    [
        ["profile", "40M", *HUGE],
        ["fit", "40M", "--budget", "1GB", "--attention", "eager", *HUGE],  # T² past 1e600
        ["estimate", "--layers", "2", "--d-emb", "64", "--heads", "4", "--vocab", "100", *HUGE],
    ],
)
def test_forced_values_past_a_float_print_without_overflow(capsys, argv):
    """--force accepts T = 10^300; the bytes are exact integers past a float's range,
    printed from their digits (units.scaled), not divided into an OverflowError."""
    assert main(argv) == 0
    out = capsys.readouterr().out
    # T·d terms alone are ~10^300 bytes: a float's range ends at 1.8e308
    assert any(int(e) > 300 for e in re.findall(r"\d\.\d\de(\d+)", out)), out


def test_forced_values_too_large_to_draw_are_one_line(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    figure = tmp_path / "figure.png"
    assert main(["profile", "40M", *HUGE, "--plot", str(figure)]) == 2
    assert "too large to draw" in one_line(capsys)
    assert not figure.exists()


def test_a_newline_in_the_plot_path_stays_on_one_line(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    path = tmp_path / "no\nfolder" / "figure.png"
    assert main([*FIT, "--plot", str(path)]) == 2
    assert repr(str(path)) in one_line(capsys)
