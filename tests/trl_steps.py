"""Real TRL trainer steps (``SFTTrainer``, ``DPOTrainer``) on CPU for the tests and
``benchmarks/trl_trainers.py``: a tiny transformers model built from an inline config, a
word-level tokenizer built in memory, a pre-tokenized dataset in memory, and the
live-storage tracker (:mod:`introspect.measure.live_tracker`) entered around the second
optimizer step by a ``TrainerCallback`` (the first allocates the optimizer's state), so the
peak is of a steady-state step as the trainer runs it: its collator, ``compute_loss``,
``accelerator.backward``, gradient clipping, ``optimizer.step`` and ``zero_grad``.
Nothing is downloaded.
"""

from __future__ import annotations

import os
import tempfile
import warnings
from dataclasses import dataclass, field
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402


@dataclass
class Step:
    """One tracked trainer step."""

    peak_bytes: int
    kinds: dict[str, int]
    phase: str | None
    logs: dict[str, Any] = field(default_factory=dict)


def tokenizer(vocab: int):
    """A word-level fast tokenizer over ``t0 … t{vocab-1}`` (pad t0, eos t1)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = {f"t{i}": i for i in range(vocab)}
    tk = Tokenizer(models.WordLevel(words, unk_token="t0"))
    tk.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(
        tokenizer_object=tk, pad_token="t0", eos_token="t1", unk_token="t0"
    )


def model(raw: dict, dtype: torch.dtype = torch.float32, attention: str = "sdpa"):
    """The family's ``*ForCausalLM`` from ``raw`` (HF config keys), seeded."""
    from transformers import AutoConfig, AutoModelForCausalLM

    raw = dict(raw)
    config = AutoConfig.for_model(raw.pop("model_type"), **raw)
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(config, dtype=dtype, attn_implementation=attention)


def rows(vocab: int, lengths: list[int], seed: int = 0) -> list[list[int]]:
    """Random token ids (never the pad id 0), one row per length."""
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(2, vocab, (n,), generator=g).tolist() for n in lengths]


class _Track:
    """A TrainerCallback (built lazily: transformers imported inside) that tracks the
    second step."""

    def __new__(cls, at_step: int = 1):
        from transformers import TrainerCallback

        from introspect.measure.live_tracker import LiveStorageTracker

        class Track(TrainerCallback):
            def __init__(self) -> None:
                self.tracker = None
                self.result: Step | None = None
                #: Tensors outside the policy and its optimizer alive through the step
                #: (DPO's reference model), counted as MemTracker's track_external does.
                self.external: list[torch.Tensor] = []

            def on_step_begin(self, args, state, control, model=None, optimizer=None, **kw):
                if state.global_step == at_step:
                    inner = getattr(optimizer, "optimizer", optimizer)
                    self.tracker = LiveStorageTracker(model, inner, self.external)
                    self.tracker.__enter__()

            def on_step_end(self, args, state, control, **kw):
                if self.tracker is not None:
                    t, self.tracker = self.tracker, None
                    t.__exit__(None, None, None)
                    self.result = Step(t.peak_bytes, t.peak_kinds, t.peak_phase)

        return Track()


def _quiet():
    warnings.filterwarnings("ignore")
    import logging

    for name in ("transformers", "trl", "datasets", "bitsandbytes", "accelerate"):
        logging.getLogger(name).setLevel(logging.ERROR)
    from datasets.utils.logging import disable_progress_bar

    disable_progress_bar()


def _common(batch: int, **config: Any) -> dict[str, Any]:
    config.setdefault("per_device_train_batch_size", batch)
    return dict(
        max_steps=2,
        report_to=[],
        use_cpu=True,
        logging_steps=1000,
        save_strategy="no",
        dataloader_num_workers=0,
        disable_tqdm=True,
        seed=0,
        **config,
    )


def sft_step(
    raw: dict,
    train_rows: list[list[int]],
    *,
    batch: int,
    peft_config=None,
    dtype: torch.dtype = torch.float32,
    attention: str = "sdpa",
    **config: Any,
) -> Step:
    """Two steps of TRL's ``SFTTrainer`` (``SFTConfig(**config)`` beside the fixed keys of
    :func:`_common`) on ``train_rows``; the second tracked."""
    _quiet()
    from datasets import Dataset
    from trl import SFTConfig, SFTTrainer

    track = _Track()
    with tempfile.TemporaryDirectory() as out:
        args = SFTConfig(output_dir=out, **_common(batch, **config))
        trainer = SFTTrainer(
            model=model(raw, dtype, attention),
            args=args,
            train_dataset=Dataset.from_dict({"input_ids": train_rows}),
            processing_class=tokenizer(raw["vocab_size"]),
            peft_config=peft_config,
            callbacks=[track],
        )
        trainer.train()
    assert track.result is not None, "the tracked step did not run"
    return track.result


def setup_from_config(config: dict[str, Any], kind: str = "sft", **extra: Any):
    """The closed form's TrainingSetup for a TRL config, read by the project's own reader
    (:mod:`introspect.adapters.trainers.hf_trainer`) as ``--config`` reads the file, plus
    ``extra`` fields; the trainer's keys only (the comparison's fixed keys ignored)."""
    from introspect.adapters.trainers import _read_main
    from introspect.adapters.trainers._base import Resolved

    from introspect.setup import TrainingSetup

    resolved = Resolved("test", ["inline"])
    _read_main("inline.yaml", dict(config, use_cpu=True), kind, resolved)
    assert not resolved.unsupported, resolved.unsupported
    fields = {k: v.value for k, v in resolved.fields.items()}
    fields.update(extra)
    return TrainingSetup(**fields), resolved


def peft_config(spec, setup):
    """peft's LoraConfig for the setup, as ``measure`` builds it
    (:func:`introspect.measure.peft_step.lora_config`)."""
    if setup.finetune == "full":
        return None
    from introspect.measure.peft_step import lora_config

    return lora_config(spec, setup)


def sft_config_keys(config: dict[str, Any]) -> dict[str, Any]:
    """The SFTConfig arguments of a config dict: TRL's CLI ModelConfig keys dropped (the
    trainer takes them as ``peft_config`` and the model instead)."""
    from introspect.adapters.trainers import _keys

    drop = set(_keys.TRL_MODEL_CONFIG) | set(_keys.TRL_SCRIPT)
    return {k: v for k, v in config.items() if k not in drop}


def preference_rows(vocab: int, pairs: int, prompt: int, completion: int, seed: int = 0):
    """A preference dataset in memory: ``pairs`` rows of a prompt and a chosen and a
    rejected completion, as space-separated words of :func:`tokenizer` (one token
    each)."""
    g = torch.Generator().manual_seed(seed)

    def text(n: int) -> str:
        return " ".join(f"t{i}" for i in torch.randint(2, vocab, (n,), generator=g).tolist())

    return {
        "prompt": [text(prompt) for _ in range(pairs)],
        "chosen": [text(completion) for _ in range(pairs)],
        "rejected": [text(completion) for _ in range(pairs)],
    }


def dpo_step(
    raw: dict,
    data: dict[str, list[str]],
    *,
    batch: int,
    peft_config=None,
    reference: bool = True,
    dtype: torch.dtype = torch.float32,
    attention: str = "sdpa",
    **config: Any,
) -> Step:
    """Two steps of TRL's ``DPOTrainer`` (``DPOConfig(**config)``) on ``data``, the second
    tracked. Full fine-tuning without precomputed log-probs is given its reference model
    (``reference``: a second copy built from the same config, what the trainer would
    load from the model's path), as a user passing ``ref_model`` does. ``Step.logs``
    holds the shape of the batch the step saw (``input_ids``)."""
    _quiet()
    from datasets import Dataset
    from trl import DPOConfig, DPOTrainer

    track = _Track()
    shapes: list[tuple[int, ...]] = []
    with tempfile.TemporaryDirectory() as out:
        args = DPOConfig(output_dir=out, **_common(batch, **config))
        policy = model(raw, dtype, attention)
        ref = model(raw, dtype, attention) if reference else None
        trainer = DPOTrainer(
            model=policy,
            ref_model=ref,
            args=args,
            train_dataset=Dataset.from_dict(data),
            processing_class=tokenizer(raw["vocab_size"]),
            peft_config=peft_config,
            callbacks=[track],
        )
        if trainer.ref_model is not None:
            ref = trainer.ref_model
            track.external = [*ref.parameters(), *ref.buffers()]
        original = trainer.compute_loss

        def compute_loss(model, inputs, *a, **kw):
            shapes.append(tuple(inputs["input_ids"].shape))
            return original(model, inputs, *a, **kw)

        trainer.compute_loss = compute_loss
        trainer.train()
    assert track.result is not None, "the tracked step did not run"
    track.result.logs["input_ids"] = shapes[-1]
    return track.result
