"""TrainingSetup: how the model is trained, as far as memory is concerned.

Defaults reproduce the seed's setup — B = 1, FP32 weights and activations, ordinary FP32
Adam, eager attention, no checkpointing, no fused loss, one device, no sharding — run the
way most users run it: transformers' own classes (mlx-lm's on MLX) with the loss computed
inside the model (``loop="labels"``). ``implementation="reference", loop="logits"`` is
our own reference model with the loop holding the logits.

Who runs the step is three fields with one vocabulary across every command:
``framework`` (torch, mlx, mlx_compiled), ``device`` (cuda or cpu for torch; metal or cpu
for MLX; ``auto`` = cuda for torch, metal for MLX) and ``implementation`` (our reference
model, transformers' classes, mlx-lm's classes) with its ``loop`` (``logits``: the training
code holds the logits and computes the loss; ``labels``: the model computes its own loss
from ``labels=``, as transformers' users and the HF Trainer's ``compute_loss`` write it).
"""

from __future__ import annotations

from introspect import _record, applies
from introspect._record import record
from introspect.units import dtype_bytes

TYPE_CHECKING = False  # typing's flag without importing typing (see introspect._record)
if TYPE_CHECKING:
    from typing import Any, Literal

    Precision = Literal["fp32", "bf16", "amp", "mixed"]
    Optimizer = Literal[
        "adam", "adamw", "adam8bit", "sgd", "sgd_momentum", "none",
        "adafactor", "paged_adamw_8bit", "paged_adamw_32bit",
    ]  # fmt: skip
    Attention = Literal["eager", "memory_efficient"]
    CrossEntropy = Literal["standard", "fused", "torchtune", "trl", "liger"]
    Framework = Literal["torch", "mlx", "mlx_compiled"]
    Device = Literal["auto", "cuda", "cpu", "metal"]
    Implementation = Literal["reference", "transformers", "mlx_lm"]
    Loop = Literal["logits", "labels"]
    OptimizerImpl = Literal["auto", "single_tensor", "foreach", "fused"]
    Trainer = Literal["loop", "hf", "trl", "dpo"]
    DpoReference = Literal["model", "precomputed"]


#: ``fp32``: everything FP32. ``bf16``: pure BF16 weights, grads and optimizer state.
#: ``amp``: ``torch.autocast(bfloat16)`` over FP32 weights, grads and state (plain PyTorch,
#: the HF Trainer's ``bf16=True``). ``mixed``: 16-bit working weights and grads with an
#: FP32 master copy (DeepSpeed, Megatron, FSDP2's ``MixedPrecisionPolicy``).
PRECISIONS = ("fp32", "bf16", "amp", "mixed")
OPTIMIZERS = ("adam", "adamw", "adam8bit", "sgd", "sgd_momentum", "none")
#: transformers' Adafactor (the HF Trainer's ``optim="adafactor"``) and bitsandbytes'
#: paged AdamW (the Trainer's names): state not a fixed width per parameter, or outside
#: torch's allocator (:mod:`introspect.refined.optimizers`).
OPTIMIZERS += applies.LIBRARY_OPTIMIZERS
#: Adapter dtype under LoRA: ``fp32`` (peft's default, ``autocast_adapter_dtype=True``)
#: or ``bf16`` (``autocast_adapter_dtype=False`` on a BF16 base; LitGPT, torchtune).
ADAPTER_DTYPES = ("fp32", "bf16")
ATTENTIONS = ("eager", "memory_efficient")
#: The loss (``introspect/refined/losses.py``): ``standard`` (the model's own over all the
#: logits), ``fused`` (a generic fused linear cross-entropy: a log-sum-exp per token kept,
#: 1024-token chunks recomputed in backward; ``chunked`` is its deprecated alias), and the
#: chunked losses of torchtune, TRL and Liger as each library writes them.
CROSS_ENTROPIES = ("standard", "fused", "torchtune", "trl", "liger")
FRAMEWORKS = ("torch", "mlx", "mlx_compiled")
DEVICES = ("auto", "cuda", "cpu", "metal")
IMPLEMENTATIONS = ("reference", "transformers", "mlx_lm")
LOOPS = ("logits", "labels")
#: torch's optimizer implementations: ``auto`` is torch's own default for the device
#: (foreach on CUDA, the single-tensor loop on CPU: ``torch/optim/optimizer.py``
#: ``_default_to_fused_or_foreach``); MLX has one update and ignores this.
OPTIMIZER_IMPLS = ("auto", "single_tensor", "foreach", "fused")
ZERO_STAGES = (0, 1, 2, 3)
#: Whose training loop steps the model (issue 21): ``loop``, a hand-written loop
#: (forward, backward, step, ``zero_grad``: what ``introspect measure`` runs); ``hf``,
#: transformers' ``Trainer``; ``trl``, TRL's ``SFTTrainer``. A trainer's *defaults*
#: (batch 8, fused AdamW, TRL's checkpointing and ``max_length``) come with it in
#: profile and fit (:mod:`introspect.adapters.trainers.hf_trainer`); what it does beyond
#: its settings is priced here: the Trainer's 32-bit bitsandbytes state for every
#: ``nn.Embedding`` (``trainer.py`` ``create_optimizer``), SFTTrainer's fused LM head;
#: ``dpo``, TRL's ``DPOTrainer``: the fused head over the chosen and the rejected rows
#: concatenated (2·B rows) and the reference model (:mod:`introspect.refined.dpo`).
TRAINERS = ("loop", "hf", "trl", "dpo")
#: DPO's reference (``--dpo-reference``): ``model``, a frozen copy of the weights (under
#: LoRA the adapter-free base, no copy) run under ``no_grad`` each step; ``precomputed``,
#: the log-probabilities computed before training (``precompute_ref_log_probs``), no copy.
DPO_REFERENCES = ("model", "precomputed")
#: How the state is spread over ``devices`` (``introspect.refined.sharding``): ``none``
#: (every device a full copy, plain data parallel without a reducer, or one device),
#: ``ddp`` (DistributedDataParallel), ``zero`` (DDP with ZeRO ``zero_stage``: torch's
#: ZeroRedundancyOptimizer at 1, DeepSpeed's stages 1-3), ``fsdp`` (FSDP2 ``fully_shard``).
SHARDINGS = ("none", "ddp", "zero", "fsdp")
#: Fine-tuning and offload (issue 11): what is trained, how the frozen base is stored,
#: and what lives in host memory. See :mod:`introspect.refined.lora` and
#: :mod:`introspect.refined.offload`.
FINETUNES = ("full", "lora", "qlora")
#: mlx-lm's ``fine_tune_type dora`` (``DoRALinear``, ``mlx_lm/tuner/dora.py``): LoRA's
#: adapters and a learned magnitude per output row; MLX only (:mod:`introspect.applies`,
#: :mod:`introspect.refined.mlx_dora`).
FINETUNES += ("dora",)
BASE_QUANTS = ("auto", "bf16", "fp16", "fp32", "int8", "nf4")
#: MLX's affine quantization (``mx.quantize``, what ``mlx_lm.convert -q`` and the
#: ``mlx-community`` 4-/8-bit checkpoints store): packed uint32 words, a scale and a bias
#: per group of :attr:`TrainingSetup.group_size` values (MLX only).
BASE_QUANTS += ("affine4", "affine8")
#: ``mx.quantize``'s affine group sizes (mlx 0.32; ``introspect.adapters.quantized``).
GROUP_SIZES = (32, 64, 128)
OFFLOADS = ("none", "optimizer", "parameters")
#: Names of the block's linears that LoRA can target (Hugging Face Llama/Qwen names);
#: ``all-linear`` is every one of them (peft's ``target_modules="all-linear"``, which
#: leaves out the output head).
LORA_MODULES = (
    *("q_proj", "k_proj", "v_proj", "qkv_proj", "o_proj"),
    *("gate_proj", "up_proj", "gate_up_proj", "down_proj"),
)
#: The output head and the input embedding, which ``--lora-targets`` may name beside the
#: block linears (peft's ``EMBEDDING_LAYER_NAMES``: lm_head as a Linear, embed_tokens as
#: ``lora.Embedding``); never part of ``all-linear``.
HEAD_LORA_MODULES = ("lm_head", "embed_tokens")
#: The block linears that read the attention norm's output, and the feed-forward's
#: (a fused projection is one linear over that input).
ATTENTION_INPUT_LINEARS = ("q_proj", "k_proj", "v_proj", "qkv_proj")
FFN_INPUT_LINEARS = ("gate_proj", "up_proj", "gate_up_proj")
#: The linears an MoE layer has once per expert.
EXPERT_LINEARS = ("gate_proj", "up_proj", "gate_up_proj", "down_proj")

#: The flag that sets each field, for messages: they name what the user typed.
FLAGS = {
    "batch_size": "--batch",
    "seq_len": "--seq",
    "devices": "--devices",
    "tensor_parallel": "--tp",
    "pipeline_parallel": "--pp",
    "precision": "--precision",
    "optimizer": "--optimizer",
    "attention": "--attention",
    "cross_entropy": "--cross-entropy",
    "framework": "--framework",
    "device": "--device",
    "implementation": "--impl",
    "loop": "--loop",
    "optimizer_impl": "--optimizer-impl",
    "zero_stage": "--zero",
    "sharding": "sharding (--ddp, --zero, --fsdp)",
    "finetune": "--finetune",
    "base_quant": "--base-quant",
    "group_size": "--group-size",
    "offload": "--offload",
    "grad_accum": "--grad-accum",
    "offload_activations": "--offload-activations",
    "adapter_dtype": "--adapter-dtype",
    "images": "--images",
    "image_size": "--image-size",
    "trainer": "--trainer",
    "dpo_reference": "--dpo-reference",
    "packed_sequences": "--packed-sequences",
    "num_layers": "--num-layers",
}

#: Optimizer state bytes per parameter (FP32 moments unless the name says otherwise).
OPTIMIZER_STATE_BYTES: dict[str, int] = {
    "adam": 8,  # m and v, FP32
    "adamw": 8,
    "adam8bit": 2,  # m and v quantized to 8 bits (block scales are negligible)
    "sgd_momentum": 4,  # one momentum buffer, FP32
    "sgd": 0,
    "none": 0,
    # Per tensor, not per parameter: introspect.refined.optimizers.
    "adafactor": 0,
    "paged_adamw_8bit": 0,
    "paged_adamw_32bit": 0,
}


def default_activation_dtype(precision: str) -> str:
    """What a precision computes activations in: BF16 under ``bf16``, ``amp`` (autocast's
    matmul outputs) and ``mixed``, FP32 under ``fp32``."""
    return "bf16" if precision in ("bf16", "amp", "mixed") else "fp32"


@record(kw_only=True)
class TrainingSetup:
    """One training step's settings. ``s`` in the seed is :attr:`activation_bytes`."""

    batch_size: int = 1
    seq_len: int = 2048
    #: Activation dtype name (``fp32``, ``bf16``, ``fp16``); ``s`` = its byte width.
    #: None: what the precision computes in — BF16 under ``bf16``, ``amp`` (autocast's
    #: matmul outputs) and ``mixed``, else FP32.
    activation_dtype: str | None = None
    #: Bytes per saved activation when given directly (overrides ``activation_dtype``).
    activation_bytes_override: int | None = None
    #: Dtype of the working weights (and their gradients).
    weights_dtype: str = "fp32"
    #: ``fp32``: everything FP32; ``mixed``: 16-bit working weights and grads with an FP32
    #: master copy; ``bf16``: pure BF16 weights, grads and optimizer state.
    precision: Precision = "fp32"
    optimizer: Optimizer = "adam"
    #: ``None`` (the default): the implementation's own — our reference model's eager,
    #: mlx-lm's mx.fast SDPA (set here), transformers' class default, SDPA unless the
    #: class has no SDPA path (set once the model is known:
    #: :func:`introspect.refined.implementations.resolve_attention`).
    attention: Attention | None = None
    #: Where a defaulted :attr:`attention` came from, in words ("" when given).
    attention_origin: str = ""
    activation_checkpointing: bool = False
    cross_entropy: CrossEntropy = "standard"
    #: Data-parallel devices the state (and the batch) is spread over.
    devices: int = 1
    #: ZeRO stage 0 (plain data parallel), 1 (optimizer), 2 (+ grads), 3 (+ weights; FSDP).
    zero_stage: int = 0
    framework: Framework = "torch"
    #: Where the step runs; ``auto`` = cuda for torch, metal (Apple GPU) for MLX.
    device: Device = "auto"
    #: Whose model class runs the step, and how its loop computes the loss. ``None`` (the
    #: default) is what most users run: transformers' classes on torch, mlx-lm's on MLX;
    #: the loss computed by the model from ``labels=`` (``loop=None``: ``labels`` for
    #: transformers' classes, ``logits`` for mlx-lm's trainer loss and our reference
    #: model, whose loops compute the loss on logits they hold).
    implementation: Implementation | None = None
    loop: Loop | None = None
    optimizer_impl: OptimizerImpl = "auto"
    # ---- multimodal (issue 10) ---------------------------------------------------------
    #: Freeze a multimodal wrapper's vision/audio tower (``ModelSpec.tower_parameters``):
    #: its weights stay, it gets no gradients, master copy or optimizer state.
    freeze_tower: bool = False
    #: Images per sample and their size (H, W) before the processor resizes them
    #: (:mod:`introspect.vision`): the language model reads ``seq_len`` text tokens plus
    #: the visual tokens; 0 images: a text-only batch.
    images: int = 0
    image_size: tuple[int, int] | None = None
    #: The FP32 ``pixel_values`` the batch holds through the step, in bytes: set by
    #: :func:`introspect.vision.language_setup` when it spends the images (no flag).
    image_input_bytes: int = 0

    # --- sharding and model parallelism (introspect.refined.sharding) ---------------------
    #: ``none``, ``ddp``, ``zero`` or ``fsdp`` (see :data:`SHARDINGS`); ``zero`` with
    #: ``zero_stage`` 0 reads as ``none``. Older callers that set only ``zero_stage`` get
    #: ``zero`` (stages 1-2) or ``fsdp`` (stage 3) when ``devices`` > 1.
    sharding: str = "none"
    #: FSDP2 ``fully_shard(reshard_after_forward=…)``: free each unit's gathered weights
    #: after its forward (True, ZeRO-3) or keep them until backward (False, ZeRO-2-like).
    reshard_after_forward: bool = True
    #: DDP ``gradient_as_bucket_view``: gradients are views into the reducer's buckets.
    gradient_as_bucket_view: bool = False
    #: Megatron tensor-parallel and pipeline-parallel degrees (closed forms, not measured);
    #: ``devices`` stays the data-parallel degree.
    tensor_parallel: int = 1
    pipeline_parallel: int = 1
    #: Micro-batches per step for the pipeline (1F1B): ``None`` = the pipeline depth.
    micro_batches: int | None = None

    # --- fine-tuning, offload, optimizer in backward (issue 11) ---------------------
    #: ``full`` trains every weight; ``lora`` freezes the base and trains adapters of rank
    #: :attr:`lora_rank` on :attr:`lora_targets`; ``qlora`` is LoRA over an NF4 base;
    #: ``dora`` is mlx-lm's DoRA (LoRA plus a magnitude per output row, MLX only).
    finetune: str = "full"
    lora_rank: int = 16
    #: peft's ``target_modules``: names from :data:`LORA_MODULES`, or ``all-linear``.
    lora_targets: tuple[str, ...] = ("all-linear",)
    #: peft's ``lora_dropout``; above 0 each adapter keeps its dropped input and mask.
    lora_dropout: float = 0.0
    #: Adapters on the top K blocks only (mlx-lm's ``num_layers``, peft's
    #: ``layers_to_transform=range(L-K, L)``); None: every block (mlx-lm's -1). The
    #: blocks below the first adapted one are frozen and need no gradient, so they keep
    #: no activations (:mod:`introspect.refined.lora`).
    num_layers: int | None = None
    #: Storage of the frozen base: ``auto`` = nf4 for qlora, the working dtype for lora.
    base_quant: str = "auto"
    #: MLX affine base (``affine4``/``affine8``): values per scale and bias, 64 as
    #: ``mlx_lm.convert``'s ``q_group_size`` default (``mlx_lm/utils.py``).
    group_size: int = 64
    #: bitsandbytes' ``bnb_4bit_use_double_quant``: the absmax constants in 8 bits.
    double_quant: bool = True
    #: Train the input embedding and the output head too (Qwen's "LoRA (emb)").
    train_embeddings: bool = False
    #: ``optimizer``: optimizer state (and master weights) in host memory;
    #: ``parameters``: the weights too, gathered one block at a time.
    offload: str = "none"
    #: Step each parameter as soon as its gradient is made (a post-accumulate-grad hook),
    #: so gradients never all exist at once.
    optimizer_in_backward: bool = False
    # --- gradient accumulation (introspect.refined.accumulation) ----------------------
    #: Micro-batches of ``batch_size`` per optimizer step (the HF Trainer's and torchtune's
    #: ``gradient_accumulation_steps``): from the second on, every gradient exists
    #: during forward and backward.
    grad_accum: int = 1
    #: Every saved activation goes to host memory as autograd saves it and comes back
    #: when its backward node runs (torch's ``save_on_cpu(pin_memory=True)``):
    #: :mod:`introspect.refined.activation_offload`.
    offload_activations: bool = False
    #: LoRA adapters' dtype (:data:`ADAPTER_DTYPES`).
    adapter_dtype: str = "fp32"
    #: Whose loop steps the model (:data:`TRAINERS`).
    trainer: Trainer = "loop"
    #: DPO's reference log-probabilities (:data:`DPO_REFERENCES`), under ``trainer="dpo"``.
    dpo_reference: DpoReference = "model"
    #: Each row is several sequences packed end to end, told apart by ``position_ids``
    #: restarting and no ``attention_mask`` (TRL's padding-free collator): transformers'
    #: classes build a block-diagonal mask (:func:`introspect.refined.hf_saved.packed_mask`).
    packed_sequences: bool = False

    def __post_init__(self) -> None:
        for name in (
            *("batch_size", "seq_len", "devices", "tensor_parallel", "pipeline_parallel"),
            "grad_accum",
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"{FLAGS[name]} must be a positive integer, got {value!r}")
        if self.micro_batches is not None and (
            isinstance(self.micro_batches, bool) or self.micro_batches <= 0
        ):
            raise ValueError(
                f"--micro-batches must be a positive integer, got {self.micro_batches!r}"
            )
        if isinstance(self.image_size, list):
            object.__setattr__(self, "image_size", tuple(self.image_size))
        if self.activation_bytes_override is not None and self.activation_bytes_override <= 0:
            raise ValueError(f"--act-bytes must be positive, got {self.activation_bytes_override}")
        if self.implementation is None:
            object.__setattr__(self, "implementation", default_implementation(self.framework))
        if self.loop is None:
            object.__setattr__(self, "loop", default_loop(self.implementation))
        if self.activation_dtype is None:
            object.__setattr__(self, "activation_dtype", default_activation_dtype(self.precision))
        if self.attention is None and self.implementation != "transformers":
            attention, origin = default_attention(self.implementation)
            object.__setattr__(self, "attention", attention)
            object.__setattr__(self, "attention_origin", origin)
        if self.attention_origin and self.attention_origin.startswith("eager") != (
            self.attention == "eager"
        ):  # a copy given another attention (fit's changes): no longer the default
            object.__setattr__(self, "attention_origin", "")
        dtype_bytes(self.activation_dtype)
        dtype_bytes(self.weights_dtype)
        for name, choices in (
            ("precision", PRECISIONS),
            ("optimizer", OPTIMIZERS),
            ("attention", ATTENTIONS),
            ("cross_entropy", CROSS_ENTROPIES),
            ("framework", FRAMEWORKS),
            ("device", DEVICES),
            ("implementation", IMPLEMENTATIONS),
            ("loop", LOOPS),
            ("optimizer_impl", OPTIMIZER_IMPLS),
            ("zero_stage", ZERO_STAGES),
            ("sharding", SHARDINGS),
            ("finetune", FINETUNES),
            ("base_quant", BASE_QUANTS),
            ("offload", OFFLOADS),
            ("adapter_dtype", ADAPTER_DTYPES),
            ("trainer", TRAINERS),
            ("dpo_reference", DPO_REFERENCES),
        ):
            if name == "attention" and self.attention is None:
                continue  # transformers' class default, resolved with the model
            if getattr(self, name) not in choices:
                allowed = ", ".join(str(c).replace("_", "-") for c in choices)
                raise ValueError(
                    f"{FLAGS.get(name, name)} must be one of {allowed}; got {getattr(self, name)!r}"
                )

        self._check_finetune()
        mlx = self.framework.startswith("mlx")
        framework = self.framework.replace("_", "-")
        if self.device == ("cuda" if mlx else "metal"):
            raise ValueError(
                f"--device {self.device} is not {'an MLX' if mlx else 'a torch'} device; use "
                + ("--device metal or cpu" if mlx else "--device cuda or cpu")
            )
        if self.implementation == ("transformers" if mlx else "mlx_lm"):
            raise ValueError(
                f"--impl {self.implementation.replace('_', '-')} does not run on "
                f"--framework {framework}; use "
                + ("--impl mlx-lm or reference" if mlx else "--impl transformers or reference")
            )
        # Every flag means something for the rest of the setup, or is refused (issue 25).
        applies.check(self)

    def _check_finetune(self) -> None:
        if isinstance(self.lora_targets, list):
            object.__setattr__(self, "lora_targets", tuple(self.lora_targets))
        if isinstance(self.lora_rank, bool) or not isinstance(self.lora_rank, int):
            raise ValueError(f"--lora-rank must be a positive integer, got {self.lora_rank!r}")
        if self.lora_rank <= 0:
            raise ValueError(f"--lora-rank must be positive, got {self.lora_rank}")
        if not 0 <= self.lora_dropout < 1:
            raise ValueError(
                f"--lora-dropout {self.lora_dropout:g} is not a probability below 1; give P "
                "with 0 <= P < 1"
            )
        if not self.lora_targets:
            raise ValueError("--lora-targets is empty; name modules or use all-linear")
        if self.group_size not in GROUP_SIZES or isinstance(self.group_size, bool):
            raise ValueError(
                f"--group-size {self.group_size!r} is not one of mx.quantize's affine group "
                f"sizes; use {', '.join(map(str, GROUP_SIZES))}"
            )
        k = self.num_layers
        if k is not None and (isinstance(k, bool) or not isinstance(k, int) or k <= 0):
            raise ValueError(
                f"--num-layers must be a positive integer (adapters on the top K blocks), got {k!r}"
            )

    @property
    def resolved_base_quant(self) -> str:
        """How the frozen base is stored: ``nf4`` for qlora (another ``--base-quant`` beside
        it is refused, :mod:`introspect.applies`; an 8-bit base is ``--finetune lora
        --base-quant int8``); for lora the working weights' dtype (bf16 under a 16-bit
        precision) unless ``--base-quant`` says otherwise; none for full. Under FSDP2's
        mixed precision the model is kept as FP32 parameters and cast per unit by the
        policy, frozen ones too (as full training's shards are the FP32 master), so a
        LoRA base is FP32 there (:mod:`introspect.refined.lora_sharded`)."""
        if self.finetune == "full":
            return "none"
        if self.base_quant != "auto":
            return self.base_quant
        if self.finetune == "qlora":
            return "nf4"
        if self.precision == "mixed" and self.resolved_sharding == "fsdp":
            return "fp32"
        if self.precision in ("bf16", "mixed"):
            return "bf16"
        return {4: "fp32", 2: "bf16", 1: "int8"}[self.weight_bytes]

    @property
    def resolved_sharding(self) -> str:
        """The strategy the estimate models: :attr:`sharding`, or for a setup that gives only
        ``zero_stage`` over several devices, ``zero`` (stages 1-2) or ``fsdp`` (stage 3)."""
        if self.sharding == "zero" and self.zero_stage == 0:
            return "none"
        if self.sharding == "none" and self.zero_stage and self.devices > 1:
            return "fsdp" if self.zero_stage == 3 else "zero"
        return self.sharding

    @property
    def resolved_device(self) -> str:
        """The device ``auto`` stands for: cuda for torch, metal for MLX."""
        if self.device != "auto":
            return self.device
        return "metal" if self.framework.startswith("mlx") else "cuda"

    @property
    def resolved_optimizer_impl(self) -> str:
        """The optimizer implementation torch picks for ``auto``: foreach when every
        tensor is on CUDA, else the single-tensor loop (``_default_to_fused_or_foreach``
        in ``torch/optim/optimizer.py``). MLX: ``mlx`` (one update in the step's graph)."""
        if self.framework.startswith("mlx"):
            return "mlx"
        # transformers' Adafactor is a loop over tensors; bitsandbytes updates each
        # parameter in place in one kernel.
        if self.optimizer == "adafactor":
            return "single_tensor"
        if self.optimizer.startswith("paged_"):
            return "fused"
        if self.optimizer_impl != "auto":
            return self.optimizer_impl
        if self.resolved_sharding == "zero" and self.zero_stage >= 2:
            # DeepSpeed builds FusedAdam for its config's Adam/AdamW section
            # (deepspeed/runtime/engine.py _configure_basic_optimizer).
            return "fused"
        return "foreach" if self.resolved_device == "cuda" else "single_tensor"

    @property
    def activation_bytes(self) -> int:
        """``s``: bytes per saved activation value."""
        if self.activation_bytes_override is not None:
            return self.activation_bytes_override
        return dtype_bytes(self.activation_dtype)

    @property
    def weight_bytes(self) -> int:
        """Bytes per working weight (and per gradient)."""
        return dtype_bytes(self.weights_dtype)

    @property
    def tokens(self) -> int:
        """Tokens in one micro-batch, B·T."""
        return self.batch_size * self.seq_len

    def replace(self, **changes: Any) -> TrainingSetup:
        """A copy with ``changes``; a new framework without a named implementation takes
        that framework's default one when this setup had its own framework's default."""
        framework = changes.get("framework", self.framework)
        if "implementation" not in changes and framework != self.framework:
            if self.implementation == default_implementation(self.framework):
                changes["implementation"] = None
        if "loop" not in changes and "implementation" in changes:
            if self.loop == default_loop(self.implementation):
                changes["loop"] = None  # the new implementation's own loop
        if "activation_dtype" not in changes and "precision" in changes:
            if self.activation_dtype == default_activation_dtype(self.precision):
                changes["activation_dtype"] = None  # the new precision's own
        return _record.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        out = _record.asdict(self)
        out["activation_bytes"] = self.activation_bytes
        out["resolved_device"] = self.resolved_device
        out["resolved_optimizer_impl"] = self.resolved_optimizer_impl
        return out


def default_implementation(framework: str) -> str:
    """The class most users of ``framework`` train: transformers' on torch, mlx-lm's on
    MLX."""
    return "mlx_lm" if framework.startswith("mlx") else "transformers"


def default_attention(implementation: str) -> tuple[str, str]:
    """The attention an implementation that does not depend on the model runs, and why:
    eager for our reference model (``introspect/measure/torch_model.py``), memory-efficient
    for mlx-lm (its attention always calls ``mx.fast.scaled_dot_product_attention``)."""
    if implementation == "mlx_lm":
        return "memory_efficient", (
            "mx.fast SDPA: mlx-lm's models always call mx.fast.scaled_dot_product_attention"
        )
    return "eager", "eager: our reference model's default"


def default_loop(implementation: str | None) -> str:
    """The loop an implementation's users run: ``labels`` for transformers' classes (the
    HF Trainer's ``compute_loss``), ``logits`` for mlx-lm's trainer and our reference."""
    return "labels" if implementation == "transformers" else "logits"
