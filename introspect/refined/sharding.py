"""Per-rank memory of a sharded step: DDP, ZeRO-1/2/3 and FSDP2, as the libraries hold it.

The execution layer (:mod:`introspect.refined.execution`) asks this module for the
per-rank persistent state, the gradients of a part of the model, and each moment's
gathered weights and communication buffers. Every figure is the rank with the largest
share. Sources (torch 2.13; DeepSpeed's ``runtime/zero``):

* **DDP** (``torch/nn/parallel/distributed.py``, ``torch/csrc/distributed/c10d/reducer.cpp``):
  the reducer allocates flat gradient buckets (``bucket_cap_mb=25``, the first 1 MB) for
  every parameter when DDP is built and rebuilds them after the first step; they live for
  the whole step — ``comm/ddp_buckets`` = N·(gradient bytes). Autograd's gradients are
  copied into them, so gradients and buckets both exist, unless ``gradient_as_bucket_view``:
  then the gradients *are* views into the buckets and no separate gradient is counted.
  Measured (gloo, 2 processes): 4N bytes beside the gradients, every moment.
* **ZeRO-1** (``torch/distributed/optim/zero_redundancy_optimizer.py``
  ``_partition_parameters``): whole tensors, sorted by size (largest first, stable), each
  to the rank with the smallest total so far; that rank's Adam state and update
  temporaries. Paired with DDP, as torch documents it, so the buckets stay.
* **ZeRO-2 / ZeRO-3 (DeepSpeed)**, not measured here: ``runtime/zero/config.py`` defaults
  ``reduce_bucket_size=5e8``, ``contiguous_gradients=True``, ``overlap_comm`` True only at
  stage 3 (two reduce buckets), ``stage3_prefetch_bucket_size=5e7``,
  ``stage3_max_live_parameters=1e9``, ``stage3_param_persistence_threshold=1e5`` (smaller
  tensors are never partitioned). Stage 2: 16-bit weights whole, gradients and FP32
  master/state ÷D, the reduce bucket (``comm/reduce_bucket``). Stage 3 also ÷D weights,
  gathers at most ``max_live_parameters`` (``weights/gathered``) and fetches one prefetch
  bucket ahead (``comm/all_gather``).
* **FSDP2** ``fully_shard`` (``torch/distributed/fsdp/_fully_shard/``): each parameter
  sharded on dim 0, padded to a multiple of D (``_fsdp_param.py``: every rank holds the
  padded shard). One unit per block, the root unit (embedding, final norm, head) last; the
  root is kept gathered after forward (``_fsdp_state.py``: the root's
  ``reshard_after_forward`` defaults to False) and through backward; blocks are
  resharded after their forward unless ``reshard_after_forward=False``. In backward a
  block is gathered (its all-gather output buffer alive during the copy-out,
  ``comm/fsdp_all_gather``), the previous block's reduce-scatter input is kept until
  the next reduce-scatter (``reduce_scatter_max_input_buffers=1``,
  ``comm/reduce_scatter``); the root's unsharded gradients live until its own
  reduce-scatter at the end of backward. Everything gathered is freed before the
  optimizer step. ``MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)``: the
  FP32 shard is the only master copy (no separate one), gathered weights and unsharded
  gradients BF16, sharded gradients and reduce-scatter buffers FP32.
  Measured (gloo, 2 and 4 processes, ``benchmarks/sharded_accuracy.py``).
* **LoRA/QLoRA** sharded: the frozen base is sharded, gathered and partitioned like
  any parameter, but has no gradient and no optimizer state
  (:mod:`introspect.refined.lora_sharded`; FSDP2's moments through :class:`Units`).
* **Tensor and pipeline parallel** (Megatron): :mod:`introspect.refined.model_parallel`;
  not measured.
"""

from __future__ import annotations

import math

from introspect._record import record
from introspect.params import norm_params, trainable_parameter_count
from introspect.refined import deepspeed
from introspect.refined.memo import per_estimate
from introspect.refined.model_parallel import model_parallel_parameters
from introspect.refined.shard_shapes import (  # noqa: F401 (re-exported)
    DS_MAX_LIVE_PARAMETERS,
    DS_PERSISTENCE_THRESHOLD,
    DS_PREFETCH_BUCKET,
    DS_REDUCE_BUCKET,
    Shape,
    _linear,
    _norm,
    _zero_ranks,
    block_elements,
    block_shard,
    fsdp_shard,
    layer_tensors,
    model_shard,
    numel,
    parameter_tensors,
    root_elements,
    root_tensors,
    strategy,
    zero1_largest_rank,
    zero_partition,
)
from introspect.setup import TrainingSetup
from introspect.spec import ModelSpec
from introspect.terms import (
    DDP_BUCKETS,
    FSDP_ALL_GATHER,
    GATHERED_WEIGHTS,
    GLOO_COPY,
    GRADS,
    MASTER_WEIGHTS,
    REDUCE_SCATTER,
    WEIGHTS,
    ZERO_ALL_GATHER,
    ZERO_REDUCE_BUCKET,
)

FP32 = 4


def _fsdp_param_bytes(setup: TrainingSetup, working: int) -> int:
    """Bytes of a gathered FSDP2 weight (and unsharded gradient): ``param_dtype``."""
    return 2 if setup.precision in ("mixed", "bf16") else working


def _fsdp_reduce_bytes(setup: TrainingSetup) -> int:
    """Bytes of a sharded FSDP2 gradient and reduce-scatter buffer: ``reduce_dtype``
    (FP32 under mixed precision; the parameter's dtype otherwise)."""
    return 2 if setup.precision == "bf16" else FP32


def state_terms(
    spec: ModelSpec, setup: TrainingSetup, *, working: int, master: int, state: dict[str, int]
) -> dict[str, int]:
    """Per-rank persistent state: weights, master copy, optimizer state, DDP buckets.

    ``working`` and ``master`` are bytes per parameter, ``state`` the optimizer's bytes
    per parameter by term (from the execution layer)."""
    N, D, how = spec.n_params, setup.devices, strategy(setup)
    # Master copy and optimizer state exist for trainable parameters only (a frozen
    # multimodal tower has neither); the sharded strategies below divide all of N.
    opt_elems = trainable_parameter_count(spec, freeze_tower=setup.freeze_tower)
    if how == "none":
        terms = {WEIGHTS: working * N}
    elif how == "ddp" or (how == "zero" and setup.zero_stage == 1):
        terms = {WEIGHTS: working * N}
        terms[DDP_BUCKETS] = working * N
        if how == "zero":
            opt_elems = zero1_largest_rank(spec, D)
    elif how == "zero":  # DeepSpeed stage 2 or 3
        opt_elems = math.ceil(N / D)
        if setup.zero_stage == 3:
            small = sum(
                numel(s) for s in parameter_tensors(spec) if numel(s) < DS_PERSISTENCE_THRESHOLD
            )
            terms = {WEIGHTS: working * (math.ceil((N - small) / D) + small)}
            # one rank: the parameters are views of the partition (deepspeed.stage3_gathers)
            gathered = deepspeed.stage3_gathers(setup) or setup.finetune != "full"
            terms[GATHERED_WEIGHTS] = working * min(N - small, DS_MAX_LIVE_PARAMETERS) * gathered
            terms.update(deepspeed.stage3_state(spec, setup))  # its IPG bucket
        else:
            terms = {WEIGHTS: working * N}
    else:  # fsdp
        opt_elems = model_shard(spec, D)
        # The sharded parameter keeps the original dtype: under mixed precision it is the
        # FP32 master itself.
        shard_bytes = FP32 if setup.precision == "mixed" else working
        terms = {WEIGHTS: shard_bytes * opt_elems}
        master = 0
    if master:
        terms[MASTER_WEIGHTS] = master * opt_elems
    for name, per in state.items():
        terms[name] = per * opt_elems
    return terms


def grad_bytes(spec: ModelSpec, setup: TrainingSetup, n_params: int, working: int) -> int:
    """Bytes of the gradients of the first ``n_params`` parameters backward makes (the
    head first, then whole blocks from the top, then part of the current block).

    DDP: full, none beside the buckets under ``gradient_as_bucket_view``. ZeRO-1: full.
    DeepSpeed ZeRO-2/3: ÷D. FSDP2: the root's gradients unsharded (param dtype) until the
    root's reduce-scatter, finished blocks sharded (reduce dtype, padded), the current
    block's unsharded; at the step (``n_params = N``) everything sharded."""
    if setup.optimizer == "none":
        return 0
    N, D, how = spec.n_params, setup.devices, strategy(setup)
    if how == "ddp" or (how == "zero" and setup.zero_stage == 1):
        return 0 if setup.gradient_as_bucket_view else working * n_params
    if how == "zero":
        partition = deepspeed.stage3_grads(spec, setup)  # ZeRO-3: held from the start
        if partition is not None:
            return partition
        return math.ceil(working * n_params / D)
    if how != "fsdp":
        return working * n_params
    from introspect.refined import offload

    # CPUOffloadPolicy copies each reduce-scattered shard to the host (offload.py).
    reduce_b = 0 if offload.grads_on_host(setup) else _fsdp_reduce_bytes(setup)
    if n_params >= N:
        return reduce_b * model_shard(spec, D)
    param_b = _fsdp_param_bytes(setup, working)
    head = min(n_params, spec.vocab_size * spec.hidden_size)
    rest = n_params - head
    per_layer = block_elements(spec)
    done, partial = divmod(rest, per_layer)
    shard = block_shard(spec, D)
    return param_b * (head + partial) + reduce_b * done * shard


@record
class Units:
    """Bytes of FSDP2's units on one rank, as each moment holds them: the root and one
    block unsharded, one block's all-gather output (D·padded shard), its reduce-scatter
    input (D·padded shard of what has gradients, reduce dtype), its unsharded gradients
    (param dtype) and their upcast to reduce dtype, one block's sharded gradients (none
    on the device when offloaded), the root's unsharded gradients alive from the head's
    backward (``head_grads``) and all of them at its reduce-scatter (``root_grads``),
    with that reduce-scatter's input."""

    root_gathered: int
    block_gathered: int
    block_all_gather: int
    block_reduce: int
    block_grads: int
    block_upcast: int
    block_shard_grads: int
    head_grads: int
    root_grads: int
    root_reduce: int


@per_estimate
def fsdp_units(spec: ModelSpec, setup: TrainingSetup, working: int) -> Units:
    """:class:`Units` of full training (every parameter trained, ``working`` bytes) or,
    under LoRA/QLoRA, of the frozen base and its adapters
    (:mod:`introspect.refined.lora_sharded`: the whole unit gathered, the adapters'
    gradients alone reduced)."""
    from introspect.refined import offload

    D = setup.devices
    keep_shards = not offload.grads_on_host(setup)
    if setup.finetune != "full":
        from introspect.refined import lora_sharded

        block = lora_sharded.largest_block(spec, setup)
        root = lora_sharded.root_unit(spec, setup)
        rb = block.trainable_reduce
        root_grads = root.trainable * root.trainable_gathered
        return Units(
            root_gathered=root.frozen_gathered + root.trainable * root.trainable_gathered,
            block_gathered=block.frozen_gathered + block.trainable * block.trainable_gathered,
            block_all_gather=block.frozen_padded
            + D * block.trainable_shard * block.trainable_gathered,
            block_reduce=D * block.trainable_shard * rb,
            block_grads=block.trainable * block.trainable_gathered,
            block_upcast=block.trainable * rb if rb != block.trainable_gathered else 0,
            block_shard_grads=block.trainable_shard * rb * keep_shards,
            head_grads=root_grads,
            root_grads=root_grads,
            root_reduce=D * root.trainable_shard * root.trainable_reduce,
        )
    param_b, reduce_b = _fsdp_param_bytes(setup, working), _fsdp_reduce_bytes(setup)
    block, shard = block_elements(spec), block_shard(spec, D)
    root = root_tensors(spec)
    head = spec.vocab_size * spec.hidden_size + norm_params(spec, spec.hidden_size)
    return Units(
        root_gathered=param_b * root_elements(spec),
        block_gathered=param_b * block,
        block_all_gather=param_b * D * shard,
        block_reduce=reduce_b * D * shard,
        block_grads=param_b * block,
        block_upcast=reduce_b * block if reduce_b != param_b else 0,
        block_shard_grads=reduce_b * shard * keep_shards,
        head_grads=param_b * head,
        root_grads=param_b * root_elements(spec),
        root_reduce=reduce_b * D * fsdp_shard(root, D),
    )


def moment_terms(
    spec: ModelSpec, setup: TrainingSetup, moment: str, working: int, layer: int | None = None
) -> dict[str, int]:
    """Gathered weights and communication buffers alive at one moment of the step:
    ``forward_end``, ``head`` (the output projection's backward), ``layer`` (block
    ``layer``'s backward) or ``optimizer_step``. Only FSDP2 and DeepSpeed ZeRO-3 have
    any; DDP's buckets are persistent state."""
    how = strategy(setup)
    if how == "zero" and setup.zero_stage >= 2:
        buckets = 2 if setup.zero_stage == 3 else 1  # overlap_comm's default
        terms = {}
        persistent = deepspeed.stage3_applies(setup)  # ZeRO-3's bucket: in the state
        if moment != "forward_end" and moment != "optimizer_step" and not persistent:
            terms[ZERO_REDUCE_BUCKET] = _reduce_bucket(spec, setup, working, buckets)
        gathers = deepspeed.stage3_gathers(setup) or setup.finetune != "full"
        if setup.zero_stage == 3 and moment != "optimizer_step" and gathers:
            terms[ZERO_ALL_GATHER] = working * min(DS_PREFETCH_BUCKET, spec.n_params)
        return terms
    if how != "fsdp" or moment == "optimizer_step":
        return {}
    u = fsdp_units(spec, setup, working)
    L = spec.num_hidden_layers
    blocks = L if not setup.reshard_after_forward else 0
    if moment == "layer":
        # Resharding: this block gathered again (the next one below is prefetched into its
        # all-gather buffer). Without: the blocks above are resharded after their backward.
        blocks = 1 if setup.reshard_after_forward else (layer or 0) + 1
    terms = {GATHERED_WEIGHTS: u.root_gathered + blocks * u.block_gathered}
    # Named even when empty, so the figure shows that no buffer is alive at this moment.
    terms[FSDP_ALL_GATHER] = terms[REDUCE_SCATTER] = 0
    if moment == "forward_end" and setup.reshard_after_forward and _loss_in_root(setup):
        # The loss is an output of the root's forward, so backward starts in the root's
        # pre-backward hook, which prefetches the last block's all-gather before the
        # loss's own backward runs (FSDP2 ``FSDPState._pre_backward``; measured with
        # transformers' labels loop: one block's all-gather output at the peak).
        terms[FSDP_ALL_GATHER] = u.block_all_gather
    if moment == "layer":
        terms[FSDP_ALL_GATHER] = u.block_all_gather if setup.reshard_after_forward else 0
        if layer is not None and layer < L - 1:
            terms[REDUCE_SCATTER] = u.block_reduce
    return terms


def _reduce_bucket(spec: ModelSpec, setup: TrainingSetup, working: int, buckets: int) -> int:
    """DeepSpeed's reduce bucket(s), at most the gradients they collect: every
    parameter's (``working`` bytes each) in full training; under LoRA the trainable
    parameters' alone (FP32 adapters: :mod:`introspect.refined.lora_sharded`)."""
    if setup.finetune != "full":
        from introspect.refined import lora_sharded

        _, trainable = lora_sharded.optimizer_share(spec, setup)
        grads = lora_sharded.trainable_grad_bytes(spec, setup)
        per = grads // trainable if trainable else 0
        return buckets * per * min(DS_REDUCE_BUCKET, trainable)
    return buckets * working * min(DS_REDUCE_BUCKET, spec.n_params)


def _loss_in_root(setup: TrainingSetup) -> bool:
    """Whether the loss is computed inside the model's (the FSDP root's) forward:
    transformers' classes with ``labels=`` (``ForCausalLMLoss``)."""
    return setup.implementation == "transformers" and setup.loop == "labels"


def post_backward(
    spec: ModelSpec, setup: TrainingSetup, working: int, layer: int
) -> list[dict[str, int]]:
    """FSDP2's post-backward of block ``layer`` (``_fsdp_param_group.post_backward`` →
    ``foreach_reduce``), two moments. The block is resharded first and the previous
    reduce-scatter input released (one kept). Copy-in: its unsharded gradients (param
    dtype; under a ``reduce_dtype`` that differs, also their upcast copies, a backward
    temporary) and the new reduce-scatter input (reduce dtype, D·padded shard). Then the
    gradients are freed and the reduce-scatter runs into a new output (the sharded
    gradients, one shard); gloo on CPU also copies the input (measured: one
    input-sized temporary during each reduce-scatter; NCCL reduces in place). Alive
    throughout: the root, the blocks still gathered without resharding, the next block's
    all-gather buffer (prefetched), the root's unsharded gradients, the blocks above's
    sharded ones. Empty for other strategies."""
    if strategy(setup) != "fsdp" or setup.optimizer == "none":
        return []
    L = spec.num_hidden_layers
    u = fsdp_units(spec, setup, working)
    gathered = 0 if setup.reshard_after_forward else layer
    above = (L - 1 - layer) * u.block_shard_grads
    common = {
        GATHERED_WEIGHTS: u.root_gathered + gathered * u.block_gathered,
        FSDP_ALL_GATHER: u.block_all_gather if setup.reshard_after_forward and layer else 0,
        REDUCE_SCATTER: u.block_reduce,
    }
    copy_in = common | {
        GRADS: u.head_grads + u.block_grads + above,
        "activations/grad_upcast": u.block_upcast,
    }
    reduce = common | {
        GRADS: u.head_grads + above + u.block_shard_grads,
        GLOO_COPY: u.block_reduce if setup.resolved_device == "cpu" else 0,
    }
    return [copy_in, reduce]


def backward_end(spec: ModelSpec, setup: TrainingSetup, working: int) -> dict[str, int] | None:
    """FSDP2's last moment of backward: the root's reduce-scatter, with every block's
    sharded gradient made, the root's unsharded gradients and its reduce-scatter input
    (reduce dtype) alive together. None for other strategies."""
    if strategy(setup) != "fsdp" or setup.optimizer == "none":
        return None
    u = fsdp_units(spec, setup, working)
    return {
        GATHERED_WEIGHTS: u.root_gathered,
        GRADS: spec.num_hidden_layers * u.block_shard_grads + u.root_grads,
        REDUCE_SCATTER: u.root_reduce,
    }


def causes(spec: ModelSpec, setup: TrainingSetup, working: int) -> dict[str, str]:
    """Why the sharded terms have their size, for this strategy (overrides the execution
    layer's generic causes)."""
    how, D = strategy(setup), setup.devices
    gb = lambda n: f"{n / 1e9:.3f} GB"  # noqa: E731 - a local formatter
    out: dict[str, str] = {}
    if how == "fsdp":
        pb, rb = _fsdp_param_bytes(setup, working), _fsdp_reduce_bytes(setup)
        u = fsdp_units(spec, setup, working)
        kept = "" if setup.reshard_after_forward else " and every block (no reshard after forward)"
        out[WEIGHTS] = f"this rank's FSDP2 shards (dim 0 padded to a multiple of D={D}), " + (
            "FP32: the only master copy under MixedPrecisionPolicy"
            if setup.precision == "mixed"
            else f"{working} bytes each"
        )
        out[GATHERED_WEIGHTS] = (
            f"FSDP2 unsharded weights ({pb} bytes each): the root unit (embedding, final "
            f"norm, head) gathered through forward and backward{kept}; in a block's "
            "backward that block and the next (prefetched)"
        )
        out[FSDP_ALL_GATHER] = (
            f"FSDP2 all-gather output of one block ({gb(u.block_all_gather)}), alive during "
            "its copy-out in backward; none at the forward end or the optimizer step"
        )
        out[GLOO_COPY] = (
            "gloo (CPU) reduce-scatter: a copy of its input while it runs (measured; NCCL "
            "reduces in place)"
        )
        out["activations/grad_upcast"] = (
            "FSDP2 foreach_reduce: the block's unsharded gradients upcast to reduce_dtype "
            "before the copy into the reduce-scatter input (a backward temporary)"
        )
        out[REDUCE_SCATTER] = (
            f"FSDP2 reduce-scatter input of the block below ({rb} bytes, "
            f"{gb(u.block_reduce)}), kept until the next reduce-scatter; the root's "
            "at the end of backward; none at the forward end"
        )
        shard = "this rank's FSDP2 shard"
        if setup.finetune != "full":
            from introspect.refined import lora_sharded

            out.update(lora_sharded.causes(setup))
    elif how == "ddp" or (how == "zero" and setup.zero_stage == 1):
        view = "; the gradients are views into them" if setup.gradient_as_bucket_view else ""
        out[WEIGHTS] = f"working weights ({working} bytes each), a full copy on every rank"
        out[DDP_BUCKETS] = (
            f"DDP reducer's flat gradient buckets (bucket_cap_mb=25, the first 1 MB): "
            f"N·{working} bytes for the whole step{view}"
            if setup.finetune == "full"
            else "DDP reducer's flat gradient buckets for the parameters that require a "
            f"gradient only (the FP32 adapters; _build_params_for_reducer){view}"
        )
        trained = "parameters" if setup.finetune == "full" else "trainable parameters"
        shard = (
            "the full model"
            if how == "ddp"
            else (
                f"this rank's ZeroRedundancyOptimizer partition (whole tensors, greedy: "
                f"{local_parameters(spec, setup):,} of {_trainable(spec, setup):,} {trained})"
            )
        )
    elif how == "zero":
        out[ZERO_REDUCE_BUCKET] = (
            "DeepSpeed ZeRO-3's IPG bucket: one buffer of reduce_bucket_size=5e8 elements "
            f"({working} bytes each) allocated with the optimizer and held to the end "
            "(stage3.py _setup_for_real_optimizer); not measured"
            if deepspeed.stage3_applies(setup)
            else "DeepSpeed reduce bucket(s) (reduce_bucket_size=5e8 elements"
            + (", two with overlap_comm at stage 3)" if setup.zero_stage == 3 else ")")
            + "; not measured"
        )
        out[ZERO_ALL_GATHER] = "DeepSpeed stage3_prefetch_bucket_size=5e7; not measured"
        out[GATHERED_WEIGHTS] = (
            "DeepSpeed ZeRO-3 live parameters (stage3_max_live_parameters=1e9); not measured"
            if D > 1 or setup.finetune != "full"
            else "none on one rank: each parameter is a view of its partition "
            "(partition_parameters.py _no_gather_coalesced / NoGatherHandle)"
        )
        shard = f"this rank's ÷{D} DeepSpeed partition"
        if setup.finetune != "full" and setup.zero_stage == 3:
            from introspect.refined import lora_sharded

            out.update(lora_sharded.causes(setup))
        out[WEIGHTS] = (
            f"DeepSpeed ZeRO-3: this rank's ÷{D} partition of the {working}-byte weights, "
            "plus the tensors under stage3_param_persistence_threshold=1e5 kept whole; "
            "not measured"
            if setup.zero_stage == 3
            else f"working weights ({working} bytes each), a full copy on every rank"
        )
    else:
        shard = ""
    for name in (
        "optimizer/adam_m",
        "optimizer/adam_v",
        "optimizer/momentum",
        "optimizer/master_weights",
    ):
        if shard:
            out[name] = f"{name.split('/')[1].replace('_', ' ')} of {shard}"
    if setup.tensor_parallel > 1 or setup.pipeline_parallel > 1:
        mp = (
            f"; Megatron tensor parallel {setup.tensor_parallel}, pipeline "
            f"{setup.pipeline_parallel} (1F1B): this rank's "
            f"{model_parallel_parameters(spec, setup):,} parameters (closed form, not measured)"
        )
        out[WEIGHTS] = out.get("weights", f"working weights ({working} bytes each)") + mp
    return out


def _trainable(spec: ModelSpec, setup: TrainingSetup) -> int:
    """Parameters an optimizer could update: all, or under LoRA the trainable ones."""
    if setup.finetune == "full":
        return spec.n_params
    from introspect.refined import lora_sharded

    return lora_sharded.optimizer_share(spec, setup)[1]


def local_parameters(spec: ModelSpec, setup: TrainingSetup) -> int:
    """Parameters the largest rank's optimizer updates (under LoRA the trainable ones':
    :func:`introspect.refined.lora_sharded.optimizer_share`)."""
    how, D = strategy(setup), setup.devices
    if setup.finetune != "full":
        from introspect.refined import lora_sharded

        return lora_sharded.optimizer_share(spec, setup)[0]
    if how == "zero" and setup.zero_stage == 1:
        return zero1_largest_rank(spec, D)
    if how == "zero":
        return math.ceil(spec.n_params / D)
    if how == "fsdp":
        return model_shard(spec, D)
    return spec.n_params


def local_tensors(spec: ModelSpec, setup: TrainingSetup) -> list[int]:
    """Elements of each tensor the largest rank's optimizer updates, in its loop order:
    ``model.parameters()`` order; ZeRO-1: the largest rank's partition, largest first (the
    order ``_partition_parameters`` appends them); FSDP2: each tensor's dim-0 shard;
    DeepSpeed ZeRO-2/3: one flat FP32 partition."""
    how, D = strategy(setup), setup.devices
    shapes = parameter_tensors(spec)
    if how == "zero" and setup.zero_stage == 1:
        ranks = _zero_ranks([numel(s) for s in shapes], D)
        totals = [sum(r) for r in ranks]
        return ranks[totals.index(max(totals))]
    if how == "zero":
        return [math.ceil(spec.n_params / D)]
    if how == "fsdp":
        return [math.ceil(s[0] / D) * numel(s[1:]) for s in shapes]
    return [numel(s) for s in shapes]


def single_tensor_temporaries(spec: ModelSpec, setup: TrainingSetup) -> int:
    """Elements of the single-tensor Adam loop's temporaries at their peak
    (``torch/optim/adam.py`` ``_single_tensor_adam``): ``denom = (exp_avg_sq.sqrt() /
    bias_correction2_sqrt).add_(eps)`` makes the square root and the quotient of this
    tensor while the previous tensor's ``denom`` is still bound (it is replaced only
    after the new one exists): max over the loop of prev + 2·cur. Measured on CPU: with
    the embedding, head and both FFN matrices the same size, 3 of them at the peak."""
    sizes = local_tensors(spec, setup)
    return max(p + 2 * c for p, c in zip([0, *sizes], sizes, strict=False))
