"""Divergence rows and flags: the deltas chain from the seed to the execution layer, a
standard transformer has no architecture rows, and the flags name what a model has."""

from __future__ import annotations

import pytest
from specs import QWEN25_05B, SEED_7B

from introspect import divergence, refined, simplified
from introspect.setup import TrainingSetup

BF16 = TrainingSetup(activation_dtype="bf16")


def test_qwen25_05b_flags():
    flags = {f.name: f for f in divergence.flags(QWEN25_05B, BF16)}
    assert {"rmsnorm", "gqa", "gated_ffn", "tied_embeddings"} <= set(flags)
    assert "group size 7" in flags["gqa"].detail
    assert flags["gqa"].short == "GQA 7"
    assert "4864/896 = 5.43" in flags["gated_ffn"].detail
    assert "qk_norm" not in flags and "moe" not in flags
    # 151,936 logits per token exceed one layer's 82,432 values: large vocabulary.
    assert "large_vocab_logits" in flags


def test_seed_7b_has_no_architecture_rows_and_no_flags():
    seed = simplified.estimate(SEED_7B, BF16)
    est = refined.estimate(SEED_7B, BF16)
    rows = divergence.rows(seed, est)
    assert not [r for r in rows if r.kind == divergence.ARCHITECTURE]
    assert divergence.flags(SEED_7B, BF16) == []
    # The execution rows explain the gap: fewer T×T tensors, gradients not yet allocated.
    by_term = {r.term: r for r in rows}
    assert by_term["activations/layer/attention/quadratic"].kind == "execution"
    assert "scores not kept" in by_term["activations/layer/attention/quadratic"].cause
    assert all(r.cause for r in rows)


@pytest.mark.parametrize(
    "spec, setup",
    [
        (QWEN25_05B, BF16),
        (SEED_7B, BF16.replace(framework="torch", device="cpu")),
        (QWEN25_05B, BF16.replace(attention="memory_efficient", activation_checkpointing=True)),
        (QWEN25_05B, BF16.replace(precision="mixed", devices=8, zero_stage=3)),
        (QWEN25_05B.replace(num_local_experts=4, num_experts_per_tok=2), BF16),
    ],
    ids=["qwen", "seed-7b-torch", "qwen-flash-ckpt", "qwen-zero3", "moe"],
)
def test_deltas_chain_from_seed_to_execution(spec, setup):
    seed = simplified.estimate(spec, setup)
    est = refined.estimate(spec, setup)
    rows = divergence.rows(seed, est)
    arch_delta = sum(r.delta_bytes for r in rows if r.kind == "architecture")
    exe_delta = sum(r.delta_bytes for r in rows if r.kind == "execution")
    assert seed.total + arch_delta == est.architecture.total
    assert est.architecture.total + exe_delta == est.execution.total
    for r in rows:
        if r.kind == "architecture":
            assert r.refined_bytes == est.architecture.sum(r.term)
            assert r.delta_bytes == r.refined_bytes - r.simplified_bytes != 0
        else:
            assert r.refined_bytes == est.execution.sum(r.term)


def test_gqa_row_names_the_group_and_the_bytes():
    setup = TrainingSetup(seq_len=1024)
    spec = QWEN25_05B
    rows = divergence.rows(simplified.estimate(spec, setup), refined.estimate(spec, setup))
    row = next(r for r in rows if r.term == "activations/layer/attention/linear")
    assert row.kind == "architecture"
    # K and V are 2·64 = 128 wide instead of 896: 2·(896 − 128)·B·T·L·4 bytes fewer.
    assert row.delta_bytes == -2 * (896 - 128) * 1024 * 24 * 4
    assert "group size 7" in row.cause


def test_json_shape():
    seed = simplified.estimate(QWEN25_05B, BF16)
    est = refined.estimate(QWEN25_05B, BF16)
    out = divergence.to_json(divergence.rows(seed, est), divergence.flags(QWEN25_05B, BF16))
    assert set(out) == {"rows", "flags"}
    assert set(out["rows"][0]) == {
        "term",
        "simplified_bytes",
        "refined_bytes",
        "delta_bytes",
        "cause",
        "kind",
        "baseline_bytes",
    }
    assert all(isinstance(r["delta_bytes"], int) for r in out["rows"])
    assert all(r["baseline_bytes"] + r["delta_bytes"] == r["refined_bytes"] for r in out["rows"])


def test_profile_json_has_refined_and_divergences(capsys, monkeypatch):
    from introspect.cli import main

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    argv = ["profile", "Qwen/Qwen2.5-0.5B", "--act-dtype", "bf16", "--json"]
    assert main(argv) == 0
    import json

    out = json.loads(capsys.readouterr().out)
    ref = out["estimates"]["refined"]
    assert ref["architecture_total_bytes"] == ref["architecture"]["total_bytes"]
    assert ref["execution_total_bytes"] == ref["execution"]["total_bytes"] == ref["total_bytes"]
    assert ref["peak_phase"] in refined.PHASES
    assert out["estimates"]["simplified"]["total_bytes"] > 0
    names = {f["name"] for f in out["divergences"]["flags"]}
    assert {"rmsnorm", "gqa", "gated_ffn", "tied_embeddings"} <= names
    kinds = {r["kind"] for r in out["divergences"]["rows"]}
    assert kinds == {"architecture", "execution"}
    assert main(argv[:-1]) == 0
    text = capsys.readouterr().out
    assert "divergence: seed vs refined" in text and "group size 7" in text
