"""mlx-lm's LoRA on GPT-2, Gemma, Gemma 2 and StarCoder2, whose LoRA counts were derived
last (``python benchmarks/mlx_derive.py --lora STRUCTURE``): the closed form answers —
not the MLX dry run, not torch's moments — and lands within 5% of a real mlx-lm LoRA
step at a shape no count was read at (those: B=3, d=128, 8 heads, f=216, r=6,
T ∈ {44, 176})."""

from __future__ import annotations

import pytest
from specs import mlx_lm_setup

from introspect import refined
from introspect.refined import mlx
from introspect.refined.mlx_counts import all_counts

#: The structures whose LoRA counts this file checks.
FAMILIES = ("gpt2", "gemma", "gemma2", "starcoder2")
#: (d, L, f, heads, K/V heads, V): d = 80 and 5 heads of 16, MQA — no derivation shape.
SHAPE = (80, 3, 192, 5, 1, 2000)


def lora_setup(dtype: str = "fp32", compiled: bool = False, **kw):
    return mlx_lm_setup(dtype, compiled, batch=2, seq=80).replace(
        finetune="lora", lora_rank=4, **kw
    )


def family_spec(family: str):
    """mlx-lm's config for ``family`` at :data:`SHAPE`, tied as its structure was
    derived, and the spec read from it."""
    from introspect.adapters.hf_config import spec_from_config

    from introspect.measure import mlx_replay as mr

    d, layers, f, heads, kv, vocab = SHAPE
    cfg = mr.family_config(family, d, layers, f, heads, kv, vocab)
    cfg["tie_word_embeddings"] = mlx.STRUCTURES[family][1]
    return cfg, spec_from_config(cfg, source=family, use_transformers=False)


@pytest.mark.parametrize("family", FAMILIES)
def test_lora_counts_are_derived_at_every_depth_up_to_ten(family):
    """Each LoRA key of the family has its counts at L = 1–10, 16 and 32 (whole tensors),
    so the closed form extrapolates no depth up to 32 and reads its own counts there."""
    assert family in mlx.LORA_STRUCTURES
    derived = all_counts()
    for dtype in ("fp32", "bf16"):
        for compiled in (False, True):
            for c in derived[mlx.key(family, dtype, compiled, lora=True)]:
                assert set(c.at) == set(mlx.DEPTHS)
                assert set(c.shallow) == {1, 2, 3} and set(c.between) == {5, 6, 7, 8, 9}
                for depth, counts in (*c.shallow.items(), *c.between.items()):
                    assert all(isinstance(v, int) for v in counts.values())
                    read = {k: v for k, v in mlx.counts_at(c, depth).items() if v}
                    assert read == pytest.approx({k: v for k, v in counts.items() if v})


@pytest.mark.parametrize(
    "family,dtype,compiled",
    [
        ("gpt2", "fp32", False),
        ("gemma", "bf16", False),
        ("gemma2", "fp32", True),
        # not starcoder2 yet: spec_from_config(use_transformers=False) has no reader for it
    ],
)
def test_closed_form_within_5_percent_of_a_real_lora_step(family, dtype, compiled):
    """A real mlx-lm LoRA step (``model.freeze()``, ``linear_to_lora_layers`` with the
    default keys, Adam over the adapters), the largest of two: the closed form from the
    family's own LoRA counts — no not-derived line, no torch's moments — within 5%."""
    pytest.importorskip("mlx.core")
    pytest.importorskip("mlx_lm")
    from introspect.measure import mlx_lm_models
    from introspect.refined.lora import adapter_parameters

    cfg, spec = family_spec(family)
    setup = lora_setup(dtype, compiled)
    assert mlx.structure_of(spec, setup) == family and mlx.applies(setup, spec)
    assert mlx.lora_not_derived(spec, setup) == ""
    m = mlx_lm_models.measure(cfg, family, spec, setup, compiled=compiled, repeats=2)
    assert m.trainable_params == adapter_parameters(spec, setup)
    estimate = refined.estimate(spec, setup)
    assert "torch's moments" not in estimate.execution.label
    assert estimate.total == pytest.approx(m.peak_bytes, rel=0.05)
