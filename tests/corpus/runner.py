"""Run one corpus :class:`~corpus.cases.Case` and judge it: used by ``tests/test_corpus.py``
and by ``tests/corpus/run.py`` (the summary and findings without pytest).

A case is *clean* when its outcome is its class:

* ``ok`` — exit 0, something on stdout (valid JSON when ``--json`` is given), no
  traceback, and no file written in the case folder but those the case names in ``writes``;
* ``refused`` — exit 2, exactly one non-empty line on stderr, naming one of the case's
  ``names`` (the flag or the file), no traceback, nothing written next to the input.

Never a hang: in process a timer raises after :data:`HANG_S`; a subprocess has the same
bound as its timeout.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from .cases import Case

#: The most any case may take before it counts as a hang (seconds): a hang check, not a
#: timing assertion — the slowest clean case takes a few seconds.
HANG_S = 60


@dataclass
class Outcome:
    code: int | None
    out: str
    err: str
    folder: Path
    before: set[str]
    after: set[str]
    #: stdout of the case's baseline call (None without one).
    baseline_out: str | None = None


def fill(text: str, folder: Path) -> str:
    return text.replace("{dir}", str(folder))


def materialize(case: Case, folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for rel, content in case.files.items():
        path = folder / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
    for link, target in case.links.items():
        os.symlink(fill(target, folder), folder / link)
    for fifo in case.fifos:
        os.mkfifo(folder / fifo)


def snapshot(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}


class Hang(Exception):
    pass


def _alarm(signum, frame):
    raise Hang


def call_main(argv: list[str], seconds: float) -> tuple[int | str, str, str]:
    """(exit code, stdout, stderr) of :func:`introspect.cli.main` on ``argv`` in process,
    for the corpus and ``tests/test_fuzz_cli.py``. The code is ``"hang"`` past
    ``seconds``, and ``"traceback: Type: message"`` for what the CLI let through (the
    traceback itself written to stderr, as a user would see it)."""
    from introspect.cli import main

    out, err = io.StringIO(), io.StringIO()
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code: int | str = main(argv)
            except SystemExit as e:  # argparse, --help, --version
                code = e.code if isinstance(e.code, int) else (0 if e.code is None else 2)
            except Hang:
                code = "hang"
            except BaseException as e:  # what the CLI let through
                import traceback

                traceback.print_exc()
                code = f"traceback: {type(e).__name__}: {str(e)[:160]}"
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    return code, out.getvalue(), err.getvalue()


def run_in_process(case: Case, folder: Path) -> tuple[int | None, str, str]:
    """(exit code, stdout, stderr) of the case's argv in process: -1 for a hang (its
    message on stderr), 1 for a traceback (on stderr)."""
    code, out, err = call_main([fill(a, folder) for a in case.argv], HANG_S)
    if code == "hang":
        return -1, out, err + f"HANG: still running after {HANG_S} s\n"
    if isinstance(code, str):
        return 1, out, err
    return code, out, err


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
    return env | {k: fill(v, folder) for k, v in (case.env or {}).items()}


def run_subprocess(case: Case, folder: Path, home: Path) -> tuple[int | None, str, str]:
    """(exit code, stdout, stderr) of ``python -m introspect`` with the case's environment,
    against its own loopback Hub (``tests/hubserver.py``) or an unused local port."""
    from hubserver import HubServer

    argv = [sys.executable, "-m", "introspect", *(fill(a, folder) for a in case.argv)]
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
            return -1, "", f"HANG: still running after {HANG_S} s"
    return done.returncode, done.stdout, done.stderr


def run(case: Case, folder: Path, home: Path | None = None) -> Outcome:
    """Materialize ``case`` in ``folder`` and run it (in a subprocess when it has an
    environment or a Hub)."""
    materialize(case, folder)
    before = snapshot(folder)
    if case.subprocess:
        code, out, err = run_subprocess(case, folder, home or folder.with_name("home"))
    else:
        code, out, err = run_in_process(case, folder)
    after = snapshot(folder)
    base = None
    if case.baseline is not None and code == 0:
        base = run_in_process(Case(case.id, case.baseline), folder)[1]
    return Outcome(code, out, err, folder, before, after, base)


def _relative(path: str, folder: Path) -> str:
    try:
        return str(Path(path).relative_to(folder))
    except ValueError:
        return path


def problem(case: Case, o: Outcome) -> str | None:
    """Why the outcome is not the case's class, in one line; None when clean."""
    lines = [line for line in o.err.splitlines() if line.strip()]
    last = lines[-1][:300] if lines else ""
    if "HANG" in o.err:
        return "hang: " + last
    if "Traceback" in o.err:
        return f"traceback (exit {o.code}): {last}"
    allowed = {_relative(fill(w, o.folder), o.folder) for w in case.writes}
    written = o.after - o.before - allowed
    if written:
        return f"exit {o.code}, wrote next to the input: {sorted(written)[:3]}"
    if case.expect == "ok":
        if o.code != 0:
            return f"exit {o.code}: {last}"
        if not o.out.strip():
            return "exit 0 with nothing on stdout"
        if "--json" in case.argv:
            try:
                json.loads(o.out)
            except ValueError as e:
                return f"exit 0 with --json but stdout is not JSON ({e})"
        missing = [w for w in case.writes if not Path(fill(w, o.folder)).is_file()]
        if missing:
            return f"exit 0 but did not write {missing}"
        if o.baseline_out is not None and o.baseline_out == o.out:
            return "exit 0 with the same answer as without the flag (silently ignored)"
        return None
    if o.code == 0:
        return "exit 0 (answered; expected a refusal)"
    if o.code != 2:
        return f"exit {o.code}: {last}"
    if len(lines) != 1:
        return f"{len(lines)} lines on stderr: {' | '.join(x[:120] for x in lines[:3])}"
    names = [fill(n, o.folder) for n in case.names]
    if not any(n in lines[0] for n in names):
        return f"names none of {names}: {last}"
    return None
