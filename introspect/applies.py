"""Which flags apply to which setup: one table, read by the flags, TrainingSetup and fit.

Every rule says, for one flag, whether the setup asks for it (``uses``), whether the rest
of the setup is one it means something for (``applies``), and why not otherwise. A flag
given where it does not apply is refused with one line naming it and the reason (issue
25): it must never quietly change a number (MLX has no host offload, so an offload
cannot lower an MLX estimate) nor be accepted and ignored (``--micro-batches`` without a
pipeline). The same table decides which of ``fit``'s changes it may propose
(:func:`refusal` on the changed setup), so the fit finder never offers what the flags
would refuse.

Flags that only the command line can see (``--weights-dtype fp32`` given or left at its
default) are :func:`contradictions`; checks that need the model's shape (heads, K/V
heads, layers, feed-forward and expert widths against ``--tp``/``--pp``) are
:func:`check_parallel`; what a measured step or a dry run cannot reproduce is
:func:`unmeasured`.

Sources of the MLX rules (mlx and mlx-lm in the venv): ``mlx/optimizers/optimizers.py``
has SGD, RMSprop, Adagrad, AdaDelta, Adam, AdamW, Adamax, Lion, Adafactor and Muon, no
8-bit state and no choice of update kernel; ``mlx_lm/tuner/trainer.py`` takes
``nn.losses.cross_entropy(logits, targets)`` over all the logits, and its step gets every
gradient from ``nn.value_and_grad`` before ``optimizer.update`` (no per-parameter hook,
torch's ``Tensor.register_post_accumulate_grad_hook``); MLX arrays live in unified memory
(no host copy to offload to); :mod:`introspect.refined.mlx` derives one device's step.
Sharding: FSDP2's ``reshard_after_forward`` (``torch/distributed/fsdp/_fully_shard/``),
DDP's ``gradient_as_bucket_view`` (``torch/nn/parallel/distributed.py``, used under
ZeroRedundancyOptimizer too); fine-tuning: peft's ``lora_dropout``, bitsandbytes'
``bnb_4bit_use_double_quant`` (NF4 only).
"""

from __future__ import annotations

from collections.abc import Callable

from introspect.errors import IntrospectError
from introspect.mlx_setups import dora_unmodelled_flag, step_derived

#: Optimizers that are not torch.optim's, each with one update: transformers' Adafactor
#: and bitsandbytes' paged AdamW (the ``--optimizer`` names after ``setup.OPTIMIZERS``'s).
LIBRARY_OPTIMIZERS = ("adafactor", "paged_adamw_8bit", "paged_adamw_32bit")
#: bitsandbytes' paged optimizer state, where the device holds it (the note the output
#: carries; introspect/refined/optimizers.py prices it as optimizer/paged_state).
PAGED_NOTE = (
    "optimizer/paged_state is bitsandbytes' paged state (cudaMallocManaged unified memory): "
    "torch's allocator (memory_allocated, max_memory_allocated) does not see it; "
    "nvidia-smi does while it is resident on the device"
)

TYPE_CHECKING = False  # typing's flag without importing typing (see introspect._record)
if TYPE_CHECKING:
    from typing import Any


class NotApplicable(IntrospectError, ValueError):
    """A flag given with a setup it does not apply to (one line: the flag and why).

    A ValueError too, as :class:`introspect.setup.TrainingSetup`'s other invariants are."""


def _mlx(s: Any) -> bool:
    return s.framework in ("mlx", "mlx_compiled")


def _dash(name: str) -> str:
    return str(name).replace("_", "-")


def _sharding_flag(s: Any) -> str:
    how = s.resolved_sharding
    return {"ddp": "--ddp", "fsdp": "--fsdp"}.get(how, f"--zero {s.zero_stage}")


#: --lora-targets names beyond the blocks (introspect.setup.HEAD_LORA_MODULES).
_HEADS = ("lm_head", "embed_tokens")

#: MLX's memory is the host's: the unified memory the CPU and GPU share.
_UNIFIED = "MLX keeps every array in unified memory, which the CPU and GPU share"

#: (flag as typed, the setup uses it, it applies to the rest of the setup, why not).
#: The first rule a setup breaks is the one reported; the MLX rules come first, so a
#: torch-only flag on MLX says so rather than naming a second flag it would also need.
RULES: tuple[tuple[Callable[[Any], str], Callable[[Any], bool], Callable[[Any], bool], str], ...]
RULES = (
    # ---- torch-only features on MLX ----------------------------------------------------
    (
        lambda s: f"--offload {s.offload}",
        lambda s: s.offload != "none",
        lambda s: not _mlx(s),
        f"is torch-only (ZeRO-Offload, FSDP's CPUOffload): {_UNIFIED}, so there is no "
        "separate host memory to move state to; drop --offload or use --framework torch",
    ),
    (
        lambda s: "--optimizer adam8bit",
        lambda s: s.optimizer == "adam8bit",
        lambda s: not _mlx(s),
        "is torch-only (bitsandbytes' 8-bit Adam): mlx.optimizers has no 8-bit state; "
        "use --optimizer adam or adamw, or --framework torch",
    ),
    (
        lambda s: "--optimizer-in-backward",
        lambda s: s.optimizer_in_backward,
        lambda s: not _mlx(s),
        "is torch-only (a post-accumulate-grad hook per parameter): MLX's value_and_grad "
        "returns every gradient before the update runs; drop it or use --framework torch",
    ),
    (
        lambda s: "--offload-activations",
        lambda s: s.offload_activations,
        lambda s: not _mlx(s),
        f"is torch's save_on_cpu (saved tensors to host memory): {_UNIFIED}, so there is "
        "no separate host memory to move them to; drop it or use --framework torch",
    ),
    (
        lambda s: f"--optimizer-impl {_dash(s.optimizer_impl)}",
        lambda s: s.optimizer_impl != "auto",
        lambda s: not _mlx(s),
        "chooses torch's update kernel: MLX has one update, in the step's graph; drop "
        "--optimizer-impl",
    ),
    (
        lambda s: "--precision amp",
        lambda s: s.precision == "amp",
        lambda s: not _mlx(s),
        "is torch.autocast: MLX has no autocast and runs in the weights' dtype; use "
        "--precision fp32 or bf16",
    ),
    (
        lambda s: "--precision mixed",
        lambda s: s.precision == "mixed",
        lambda s: not _mlx(s),
        "keeps an FP32 master copy under 16-bit weights (DeepSpeed, Megatron, FSDP2): "
        "mlx-lm trains in the weights' own dtype; use --precision bf16 or fp32",
    ),
    (
        lambda s: f"--cross-entropy {s.cross_entropy}",
        lambda s: s.cross_entropy != "standard",
        lambda s: not _mlx(s),
        "is torch's (a chunked or fused linear cross-entropy, such as Liger's): mlx-lm's "
        "trainer takes its loss over all the logits, and the MLX estimate has no chunked "
        "loss; use --cross-entropy standard or --framework torch",
    ),
    (
        lambda s: f"--cross-entropy {s.cross_entropy} and --finetune {s.finetune}",
        lambda s: s.cross_entropy in ("torchtune", "liger") and s.finetune != "full",
        lambda s: False,
        "contradict here: torchtune's and Liger's losses are priced and measured with the "
        "head's weight trained (introspect/refined/losses.py: Liger makes its gradient in "
        "the forward); use --cross-entropy trl, standard or fused with LoRA",
    ),
    (
        lambda s: "--cross-entropy trl and --lora-targets lm_head",
        lambda s: s.cross_entropy == "trl" and "lm_head" in s.lora_targets,
        lambda s: s.finetune == "full",
        "contradict: TRL's fused head multiplies by lm_head.weight directly, so an adapter "
        "on lm_head is never trained (SFTTrainer refuses it, sft_trainer.py:1066); drop "
        "lm_head from --lora-targets",
    ),
    (
        lambda s: f"--cross-entropy {s.cross_entropy} with --tp/--pp",
        lambda s: (
            s.cross_entropy in ("torchtune", "trl", "liger")
            and (s.tensor_parallel > 1 or s.pipeline_parallel > 1)
        ),
        lambda s: False,
        "is not priced with a sharded output projection (torchtune's loss-parallel, a "
        "vocabulary-parallel head); drop --tp/--pp or use --cross-entropy fused",
    ),
    (
        _sharding_flag,
        lambda s: s.resolved_sharding != "none",
        lambda s: not _mlx(s),
        "is torch's (DistributedDataParallel, FSDP2, ZeroRedundancyOptimizer, "
        "DeepSpeed): the MLX estimate is one Mac's step; use --framework torch",
    ),
    (
        lambda s: (
            f"--tp {s.tensor_parallel}" if s.tensor_parallel > 1 else f"--pp {s.pipeline_parallel}"
        ),
        lambda s: s.tensor_parallel > 1 or s.pipeline_parallel > 1,
        lambda s: not _mlx(s),
        "is Megatron-LM's model parallelism (torch): the MLX estimate is one Mac's step; "
        "use --framework torch",
    ),
    (
        lambda s: f"--devices {s.devices}",
        lambda s: s.devices > 1,
        lambda s: not _mlx(s),
        "with MLX: the MLX estimate is one Mac's step (MLX's distributed data parallel is "
        "not modelled); drop --devices or use --framework torch",
    ),
    (
        lambda s: f"--grad-accum {s.grad_accum}",
        lambda s: s.grad_accum > 1,
        lambda s: not _mlx(s) or step_derived(s),
        "on MLX is modelled over MLX's derived steps only (full Adam fine-tuning, or "
        "mlx-lm's LoRA/DoRA on every linear, introspect.refined.mlx_dora); this setup has "
        "torch's moments: drop --grad-accum or use --framework torch",
    ),
    (
        lambda s: "--finetune dora",
        lambda s: s.finetune == "dora",
        lambda s: _mlx(s),
        "is mlx-lm's DoRA (DoRALinear, mlx_lm/tuner/dora.py), modelled on --framework mlx "
        "only (peft's use_dora is not modelled); use --framework mlx, or --finetune lora",
    ),
    (
        lambda s: f"--finetune dora with {dora_unmodelled_flag(s)}",
        lambda s: s.finetune == "dora" and _mlx(s),
        lambda s: dora_unmodelled_flag(s) is None,
        "is not modelled: MLX's DoRA step is derived for mlx-lm's DoRALinear on every "
        "linear of each block (mlx-lm's default keys), a float base, Adam or AdamW, no "
        "checkpointing, one device; drop that flag or use --finetune lora",
    ),
    # ---- who runs the step -------------------------------------------------------------
    (
        lambda s: f"--trainer {s.trainer}",
        lambda s: s.trainer != "loop",
        lambda s: not _mlx(s) and s.implementation == "transformers",
        "steps transformers' own classes on torch (the trainer builds the model from its "
        "config); use --impl transformers on --framework torch, or drop --trainer",
    ),
    (
        lambda s: f"--trainer {s.trainer} and --cross-entropy {s.cross_entropy}",
        lambda s: s.trainer in ("trl", "dpo"),
        lambda s: s.cross_entropy == "trl",
        "contradict: TRL's SFTTrainer and DPOTrainer always replace the LM-head loss with "
        "TRL's fused head (trl/trainer/sft_trainer.py:1144, dpo_trainer.py:960 "
        "add_fused_lm_head); drop --cross-entropy",
    ),
    (
        lambda s: "--packed-sequences",
        lambda s: s.packed_sequences,
        lambda s: not _mlx(s) and s.implementation == "transformers",
        "is transformers' packed-sequence mask (masking_utils.py find_packed_sequence_indices): "
        "use --impl transformers on --framework torch, or drop it",
    ),
    (
        lambda s: f"--dpo-reference {s.dpo_reference}",
        lambda s: s.dpo_reference != "model",
        lambda s: s.trainer == "dpo",
        "is DPOTrainer's (precompute_ref_log_probs): add --trainer dpo, or drop it",
    ),
    (
        lambda s: "--loop labels",
        lambda s: s.loop == "labels",
        lambda s: s.implementation == "transformers",
        "is the loss computed by the model from labels=, which only transformers' classes "
        "do; add --impl transformers or use --loop logits",
    ),
    (
        lambda s: f"--precision amp and --weights-dtype {s.weights_dtype}",
        lambda s: s.precision == "amp",
        lambda s: s.weight_bytes == 4,
        "contradict: amp is torch.autocast over FP32 weights; drop --weights-dtype, or use "
        "--precision mixed for 16-bit working weights",
    ),
    (
        lambda s: f"--precision {s.precision} and --weights-dtype {s.weights_dtype}",
        lambda s: s.precision in ("mixed", "bf16") and s.weight_bytes == 1,
        lambda s: False,
        "contradict: the precision keeps 16-bit working weights (bf16, or fp16), so an 8-bit "
        "--weights-dtype would be ignored; drop --weights-dtype or give bf16 or fp16",
    ),
    # ---- the optimizer -------------------------------------------------------------------
    (
        lambda s: "--optimizer-in-backward",
        lambda s: s.optimizer_in_backward,
        lambda s: s.optimizer != "none",
        "steps the optimizer inside backward, and --optimizer none has no optimizer; drop "
        "one of them",
    ),
    (
        lambda s: f"--optimizer-impl {_dash(s.optimizer_impl)}",
        lambda s: s.optimizer_impl != "auto",
        lambda s: s.optimizer != "none",
        "chooses the update's kernel, and --optimizer none runs no update; drop one of them",
    ),
    (
        lambda s: "--offload optimizer",
        lambda s: s.offload == "optimizer",
        lambda s: s.optimizer != "none",
        "moves the optimizer state to the host, and --optimizer none has none; drop one of "
        "them (--offload parameters moves the weights)",
    ),
    # ---- gradient accumulation (introspect.refined.accumulation) ---------------------------
    (
        lambda s: f"--grad-accum {s.grad_accum}",
        lambda s: s.grad_accum > 1,
        lambda s: s.optimizer != "none",
        "accumulates gradients between optimizer steps, and --optimizer none makes none; "
        "drop one of them",
    ),
    (
        lambda s: f"--grad-accum {s.grad_accum} and --optimizer-in-backward",
        lambda s: s.grad_accum > 1 and s.optimizer_in_backward,
        lambda s: False,
        "contradict: the optimizer in backward steps each parameter as its gradient is made, "
        "so no gradient is left to accumulate (torchtune refuses the pair too); drop one",
    ),
    (
        lambda s: f"--grad-accum {s.grad_accum}",
        lambda s: s.grad_accum > 1,
        lambda s: s.resolved_sharding == "none" and s.tensor_parallel == s.pipeline_parallel == 1,
        "is modelled on one unsharded device only: DDP's no_sync, ZeRO's and FSDP2's "
        "accumulation buffers and a pipeline's micro-batches are not; drop --grad-accum, or "
        "the sharding (--ddp, --zero, --fsdp, --tp, --pp)",
    ),
    (
        lambda s: f"--grad-accum {s.grad_accum} and --offload {s.offload}",
        lambda s: s.grad_accum > 1 and s.offload != "none",
        lambda s: False,
        "is not modelled: the offloaded gradients' host buffers between micro-batches "
        "(DeepSpeed's) are not; drop one of them",
    ),
    (
        lambda s: f"--grad-accum {s.grad_accum} and --precision mixed",
        lambda s: s.grad_accum > 1 and s.precision == "mixed",
        lambda s: False,
        "is not modelled: mixed precision accumulates into the FP32 master's gradients "
        "after each micro-batch (DeepSpeed's BF16_Optimizer), which the estimate does not "
        "price; use --precision bf16 or amp, or drop --grad-accum",
    ),
    (
        lambda s: f"--optimizer {_dash(s.optimizer)}",
        lambda s: s.optimizer in LIBRARY_OPTIMIZERS,
        lambda s: not _mlx(s),
        "is torch's (transformers' Adafactor, bitsandbytes' paged AdamW): the MLX estimate "
        "has Adam, AdamW and SGD; use one of them or --framework torch",
    ),
    (
        lambda s: f"--optimizer {_dash(s.optimizer)} and --offload {s.offload}",
        lambda s: s.optimizer in LIBRARY_OPTIMIZERS,
        lambda s: s.offload == "none",
        "contradict: the offload runs DeepSpeed's CPU Adam on the host, not this optimizer; "
        "drop --offload or use --optimizer adam",
    ),
    (
        lambda s: "--optimizer adafactor",
        lambda s: s.optimizer == "adafactor",
        lambda s: s.resolved_sharding in ("none", "ddp"),
        "keeps factored state per whole tensor, which the sharded estimate (ZeRO, FSDP2 "
        "shards) does not model; drop the sharding or use --optimizer adam",
    ),
    (
        lambda s: f"--optimizer-impl {_dash(s.optimizer_impl)}",
        lambda s: s.optimizer in LIBRARY_OPTIMIZERS and s.optimizer_impl != "auto",
        lambda s: False,
        "chooses torch.optim's kernel (single-tensor, foreach, fused); transformers' "
        "Adafactor and bitsandbytes' optimizers have one update each; drop --optimizer-impl",
    ),
    # ---- sharding and model parallelism --------------------------------------------------
    (
        lambda s: f"--zero {s.zero_stage} and --{s.sharding}",
        lambda s: s.sharding in ("ddp", "fsdp") and s.zero_stage != 0,
        lambda s: s.sharding == "fsdp" and s.zero_stage == 3,
        "name two shardings; give one",
    ),
    (
        lambda s: "--no-reshard",
        lambda s: not s.reshard_after_forward,
        lambda s: s.resolved_sharding == "fsdp",
        "is FSDP2's reshard_after_forward=False; it needs --fsdp (--zero 3 is DeepSpeed's "
        "ZeRO-3, which has no such switch)",
    ),
    (
        lambda s: "--bucket-view",
        lambda s: s.gradient_as_bucket_view,
        lambda s: (
            s.resolved_sharding == "ddp" or (s.resolved_sharding == "zero" and s.zero_stage == 1)
        ),
        "is DDP's gradient_as_bucket_view=True; it needs --ddp (or --zero 1, which runs under DDP)",
    ),
    (
        lambda s: f"--micro-batches {s.micro_batches}",
        lambda s: s.micro_batches is not None,
        lambda s: s.pipeline_parallel > 1,
        "counts the pipeline's micro-batches; it needs --pp P (P > 1)",
    ),
    # ---- fine-tuning -----------------------------------------------------------------------
    (
        lambda s: f"--lora-dropout {s.lora_dropout:g}",
        lambda s: s.lora_dropout != 0,
        lambda s: s.finetune != "full",
        "is the adapters' dropout; it needs --finetune lora, dora or qlora",
    ),
    (
        lambda s: f"--num-layers {s.num_layers}",
        lambda s: s.num_layers is not None,
        lambda s: s.finetune != "full",
        "puts LoRA's adapters on the top K blocks; full fine-tuning trains every block: "
        "add --finetune lora or qlora, or drop it",
    ),
    (
        lambda s: f"--num-layers {s.num_layers} and --train-embeddings",
        lambda s: s.num_layers is not None and s.train_embeddings,
        lambda s: False,
        "are not modelled together: a trained embedding needs its gradient through every "
        "frozen block below the adapted ones, which then keep activations; drop one",
    ),
    (
        lambda s: (
            f"--num-layers {s.num_layers} and --lora-targets "
            + " ".join(t for t in s.lora_targets if t in _HEADS)
        ),
        lambda s: s.num_layers is not None and any(t in _HEADS for t in s.lora_targets),
        lambda s: False,
        "contradict: peft's layers_to_transform adapts numbered blocks only, so lm_head and "
        "embed_tokens would get no adapter; drop one",
    ),
    (
        lambda s: f"--num-layers {s.num_layers}",
        lambda s: s.num_layers is not None,
        lambda s: s.resolved_sharding in ("none", "ddp") and s.offload == "none",
        "is not modelled with FSDP/ZeRO sharding or --offload (their per-block moments "
        "assume adapters in every block); drop one",
    ),
    (
        lambda s: "--train-embeddings",
        lambda s: s.train_embeddings,
        lambda s: s.finetune != "full",
        "trains the embedding and head beside LoRA's adapters; full fine-tuning trains "
        "them already: add --finetune lora or qlora, or drop it",
    ),
    (
        lambda s: "--lora-targets " + " ".join(t for t in s.lora_targets if t in _HEADS),
        lambda s: any(t in _HEADS for t in s.lora_targets),
        lambda s: not _mlx(s),
        "puts peft's adapters on the output head or the embedding: the MLX estimate follows "
        "mlx-lm's linear_to_lora_layers over the blocks; drop them or use --framework torch",
    ),
    (
        lambda s: "--adapter-dtype bf16",
        lambda s: s.adapter_dtype == "bf16",
        lambda s: s.finetune != "full",
        "is the LoRA adapters' dtype; it needs --finetune lora or qlora",
    ),
    (
        lambda s: f"--adapter-dtype bf16 and --precision {s.precision}",
        lambda s: s.adapter_dtype == "bf16",
        lambda s: s.precision == "bf16" or _mlx(s),  # MLX: the next rule
        "contradict: peft's autocast_adapter_dtype=False leaves the adapters at the base "
        "layer's dtype, FP32 under fp32 and amp, and mixed precision would keep an FP32 "
        "master of them; use --precision bf16 (LitGPT's and torchtune's bf16-true)",
    ),
    (
        lambda s: "--adapter-dtype bf16",
        lambda s: s.adapter_dtype == "bf16",
        lambda s: not _mlx(s),
        "is peft's autocast_adapter_dtype=False: the MLX estimate follows mlx-lm's "
        "LoRALinear, whose adapters are FP32; drop it or use --framework torch",
    ),
    (
        lambda s: f"--base-quant {_dash(s.base_quant)}",
        lambda s: s.base_quant != "auto",
        lambda s: s.finetune != "full",
        "stores the frozen base; it needs --finetune lora or qlora",
    ),
    (
        lambda s: f"--base-quant {s.base_quant}",
        lambda s: s.base_quant.startswith("affine"),
        lambda s: _mlx(s) and s.finetune == "lora",
        "is MLX's affine quantization (mx.quantize, mlx-community's 4-/8-bit checkpoints); "
        "it needs --framework mlx --finetune lora (on torch: --base-quant nf4 or int8)",
    ),
    (
        lambda s: f"--base-quant {s.base_quant} with --framework {_dash(s.framework)}",
        lambda s: s.base_quant in ("nf4", "int8") or s.finetune == "qlora",
        lambda s: not _mlx(s),
        "is bitsandbytes' storage, which MLX has not; use --base-quant affine4 or affine8 "
        "(mx.quantize) with --finetune lora",
    ),
    (
        lambda s: f"--group-size {s.group_size}",
        lambda s: s.group_size != 64,
        lambda s: s.base_quant.startswith("affine"),
        "is the affine base's group size; it needs --base-quant affine4 or affine8",
    ),
    (
        lambda s: f"--finetune qlora and --base-quant {_dash(s.base_quant)}",
        lambda s: s.finetune == "qlora" and s.base_quant not in ("auto", "nf4"),
        lambda s: False,
        "contradict: QLoRA is LoRA over a 4-bit NF4 base (bitsandbytes' "
        "bnb_4bit_quant_type='nf4'); drop --base-quant, or use --finetune lora with it",
    ),
    (
        lambda s: "--no-double-quant",
        lambda s: not s.double_quant,
        lambda s: s.resolved_base_quant == "nf4",
        "changes the NF4 base's constants; it needs --finetune qlora (or --base-quant nf4)",
    ),
)


def refusal(setup: Any) -> str | None:
    """The one line for the first flag of ``setup`` that does not apply to it (see
    :data:`RULES`), or None when every flag applies."""
    for flag, uses, applies, why in RULES:
        if uses(setup) and not applies(setup):
            return f"{flag(setup)} {why}"
    return None


def check(setup: Any) -> None:
    """Raise :class:`NotApplicable` for the first flag of ``setup`` that does not apply."""
    line = refusal(setup)
    if line is not None:
        raise NotApplicable(line)


#: Dtype names that are 32-bit (``--weights-dtype``'s spellings of FP32).
_FP32_NAMES = ("fp32", "float32", "tf32")


def contradictions(
    *,
    precision: str,
    weights_dtype: str | None,
    zero_stage: int,
    devices: int,
    sharding: str = "none",
) -> None:
    """Raise :class:`IntrospectError` when flags contradict that only the command line
    tells apart (``weights_dtype`` is None when --weights-dtype was not given;
    ``sharding`` is ``ddp`` or ``fsdp`` when --ddp or --fsdp was given):

    * ``--precision mixed`` or ``bf16`` keeps 16-bit working weights; an explicit
      ``--weights-dtype fp32`` would be silently ignored. (``amp`` is autocast over FP32
      weights, so ``--weights-dtype fp32`` is what it means; a 16-bit one is refused by
      :data:`RULES`.)
    * ``--zero 1``, ``--ddp`` and ``--fsdp`` spread the step over ``--devices``; on one
      device there is nothing to shard or all-reduce. (``--zero 2``/``3`` are DeepSpeed,
      which runs on one device too: Qwen's fine-tuning scripts do.) (Only the flags: a TrainingSetup
      of one device with DDP's buckets stays valid for the estimators.)"""
    if precision in ("mixed", "bf16") and weights_dtype in _FP32_NAMES:
        raise IntrospectError(
            f"--precision {precision} uses 16-bit working weights but --weights-dtype "
            f"{weights_dtype} asks for 32-bit ones; drop --weights-dtype, or use "
            "--precision fp32 or amp"
        )
    if zero_stage == 1 and devices == 1:
        # --zero 2 and 3 are DeepSpeed's, whose buffers and FP32 partition exist on one
        # rank too (introspect.refined.deepspeed); --zero 1 is torch's optimizer sharding.
        raise IntrospectError(
            "--zero 1 (torch's ZeroRedundancyOptimizer) shards the optimizer state over "
            "--devices, which is 1: nothing would be sharded; give --devices D (D > 1), "
            "--zero 2 or 3 for DeepSpeed on one device, or drop --zero"
        )
    if sharding in ("ddp", "fsdp") and devices == 1:
        what = {
            "ddp": "replicates the model and all-reduces its gradients",
            "fsdp": "shards the training state",
        }[sharding]
        raise IntrospectError(
            f"--{sharding} {what} over --devices, which is 1: there is no other device; "
            f"give --devices D (D > 1) or drop --{sharding}"
        )


def notes(setup: Any) -> list[str]:
    """Lines a command prints once under its output where a flag's meaning changed
    (CHANGELOG.md says the same)."""
    out = []
    if setup.offload_activations:
        out.append(
            "--offload-activations is torch's save_on_cpu(pin_memory=True): every saved "
            "tensor on the host; the closed form is approximate (within ±17% of measured "
            "steps, introspect/refined/activation_offload.py); torchtune's "
            "OffloadActivations keeps tensors under 1 KiB, parameters and the output "
            "head's saved tensors on the device, which it does not model"
        )
    if setup.resolved_sharding == "zero" and setup.zero_stage == 3:
        out.append(
            "--zero 3 is DeepSpeed ZeRO-3's closed form (its default buckets); earlier "
            "versions priced it as FSDP full sharding, which is --fsdp now (CHANGELOG.md)"
        )
    if setup.resolved_sharding == "zero" and setup.zero_stage >= 2 and setup.devices == 1:
        out.append(
            f"DeepSpeed ZeRO-{setup.zero_stage} on one device: nothing is partitioned (÷1), "
            "but its FP32 partition, optimizer state and reduce/all-gather buckets are "
            "allocated as on D devices (introspect/refined/deepspeed.py)"
        )
    if str(setup.optimizer).startswith("paged_"):
        out.append(PAGED_NOTE)
    trainer = getattr(setup, "trainer", "loop")
    if trainer != "loop" and setup.optimizer in ("adam8bit", "paged_adamw_8bit"):
        whole = setup.resolved_sharding in ("none", "ddp") and setup.offload == "none"
        if not whole or setup.freeze_tower:
            out.append(
                f"--trainer {trainer} with --optimizer {_dash(setup.optimizer)}: the Trainer's "
                "32-bit state for every nn.Embedding (transformers/trainer.py create_optimizer) "
                "is not modelled with sharded, offloaded or partly frozen state; priced at "
                "8-bit Adam's 2 bytes a value"
            )
    return out


# ---- the model's shape against the parallel degrees -------------------------------------


def check_model(spec: Any, setup: Any) -> None:
    """Every check of ``setup`` that needs the model, before anything is priced:
    :func:`check_parallel`, and ``--freeze-tower`` only where the model has a tower."""
    if setup.freeze_tower and not spec.tower_parameters:
        raise NotApplicable(
            f"--freeze-tower freezes a multimodal model's vision/audio tower, and "
            f"{spec.source or spec.model_type} has none; drop it"
        )
    # TRL's fused head runs the softcap (add_fused_lm_head reads final_logit_softcapping;
    # introspect.refined.losses prices its tanh); torchtune's and Liger's losses here do not.
    if setup.cross_entropy in ("torchtune", "liger") and spec.final_logit_softcapping:
        raise NotApplicable(
            f"--cross-entropy {setup.cross_entropy}: {spec.source or spec.model_type} caps "
            "its logits (final_logit_softcapping), which this library loss is not priced "
            "or run with; use --cross-entropy standard or trl"
        )
    check_state_space(spec, setup)
    check_shared_blocks(spec, setup)
    if setup.images:
        check_images(spec, setup)
    k = getattr(setup, "num_layers", None)
    if k is not None and k > spec.num_hidden_layers:
        raise NotApplicable(
            f"--num-layers {k}: {spec.source or spec.model_type} has "
            f"{spec.num_hidden_layers} layers; use --num-layers {spec.num_hidden_layers} "
            "or less"
        )
    check_parallel(spec, setup)


#: Setups the Mamba-2 closed form (introspect.refined.mamba2: transformers' torch path,
#: checked against its census and dry run) does not price, each as (flag, what it would
#: need): another framework's or our reference model's mixer, adapters on its
#: projections, its split across tensor-parallel ranks, its saved set packed to the host.
STATE_SPACE_UNMODELLED = (
    ("--framework", "framework", lambda s: s.framework != "torch", "mlx-lm's own mixer"),
    ("--impl", "implementation", lambda s: s.implementation != "transformers", "a reference mixer"),
    ("--finetune", "finetune", lambda s: s.finetune != "full", "LoRA on in_proj/out_proj"),
    ("--tp", "tensor_parallel", lambda s: s.tensor_parallel > 1, "a Mamba-2 split over ranks"),
    (
        "--offload-activations",
        "offload_activations",
        lambda s: s.offload_activations,
        "the mixer's packed saved set",
    ),
)


def check_state_space(spec: Any, setup: Any) -> None:
    """One line for a setup the Mamba-2, Mamba-1 or RG-LRU closed form does not model
    (:data:`STATE_SPACE_UNMODELLED`), naming the flag: the closed form prices
    transformers' torch path in full training only; the dry run
    (``introspect measure --device fake``) still answers transformers' setups."""
    for kind_name, name in (("mamba2", "Mamba-2"), ("mamba1", "Mamba-1"), ("rglru", "RG-LRU")):
        n = sum(
            count
            for kind, count in spec.kinds
            if kind_name in (kind.attention.kind, kind.mixer and kind.mixer.kind)
        )
        if n:
            _refuse_state_space(spec, setup, n, name)


def check_shared_blocks(spec: Any, setup: Any) -> None:
    """One line for a parameter-sharding setup (FSDP, ZeRO-3) on a stack with shared
    blocks (Zamba2): the closed form gathers a block's weights with each layer, and a
    block whose weights many layers share is not such a unit (nor is its placement
    modelled); the dry run on one device, DDP and ZeRO-1/2 are."""
    n = sum(count for kind, count in spec.kinds if getattr(kind, "shared", None) is not None)
    if not n:
        return
    where = f"{spec.source or spec.model_type} runs shared transformer blocks at {n} of "
    where += f"{spec.num_hidden_layers} layers"
    if setup.resolved_sharding == "fsdp":
        raise NotApplicable(
            f"--fsdp / --zero 3: {where}, whose weights the closed form cannot gather layer "
            "by layer (a shared block is no per-layer unit); use --ddp or --zero 1/2, or "
            "one device"
        )
    if setup.pipeline_parallel > 1:
        raise NotApplicable(
            f"--pp {setup.pipeline_parallel}: {where}, whose weights every stage using "
            "them would hold (not modelled: the closed form gives a stage its own layers' "
            "weights); drop --pp"
        )


def _refuse_state_space(spec: Any, setup: Any, n: int, name: str) -> None:
    for flag, field, applies, needs in STATE_SPACE_UNMODELLED:
        if applies(setup):
            value = getattr(setup, field)
            given = flag if isinstance(value, bool) else f"{flag} {value}"
            needs = needs.replace("Mamba-2", name)
            if name == "RG-LRU":  # RecurrentGemma's block: linear_x/_y/_out, not in/out_proj
                needs = needs.replace("in_proj/out_proj", "linear_x/linear_y/linear_out")
            raise NotApplicable(
                f"{given}: {spec.source or spec.model_type} has {name} mixers in {n} of "
                f"{spec.num_hidden_layers} layers, which the closed form models as "
                f"transformers' torch path in full training only ({needs} is not "
                f"modelled); drop {flag}"
            )


def check_images(spec: Any, setup: Any) -> None:
    """``--images`` only where the model's processor is modelled
    (:func:`introspect.vision.check_images`), and only with the tower frozen: a trained
    tower's own saved activations are not modelled."""
    from introspect.vision import check_images as why

    where = spec.source or spec.model_type
    reason = why(getattr(spec, "vision", None), setup.images, setup.image_size, where)
    if reason:
        raise NotApplicable(reason)
    if setup.finetune == "full" and not setup.freeze_tower:
        raise NotApplicable(
            f"--images with the tower trained: {where}'s vision tower would save its own "
            "activations for backward, which are not modelled; add --freeze-tower (or "
            "train adapters: --finetune lora keeps the tower frozen)"
        )


def check_parallel(spec: Any, setup: Any) -> None:
    """Raise :class:`NotApplicable` when a parallel degree cannot split the model, before
    anything is priced.

    Tensor parallel t (Megatron-LM): ``megatron/core/transformer/transformer_config.py``
    requires ``num_attention_heads`` and ``num_query_groups`` (K/V heads) to be
    multiples of t, and the column-parallel linears divide their output width by t
    (``megatron/core/utils.py`` ``divide``, which asserts divisibility): so every layer
    kind's query and K/V heads (MLA: its heads; linear attention: its key and value
    heads), its feed-forward width and each expert's width (and a shared expert's) must
    divide by t. Pipeline p: every stage holds at least one block, so p ≤ L (the closed
    form gives a stage ⌈L/p⌉ blocks). The work is one pass over the spec's layer kinds."""
    t, p = setup.tensor_parallel, setup.pipeline_parallel
    name = spec.source or spec.model_type
    if p > 1 and p > spec.num_hidden_layers:
        raise NotApplicable(
            f"--pp {p}: {name} has {spec.num_hidden_layers} layers, and every pipeline "
            f"stage needs at least one; use --pp {spec.num_hidden_layers} or less"
        )
    if t == 1:
        return
    for kind, _ in spec.kinds:
        a, ff = kind.attention, kind.feed_forward
        dims = [("attention heads", a.num_attention_heads)]
        if a.kind == "linear":
            dims += [
                ("linear-attention key heads", a.linear_num_key_heads),
                ("linear-attention value heads", a.linear_num_value_heads),
            ]
        elif a.kind == "mamba2":
            dims = [
                ("Mamba-2 heads", a.mamba_num_heads),
                ("Mamba-2 groups", a.mamba_n_groups),
            ]
        elif a.kind == "mamba1":
            dims = [("Mamba-1 channels", a.mamba_inner_size)]
        elif a.kind != "mla":
            dims.append(("K/V heads", a.num_key_value_heads))
        width = "expert feed-forward width" if ff.is_moe else "feed-forward width"
        dims.append((width, ff.intermediate_size))
        if ff.shared_intermediate_size:
            dims.append(("shared-expert width", ff.shared_intermediate_size))
        for what, n in dims:
            if n and n % t:
                raise NotApplicable(
                    f"--tp {t}: {name} has {n:,} {what}, which {t} does not divide "
                    f"(Megatron-LM splits them evenly over the tensor-parallel ranks); "
                    f"use a --tp that divides {n:,}"
                )


# ---- what a measured step runs ---------------------------------------------------------

#: (the setup asks for it, the flag as typed) for what no measured step or dry run
#: reproduces: the estimate for it would be set beside a step that does not do it.
UNMEASURED: tuple[tuple[Callable[[Any], bool], Callable[[Any], str]], ...] = (
    (lambda s: s.tensor_parallel > 1, lambda s: f"--tp {s.tensor_parallel}"),
    (lambda s: s.pipeline_parallel > 1, lambda s: f"--pp {s.pipeline_parallel}"),
    (lambda s: s.offload != "none", lambda s: f"--offload {s.offload}"),
)


def unmeasured(setup: Any, what: str) -> None:
    """Raise :class:`IntrospectError` where ``what`` (``measure``, ``--exact``) would set
    a step that does not do what ``setup`` asks beside an estimate that does."""
    alone = "drop --exact" if what == "--exact" else "use `introspect profile`"
    for uses, flag_of in UNMEASURED:
        if uses(setup):
            flag = flag_of(setup)
            raise IntrospectError(
                f"{flag}: {what} runs a step without it, so its ratio to the estimate (with "
                f"{flag}) would compare two different setups; drop {flag}, or {alone} for "
                "the estimate alone"
            )


# ---- measure's own flags ---------------------------------------------------------------


def _trainer(a: Any) -> bool:
    """Whether measure runs the HF Trainer or TRL's SFTTrainer (``--trainer hf|trl``)."""
    return getattr(a, "trainer", "loop") != "loop"


#: Why the Trainer has no dry run (tried: ``introspect.measure.trainer_run``'s docstring);
#: here so the rule needs no torch import.
TRAINER_NO_DRY_RUN = (
    "runs the real Trainer, whose data loader and loop read tensor values that fake "
    "tensors do not have (accelerate's DataLoaderShard sampler .tolist(), trainer.py's "
    "torch.isnan(loss)); use --device cpu on a model this machine holds, or drop "
    "--trainer for the dry run of measure's own loop"
)


def _sharding_flag(a: Any) -> str:
    if a.ddp or a.fsdp:
        return "--ddp" if a.ddp else "--fsdp"
    return f"--zero {a.zero}" if a.zero else f"--devices {a.devices}"


def _sharded_step(a: Any) -> bool:
    """Whether measure's flags ask for a sharded step (as ``commands._sharded``'s
    ``wants_sharded``: more than one device, or a sharding named)."""
    return getattr(a, "devices", 1) > 1 or bool(a.ddp or a.fsdp or a.zero)


#: The shape ``--llama`` builds (``introspect.measure.shapes.llama_style``): what it sets,
#: so a flag setting the same field otherwise would be overwritten without a word.
_LLAMA = "--llama builds RMSNorm, a gated SiLU feed-forward (f ≈ 8d/3) and h/4 K/V heads"

#: (flag as typed, the command line asks for it, it applies, why not) over measure's
#: parsed flags (an argparse Namespace): what a TrainingSetup does not hold.
MEASURE_RULES: tuple[
    tuple[Callable[[Any], str], Callable[[Any], bool], Callable[[Any], bool], str], ...
]
MEASURE_RULES = (
    (
        lambda a: f"--base-quant {getattr(a, 'base_quant', 'auto')}",
        lambda a: str(getattr(a, "base_quant", "auto")).startswith("affine"),
        lambda a: False,
        "is not measured: measure builds the model in float from its config; profile and "
        "fit price the MLX affine base (benchmarks/mlx_quantized.py runs real steps over "
        "nn.quantize'd models)",
    ),
    (
        lambda a: "--group-size",
        lambda a: getattr(a, "group_size", 64) != 64,
        lambda a: False,
        "is not measured: it is the affine base's group size, which measure does not build; "
        "profile and fit price it with --base-quant affine4 or affine8",
    ),
    (
        lambda a: "--packed-sequences",
        lambda a: getattr(a, "packed_sequences", False),
        lambda a: False,
        "is not measured: measure's batch is B rows of one sequence each; drop it (profile "
        "--packed-sequences prices the packed row)",
    ),
    (
        lambda a: "--trainer dpo",
        lambda a: getattr(a, "trainer", "loop") == "dpo",
        lambda a: False,
        "is not measured: measure runs transformers' Trainer and TRL's SFTTrainer; drop "
        "--trainer dpo (profile --trainer dpo prices DPOTrainer's step; "
        "benchmarks/trl_trainers.py runs the real one)",
    ),
    (
        lambda a: f"--trainer {a.trainer} and --framework {_dash(a.framework)}",
        _trainer,
        lambda a: not _mlx(a),
        "contradict: the HF Trainer and TRL's SFTTrainer train torch models; use "
        "--framework torch, or drop --trainer",
    ),
    (
        lambda a: f"--trainer {a.trainer} and --device fake",
        _trainer,
        lambda a: a.device != "fake",
        "contradict: --trainer " + TRAINER_NO_DRY_RUN,
    ),
    (
        lambda a: f"--trainer {a.trainer} and --device {a.device}",
        _trainer,
        lambda a: a.device in ("auto", "cpu", "fake"),
        "contradict: measure runs the Trainer on the CPU (use_cpu=True); use --device cpu",
    ),
    (
        lambda a: f"--trainer {a.trainer} and {_sharding_flag(a)}",
        _trainer,
        lambda a: not _sharded_step(a),
        "contradict: measure runs the Trainer in one process; drop --devices and the "
        "sharding flags, or drop --trainer",
    ),
    (
        lambda a: f"--trainer {a.trainer} and --no-census",
        lambda a: _trainer(a) and a.no_census,
        lambda a: False,
        "contradict: the Trainer run takes no census (it runs trainer.train() alone); drop "
        "--no-census",
    ),
    (
        lambda a: f"--repeats {a.repeats} and --framework {_dash(a.framework)}",
        lambda a: a.repeats is not None,
        lambda a: _mlx(a),
        "contradict: --repeats measures several MLX steps (MLX's peak moves from step to "
        "step); torch measures one step after a warm-up; drop --repeats or use --framework mlx",
    ),
    (
        lambda a: f"--repeats {a.repeats} and --device fake",
        lambda a: a.repeats is not None,
        lambda a: a.device != "fake",
        "contradict: the MLX dry run replays one traced step; drop --repeats or --device fake",
    ),
    (
        lambda a: f"--step-timeout {a.step_timeout}",
        lambda a: a.step_timeout is not None,
        _sharded_step,
        "ends the processes of a sharded step, and this step runs in one process; give "
        "--devices D (D > 1) with --ddp, --zero 1 or --fsdp, or drop --step-timeout "
        "(--timeout bounds reading the model)",
    ),
    (
        lambda a: f"--step-timeout {a.step_timeout} and --device fake",
        lambda a: a.step_timeout is not None,
        lambda a: a.device != "fake",
        "contradict: --step-timeout ends the processes of a real sharded step, and the "
        "sharded dry run (--device fake) runs every rank in this one process; drop "
        "--step-timeout or --device fake",
    ),
    (
        lambda a: f"--llama and --norm {a.norm}",
        lambda a: a.llama and a.norm not in (None, "rmsnorm"),
        lambda a: False,
        f"contradict: {_LLAMA}; drop --norm or --llama",
    ),
    (
        lambda a: f"--llama and --ffn {a.ffn}",
        lambda a: a.llama and a.ffn not in (None, "gated"),
        lambda a: False,
        f"contradict: {_LLAMA}; drop --ffn or --llama",
    ),
    (
        lambda a: f"--llama and --act {a.hidden_act!r}",
        lambda a: a.llama and a.hidden_act not in (None, "silu", "swish"),
        lambda a: False,
        f"contradict: {_LLAMA}; drop --act or --llama",
    ),
    (
        lambda a: f"--llama and --kv-heads {a.num_key_value_heads}",
        lambda a: a.llama and a.num_key_value_heads is not None,
        lambda a: False,
        f"contradict: {_LLAMA}; drop --kv-heads or --llama",
    ),
    (
        lambda a: f"--llama and --intermediate {a.intermediate_size}",
        lambda a: a.llama and a.intermediate_size is not None,
        lambda a: False,
        f"contradict: {_LLAMA}; drop --intermediate or --llama",
    ),
    (
        lambda a: f"{_structure_flag(a)}: the step builds SOURCE's own {_dash(a.impl)} class",
        lambda a: bool(a.source) and a.impl in ("transformers", "mlx_lm") and _structure_flag(a),
        lambda a: False,
        "from its config, which only the size flags (--layers, --d-emb, --heads, --kv-heads, "
        "--head-dim, --intermediate, --vocab) change, so the estimate would price another "
        "model than the step runs; drop the flag, or add --impl reference",
    ),
)


#: measure's flags that change the reference model's structure (not a size): the config's
#: own class (transformers', mlx-lm's) is built from its config with only the size flags
#: set on it (``introspect.measure.hf_models.SHAPE_KEYS``).
_STRUCTURE = (("--llama", "llama"), ("--tied", "tied"), ("--norm", "norm"), ("--ffn", "ffn"))
_STRUCTURE += (("--act", "hidden_act"),)


def _structure_flag(a: Any) -> str | None:
    return next((flag for flag, dest in _STRUCTURE if getattr(a, dest) not in (None, False)), None)


def check_measure(args: Any) -> None:
    """Raise :class:`NotApplicable` for the first of measure's own flags (``args``, its
    parsed command line) that does not apply to the step it asks for (:data:`MEASURE_RULES`)."""
    for flag, uses, applies, why in MEASURE_RULES:
        if uses(args) and not applies(args):
            raise NotApplicable(f"{flag(args)} {why}")
