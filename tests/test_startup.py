"""What a closed-form command imports, in a fresh interpreter: no torch, MLX, NumPy,
Hub client, transformers or safetensors, no package-metadata read, only the chosen
sub-command's modules; and `--help`, `--version`, an unknown command."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from introspect.adapters import bundled

import introspect

ROOT = Path(__file__).resolve().parents[1]

#: Top-level packages a closed-form command must not import.
HEAVY = ("torch", "mlx", "numpy", "huggingface_hub", "transformers", "safetensors")

# Runs the command as the console script does, then prints what was imported.
_WRAPPER = """\
import contextlib, io, json, sys
from introspect.cli import main
with contextlib.redirect_stdout(io.StringIO()) as out:
    try:
        rc = main(sys.argv[1:])
    except SystemExit as exit:  # --help
        rc = exit.code
print(json.dumps({"rc": rc, "out": out.getvalue(), "modules": sorted(sys.modules)}))
"""


def _imported(*argv: str) -> tuple[str, set[str]]:
    proc = subprocess.run(
        [sys.executable, "-c", _WRAPPER, *argv],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    result = json.loads(proc.stdout)
    assert result["rc"] == 0, proc.stderr
    return result["out"], set(result["modules"])


def _local_config(tmp_path: Path) -> str:
    model = bundled.lookup("Qwen/Qwen2.5-0.5B")
    source = Path(bundled.__file__).parent / "data" / model.folder / "config.json"
    target = tmp_path / "config.json"
    shutil.copyfile(source, target)
    return str(target)


CLOSED_FORM = {
    "estimate": ["estimate", "--layers", "33", "--d-emb", "4096", "--heads", "32",
                 "--vocab", "43520", "--params", "7e9", "--seq", "2048"],
    "sizes": ["sizes"],
    "profile-bundled": ["profile", "Qwen/Qwen2.5-0.5B"],
    "profile-config": ["profile", "{config}"],
    "profile-list": ["profile", "--list"],
    "table": ["table"],
    "table-json": ["table", "--json"],
    "fit": ["fit", "Qwen/Qwen2.5-7B", "--gpu", "h100-80gb", "--seq", "4096"],
    "fit-json": ["fit", "Qwen/Qwen2.5-0.5B", "--budget", "8GB", "--lora-rank", "16", "--json"],
}  # fmt: skip


@pytest.mark.parametrize("name", CLOSED_FORM)
def test_closed_form_commands_import_nothing_heavy(name, tmp_path):
    argv = [a.replace("{config}", _local_config(tmp_path)) for a in CLOSED_FORM[name]]
    out, modules = _imported(*argv)
    assert out.strip(), "the command printed nothing"
    heavy = sorted(m for m in modules if m.split(".")[0] in HEAVY)
    assert heavy == [], f"{name} imported {heavy[:5]}"
    # tabulate's own import reads its version from package metadata (introspect/_tabulate)
    assert "importlib.metadata" not in modules
    # nor dataclasses (it imports inspect, ast, dis, tokenize) nor typing nor fractions:
    # our records are introspect._record's, tabulate checks rows without dataclasses'
    # import, and type hints are read by type checkers only
    slow = {"dataclasses", "inspect", "ast", "typing", "fractions", "decimal"} & modules
    assert not slow, f"{name} imported {sorted(slow)}"
    assert "importlib.resources" not in modules
    # only the chosen sub-command's module
    chosen = argv[0]
    others = {f"introspect.commands.{c}" for c in ("estimate", "sizes", "profile", "table", "fit")}
    assert {m for m in modules if m in others} == {f"introspect.commands.{chosen}"}
    assert "introspect.commands.measure" not in modules
    # not platform, whose import compiles a dozen regular expressions (the measuring
    # package's record reads it only when asked); the measuring package only for sizes
    # (its nominal shapes)
    assert "platform" not in modules
    if chosen != "sizes":
        assert not {m for m in modules if m.startswith("introspect.measure")}


def test_tabulate_lays_out_dataclass_rows_after_its_lighter_import():
    code = (
        "from introspect._tabulate import tabulate; import sys; "
        "print('dataclasses' in sys.modules); "
        "import dataclasses, tabulate as t; "
        "R = dataclasses.make_dataclass('R', [('a', int), ('b', str)]); "
        "print(tabulate([R(1, 'x')], headers='keys').split()); "
        "print(t.dataclasses.is_dataclass(R), t.dataclasses.is_dataclass(1), "
        "t.dataclasses.fields is dataclasses.fields, sys.modules['dataclasses'] is dataclasses)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    ).stdout.splitlines()
    assert out == ["False", "['a', 'b', '---', '---', '1', 'x']", "True False True True"]


def test_tabulate_is_the_real_library_and_metadata_still_works():
    code = (
        "from introspect._tabulate import tabulate; import sys, tabulate as t; "
        "print(tabulate([[1, 22]], headers=['a', 'b']) == t.tabulate([[1, 22]], "
        "headers=['a', 'b'])); import importlib.metadata as m; "
        "print(m.version('tabulate') == m.distribution('tabulate').version, "
        "type(m).__name__, hasattr(m, 'distributions'))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    ).stdout.split()
    assert out == ["True", "True", "module", "True"]


def _cli(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "introspect", *argv], capture_output=True, text=True, timeout=60
    )


def test_help_lists_every_command_without_importing_them():
    proc = _cli("--help")
    assert proc.returncode == 0
    for command in ("estimate", "sizes", "profile", "table", "measure"):
        assert re.search(rf"introspect {command}\b", proc.stdout), command
    out, modules = _imported("--help")
    assert "introspect profile" in out
    assert not {m for m in modules if m.startswith("introspect.commands.")}


def test_unknown_command_is_one_line_pointing_at_help():
    proc = _cli("estimat", "--seq", "5")
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1
    assert "'estimat'" in lines[0] and "introspect --help" in lines[0]
    assert "estimate" in lines[0]


def test_version_matches_pyproject():
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    (version,) = re.findall(r'(?m)^version = "([^"]+)"$', pyproject)
    assert introspect.__version__ == version
    proc = _cli("--version")
    assert proc.returncode == 0
    assert proc.stdout.strip() == f"introspect {introspect.__version__}"


def test_subcommand_help_still_works():
    proc = _cli("profile", "--help")
    assert proc.returncode == 0
    assert "--list" in proc.stdout
