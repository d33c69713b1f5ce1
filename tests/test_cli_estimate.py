"""`introspect estimate` and `introspect sizes` through the real command line."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from introspect.cli import main
from introspect.units import GB

WORKED = [
    "estimate", "--params", "7e9", "--layers", "33", "--d-emb", "4096", "--heads", "32",
    "--vocab", "43520", "--batch", "1", "--seq", "2048", "--act-dtype", "bf16",
]  # fmt: skip


def run_json(capsys, argv):
    assert main(argv + ["--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_worked_example_json(capsys):
    out = run_json(capsys, WORKED)
    (row,) = out["rows"]
    sm = row["summary"]
    assert all(isinstance(v, int) for v in sm.values())
    assert round(sm["weights_and_backward_bytes"] / GB, 2) == 112.00
    assert round(sm["activations_bytes"] / GB, 2) == 26.77
    assert round(sm["total_bytes"] / GB, 2) == 138.77
    assert row["breakdown"]["total_bytes"] == sm["total_bytes"]
    assert out["n_params"] == 7_000_000_000


def test_worked_example_batch_8(capsys):
    argv = list(WORKED)
    argv[argv.index("--batch") + 1] = "8"
    (row,) = run_json(capsys, argv)["rows"]
    assert round(row["summary"]["activations_bytes"] / GB, 2) == 214.16


def test_sweep_gives_one_row_per_setting(capsys):
    argv = WORKED[:-6] + ["--batch", "1", "8", "--seq", "1024", "2048"]
    out = run_json(capsys, argv)
    got = [(r["setup"]["batch_size"], r["setup"]["seq_len"]) for r in out["rows"]]
    assert got == [(1, 1024), (1, 2048), (8, 1024), (8, 2048)]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert text.count("\n") >= 6 and "of which T²" in text


def test_text_output_names_every_part(capsys):
    assert main(WORKED) == 0
    text = capsys.readouterr().out
    for words in ("weights", "LayerNorm", "scores", "feed-forward", "logits", "Adam", "total"):
        assert words in text
    assert "138.770" in text


def test_act_bytes_overrides_dtype(capsys):
    argv = [a if a != "bf16" else "fp32" for a in WORKED]
    i = argv.index("--act-dtype")
    argv[i : i + 2] = ["--act-bytes", "2"]
    (row,) = run_json(capsys, argv)["rows"]
    assert round(row["summary"]["activations_bytes"] / GB, 2) == 26.77


def test_sizes_json_reproduces_seed_rows(capsys):
    out = run_json(capsys, ["sizes"])
    rows = {(r["nominal"], r["seq"]): r for r in out["rows"]}
    assert rows[("40M", 2048)]["total_bytes"] / GB == pytest.approx(4.069, rel=0.01)
    assert rows[("100M", 2048)]["total_bytes"] / GB == pytest.approx(7.726, rel=0.01)
    assert rows[("40M", 512)]["total_bytes"] < GB
    assert rows[("40M", 2048)]["fits_4gb"] is False and rows[("40M", 2048)]["fits_8gb"] is True
    seven = rows[("7B", 2048)]
    assert (seven["layers"], seven["d_emb"], seven["heads"], seven["vocab"]) == (
        33, 4096, 32, 43520,
    )  # fmt: skip
    assert {r["nominal"] for r in out["rows"]} >= {"10M", "40M", "100M", "1B", "7B", "70B"}


def test_sizes_other_seq(capsys):
    out = run_json(capsys, ["sizes", "--seq", "1024"])
    assert {r["seq"] for r in out["rows"]} == {1024}


@pytest.mark.parametrize(
    "argv, words",
    [
        (["--layers", "0"], "--layers"),
        (["--heads", "33"], "--heads 33 does not divide --d-emb 4096"),
        (["--act-dtype", "fp64"], "--act-dtype"),
        (["--seq", "12x"], "--seq"),
        (["--batch", "-1"], "--batch"),
        (["--params", "1.5"], "--params"),
    ],
)
def test_bad_input_is_one_line_exit_2(argv, words):
    base = dict(zip(WORKED[1::2], WORKED[2::2], strict=True))
    for flag, value in zip(argv[::2], argv[1::2], strict=True):
        base[flag] = value
    cmd = [sys.executable, "-m", "introspect", "estimate"]
    for flag, value in base.items():
        cmd += [flag, value]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert words in proc.stderr
    assert proc.stdout == ""


def test_module_entry_point_help():
    proc = subprocess.run(
        [sys.executable, "-m", "introspect", "--help"], capture_output=True, text=True
    )
    assert proc.returncode == 0
    for sub in ("estimate", "sizes", "profile", "table", "measure"):
        assert sub in proc.stdout
