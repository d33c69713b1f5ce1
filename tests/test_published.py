"""Every published run in ``benchmarks/data/published_runs.json`` parses into a
TrainingSetup with ``introspect profile``'s own parser and gets a closed-form estimate
(``benchmarks/published.py``). No accuracy threshold: the ratios are the benchmark's
output, reported, not asserted. What is asserted is that the flags say what the row's
stated setup says (batch, T, devices, checkpointing, fine-tuning method), that the figure
is the quoted one, and that every model is bundled (no network)."""

from __future__ import annotations

import importlib.util
import math
import re
from pathlib import Path

import pytest
from introspect.adapters import bundled

ROOT = Path(__file__).resolve().parent.parent


def _published():
    spec = importlib.util.spec_from_file_location("published", ROOT / "benchmarks" / "published.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


published = _published()
ROWS = published.load_rows()


def test_rows_cover_the_three_groups():
    groups = [r["group"] for r in ROWS]
    assert len(ROWS) >= 8
    assert set(groups) == set(published.GROUPS)
    assert len({r["id"] for r in ROWS}) == len(ROWS)


@pytest.mark.parametrize("row", ROWS, ids=lambda r: r["id"])
def test_row_is_sourced_and_quoted(row):
    """The URL is pinned to a commit, the figure is the quoted one, its value and unit are
    the figure's, and the statistic is one the benchmark knows."""
    assert re.match(r"https://github\.com/[^/]+/[^/]+/blob/[0-9a-f]{40}/", row["url"])
    assert row["figure"] in row["quote"]
    assert f"{row['value']}" in row["figure"]
    assert row["unit"] in published.UNIT_BYTES
    assert row["statistic"] in {"allocated", "reserved", "active", "unnamed"}
    if row["statistic"] != "unnamed":  # a named statistic here is always one of torch.cuda's
        assert row["torch_allocator"]
    assert bundled.lookup(row["model"]) is not None, "every model is bundled: no network"


@pytest.mark.parametrize("row", ROWS, ids=lambda r: r["id"])
def test_flags_say_what_the_source_says(row):
    setup = published.setup_for(row)
    assert setup.batch_size == row["batch"]
    assert setup.seq_len == row["seq"]
    assert setup.devices == row["devices"]
    assert setup.activation_checkpointing == row["checkpointing"]
    method = re.sub("[^a-z]", "", row["method"].split()[0].lower())  # "Q-LoRA:" -> "qlora"
    assert setup.finetune == (method if method in ("lora", "qlora") else "full")
    if row["devices"] > 1:
        assert setup.sharding == "fsdp"


@pytest.mark.parametrize("row", ROWS, ids=lambda r: r["id"])
def test_every_row_gets_an_estimate(row):
    result = published.estimate_row(row)
    assert result["refined_bytes"] > 0 and result["simplified_bytes"] > 0
    assert result["published_bytes"] == round(row["value"] * published.UNIT_BYTES[row["unit"]])
    assert math.isfinite(result["ratio"]) and result["ratio"] > 0
    outside = result["outside_torch_bytes"] if row["torch_allocator"] else 0
    assert result["compared_bytes"] == result["refined_bytes"] - outside
    assert result["ratio"] == result["compared_bytes"] / result["published_bytes"]


def test_the_table_prints_every_row_and_what_it_cannot_express(capsys):
    assert published.main([]) == 0
    out = capsys.readouterr().out
    for row in ROWS:
        assert row["id"] in out
    assert "not expressed by today's flags" in out
    assert published.main(["--markdown", "--only", ROWS[0]["id"]]) == 0
    md = capsys.readouterr().out
    assert md.count("\n") == 3 and ROWS[0]["url"] in md
