"""The checkpointed step the replay traces (:mod:`introspect.measure.mlx_replay_ckpt`):
the same update as mlx-lm's ``grad_checkpoint`` step, and a real checkpointed step's
peak within the replay's bounds (tolerance as ``test_mlx_replay.py``'s: between the
worker caught up and as far behind as the scheduler allows, within 2%)."""

from __future__ import annotations

import pytest

mx = pytest.importorskip("mlx.core")
pytest.importorskip("mlx_lm")

import mlx.optimizers as optim  # noqa: E402
from mlx.utils import tree_flatten  # noqa: E402

from introspect.measure import mlx_replay as mr  # noqa: E402
from introspect.measure.mlx_replay_ckpt import checkpointed_step  # noqa: E402
from introspect.measure.mlx_replay_eval import replay  # noqa: E402
from introspect.measure.mlx_replay_trace import UntraceableError  # noqa: E402

pytestmark = pytest.mark.slow

SLACK = 0.02


def built(family: str, layers: int, tied: bool = True):
    cfg = mr.family_config(family, d=64, layers=layers, ffn=128, heads=4, kv=2, vocab=512)
    cfg["tie_word_embeddings"] = tied
    model = mr.mlx_lm_model(cfg)
    optimizer = optim.Adam(learning_rate=1e-2)
    optimizer.init(model.trainable_parameters())
    return model, optimizer


@pytest.mark.parametrize(
    "family,tied", [("llama", True), ("llama", False), ("qwen2", True), ("qwen3", True)]
)
def test_the_traced_step_updates_as_mlx_lms_checkpointed_step(family, tied):
    batch = mr.mlx_lm_batch(512, 2, 32)
    real, real_opt = built(family, 2, tied)
    with mr.checkpointed(real):
        loss = mr.make_step(real, real_opt, mr.mlx_lm_loss, False)(*batch)
        mx.eval(loss, real.state, real_opt.state)
    ours, ours_opt = built(family, 2, tied)
    value = checkpointed_step(ours, ours_opt, False)(*batch)
    mx.eval(value, ours.state, ours_opt.state)
    assert value[0].item() == loss[0].item()
    pairs = zip(tree_flatten(real.parameters()), tree_flatten(ours.parameters()), strict=True)
    for (k, a), (_, b) in pairs:
        assert mx.array_equal(a, b).item(), k


def test_mlx_lms_own_checkpointed_step_cannot_be_traced():
    model, optimizer = built("llama", 2)
    batch = mr.mlx_lm_batch(512, 1, 16)
    with mr.checkpointed(model), pytest.raises(UntraceableError):
        mr.graph_of(model, optimizer, mr.make_step(model, optimizer, mr.mlx_lm_loss, False),
                    batch, False)  # fmt: skip


@pytest.mark.parametrize("family,layers,compiled", [("llama", 4, True), ("qwen2", 6, False)])
def test_measured_checkpointed_peak_lies_within_the_replays_bounds(family, layers, compiled):
    import gc

    gc.collect()
    # Earlier tests' cached buffers would serve this step's allocations a little larger
    # than asked (MLX's buffer cache), which active memory counts.
    mx.clear_cache()
    held = mx.get_active_memory()
    batch = mr.mlx_lm_batch(512, 1, 128)
    model, optimizer = built(family, layers)
    graph = mr.graph_of(model, optimizer, checkpointed_step(model, optimizer, compiled),
                        batch, compiled)  # fmt: skip
    low, high = replay(graph, worker="caught_up"), replay(graph)
    with mr.checkpointed(model):
        step = mr.make_step(model, optimizer, mr.mlx_lm_loss, compiled)
        _, peaks = mr.measure(model, optimizer, step, batch, repeats=2)
    peak = max(peaks) - held
    assert low.peak_bytes * (1 - SLACK) <= peak <= high.peak_bytes * (1 + SLACK)
