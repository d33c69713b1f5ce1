"""mlx-lm's LoRA with ``grad_checkpoint`` (``mlx_lm/tuner/trainer.py``: ``mx.checkpoint``
around every block's ``__call__``) in closed form: the counts read off replays of the
hand-built checkpointed step (``python benchmarks/mlx_derive_ckpt.py --lora``, keys
``<structure>/<dtype>/<mode>/lora/ckpt``) for every linear of Llama (tied and untied),
Qwen2 and Qwen3; a 4-bit base (``affine_base_bytes``) composes with them as without
checkpointing, checked against a real mlx-lm step over ``quantize_model``'d Llama.
The held-out real steps are ``benchmarks/mlx_lora.py --ckpt``'s
(``benchmarks/results/mlx-lora.md``, "Checkpointed") and
``tests/test_mlx_lora_keys.py``'s."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from introspect.adapters.hf_config import spec_from_config

from introspect.applies import NotApplicable
from introspect.refined import estimate, mlx
from introspect.refined.mlx_counts import CKPT_DATA, structure_counts
from introspect.setup import TrainingSetup

LLAMA = dict(
    model_type="llama", hidden_size=96, num_hidden_layers=4, num_attention_heads=6,
    num_key_value_heads=2, intermediate_size=160, vocab_size=3000, rms_norm_eps=1e-5,
    rope_theta=10000.0, max_position_embeddings=4096, tie_word_embeddings=True,
)  # fmt: skip
#: Every depth the checkpointed LoRA counts are read at (as the plain LoRA counts').
DEPTHS = {"at": [4, 10, 16, 32], "shallow": [1, 2, 3], "between": [5, 6, 7, 8, 9]}


def lora_setup(dtype: str = "fp32", compiled: bool = False, **kw) -> TrainingSetup:
    flags = dict(
        framework="mlx_compiled" if compiled else "mlx", device="cpu", finetune="lora",
        implementation="mlx_lm", lora_rank=8, batch_size=2, seq_len=256,
        precision="bf16" if dtype == "bf16" else "fp32", activation_dtype=dtype,
        weights_dtype=dtype, activation_checkpointing=True,
    )  # fmt: skip
    return TrainingSetup(**{**flags, **kw})


@pytest.mark.parametrize("structure", mlx.LORA_CKPT_STRUCTURES)
def test_checkpointed_lora_counts_are_read_at_every_depth(structure):
    """Each structure's checkpointed LoRA keys, FP32 and BF16, eager and compiled: whole
    tensors (whole bytes per element: 4 an FP32 tensor, 2 a BF16 one, 1 the boolean
    mask) at L = 1–10, 16, 32, the adapters' kinds
    among them, at the six derivation shapes (the largest moment and the update's)."""
    counts = structure_counts(structure, CKPT_DATA)
    for dtype in ("fp32", "bf16"):
        for compiled in (False, True):
            rows = counts[mlx.key(structure, dtype, compiled, lora=True) + "/ckpt"]
            assert len({(c.shape["seq"], c.shape["vocab"]) for c in rows}) == 6
            for c in rows:
                for part, depths in DEPTHS.items():
                    assert sorted(getattr(c, part)) == depths
                kinds = {k for at in c.at.values() for k in at}
                assert "B·T·r" in kinds or "d·r" in kinds
                held = [v for at in c.at.values() for v in at.values()]
                assert held and all(isinstance(v, int) and v > 0 for v in held)


def test_checkpointed_lora_is_priced_and_below_the_plain_step():
    """Every linear, no dropout: derived (no not-derived line, the counts apply); at a
    long sequence the checkpointed step keeps far less than the plain one (the blocks'
    activations are not kept), the state the same."""
    spec = spec_from_config(dict(LLAMA, num_hidden_layers=16), use_transformers=False)
    for dtype in ("fp32", "bf16"):
        for compiled in (False, True):
            setup = lora_setup(dtype, compiled, seq_len=2048)
            assert not mlx.lora_not_derived(spec, setup) and mlx.applies(setup, spec)
            ckpt = estimate(spec, setup)
            plain = estimate(spec, setup.replace(activation_checkpointing=False))
            assert ckpt.total < 0.6 * plain.total
            assert ckpt.execution.terms["weights"] == plain.execution.terms["weights"]


def test_checkpointing_with_what_is_not_read_is_one_line():
    """Named keys, a dropout, or a structure whose checkpointed LoRA is not read (Gemma
    2's): one line each, never a figure; DoRA with checkpointing is refused as a setup."""
    spec = spec_from_config(LLAMA, use_transformers=False)
    for change, named in (
        (dict(lora_targets=("q_proj", "v_proj")), "with keys q_proj, v_proj"),
        (dict(lora_dropout=0.1), "--lora-dropout"),
    ):
        why = mlx.lora_not_derived(spec, lora_setup(**change))
        assert named in why and "with --checkpointing" in why and "\n" not in why
    with pytest.raises(NotApplicable, match="--finetune dora with --checkpointing"):
        lora_setup(finetune="dora")
    gemma2 = dict(LLAMA, model_type="gemma2", head_dim=16, query_pre_attn_scalar=16)
    other = spec_from_config(gemma2, use_transformers=False)
    assert mlx.structure_of(other, lora_setup()) in mlx.LORA_STRUCTURES
    why = mlx.lora_not_derived(other, lora_setup())
    assert "with --checkpointing: answered by the MLX dry run" in why


def test_upcasts_under_checkpointing_are_one_layers():
    """An eager BF16 step's FP32 copies of the adapters' shared inputs
    (:func:`introspect.refined.mlx.lora_upcast_bytes`): under checkpointing one layer's
    (the one recomputed), not every adapted layer's."""
    spec = spec_from_config(LLAMA, use_transformers=False)
    ckpt = lora_setup("bf16")
    plain = ckpt.replace(activation_checkpointing=False)
    one = 3 * ckpt.batch_size * ckpt.seq_len * spec.hidden_size * 4  # q/k/v 2 more, gate/up 1
    assert mlx.lora_upcast_bytes(spec, ckpt) == one
    assert mlx.lora_upcast_bytes(spec, plain) == spec.num_hidden_layers * one
    assert mlx.lora_upcast_bytes(spec, lora_setup("bf16", compiled=True)) == 0


def real_quantized_peak(compiled: bool) -> int:
    """``mx.get_peak_memory()`` of a real checkpointed mlx-lm LoRA step over Llama
    quantized by ``mlx_lm.utils.quantize_model`` (4 bits, group 32)."""
    import mlx.core as mx
    from mlx_lm.utils import quantize_model

    from introspect.measure import mlx_lm_models, mlx_step

    setup = lora_setup(compiled=compiled, base_quant="affine4", group_size=32)
    spec = spec_from_config(LLAMA, use_transformers=False)
    model = mlx_lm_models.build(LLAMA, "test", mx.float32)
    quantize_model(model, {}, 32, 4)
    mlx_lm_models.to_lora(model, setup.replace(base_quant="auto", group_size=64))
    mx.eval(model.parameters())
    with mlx_lm_models.checkpointed(model, True):
        m = mlx_step.measure_step(
            model, setup, vocab=spec.vocab_size, compiled=compiled, implementation="mlx_lm",
            loss=mlx_lm_models.trainer_loss, repeats=2,
            inputs=mlx_lm_models.trainer_batch(spec.vocab_size, setup), random_state=True,
        )  # fmt: skip
    return m.peak_bytes


@pytest.mark.slow
@pytest.mark.parametrize("compiled", [False, True])
def test_checkpointed_lora_over_a_4bit_base_within_5_percent(compiled):
    """A real checkpointed LoRA step over a 4-bit base (``LoRALinear`` over
    ``QuantizedLinear``, the step in its own process as ``introspect measure`` runs it):
    within ±5% of the checkpointed counts over ``affine_base_bytes``, and below the same
    estimate with a dense base."""
    pytest.importorskip("mlx_lm")
    code = (
        f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); "
        f"import test_mlx_lora_ckpt as t; print(t.real_quantized_peak({compiled}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    peak = int(out.stdout.split()[-1])
    spec = spec_from_config(LLAMA, use_transformers=False)
    setup = lora_setup(compiled=compiled, base_quant="affine4", group_size=32)
    est = estimate(spec, setup).total
    assert abs(est / peak - 1) <= 0.05, (est, peak)
    assert estimate(spec, setup.replace(base_quant="auto", group_size=64)).total > est
