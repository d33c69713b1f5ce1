"""The real ``transformers.Trainer`` (``--trainer hf``) or TRL ``SFTTrainer``
(``--trainer trl``) training transformers' own class for a few optimizer steps on the
CPU, and the peak of live tensor bytes over the whole ``trainer.train()``.

    args = TrainingArguments(per_device_train_batch_size=B, gradient_accumulation_steps=M,
                             bf16=amp, activation_checkpointing=…, optim=…, max_steps=K,
                             use_cpu=True, report_to=[], save_strategy="no", …)
    trainer = Trainer(model, args, train_dataset=rows)     # or SFTTrainer(…, peft_config)
    trainer.create_optimizer()                              # what train() would make first
    with LiveStorageTracker(trainer.model, trainer.optimizer):
        trainer.train()

Read from transformers 5.24.0 ``trainer.py`` and TRL 1.16.0 ``trl/trainer/sft_trainer.py``:

* ``Trainer.create_optimizer`` (trainer.py:1259) makes the optimizer only ``if
  self.optimizer is None`` and ``_prepare_for_training`` (trainer.py:1716) calls it
  again, so making it before ``train()`` is the same optimizer, with the bitsandbytes
  32-bit override for every ``nn.Embedding`` (trainer.py:1331) already registered; the
  tracker then knows its state and its step (``register_step_pre_hook``), which
  accelerate's ``AcceleratedOptimizer.step`` still calls.
* the dataset: B·M·K rows of T random token ids (labels = input ids), so every
  micro-batch is B×T with no padding; the Trainer stacks them with
  ``default_data_collator``. For TRL a ``datasets.Dataset`` whose ``input_ids`` column
  makes ``_prepare_dataset`` skip tokenizing (sft_trainer.py:1248 ``is_processed``),
  with ``max_length`` = T (no truncation) and a two-token tokenizer built here
  (``tokenizers.WordLevel``) as ``processing_class``, so nothing is downloaded
  (sft_trainer.py:714 would call ``AutoProcessor.from_pretrained``); TRL reads only its
  pad token (sft_trainer.py:970).
* LoRA: the Trainer gets the model wrapped by :func:`introspect.measure.peft_step.wrap`;
  SFTTrainer gets ``peft_config`` (:func:`peft_step.lora_config`) and calls
  ``get_peft_model`` itself (sft_trainer.py:870).
* the phase: a forward of the outermost model outside backward starts a new step's
  forward (:meth:`LiveStorageTracker.forward_begins`), so the later steps' forwards are
  not read as the first update's preparation.

A dry run is refused (:data:`FAKE_REFUSAL`). Tried: the model built and the Trainer made
inside FakeTensorMode (with :func:`introspect.measure.fake.module_surgery` for the
Trainer's ``model.to(device)``, trainer.py:4765), ``trainer.train()`` stops at its first
batch: accelerate's ``DataLoaderShard.__iter__`` (accelerate/data_loader.py:572, the
sampler's ``torch.randperm(…).tolist()``) reads tensor values, and past it the loop's
``torch.isnan(tr_loss_step)`` (trainer.py:1922) would too; fake tensors have none.
"""

from __future__ import annotations

import tempfile
from typing import Any

from introspect.applies import TRAINER_NO_DRY_RUN
from introspect.errors import IntrospectError
from introspect.measure.record import Measurement
from introspect.setup import TrainingSetup
from introspect.spec import ModelSpec

#: Optimizer steps each run takes: the first makes the optimizer's state, the second
#: steps with it alive from the start, as every later step does.
STEPS = 2

#: Why ``--trainer`` has no dry run (tried: see the module docstring).
FAKE_REFUSAL = TRAINER_NO_DRY_RUN


def _optim_names() -> dict[tuple[str, str], str]:
    """(TrainingSetup.optimizer, optimizer_impl) → the Trainer's ``optim`` name: the
    config reader's table (:data:`introspect.adapters.trainers.hf_trainer.OPTIM`, and the
    names the setup models as they are) read backwards, the first name of each setup
    kept (adamw_torch before 4.x's adamw_hf, adamw_bnb_8bit before adamw_8bit). On the
    CPU torch's own choice (``auto``) is the single-tensor loop, so that spelling maps to
    the same name (transformers/training_args.py ``OptimizerNames``; trainer.py
    ``get_optimizer_cls_and_kwargs``)."""
    from introspect.adapters.trainers import hf_trainer

    names: dict[tuple[str, str], str] = {}
    for name, key in hf_trainer.OPTIM.items():
        names.setdefault(key, name)
    for name in hf_trainer.OWN_STATE_MODEL:
        names.setdefault((name, "auto"), name)
    for (optimizer, impl), name in list(names.items()):
        if impl == "auto" and optimizer in ("adamw", "sgd"):
            names[(optimizer, "single_tensor")] = name
    return names


OPTIM = _optim_names()


def optim_name(setup: TrainingSetup) -> str:
    """The Trainer's ``optim`` for the setup's optimizer (:data:`OPTIM`), or one line."""
    name = OPTIM.get((setup.optimizer, setup.optimizer_impl))
    if name is not None:
        return name
    if any(opt == setup.optimizer for opt, _ in OPTIM):
        impl = setup.optimizer_impl.replace("_", "-")
        return _refuse(
            f"--optimizer-impl {impl} with --optimizer {setup.optimizer}: the Trainer's optim "
            "names give torch's own implementation (adamw_torch, sgd) or fused "
            "(adamw_torch_fused) only; drop --optimizer-impl or use auto/fused"
        )
    return _refuse(
        f"--optimizer {setup.optimizer}: the Trainer has no optim name for it (it takes "
        "adamw, adam8bit, adafactor, sgd, paged_adamw_8bit, paged_adamw_32bit here); "
        "choose one of those, or drop --trainer"
    )


def _refuse(line: str) -> str:
    raise IntrospectError(line)


def check(setup: TrainingSetup) -> None:
    """One line for what the Trainer run cannot do: it is one CPU process, with the
    precisions the Trainer's own flags give."""
    if setup.precision == "mixed":
        _refuse(
            "--precision mixed with --trainer: the Trainer keeps no FP32 master copy of "
            "16-bit weights (that is DeepSpeed's or FSDP's); use --precision amp "
            "(bf16=True) or bf16 (a BF16 model)"
        )
    if setup.finetune == "qlora":
        _refuse(
            f"--finetune qlora with --trainer {setup.trainer}: the Trainer's QLoRA base is "
            "loaded by from_pretrained(quantization_config=…), which a model built from its "
            "config does not go through; use --finetune lora, or drop --trainer"
        )
    if setup.optimizer_in_backward:
        _refuse("--optimizer-in-backward with --trainer: the Trainer steps after backward")
    if setup.offload_activations:
        _refuse(
            "--offload-activations with --trainer: not wired to the Trainer's run "
            "(TRL's activation_offloading is its own); drop one"
        )
    optim_name(setup)


def _arguments(setup: TrainingSetup, output_dir: str, steps: int) -> dict[str, Any]:
    """The TrainingArguments the setup asks for, and what keeps the run on the CPU,
    quiet and writing nothing outside ``output_dir``."""
    return {
        "output_dir": output_dir,
        "per_device_train_batch_size": setup.batch_size,
        "gradient_accumulation_steps": setup.grad_accum,
        "max_steps": steps,
        "bf16": setup.precision == "amp",
        "activation_checkpointing": setup.activation_checkpointing,  # 5.x name
        "optim": optim_name(setup),
        "use_cpu": True,
        "report_to": [],
        "save_strategy": "no",
        "logging_strategy": "no",
        "disable_tqdm": True,
        "dataloader_num_workers": 0,
        "seed": 0,
    }


def _rows(vocab: int, setup: TrainingSetup, steps: int) -> list[list[int]]:
    import random

    rng = random.Random(0)
    n = setup.batch_size * setup.grad_accum * steps
    return [[rng.randrange(vocab) for _ in range(setup.seq_len)] for _ in range(n)]


def _tokenizer():
    """A two-token fast tokenizer (pad, eos), enough for SFTTrainer's pad token; built
    here so nothing is read from the Hub."""
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from transformers import PreTrainedTokenizerFast

    raw = Tokenizer(WordLevel({"<pad>": 0, "<eos>": 1}, unk_token="<pad>"))
    return PreTrainedTokenizerFast(tokenizer_object=raw, pad_token="<pad>", eos_token="<eos>")


def make_trainer(
    model, spec: ModelSpec, setup: TrainingSetup, vocab: int, output_dir: str, steps: int, trainer
):
    """The Trainer (``trainer`` hf) or SFTTrainer (trl) over ``model``."""
    rows = _rows(vocab, setup, steps)
    kwargs = _arguments(setup, output_dir, steps)
    if trainer == "trl":
        import datasets
        from datasets import Dataset
        from trl import SFTConfig, SFTTrainer

        datasets.disable_progress_bars()  # TRL's map() over the rows: stderr noise

        peft_config = None
        if setup.finetune == "lora":
            from introspect.measure import peft_step

            conv1d = any(type(m).__name__ == "Conv1D" for m in model.modules())
            peft_config = peft_step.lora_config(spec, setup, fan_in_fan_out=conv1d)
        args = SFTConfig(**kwargs, max_length=setup.seq_len)
        return SFTTrainer(
            model=model,
            args=args,
            train_dataset=Dataset.from_dict({"input_ids": rows}),
            processing_class=_tokenizer(),
            peft_config=peft_config,
        )
    import torch
    from transformers import Trainer, TrainingArguments

    if setup.finetune == "lora":
        from introspect.measure import peft_step

        model = peft_step.wrap(model, spec, setup, next(model.parameters()).dtype)
    data = [{"input_ids": torch.tensor(r), "labels": torch.tensor(r)} for r in rows]
    return Trainer(model=model, args=TrainingArguments(**kwargs), train_dataset=data)


def _fresh_bnb_overrides() -> None:
    """An empty bitsandbytes override table, as a fresh process has. Its
    ``GlobalOptimManager`` (bitsandbytes/optim/optimizer.py:36) is a process-wide
    singleton whose ``index2config`` maps (group, index) → config and is never cleared:
    a second 8-bit optimizer in the same process (a benchmark's next row) would give
    32-bit state to whatever parameter sits where the last model's embedding sat."""
    try:
        from bitsandbytes.optim import GlobalOptimManager
    except ImportError:
        return  # the Trainer's own import of bitsandbytes says what to install
    GlobalOptimManager.get_instance().initialize()


def bnb_fp32_state(model, optimizer) -> dict[str, int]:
    """Bytes of 32-bit optimizer state a bitsandbytes 8-bit optimizer holds (``state1``
    in FP32), for ``nn.Embedding`` weights (the Trainer's override, trainer.py:1338) and
    for the other tensors under its ``min_8bit_size`` (4096 values,
    bitsandbytes/optim/optimizer.py ``Optimizer8bit``: a small LoRA adapter); empty for
    any other optimizer. Measured from ``optimizer.state``, not modelled."""
    import torch
    from torch import nn

    from introspect.measure.live_tracker import storage_bytes

    if "bitsandbytes" not in type(optimizer).__module__:
        return {}
    embeddings = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    out = {"embeddings": 0, "small tensors": 0}
    for p, state in optimizer.state.items():
        if getattr(state.get("state1"), "dtype", None) != torch.float32:
            continue
        kind = "embeddings" if id(p) in embeddings else "small tensors"
        out[kind] += storage_bytes(v for v in state.values() if isinstance(v, torch.Tensor))
    return out


def trainer_version(trainer: str) -> str:
    """``transformers 5.24.0 Trainer`` or ``TRL 1.16.0 SFTTrainer``."""
    from introspect.measure.record import versions

    if trainer == "trl":
        return f"TRL {versions('trl').get('trl', '?')} SFTTrainer"
    return f"transformers {versions('transformers').get('transformers', '?')} Trainer"


def measure(
    raw: dict[str, Any],
    where: str,
    spec: ModelSpec,
    setup: TrainingSetup,
    *,
    overrides: dict[str, Any] | None = None,
    steps: int = STEPS,
    trainer: str | None = None,
    terms: dict[str, int] | None = None,
) -> Measurement:
    """Build transformers' class for ``raw``, run ``trainer.train()`` for ``steps``
    optimizer steps under the live-storage tracker, and return the peak over the run.

    ``trainer`` (default ``setup.trainer``) lets a benchmark run SFTTrainer for a setup
    the closed form refuses to hold (TRL's fused head under LoRA): the run needs only
    the setup's batch, length, precision, checkpointing, optimizer and LoRA. ``terms``,
    when given, is filled with terms measured beside the peak (bitsandbytes' 32-bit
    state, :func:`bnb_fp32_state`) for a benchmark to name a miss by."""
    import logging
    import warnings

    import torch

    from introspect.measure import hf_models, live_tracker
    from introspect.measure.record import versions
    from introspect.measure.torch_step import check_setup, weight_count
    from introspect.refined.implementations import resolve_attention

    trainer = trainer or setup.trainer
    if trainer == "loop":
        raise ValueError("trainer_run.measure runs a trainer: hf or trl")
    check(setup)
    setup = resolve_attention(spec, setup)
    dtype = check_setup(setup)
    model = hf_models.build(raw, where, attention=setup.attention, dtype=dtype, overrides=overrides)
    built = type(model).__name__
    vocab = model.config.get_text_config().vocab_size
    logging.getLogger("bitsandbytes").setLevel(logging.ERROR)
    for name in ("transformers", "trl", "accelerate", "peft"):
        logging.getLogger(name).setLevel(logging.ERROR)
    temporary = tempfile.TemporaryDirectory(prefix="introspect-trainer-")
    with temporary as out, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if optim_name(setup).endswith("8bit"):
            _fresh_bnb_overrides()
        run = make_trainer(model, spec, setup, vocab, out, steps, trainer)
        from transformers.trainer_callback import PrinterCallback

        run.remove_callback(PrinterCallback)  # the end-of-run metrics dict on stdout
        optimizer = run.create_optimizer()
        tracker = live_tracker.LiveStorageTracker(run.model, optimizer)
        top = run.model

        def forward_begins(module, args):
            if live_tracker._graph_task_id() == -1:
                tracker.forward_begins()

        handle = top.register_forward_pre_hook(forward_begins)
        try:
            with tracker:  # no time reported: the tracker slows every operation
                run.train()
        finally:
            handle.remove()
        model = run.model
    state = live_tracker.optimizer_state_bytes(optimizer)
    categories = live_tracker.categories(tracker.peak_kinds, state)
    lora = setup.finetune != "full"
    notes = [
        f"stepped by {trainer_version(trainer)}: {steps} optimizer steps "
        f"(optim={optim_name(setup)}, bf16={setup.precision == 'amp'}, "
        f"activation_checkpointing={setup.activation_checkpointing}, "
        f"gradient_accumulation_steps={setup.grad_accum}, max_grad_norm="
        f"{run.args.max_grad_norm}); peak over the whole trainer.train()",
        f"transformers {built} from {where}",
        "synthetic data: B·M·K rows of T random token ids, labels = input ids, no padding",
        "peak from live tensor storages (MemTracker's rules), exact bytes",
    ]
    fp32_state = bnb_fp32_state(model, optimizer)
    if terms is not None:
        terms.update({f"bnb 32-bit state, {k}": v for k, v in fp32_state.items()})
    if fp32_state.get("embeddings"):
        notes.append(
            "bitsandbytes keeps 32-bit state for the nn.Embedding weights (the Trainer's "
            f"override, trainer.py:1338): {fp32_state['embeddings']:,} bytes"
        )
    if fp32_state.get("small tensors"):
        notes.append(
            "bitsandbytes keeps 32-bit state for tensors under 4096 values (min_8bit_size): "
            f"{fp32_state['small tensors']:,} bytes"
        )
    if lora:
        from introspect.refined.lora import targets

        how = "SFTTrainer's peft_config" if trainer == "trl" else "get_peft_model"
        notes.append(f"peft LoRA r={setup.lora_rank} on {', '.join(targets(spec, setup))} ({how})")
    return Measurement(
        peak_bytes=tracker.peak_bytes,
        categories=categories,
        peak_phase=tracker.peak_phase,
        backend="torch",
        device="cpu",
        implementation="transformers+peft" if lora else "transformers",
        n_params=sum(weight_count(p) for p in model.parameters()),
        trainable_params=sum(weight_count(p) for p in model.parameters() if p.requires_grad),
        versions=versions("torch", "transformers", "trl", "accelerate", "peft")
        | {"torch_threads": str(torch.get_num_threads())},
        setup=setup.to_dict() | {"trainer": trainer},
        notes=tuple(notes),
    )
