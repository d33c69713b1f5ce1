"""The MLX closed form's mixture-of-experts structure (mlx-lm's qwen3_moe): a real step,
measured and replayed, against the closed form; the rebuilt sorted-expert gradients;
the dense structures untouched.

The real step runs in a child process: once a process has evaluated a qwen3_moe model,
MLX's active memory stays 30–45 KB higher, which tests/test_mlx_replay.py's 1 KB check of
a measured step's baseline would see if it ran later in the same process."""

from __future__ import annotations

import pytest
from specs import mlx_lm_setup

from introspect import refined
from introspect.refined import mlx
from introspect.refined.mlx_counts import all_counts
from introspect.setup import TrainingSetup

#: Not a derivation shape (those are d=128, 8 heads, E=12, k=4, fe=216, B=3, T ∈ {44, 176}).
SHAPE = dict(d=96, layers=3, ffn=128, heads=4, kv=2, vocab=3000, experts=8, top_k=2)


def setup_for(
    compiled: bool = False, dtype: str = "fp32", batch=2, seq=64, ckpt=False
) -> TrainingSetup:
    return mlx_lm_setup(dtype, compiled, batch, seq, ckpt)


def moe_config(**changes) -> dict:
    from introspect.measure import mlx_replay as mr

    s = SHAPE
    cfg = mr.family_config(
        "qwen3_moe", s["d"], s["layers"], s["ffn"], s["heads"], s["kv"], s["vocab"],
        experts=s["experts"], top_k=s["top_k"],
    )  # fmt: skip
    return cfg | changes


def spec_of(cfg: dict):
    from introspect.adapters.hf_config import spec_from_config

    return spec_from_config(cfg, use_transformers=False)


def measured_in_a_child(cfg: dict, compiled: bool) -> int:
    """``mlx_lm_models.measure``'s peak for ``cfg`` at :func:`setup_for`'s setup, run in
    a fresh Python (module docstring)."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    code = (
        "import json, sys\n"
        "sys.path.insert(0, sys.argv[1])\n"
        "from test_refined_mlx_moe import setup_for, spec_of\n"
        "from introspect.measure import mlx_lm_models\n"
        "cfg, compiled = json.loads(sys.argv[2]), sys.argv[3] == '1'\n"
        "setup = setup_for(compiled)\n"
        "m = mlx_lm_models.measure(cfg, 'test', spec_of(cfg), setup, compiled=compiled)\n"
        "print(m.peak_bytes)\n"
    )
    here = str(Path(__file__).resolve().parent)
    args = [sys.executable, "-c", code, here, json.dumps(cfg), "1" if compiled else "0"]
    out = subprocess.run(args, capture_output=True, text=True, check=True, timeout=120)
    return int(out.stdout.split()[-1])


def test_a_measured_and_a_replayed_qwen3_moe_step_are_within_5_percent():
    """mlx-lm's qwen3_moe class, one real FP32 step on the CPU (B·T·k = 256: SwitchGLU
    sorts the tokens) and the same step traced and replayed: the closed form, from
    counts read at other shapes, within 5% of both."""
    pytest.importorskip("mlx.core")
    pytest.importorskip("mlx_lm")
    import mlx.core as mx
    import mlx.optimizers as optim

    from introspect.measure import mlx_replay as mr

    cfg = moe_config()
    spec, setup = spec_of(cfg), setup_for()
    closed = refined.estimate(spec, setup).total
    measured = measured_in_a_child(cfg, compiled=False)

    model = mr.mlx_lm_model(cfg, mx.float32, evaluate=False)
    optimizer = optim.Adam(learning_rate=1e-4)
    optimizer.init(model.trainable_parameters())
    batch = mr.mlx_lm_batch(SHAPE["vocab"], setup.batch_size, setup.seq_len, evaluate=False)
    step = mr.make_step(model, optimizer, mr.mlx_lm_loss, False)
    graph = mr.graph_of(model, optimizer, step, batch, False)
    # Every projection's weight gradient is MLX's segmented product, and no marker is left.
    assert sum(n.name == "SegmentedMM" for n in graph.nodes) == 3 * SHAPE["layers"]
    assert all(graph.dtypes[o] != "float64" for n in graph.nodes for o in n.outputs)
    replayed = mr.replay(graph).peak_bytes
    assert closed == pytest.approx(measured, rel=0.05)
    assert closed == pytest.approx(replayed, rel=0.05)


def test_qwen3_moe_specs_get_the_moe_structure_and_its_sizes():
    spec, setup = spec_of(moe_config()), setup_for()
    assert mlx.structure_of(spec, setup) == "qwen3_moe"
    x = mlx.dims(spec, setup)
    assert (x.E, x.k, x.fe) == (SHAPE["experts"], SHAPE["top_k"], SHAPE["ffn"])
    assert set(mlx.MOE_KINDS) <= set(mlx.kinds(x))
    # More experts: more expert weights (state) and a larger router; more per token: more
    # token copies.
    more = spec_of(moe_config(num_experts=16))
    assert refined.estimate(more, setup).total > refined.estimate(spec, setup).total
    wider = spec_of(moe_config(num_experts_per_tok=4))
    assert refined.estimate(wider, setup).total > refined.estimate(spec, setup).total


@pytest.mark.parametrize(
    "changes,dtype,ckpt",
    [
        (dict(decoder_sparse_step=2), "fp32", False),  # MoE on every other layer
        (dict(mlp_only_layers=[0]), "fp32", False),
        (dict(tie_word_embeddings=True), "fp32", False),
        ({}, "bf16", False),  # MLX's CPU GatherMM runs FP32 only
        ({}, "fp32", True),  # mlx-lm's grad_checkpoint
    ],
)
def test_moe_setups_outside_the_derivation_keep_the_dense_counts_labelled(changes, dtype, ckpt):
    spec, setup = spec_of(moe_config(**changes)), setup_for(dtype=dtype, ckpt=ckpt)
    assert mlx.structure_of(spec, setup) == "qwen3"
    assert "MoE on the dense qwen3 counts" in refined.estimate(spec, setup).execution.label


def test_dense_structures_are_untouched():
    """A dense spec has no MoE sizes, no MoE kinds, the structure it had, and the same
    estimate with the MoE structures switched off; no dense count holds a MoE kind."""
    from introspect.measure import mlx_replay as mr

    cfg = mr.family_config("qwen3", 96, 3, 256, 4, 2, 3000)
    spec, setup = spec_of(cfg), setup_for(compiled=True)
    assert mlx.structure_of(spec, setup) == "qwen3"
    x = mlx.dims(spec, setup)
    assert (x.E, x.k, x.fe) == (0, 0, 0)
    assert not set(mlx.MOE_KINDS) & set(mlx.kinds(x))
    est = refined.estimate(spec, setup)
    assert "MoE" not in est.execution.label
    original = mlx.moe_structure
    mlx.moe_structure = lambda spec, setup: None
    try:
        assert refined.estimate(spec, setup).total == est.total
    finally:
        mlx.moe_structure = original
    for key, candidates in all_counts().items():
        if key.split("/")[0] in mlx.MOE_STRUCTURES:
            continue
        for c in candidates:
            for counts in c.at.values():
                assert not set(mlx.MOE_KINDS) & set(counts), key


def test_mixtral_specs_get_their_own_moe_structure():
    """mlx-lm's Mixtral (Llama's attention, a soft-max over the top-k logits, the same
    SwitchGLU) has its own counts; it was Llama's untied counts before."""
    from introspect.measure import mlx_replay as mr

    cfg = mr.family_config("mixtral", 96, 3, 128, 4, 2, 3000, experts=8, top_k=2)
    spec, setup = spec_of(cfg), setup_for(compiled=True)
    assert mlx.structure_of(spec, setup) == "mixtral"
    assert (mlx.dims(spec, setup).E, mlx.dims(spec, setup).k) == (8, 2)
    assert "MoE" not in refined.estimate(spec, setup).execution.label
    assert mlx.structure_of(spec, setup_for(dtype="bf16")) == "llama-untied"
