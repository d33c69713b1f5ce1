"""Property-based fuzz of every command's flags (hypothesis), in process through
:func:`introspect.cli.main`, with a fixed budget.

Each example is one command line: the command, a source (bundled models, a tiny local
config, a broken or missing file, a nominal size), and a random subset of the command's
flags — read from its parser, so a new flag is fuzzed without a change here — each with a
value drawn from good and bad ones (0, -1, nan, inf, 1e400, 10^9, 40-digit ints, text,
empty, unknown choices). The property:

* exit 0 with an answer on stdout (JSON that parses when ``--json`` is given), or exit 2
  with exactly one line on stderr naming a flag (``--x``) or the file/source given;
* never another exit code, a traceback, or a hang (a timer ends an example after
  :data:`EXAMPLE_S` seconds: a hang check, not a timing assertion);
* never a silently ignored flag: when an example with one of :data:`APPLICABILITY`'s
  flags exits 0, the same line without that flag must not print the same answer.

Budget: :data:`EXAMPLES` examples per command (``INTROSPECT_FUZZ_EXAMPLES`` raises it),
``deadline=None``, derandomized so a run is repeatable, no shrinking (every failure of the
budget is collected and reported at once, with its command line). No network: only
bundled models and local files, ``HF_HUB_OFFLINE=1``, and ``--revision`` (the Hub) and
``--exact`` / a real ``measure`` (seconds each) left to the corpus; ``measure`` runs tiny
shapes on ``--device fake`` or the CPU. ``--debug`` is never drawn (it shows tracebacks
by design). ``pytest tests/test_fuzz_cli.py -q`` ends with the budget line
(``tests/conftest.py``).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import re
from collections import Counter
from pathlib import Path

import pytest
from corpus.cases import CONFIG
from corpus.runner import call_main
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as hs

from introspect.cli import COMMANDS, build_parser

EXAMPLES = int(os.environ.get("INTROSPECT_FUZZ_EXAMPLES", "40"))
#: The most one example may run before it counts as a hang (seconds).
EXAMPLE_S = 30
BUDGET = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=list(HealthCheck),
)

QWEN = "Qwen/Qwen2.5-0.5B"
COUNT = ["1", "2", "3", "4", "8", "64", "512", "0", "-1", "nan", "inf", "1e400", "1e9"]
COUNT += ["9" * 40, "x", "1.5", "", "7e2", "1,024"]
SECONDS = ["0.5", "5", "30", "0", "-1", "nan", "inf", "1e400", "x", ""]
PROBABILITY = ["0", "0.1", "0.5", "-0.1", "1", "nan", "inf", "x", ""]
BAD_CHOICE = ["nonesuch", ""]
#: Values per flag where the kind alone does not say (text flags and tiny shapes).
VALUES: dict[str, list[str]] = {
    "--budget": ["8GB", "80GB", "24GiB", "0.5GB", "80TB", "0GB", "-1GB", "80", "xGB", "1e400GB"]
    + ["nanGB", ""],
    "--gpu": ["h200", "a100-40gb", "m2-8gb", "t4", "rtx-4090", "nonesuch", ""],
    "--act": ["silu", "gelu", "relu", "wiggle", ""],
    "--plot": ["{dir}/out.png", "{dir}/out.svg", "{dir}/out.txt", "{dir}/no/out.png", ""]
    + ["{dir}/file.txt/out.png"],
    "--reported": ["qwen-7b", "gpt-5", ""],
    # a trainer's config (issue 21): a TRL one, a model config.json, broken and missing
    "--config": ["{dir}/sft.yaml", "{dir}/config.json", "{dir}/bad.json", "{dir}/nope.yaml"],
    "--zero": ["0", "1", "2", "3", "4", "-1", "x"],
    "--lora-dropout": PROBABILITY,
}
#: measure's shape and setup flags stay tiny (a real step or a dry run each example).
MEASURE_VALUES: dict[str, list[str]] = {
    "--layers": ["1", "2", "0", "1e30", "x"],
    "--d-emb": ["32", "64", "0", "1e9", "x"],
    "--heads": ["2", "4", "3", "0"],
    "--vocab": ["64", "128", "0", "1e12"],
    "--kv-heads": ["1", "2", "3", "0"],
    "--head-dim": ["8", "16", "0"],
    "--intermediate": ["48", "96", "0"],
    "--seq": ["8", "16", "0", "1e12", "x"],
    "--batch": ["1", "2", "0", "1e9"],
    "--repeats": ["1", "2", "0", "1e9"],
    "--step-timeout": ["5", "0", "x"],
    "--device": ["fake", "cpu", "metal", "cuda", "nonesuch"],
    "--framework": ["torch", "nonesuch"],
    "--devices": ["1", "0", "x"],
    "--lora-rank": ["4", "0", "1e9"],
    "--grad-accum": ["1", "2", "4", "0", "1e9", "x"],  # each micro-batch is a real pass
}
#: Values drawn one time in four (the rest from the good ones), so that most examples get
#: past the parser to the checks between flags; a weighting only, not a rule.
BAD = {"0", "-1", "nan", "inf", "1e400", "1e9", "1e12", "1e30", "9" * 40, "x", "1.5", ""}
BAD |= {"nonesuch", "-0.1", "0GB", "-1GB", "80", "xGB", "1e400GB", "nanGB", "gpt-5", "wiggle"}
BAD |= {"{dir}/out.txt", "{dir}/no/out.png", "{dir}/file.txt/out.png", "fp7", "c_attn"}
#: Flags never drawn (see the module docstring); measure's sharded and MLX runs too.
NEVER = {"--debug", "--revision", "--exact", "--help"}
NEVER_MEASURE = {"--ddp", "--fsdp", "--zero", "--no-reshard", "--bucket-view", "--plot"}
#: Flags that apply only with others or to some models: an answer with one of them must
#: differ from the answer without it (else the flag was silently ignored). Not
#: --optimizer-in-backward or --optimizer-impl: they may leave a peak reached before the
#: update where it was.
APPLICABILITY = {
    "--no-reshard",
    "--bucket-view",
    "--micro-batches",
    "--lora-dropout",
    "--no-double-quant",
    "--train-embeddings",
    "--freeze-tower",
    "--offload",
    "--units",
    "--tp",
    "--pp",
    "--repeats",
    "--step-timeout",
}
SOURCES: dict[str, list[str]] = {
    "profile": [QWEN, "Qwen/Qwen3-0.6B", "google/gemma-3-4b-pt", "Qwen/Qwen3-30B-A3B"]
    + ["{dir}/config.json", "{dir}/bad.json", "{dir}/missing.json", "{dir}"],
    "fit": [QWEN, "40M", "7B", "google/gemma-3-4b-pt", "{dir}/config.json", "{dir}/bad.json"]
    + ["12M"],
    "measure": ["{dir}/config.json", "{dir}/bad.json", "10M"],
}
SOURCES["table"] = SOURCES["profile"]
SOURCES["explain"] = ["weights", "weights/gathered", "nonesuch", ""]

#: Collected by the tests, printed by tests/conftest.py.
STATS: Counter = Counter()
#: Exit codes of the examples (0, 2 or "other"), for the summary line.
OUTCOMES: Counter = Counter()


def _subparser(command: str) -> argparse.ArgumentParser:
    parser = build_parser(command)
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices[command]


def _choices_of(action: argparse.Action) -> list[str]:
    """The choices of a flag: argparse's, or those the ``choice`` type names when it
    refuses a value (``'…' is not one of a, b-c``)."""
    if action.choices:
        return [str(c) for c in action.choices]
    try:
        action.type("\0")
    except (argparse.ArgumentTypeError, ValueError) as err:
        text = str(err)
        if "is not one of " in text:
            return [c.strip() for c in text.split("is not one of ", 1)[1].split(",")]
    return []


def flag_values(command: str) -> dict[str, tuple[list[str] | None, bool]]:
    """Every drawable flag of ``command`` → (its candidate values, or None for a switch;
    whether it takes several)."""
    out = {}
    for action in _subparser(command)._actions:
        if not action.option_strings:
            continue
        flag = action.option_strings[-1]
        if flag in NEVER or (command == "measure" and flag in NEVER_MEASURE):
            continue
        if action.nargs == 0:
            out[flag] = (None, False)
            continue
        name = getattr(action.type, "__name__", "")
        if command == "measure" and flag in MEASURE_VALUES:
            values = MEASURE_VALUES[flag]
        elif flag in VALUES:
            values = VALUES[flag]
        elif name == "positive_int":
            values = COUNT
        elif name == "positive_seconds":
            values = SECONDS
        elif flag == "--lora-targets":
            values = ["q_proj", "v_proj", "o_proj", "all-linear", "c_attn", ""]
        else:
            values = _choices_of(action) + BAD_CHOICE
        if name == "dtype_name":
            values = ["fp32", "bf16", "fp16", "fp8", "int8", "fp7", ""]
        out[flag] = (values, action.nargs == "+")
    return out


ESTIMATE_SHAPE = (("--layers", "2"), ("--d-emb", "64"), ("--heads", "4"), ("--vocab", "100"))
ESTIMATE_SHAPE += (("--seq", "8"),)


@hs.composite
def command_lines(draw, command: str) -> list[str]:
    flags = flag_values(command)
    argv = [command]
    if command == "estimate":
        for flag, value in ESTIMATE_SHAPE:
            if draw(hs.integers(0, 9)):  # mostly present: a required flag left out 1 in 10
                argv += [flag, value]
    elif command == "measure":
        if draw(hs.booleans()):
            argv.append(draw(hs.sampled_from(SOURCES["measure"])))
        else:
            argv += ["--layers", "2", "--d-emb", "64", "--heads", "4", "--vocab", "128"]
        argv += ["--device", "fake", "--seq", "8", "--no-census"]
    elif command == "table":
        argv += draw(hs.lists(hs.sampled_from(SOURCES["table"]), max_size=2))
    elif command in SOURCES:
        argv.append(draw(hs.sampled_from(SOURCES[command])))
    if command == "fit":
        argv += draw(hs.sampled_from([["--gpu", "h200"], ["--budget", "24GB"], []]))
    names = sorted(flags)
    for flag in draw(hs.lists(hs.sampled_from(names), max_size=4, unique=True)):
        values, several = flags[flag]
        argv.append(flag)
        if values is None:
            continue
        count = draw(hs.integers(1, 2)) if several else 1
        for _ in range(count):
            bad = [v for v in values if v in BAD]
            good = [v for v in values if v not in BAD] or bad
            pool = bad if bad and draw(hs.integers(0, 3)) == 0 else good
            argv.append(draw(hs.sampled_from(pool)))
    return argv


def call(argv: list[str]) -> tuple[int | str, str, str]:
    """(exit code — or "traceback: …"/"hang" —, stdout, stderr) of main(argv) in process."""
    return call_main(argv, EXAMPLE_S)


def _without(argv: list[str], flag: str, command: str) -> list[str]:
    """``argv`` without ``flag`` and its values."""
    values, _ = flag_values(command)[flag]
    out, i = [], 0
    while i < len(argv):
        if argv[i] == flag:
            i += 1
            while values is not None and i < len(argv) and not argv[i].startswith("--"):
                i += 1
            continue
        out.append(argv[i])
        i += 1
    return out


def judge(argv: list[str], folder: Path, command: str) -> str | None:
    """Why ``argv`` breaks the property, or None."""
    code, out, err = call(argv)
    OUTCOMES[code if code in (0, 2) else "other"] += 1
    lines = [line for line in err.splitlines() if line.strip()]
    if code == "hang":
        return f"hang (over {EXAMPLE_S} s)"
    if isinstance(code, str):
        return code
    if "Traceback" in err:
        return f"exit {code} with a traceback on stderr"
    if code == 0:
        if not out.strip():
            return "exit 0 with nothing on stdout"
        if "--json" in argv:
            try:
                json.loads(out)
            except ValueError:
                return "exit 0 with --json but stdout is not JSON"
        for flag in APPLICABILITY & set(argv):
            shorter = _without(argv, flag, command)
            again, out2, _ = call(shorter)
            if again == 0 and out2 == out and _differs(command, argv, shorter, flag):
                return f"exit 0 and {flag} changed nothing (silently ignored)"
        return None
    if code != 2:
        return f"exit {code}: {lines[-1][:160] if lines else ''}"
    if len(lines) != 1:
        return f"exit 2 with {len(lines)} lines on stderr: {' | '.join(x[:80] for x in lines[:3])}"
    given = [a for a in argv[1:] if not a.startswith("--") and re.search(r"[/.]|^[0-9]+[MB]$", a)]
    if not (re.search(r"--[a-z]", lines[0]) or "SOURCE" in lines[0]) and not any(
        g and g in lines[0] for g in given
    ):
        return f"exit 2 naming no flag or file: {lines[0][:160]}"
    return None


def _differs(command: str, argv: list[str], shorter: list[str], flag: str) -> bool:
    """Whether ``flag``'s parsed value in ``argv`` is not the one it has without it."""
    dest = next(a.dest for a in _subparser(command)._actions if a.option_strings[-1:] == [flag])
    parser = build_parser(command)
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            a, b = parser.parse_args(argv), parser.parse_args(shorter)
    except SystemExit:
        return False
    value = getattr(a, dest)
    if flag == "--micro-batches" and value == getattr(a, "pp", None):
        return False  # --micro-batches defaults to --pp
    if flag == "--units" and value == "gb":
        return False
    return value != getattr(b, dest)


@pytest.fixture(scope="module")
def offline():
    """HF_HUB_OFFLINE=1 for the module (restored after): nothing may reach the Hub."""
    old = os.environ.get("HF_HUB_OFFLINE")
    os.environ["HF_HUB_OFFLINE"] = "1"
    yield
    if old is None:
        os.environ.pop("HF_HUB_OFFLINE", None)
    else:
        os.environ["HF_HUB_OFFLINE"] = old


@pytest.mark.parametrize("command", COMMANDS)
def test_fuzz_command(command, tmp_path, offline):
    """The property over :data:`EXAMPLES` random command lines of ``command``; every
    failure of the budget is listed (command line and what happened)."""
    import conftest

    (tmp_path / "config.json").write_text(json.dumps(CONFIG))
    (tmp_path / "bad.json").write_text("{")
    (tmp_path / "file.txt").write_text("x")
    (tmp_path / "sft.yaml").write_text("model_name_or_path: Qwen/Qwen2.5-0.5B\ndataset_name: d\n")
    failures: dict[str, str] = {}

    @BUDGET
    @given(argv=command_lines(command))
    def one(argv):
        filled = [a.replace("{dir}", str(tmp_path)) for a in argv]
        STATS[command] += 1
        why = judge(filled, tmp_path, command)
        if why:
            key = re.sub(r"[0-9]+", "N", why)[:70]
            failures.setdefault(key, f"introspect {' '.join(map(repr, argv))} → {why}")

    one()
    conftest.FUZZ.update(budget=EXAMPLES, timeout_s=EXAMPLE_S, examples=STATS, exits=OUTCOMES)
    if failures:
        conftest.FUZZ["failed"] = conftest.FUZZ.get("failed", 0) + 1
    assert not failures, f"{len(failures)} kinds of failure:\n" + "\n".join(failures.values())
