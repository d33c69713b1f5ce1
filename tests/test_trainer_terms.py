"""The HF Trainer's own terms (:mod:`introspect.refined.trainers`) against real
``transformers.Trainer.train()`` runs on CPU: two steps of tiny Llama and GPT-2 configs
under the project's live tracker, the Trainer building its own optimizer (bitsandbytes'
8-bit AdamW with its ``nn.Embedding`` override, torch's AdamW, Adafactor, SGD).

The optimizer's state after the steps (every tensor in ``optimizer.state``) equals the
closed form's optimizer terms to the byte; the peak over ``train()`` is the closed form's
``--trainer hf`` execution total within 1% across optimizers, BF16 autocast,
checkpointing, accumulation and LoRA.
"""

from __future__ import annotations

import logging
import warnings

import pytest

from introspect.setup import TrainingSetup

LLAMA = dict(
    model_type="llama", hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
    num_key_value_heads=2, intermediate_size=160, vocab_size=1000,
)  # fmt: skip
LLAMA_TIED = dict(LLAMA, tie_word_embeddings=True)
GPT2 = dict(model_type="gpt2", n_embd=64, n_layer=2, n_head=4, vocab_size=1000, n_positions=128)
CONFIGS = {"llama": LLAMA, "llama tied": LLAMA_TIED, "gpt2": GPT2}

#: The Trainer's ``optim`` → (--optimizer, --optimizer-impl), as the config reader maps it.
OPTIM = {
    "adamw_torch_fused": ("adamw", "fused"),
    "adamw_torch": ("adamw", "auto"),
    "adamw_bnb_8bit": ("adam8bit", "auto"),
    "adafactor": ("adafactor", "auto"),
    "sgd": ("sgd", "auto"),
}
RANK = 8


def _dataset(rows: int, T: int, vocab: int):
    """A tokenized dataset as a tokenizer gives it: input_ids, attention_mask (no padding)
    and labels, B·T each once collated."""
    import torch

    g = torch.Generator().manual_seed(0)
    ids = [torch.randint(0, vocab, (T,), generator=g) for _ in range(rows)]
    return [
        {"input_ids": x, "attention_mask": torch.ones_like(x), "labels": x.clone()} for x in ids
    ]


def trainer_run(
    config: dict,
    *,
    optim: str = "adamw_torch_fused",
    B: int = 2,
    T: int = 64,
    bf16: bool = False,
    checkpointing: bool = False,
    accum: int = 1,
    lora: bool = False,
    embeddings: bool = False,
):
    """``Trainer.train()`` for two optimizer steps under the live tracker; returns the
    tracker and the optimizer."""
    import torch
    import transformers
    from transformers import Trainer, TrainingArguments

    from introspect.measure import live_tracker

    transformers.logging.set_verbosity_error()
    logging.getLogger("accelerate").setLevel(logging.ERROR)
    if "bnb" in optim:
        bnb = pytest.importorskip("bitsandbytes")
        # A process-wide singleton: an earlier Trainer's overrides, kept by (group,
        # index), would apply to this optimizer's tensors.
        bnb.optim.GlobalOptimManager.get_instance().initialize()
    keys = {k: v for k, v in config.items() if k != "model_type"}
    hf_config = transformers.AutoConfig.for_model(config["model_type"], **keys)
    hf_config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(hf_config)
    if lora:
        import peft

        extra = {"modules_to_save": ["embed_tokens", "lm_head"]} if embeddings else {}
        model = peft.get_peft_model(
            model, peft.LoraConfig(r=RANK, target_modules="all-linear", **extra)
        )
    args = TrainingArguments(
        output_dir="/tmp/introspect-trainer-terms",
        per_device_train_batch_size=B,
        max_steps=2,
        optim=optim,
        bf16=bf16,
        gradient_checkpointing=checkpointing,
        gradient_checkpointing_kwargs={"use_reentrant": False} if checkpointing else None,
        gradient_accumulation_steps=accum,
        use_cpu=True,
        report_to=[],
        save_strategy="no",
        logging_strategy="no",
        disable_tqdm=True,
    )
    data = _dataset(2 * B * accum, T, hf_config.vocab_size)
    trainer = Trainer(model=model, args=args, train_dataset=data)
    trainer.create_optimizer()  # the Trainer's own (train() keeps it): the tracker sees it
    tracker = live_tracker.LiveStorageTracker(trainer.model, trainer.optimizer)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with tracker:
            trainer.train()
    return tracker, trainer.optimizer


def closed_form(config: dict, *, optim: str = "adamw_torch_fused", **row):
    """The ``--trainer hf`` execution estimate of the same step."""
    from introspect.adapters.hf_config import spec_from_config

    from introspect.refined import execution_estimate

    optimizer, impl = OPTIM[optim]
    setup = TrainingSetup(
        batch_size=row.get("B", 2),
        seq_len=row.get("T", 64),
        optimizer=optimizer,
        optimizer_impl=impl,
        precision="amp" if row.get("bf16") else "fp32",
        activation_checkpointing=row.get("checkpointing", False),
        grad_accum=row.get("accum", 1),
        finetune="lora" if row.get("lora") else "full",
        lora_rank=RANK,
        train_embeddings=row.get("embeddings", False),
        device="cpu",
        trainer="hf",
    )
    return execution_estimate(spec_from_config(dict(config)), setup, notes=False)


def _optimizer_terms(estimate) -> int:
    return estimate.sum("optimizer") - estimate.terms.get("optimizer/temporaries", 0)


@pytest.mark.slow
@pytest.mark.parametrize(
    "family, row",
    [
        ("llama", {}),
        ("llama tied", {}),
        ("gpt2", {}),  # wte (tied to the head) and wpe: both nn.Embedding, both 32-bit
        ("llama", {"bf16": True}),
        ("llama", {"lora": True}),  # frozen embeddings: no state, every adapter 32-bit
        ("llama", {"lora": True, "embeddings": True}),  # peft's trainable embedding copy
    ],
    ids=["llama", "llama-tied", "gpt2", "llama-bf16", "llama-lora", "llama-lora-embeddings"],
)
def test_bnb_state_after_real_trainer_steps_is_the_closed_form_to_the_byte(family, row):
    from introspect.measure import live_tracker
    from introspect.refined import trainers

    config = CONFIGS[family]
    _, optimizer = trainer_run(config, optim="adamw_bnb_8bit", **row)
    state = live_tracker.optimizer_state_bytes(optimizer)
    estimate = closed_form(config, optim="adamw_bnb_8bit", **row)
    assert _optimizer_terms(estimate) == state
    embedding = estimate.terms.get(trainers.EMBEDDING_STATE, 0)
    if row.get("lora") and not row.get("embeddings"):
        assert embedding == 0
    else:  # the override is there: 8 bytes a value where the loop's Adam8bit keeps ~2
        assert embedding >= 8 * config["vocab_size"] * 64


def test_override_is_the_trainers_alone():
    """The loop's Adam8bit (``introspect measure``'s) has no override: its state stays the
    flat 2 bytes a value; the Trainer's prices the embedding's 8."""
    from introspect.adapters.hf_config import spec_from_config

    from introspect.refined import execution_estimate, trainers

    spec = spec_from_config(dict(LLAMA))
    base = TrainingSetup(batch_size=2, seq_len=64, optimizer="adam8bit", device="cpu")
    loop = execution_estimate(spec, base, notes=False)
    hf = execution_estimate(spec, base.replace(trainer="hf"), notes=False)
    assert trainers.EMBEDDING_STATE not in loop.terms
    assert hf[trainers.EMBEDDING_STATE] == 8 * spec.vocab_size * spec.hidden_size
    assert hf.total > loop.total


@pytest.mark.slow
@pytest.mark.parametrize(
    "family, row",
    [
        ("llama", {}),
        ("gpt2", {}),
        ("llama", {"optim": "adamw_torch"}),
        ("llama", {"optim": "adamw_torch", "T": 8}),  # the single-tensor loop per group
        ("llama", {"optim": "adamw_bnb_8bit"}),
        ("gpt2", {"optim": "adamw_bnb_8bit"}),
        ("llama", {"optim": "adafactor"}),
        ("llama", {"optim": "sgd"}),
        ("llama", {"bf16": True}),
        ("llama", {"checkpointing": True}),
        ("llama", {"accum": 2}),
        ("llama", {"lora": True}),
        # The checkpoint keeps the frozen embedding's output; the final norm its input.
        ("llama", {"lora": True, "checkpointing": True}),
        ("llama", {"lora": True, "optim": "adamw_bnb_8bit", "bf16": True}),
    ],
    ids=lambda v: v if isinstance(v, str) else "-".join(f"{k}={x}" for k, x in v.items()),
)
def test_trainer_peak_is_the_closed_form(family, row):
    config = CONFIGS[family]
    tracker, _ = trainer_run(config, **row)
    estimate = closed_form(config, **row)
    assert estimate.total == pytest.approx(tracker.peak_bytes, rel=0.01)


def test_batch_and_groups_are_the_trainers_alone():
    """The collated batch (3 int64 tensors a micro-batch, M micro-batches bound) and the
    per-group single-tensor update exist under --trainer hf, not in the loop."""
    from introspect.adapters.hf_config import spec_from_config

    from introspect.refined import execution_estimate, trainers

    spec = spec_from_config(dict(LLAMA))
    base = TrainingSetup(batch_size=2, seq_len=8, optimizer="adamw", device="cpu")
    loop = execution_estimate(spec, base, notes=False)
    hf = execution_estimate(spec, base.replace(trainer="hf", grad_accum=2), notes=False)
    assert trainers.BATCH not in loop.terms
    assert hf[trainers.BATCH] == 8 * 3 * 2 * 8 * 2
    # The head (V·d) follows the last down_proj in the weights' group, not the final norm.
    one = execution_estimate(spec, base.replace(trainer="hf"), notes=False)
    V, d, f = spec.vocab_size, spec.hidden_size, spec.ffn_dim
    assert one["optimizer/temporaries"] == 4 * (d * f + 2 * V * d)
    assert loop["optimizer/temporaries"] == 4 * (d + 2 * V * d)


def test_trainer_config_prices_the_8bit_and_paged_names(tmp_path):
    """``optim: adamw_bnb_8bit`` is modelled now (no "not modelled yet" note), and the
    paged names map to the paged optimizers."""
    import json

    from introspect.adapters import trainers

    for name, optimizer in (
        ("adamw_bnb_8bit", "adam8bit"),
        ("adamw_8bit", "adam8bit"),
        ("paged_adamw_8bit", "paged_adamw_8bit"),
        ("paged_adamw_32bit", "paged_adamw_32bit"),
    ):
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps({"optim": name, "per_device_train_batch_size": 2}))
        resolved = trainers.read([str(path)])
        assert resolved.fields["optimizer"].value == optimizer
        assert not resolved.unsupported
        assert not any("not modelled yet" in n for n in resolved.notes), resolved.notes
