"""benchmarks/metal_published.py: every published row parses, names its source and what it
assumes, prices through the same setup the CLI builds, and its cause follows the rule."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest

from introspect.setup import TrainingSetup

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def published():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    path = ROOT / "benchmarks" / "metal_published.py"
    spec = importlib.util.spec_from_file_location("metal_published", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_row_has_a_source_a_date_and_a_setup(published):
    ids = [r["id"] for r in published.ROWS]
    assert len(ids) == len(set(ids)) >= 6
    for row in published.ROWS:
        assert re.match(r"https://github\.com/\S+", row["source"]), row["id"]
        assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", row["date"]), row["id"]
        assert row["measured_gb"] > 0 and row["assumed"] and row["hardware"]
        assert row["model"] and row["mlx_version"]
        assert not (row.get("bound") and row.get("not_modelled")), row["id"]
        framework = published.framework_of(row)
        assert framework in ("mlx", "mlx_compiled")
        setup = TrainingSetup(framework=framework, **row["flags"])
        assert setup.finetune == "lora" and setup.seq_len > 0


def test_rows_take_the_trainer_of_their_day(published):
    by_id = {r["id"]: r for r in published.ROWS}
    # mlx-lm a5322574 (2025-03-22): the step was not compiled yet
    assert published.framework_of(by_id["llama-3.2-1b-defaults-T4095"]) == "mlx"
    assert published.framework_of(by_id["llama-3.1-8b-T8192"]) == "mlx"
    assert published.framework_of(by_id["mlx-tune-qwen3-0.6b-all-T<=4096"]) == "mlx_compiled"


def test_found_figures_name_what_is_missing(published):
    assert published.FOUND_NOT_COMPARABLE
    for found in published.FOUND_NOT_COMPARABLE:
        assert re.match(r"https://github\.com/\S+", found["source"])
        assert found["missing"] and found["model"]
        assert found["measured_gb"] is None or found["measured_gb"] > 0


def _result(label="refined: execution (mlx on metal)", kept=True):
    return {
        "label": label,
        "attention_kept": kept,
        "largest_terms": [("activations/mlx/attention", 60), ("weights", 40)],
        "estimate_bytes": 100,
        "metal_estimate_bytes": 100,
    }


def test_a_bound_is_respected_or_the_estimate_is_low(published):
    row = {"bound": "T not stated", "measured_gb": 1.0}
    assert published.cause(row, 0.4, _result()).startswith("bound only")
    assert "estimate is low" in published.cause(row, 1.3, _result())


def test_the_torch_fallback_cause_lists_every_derived_structure(published):
    from introspect.refined.mlx import LORA_STRUCTURES

    text = published.cause({"measured_gb": 1.0}, 0.5, _result(label="… torch's moments …"))
    for structure in LORA_STRUCTURES:
        assert structure.split("-")[0] in text
    assert "Llama/Qwen2 blocks" not in text
    assert published.cause({"measured_gb": 1.0}, 1.1, _result()) == "within ±15%"
