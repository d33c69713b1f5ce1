"""Published runs that state allocated AND reserved for the same run
(benchmarks/data/published_reserved.json) beside the tool's figures: every row's source
and figures, the verdict's rule, and the rows priced through the same path the CLI takes."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _benchmark(name: str):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def allocator():
    return _benchmark("allocator")


def test_every_row_names_its_source_figures_and_published_row(allocator):
    published = _benchmark("published")
    by_id = {r["id"]: r for r in published.load_rows()}
    data = allocator.load_both()
    assert data["rows"] and data["searched"]
    for row in data["rows"]:
        assert row["url"].startswith("https://github.com/") and "/blob/" in row["url"]
        if "published_row" in row:  # its flags are the published row's
            assert row["published_row"] in by_id
        else:  # its own model (a config.json under benchmarks/data) and flags
            assert (ROOT / "benchmarks" / "data" / row["model_path"]).is_file() and row["flags"]
        for stat in ("allocated", "reserved"):
            fig = row[stat]
            assert fig["unit"] in allocator.UNIT_BYTES and fig["value"] > 0 and fig["quote"]
            assert f"{fig['value']:.2f}" in fig["quote"] or str(fig["value"]) in fig["quote"]
        assert row["reserved"]["value"] >= row["allocated"]["value"]
        assert row["ran"] and row["measured"] and row["not_modelled"]
        assert isinstance(row["varying_seq"], bool)
    for s in data["searched"]:
        assert s["ran"] and s["measured"] and s["why_not"]


@pytest.mark.parametrize(
    ("allocated", "reserved", "words"),
    [
        (1.063, 0.915, "unchecked: allocated +6.3%"),
        (0.94, 1.0, "unchecked: allocated -6.0%"),
        (1.043, 0.998, "met: reserved -0.2%"),
        (0.96, 1.099, "met: reserved +9.9%"),
        (1.0, 0.85, "missed: reserved -15.0%"),
        (1.05, 1.101, "missed: reserved +10.1%"),
        (1.05, 0.90, "met: reserved -10.0%"),
    ],
)
def test_verdict_checks_reserved_only_where_allocated_is_within_five_percent(
    allocator, allocated, reserved, words
):
    assert allocator.verdict(allocated, reserved).startswith(words)


def test_rows_are_priced_on_the_runs_gpu(allocator):
    """The rows go through the closed form and the device view of their --gpu: the
    reserved figure holds the allocated peak, the GPU's cuBLAS workspaces and the replayed
    reserve; nvidia-smi adds the GPU's context; the ratios are the figures' own."""
    from introspect import cuda_libraries, overhead
    from introspect.devices import lookup

    rows = allocator.both_rows()
    data = {r["id"]: r for r in allocator.load_both()["rows"]}
    assert [r["id"] for r in rows] == list(data)
    for r in rows:
        setting = "reserved_on" if r["expandable_segments"] else "reserved_off"
        assert r["allocated"] < r["reserved_on"] <= r["reserved_off"]
        assert r[setting] < r["shown"]
        context, _ = overhead.cuda_context(lookup(r["gpu"]), {})
        ranks = 2 if "fsdp" in r["id"] else 1  # Answer.AI's runs: FSDP over two 3090s
        nccl, _ = cuda_libraries.nccl_buffers(ranks, {})
        assert r["shown"] - r[setting] == context + nccl
        assert r["allocated_ratio"] == r["allocated"] / r["published_allocated"]
        assert r["reserved_ratio"] == r[setting] / r["published_reserved"]
        assert r["expandable_segments"] == bool(data[r["id"]].get("expandable_segments"))
        expected = allocator.verdict(r["allocated_ratio"], r["reserved_ratio"])
        assert r["verdict"] == expected
    text = "\n".join(allocator.both_section())
    assert "## 6." in text and "rows checked (allocated within ±5%)" in text


def test_varying_rows_replay_the_runs_config_in_each_assumed_order(allocator):
    """The varying-T row's config prices the run's setup (QLoRA, batch 2, checkpointing,
    bf16) on its GPU; a rising order never reserves less than one step at T_max with
    expandable segments off, and expandable segments never reserve more than off."""
    (row,) = allocator.load_both()["varying_seq"]
    spec, setup, device = allocator.varying_setup(row)
    assert (setup.finetune, setup.batch_size, setup.activation_checkpointing) == ("qlora", 2, True)
    assert setup.grad_accum == 1 and device.name == "a100-80gb"
    (priced,) = allocator.varying_rows()
    by = {(r["t_max"], r["order"]): r for r in priced["replays"]}
    labels = [label for label, _ in allocator.ORDERS]
    for t_max in allocator.T_MAX:
        one, rising = by[(t_max, labels[0])], by[(t_max, labels[1])]
        assert rising["reserved_off"] >= one["reserved_off"]
        for r in (one, rising):
            assert r["allocated"] <= r["reserved_on"] <= r["reserved_off"]
    assert priced["published_off"] > priced["published_on"]


def test_the_written_qwen15_config_has_the_model_cards_count():
    """benchmarks/data/qwen1.5-0.5b/config.json is written from the model's published
    config (the Hub is not reached here): its exact count is the model card's 464M."""
    from introspect.adapters import resolve

    spec = resolve(str(ROOT / "benchmarks" / "data" / "qwen1.5-0.5b" / "config.json")).spec
    assert spec.n_params == 463_987_712
