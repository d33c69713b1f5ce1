"""Every case of the bad-input corpus (``tests/corpus/cases.py``) is refused cleanly: a
non-zero exit, exactly one line on stderr naming the file or flag, no traceback, nothing
written next to the input, and no hang (a generous bound, enforced by a timer in process
and by the subprocess timeout — a hang check, not a timing assertion).

In-process cases run through :func:`introspect.cli.main`; the environment and Hub cases
run in subprocesses (huggingface_hub reads its environment at import), all of them at
once in a small thread pool the first time one is asked for, each against its own
loopback Hub (``tests/hubserver.py``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from corpus.cases import Case, all_cases
from hubserver import HubServer

from introspect.cli import main

CASES = all_cases()
#: The most any case may take before it counts as a hang (seconds).
HANG_S = 60


def _fill(text: str, folder: Path) -> str:
    return text.replace("{dir}", str(folder))


def materialize(case: Case, folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for rel, content in case.files.items():
        path = folder / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
    for link, target in case.links.items():
        os.symlink(target, folder / link)


def snapshot(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}


class Hang(Exception):
    pass


def _alarm(signum, frame):
    raise Hang(f"still running after {HANG_S} s")


def run_in_process(case: Case, folder: Path, capsys) -> tuple[int, str]:
    argv = [_fill(a, folder) for a in case.argv]
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, HANG_S)
    try:
        code = main(argv)
    except SystemExit as e:  # argparse
        code = e.code if isinstance(e.code, int) else 2
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    return code, capsys.readouterr().err


def _env(case: Case, folder: Path, home: Path, endpoint: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE_"))}
    env.pop("INTROSPECT_TIMEOUT", None)
    env |= {
        "HF_HOME": str(home),
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "HF_HUB_DISABLE_XET": "1",
        "HF_ENDPOINT": endpoint,
        "PYTHONWARNINGS": "default",
    }
    return env | {k: _fill(v, folder) for k, v in (case.env or {}).items()}


def run_subprocess(case: Case, folder: Path, home: Path) -> tuple[int, str]:
    argv = [sys.executable, "-m", "introspect", *(_fill(a, folder) for a in case.argv)]
    server = HubServer()
    for repo_id, repo in (case.hub or {}).get("repos", {}).items():
        kw = {k: v for k, v in repo.items() if k != "files"}
        server.add(repo_id, repo["files"], **kw)
    with server:
        # an unused local port when the case has no Hub: nothing can reach the network
        endpoint = server.url if case.hub else "http://127.0.0.1:9"
        env = _env(case, folder, home, endpoint)
        if case.warm_up:
            online = {k: v for k, v in env.items() if k != "HF_HUB_OFFLINE"}
            subprocess.run(argv, env=online, capture_output=True, timeout=HANG_S)
        try:
            done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=HANG_S)
        except subprocess.TimeoutExpired:
            return -1, f"HANG: still running after {HANG_S} s"
    return done.returncode, done.stderr


@pytest.fixture(scope="module")
def subprocess_results(tmp_path_factory) -> dict[str, tuple[int, str, Path]]:
    """Every subprocess case, run four at a time, by id: (exit code, stderr, folder)."""
    root = tmp_path_factory.mktemp("corpus-sub")

    def one(index_case):
        index, case = index_case
        folder, home = root / f"case{index}", root / f"home{index}"
        materialize(case, folder)
        before = snapshot(folder)
        code, err = run_subprocess(case, folder, home)
        return case.id, (code, err, folder, before)

    todo = [(i, c) for i, c in enumerate(CASES) if c.subprocess]
    with ThreadPoolExecutor(max_workers=4) as pool:
        return dict(pool.map(one, todo))


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_case_is_refused_in_one_line(case: Case, tmp_path, capsys, request):
    if case.subprocess:
        results = request.getfixturevalue("subprocess_results")
        code, err, folder, before = results[case.id]
    else:
        folder = tmp_path / "case"
        materialize(case, folder)
        before = snapshot(folder)
        code, err = run_in_process(case, folder, capsys)
    lines = [line for line in err.splitlines() if line.strip()]
    assert code not in (0, None), f"exit {code}; stderr: {err!r}"
    assert "Traceback" not in err and "HANG" not in err, err
    assert len(lines) == 1, f"{len(lines)} lines on stderr:\n{err}"
    names = [_fill(n, folder) for n in case.names]
    assert any(n in lines[0] for n in names), f"{lines[0]!r} names none of {names}"
    assert snapshot(folder) == before, "files were written next to the input"


def test_corpus_is_large_and_covers_every_kind():
    kinds = {c.id.split("/")[0] for c in CASES}
    assert kinds == {"config", "safetensors", "index", "args", "env", "hub"}
    assert len(CASES) >= 100
    assert len({c.id for c in CASES}) == len(CASES)
