"""TRL's trainers as they run (issue 21): the real ``SFTTrainer`` stepped on CPU with a
tiny Llama (:mod:`tests.trl_steps`), its config read by the project's own reader into the
closed form's setup, the estimate against the live-storage peak of the second step.

Tolerance: 0.5%. Measured (``benchmarks/trl_trainers.py``): full fine-tuning within
0.07%, LoRA within 0.2% (the closed form a little under the real step: the Trainer's
own small tensors, the collator's batch, are not priced).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("trl")
pytest.importorskip("peft")

import trl_steps  # noqa: E402
from introspect.adapters.hf_config import spec_from_config  # noqa: E402

pytestmark = pytest.mark.slow

TOLERANCE = 0.005

LLAMA = dict(
    model_type="llama", hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
    num_key_value_heads=2, intermediate_size=160, vocab_size=8000,
)  # fmt: skip
BASE = dict(per_device_train_batch_size=2, max_length=128)
LORA = dict(model_name_or_path="llama-small", use_peft=True, lora_r=8)

CASES = {
    "full-fp32": dict(bf16=False, gradient_checkpointing=False),
    # TRL's own defaults: bf16 = not fp16, gradient checkpointing on
    "full-defaults": {},
    "lora-fp32": dict(LORA, bf16=False, gradient_checkpointing=False, lora_dropout=0.0),
    # ModelConfig's lora_dropout 0.05 (each adapter keeps its dropped input)
    "lora-defaults": dict(LORA),
}


def run_sft(config: dict, train_rows: list[list[int]] | None = None):
    spec = spec_from_config(LLAMA, source="llama-small")
    setup, _ = trl_steps.setup_from_config(config)
    if train_rows is None:
        train_rows = trl_steps.rows(LLAMA["vocab_size"], [setup.seq_len] * 8)
    step = trl_steps.sft_step(
        LLAMA,
        train_rows,
        batch=setup.batch_size,
        peft_config=trl_steps.peft_config(spec, setup),
        **trl_steps.sft_config_keys({k: v for k, v in config.items() if k != "use_cpu"}),
    )
    return spec, setup, step


@pytest.mark.parametrize("case", list(CASES))
def test_sft_trainer_step_matches_the_closed_form(case):
    from introspect.refined import execution_estimate
    from introspect.refined.causes import tracker_phase

    config = dict(BASE, **CASES[case])
    spec, setup, step = run_sft(config)
    assert setup.trainer == "trl" and setup.cross_entropy == "trl"
    assert (setup.finetune == "lora") == ("use_peft" in config)
    est = execution_estimate(spec, setup)
    assert abs(est.total / step.peak_bytes - 1) < TOLERANCE, (est.total, step.peak_bytes)
    assert tracker_phase(est.meta["peak_phase"]) == step.phase
    if setup.finetune == "lora":
        # the frozen head: TRL's backward makes no FP32 weight-gradient accumulator; were
        # it priced (V·d·4), the estimate would be out of the tolerance
        extra = spec.vocab_size * spec.hidden_size * 4
        assert (est.total + extra) / step.peak_bytes - 1 > 2 * TOLERANCE


def _measured(setup_changes: dict, device: str = "cpu"):
    from introspect.measure import hf_models
    from introspect.setup import TrainingSetup

    spec = spec_from_config(LLAMA, source="llama-small")
    setup = TrainingSetup(
        batch_size=2, seq_len=128, implementation="transformers", loop="labels",
        cross_entropy="trl", device="cpu", **setup_changes,
    )  # fmt: skip
    m = hf_models.measure(LLAMA, "llama-small", spec, setup, device=device, census=False)
    return spec, setup, m[0]


@pytest.mark.parametrize("finetune", ["full", "lora"])
def test_measure_runs_trls_own_fused_head_as_the_mirror_does(finetune, monkeypatch):
    """``measure --cross-entropy trl`` patches the model with TRL's own
    ``add_fused_lm_head``; the line-by-line mirror (kept for where TRL does not import)
    holds the same bytes at the same moment, and the closed form holds to both (LoRA:
    the frozen head)."""
    from introspect.measure import losses
    from introspect.refined import execution_estimate

    changes = dict(precision="bf16", finetune=finetune, lora_rank=8)
    spec, setup, own = _measured(changes)
    assert any("TRL 1.16" in n and "own fused LM head" in n for n in own.notes), own.notes
    monkeypatch.setattr(losses, "_trl_fused_head", lambda: None)
    _, _, mirror = _measured(changes)
    assert any("mirrored line by line" in n for n in mirror.notes)
    assert own.peak_bytes == mirror.peak_bytes
    assert own.categories == mirror.categories
    est = execution_estimate(spec, setup)
    assert abs(est.total / own.peak_bytes - 1) < TOLERANCE, (est.total, own.peak_bytes)


def test_the_dry_run_of_trls_own_head_equals_the_real_step():
    _, _, real = _measured(dict(precision="amp", finetune="lora", lora_rank=8))
    _, _, fake = _measured(dict(precision="amp", finetune="lora", lora_rank=8), "fake")
    assert fake.peak_bytes == real.peak_bytes


@pytest.mark.parametrize(
    "changes, match",
    [
        (dict(cross_entropy="liger", finetune="lora"), "--cross-entropy liger and --finetune"),
        (dict(cross_entropy="torchtune", finetune="qlora"), "--cross-entropy torchtune and"),
        (
            dict(cross_entropy="trl", finetune="lora", lora_targets=("q_proj", "lm_head")),
            "--cross-entropy trl and --lora-targets lm_head",
        ),
    ],
)
def test_what_stays_unmodelled_is_refused(changes, match):
    from introspect.applies import NotApplicable
    from introspect.setup import TrainingSetup

    with pytest.raises(NotApplicable, match=match):
        TrainingSetup(implementation="transformers", **changes)
    TrainingSetup(implementation="transformers", cross_entropy="trl", finetune="lora")


SMALL_VOCAB = dict(LLAMA, vocab_size=2000)


@pytest.mark.parametrize(
    "extra, one_row",
    [
        (dict(packing=True), True),  # bfd: padding-free, one row of B bins
        (dict(packing=True, packing_strategy="wrapped"), False),  # B rows of max_length
        (dict(padding_free=True, packing=True, packing_strategy="wrapped"), True),
    ],
)
def test_packing_and_padding_free_are_the_sequence_the_step_sees(extra, one_row):
    """Eager attention (whose causal mask is T×T already, packed or not): the reader's
    B = 1, T = B·max_length for a padding-free batch is the step within the tolerance,
    and the batch as given (B rows of max_length) is not."""
    from introspect.refined import execution_estimate

    config = dict(per_device_train_batch_size=2, max_length=256, bf16=False, **extra)
    config["gradient_checkpointing"] = False
    spec = spec_from_config(SMALL_VOCAB, source="llama-small")
    setup, resolved = trl_steps.setup_from_config(config, attention="eager")
    assert (setup.batch_size, setup.seq_len) == ((1, 512) if one_row else (2, 256))
    assert any("block-diagonal mask" in n for n in resolved.notes) == one_row
    step = trl_steps.sft_step(
        SMALL_VOCAB, trl_steps.rows(2000, [256] * 8), batch=2, attention="eager", **config
    )
    est = execution_estimate(spec, setup).total
    assert abs(est / step.peak_bytes - 1) < TOLERANCE, (est, step.peak_bytes)
    if one_row:
        as_given = execution_estimate(spec, setup.replace(batch_size=2, seq_len=256)).total
        assert abs(as_given / step.peak_bytes - 1) > 2 * TOLERANCE


DPO_CASES = {
    "full-reference-fp32": dict(bf16=False, gradient_checkpointing=False),
    "full-reference-defaults": {},
    "full-precomputed": dict(bf16=False, gradient_checkpointing=False)
    | dict(precompute_ref_log_probs=True),
    # the adapter-free base as the reference; DPOConfig's disable_dropout zeroes the
    # ModelConfig's lora_dropout 0.05
    "lora-fp32": dict(LORA, bf16=False, gradient_checkpointing=False),
    "lora-defaults": dict(LORA),
}


@pytest.mark.parametrize("case", list(DPO_CASES))
def test_dpo_trainer_step_matches_the_closed_form(case):
    """The real DPOTrainer on a 16-pair preference dataset built in memory (prompts and
    completions longer than max_length, so every row is truncated to it): the closed
    form (2·B rows through TRL's fused head, the reference copy's weights under full
    fine-tuning without precomputed log-probs) within the tolerance, in the tracker's
    phase; the reference copy is counted by the tracker as an external tensor (its
    weights exist through the step, outside the policy)."""
    from introspect.refined import execution_estimate
    from introspect.refined.causes import tracker_phase

    config = dict(per_device_train_batch_size=2, max_length=64, **DPO_CASES[case])
    spec = spec_from_config(LLAMA, source="llama-small")
    setup, _ = trl_steps.setup_from_config(config, kind="dpo")
    assert setup.trainer == "dpo" and setup.cross_entropy == "trl"
    data = trl_steps.preference_rows(LLAMA["vocab_size"], 16, 40, 40)
    step = trl_steps.dpo_step(
        LLAMA,
        data,
        batch=2,
        reference=setup.finetune == "full" and setup.dpo_reference == "model",
        peft_config=trl_steps.peft_config(spec, setup),
        **trl_steps.sft_config_keys(config),
    )
    assert step.logs["input_ids"] == (2 * setup.batch_size, setup.seq_len)
    est = execution_estimate(spec, setup)
    assert abs(est.total / step.peak_bytes - 1) < TOLERANCE, (est.total, step.peak_bytes)
    assert tracker_phase(est.meta["peak_phase"]) == step.phase
    copy = est.terms.get("weights/reference", 0)
    if "precompute" in case or setup.finetune != "full":
        assert copy == 0
    else:
        assert copy == sum(p.numel() for p in trl_steps.model(LLAMA).parameters()) * 4
    # one row per pair would be far off: the step is over the chosen and the rejected
    as_sft = setup.replace(trainer="trl", dpo_reference="model")
    as_sft = execution_estimate(spec, as_sft).total
    assert abs(as_sft / step.peak_bytes - 1) > 4 * TOLERANCE


@pytest.mark.parametrize(
    "bf16, checkpointing", [(False, False), (True, False), (False, True), (True, True)]
)
def test_packed_sequences_under_sdpa_keep_their_mask(bf16, checkpointing):
    """SDPA (transformers' default) over a bfd-packed batch: the reader's packed row
    (``packed_sequences``) prices the block-diagonal mask each layer keeps (and K/V
    repeated to every head); without it the estimate is out of the tolerance."""
    from introspect.refined import execution_estimate

    config = dict(per_device_train_batch_size=2, max_length=512, packing=True, bf16=bf16)
    config["gradient_checkpointing"] = checkpointing
    spec = spec_from_config(SMALL_VOCAB, source="llama-small")
    setup, _ = trl_steps.setup_from_config(config)
    assert setup.packed_sequences and (setup.batch_size, setup.seq_len) == (1, 1024)
    step = trl_steps.sft_step(SMALL_VOCAB, trl_steps.rows(2000, [512] * 8), batch=2, **config)
    est = execution_estimate(spec, setup)
    assert abs(est.total / step.peak_bytes - 1) < TOLERANCE, (est.total, step.peak_bytes)
    if not checkpointing:
        unmasked = execution_estimate(spec, setup.replace(packed_sequences=False)).total
        assert abs(unmasked / step.peak_bytes - 1) > 2 * TOLERANCE


GEMMA2 = dict(
    model_type="gemma2", hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
    num_key_value_heads=2, head_dim=16, intermediate_size=160, vocab_size=8000,
    sliding_window=32, final_logit_softcapping=30.0,
)  # fmt: skip


@pytest.mark.parametrize("precision", ["fp32", "amp"])
def test_trls_soft_capped_head_is_priced(precision):
    """Gemma 2's final_logit_softcapping through TRL's own fused head (CPU: its torch
    fallback): the tanh keeps one more FP32 tile in the backward (and, under autocast, the
    forward transform holds the tile's FP32 copy); priced, the estimate is within the
    tolerance, and the tile it adds is more than twice the tolerance of the peak."""
    from introspect import applies
    from introspect.measure import hf_models
    from introspect.refined import execution_estimate
    from introspect.setup import TrainingSetup

    spec = spec_from_config(GEMMA2, source="gemma2-small")
    setup = TrainingSetup(
        batch_size=2, seq_len=128, implementation="transformers", loop="labels",
        cross_entropy="trl", device="cpu", precision=precision, attention="eager",
    )  # fmt: skip
    applies.check_model(spec, setup)  # TRL runs the softcap: priced, not refused
    m = hf_models.measure(GEMMA2, "gemma2-small", spec, setup, device="cpu", census=False)[0]
    est = execution_estimate(spec, setup)
    assert abs(est.total / m.peak_bytes - 1) < TOLERANCE, (est.total, m.peak_bytes)
    tile = 4 * setup.batch_size * (setup.seq_len - 1) * spec.vocab_size
    assert tile > 2 * TOLERANCE * m.peak_bytes
