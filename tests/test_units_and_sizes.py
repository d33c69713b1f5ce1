"""--units on the commands, the seed's M2 question with the refined estimate, and the
seed's nominal sizes as a SOURCE everywhere."""

from __future__ import annotations

import json

import pytest

from introspect import refined
from introspect.cli import main
from introspect.measure.shapes import nominal_spec
from introspect.setup import TrainingSetup
from introspect.units import GB, GiB


def out_of(capsys, *argv) -> str:
    assert main(list(argv)) == 0
    return capsys.readouterr().out


def test_units_gib_changes_the_printed_unit_not_json(capsys):
    gb = out_of(capsys, "sizes")
    gib = out_of(capsys, "sizes", "--units", "GiB")
    assert "total GB" in gb and "total GiB" in gib and "total GB" not in gib
    row_gb = next(line for line in gb.splitlines() if line.startswith("7B "))
    row_gib = next(line for line in gib.splitlines() if line.startswith("7B "))
    total_gb, total_gib = float(row_gb.split()[8]), float(row_gib.split()[8])
    assert total_gib == pytest.approx(total_gb * GB / GiB, abs=0.002)
    # The default is restored by the next command.
    assert "total GB" in out_of(capsys, "sizes")


def test_units_on_profile_and_fit(capsys):
    assert "GiB" in out_of(capsys, "profile", "Qwen/Qwen2.5-0.5B", "--units", "gib")
    text = out_of(capsys, "fit", "Qwen/Qwen2.5-0.5B", "--budget", "40GB", "--units", "GiB")
    assert "37.25 GiB" in text  # 40e9 bytes in GiB


def test_sizes_with_the_refined_mlx_estimate(capsys):
    data = json.loads(out_of(capsys, "sizes", "--framework", "mlx-compiled", "--json"))
    row = next(r for r in data["rows"] if r["nominal"] == "40M" and r["seq"] == 2048)
    setup = TrainingSetup(seq_len=2048, framework="mlx_compiled")
    assert row["refined_total_bytes"] == refined.estimate(nominal_spec("40M"), setup).total
    assert row["refined_fits_4gb"] == (row["refined_total_bytes"] <= 4 * GB)
    assert row["fits_4gb"] == (row["total_bytes"] <= 4 * GB)
    text = out_of(capsys, "sizes", "--framework", "mlx-compiled")
    assert "refined mlx-compiled GB" in text and "refined ≤ 4 GB" in text


@pytest.mark.parametrize("command", [["profile"], ["table"], ["fit", "--budget", "8GB"]])
def test_nominal_names_are_sources(capsys, command):
    name, *rest = command
    data = json.loads(out_of(capsys, name, "40M", *rest, "--json"))
    n = nominal_spec("40M").n_params
    text = json.dumps(data)
    assert f"{n}" in text


def test_fit_m2(capsys):
    text = out_of(capsys, "fit", "40M", "--gpu", "m2-8gb", "--framework", "mlx-compiled")
    assert "working set" in text and "FITS" in text
