"""DeepSpeed ZeRO-2's and ZeRO-3's own buffers, on any number of ranks — one included.

``--zero 2`` and ``--zero 3`` are DeepSpeed's stages (``--zero 1`` is torch's
``ZeroRedundancyOptimizer``, ``--fsdp`` FSDP2's ``fully_shard``). DeepSpeed runs on one
GPU too (Qwen's fine-tuning scripts launch ``deepspeed`` with ``ds_config_zero2.json`` on
one device): with one rank nothing is partitioned (÷1), but what DeepSpeed allocates
is real, and the sharding closed form (:mod:`introspect.refined.sharding`: weights, the
FP32 partition's master and Adam state ÷D, the reduce and all-gather buckets) holds with
D = 1. This module adds what ``deepspeed/runtime/zero/stage_1_and_2.py``
(``DeepSpeedZeroOptimizer``, stage 2) allocates beyond it, full training only:

* **the FP32 partition is a clone** (``__init__``: ``weights_partition =
  parallel_partitioned_bit16_groups[i][partition_id].detach().clone().to(device,
  master_weights_and_grads_dtype)``), also when the model is FP32 (``--precision fp32``
  or ``amp``): 4 bytes per local parameter as ``optimizer/master_weights``
  (:func:`master_bytes`). Stage 3 reuses an FP32 partition (``stage3.py``
  ``_create_fp32_partitions``: ``fp32_partitioned_groups_flat.append(fp16_partitioned_
  groups_flat[i])`` when the dtypes agree), so only stage 2 keeps the copy.
* **the step's gradient partition** (``step``): ``flat_grad_partition =
  flatten_dense_tensors_aligned(averaged_gradients[i], partition_size)`` (a new flat
  copy of the working-dtype gradients), then ``single_grad_partition =
  flat_grad_partition.to(fp32)`` (a second copy under 16-bit weights, none under FP32)
  while the gradients are still referenced; then the flat copy and the gradients are
  freed (``del flat_grad_partition``, ``free_grad_in_param_list``,
  ``averaged_gradients[i] = None``) and ``_optimizer_step`` runs on the FP32 partition's
  gradient alone. Two moments: :func:`grad_partition_moment` (w + w + 4 bytes per local
  parameter under 16-bit weights, 4 + 4 under FP32) and the step (4 bytes:
  :func:`step_grad_bytes`).
* **its optimizer**: for an ``"optimizer": {"type": "AdamW"}`` section (Qwen's, the HF
  Trainer's ``auto`` configs) ``deepspeed/runtime/engine.py``
  ``_configure_basic_optimizer`` builds ``FusedAdam`` (in place: no temporaries), unless
  ``torch_adam`` or a CPU offload; :attr:`TrainingSetup.resolved_optimizer_impl` is
  ``fused`` for ``--zero 2``/``3`` unless ``--optimizer-impl`` says otherwise.

ZeRO-3 (``deepspeed/runtime/zero/stage3.py``, ``DeepSpeedZeroOptimizer_Stage3``; the
same logic at v0.14.2, the release of April 2024, and at ``edaa72212``), full training, the
optimizer on the device (:func:`stage3_applies`):

* **persistent from the optimizer's construction** (``_setup_for_real_optimizer``,
  stage3.py:731-752 at ``edaa72212``, :488-508 at v0.14.2): under
  ``contiguous_gradients`` (default True) the IPG bucket, ``torch.empty(reduce_bucket_size,
  dtype=...)`` — one buffer per gradient dtype, ``reduce_bucket_size`` elements whatever N
  (5e8 by default: ``runtime/zero/config.py``) — and the contiguous gradient partition
  ``grad_partitions_flat_buffer = torch.zeros(sum(p.partition_numel()), dtype=
  gradient_accumulation_dtype)`` (the model's dtype unless ``data_types.grad_accum_dtype``
  says otherwise: ``engine.py`` ``get_data_types``). Both are held at every moment, the
  forward included (:func:`stage3_state`; the partition is the ``grads`` term at every
  moment: :func:`stage3_grads`). Autograd's own gradient of each parameter is copied
  into the bucket by the gradient hook and its ``.data`` pointed there
  (``__add_grad_to_ipg_bucket``), then reduced into the partition: the model's
  gradients are never held beside it (one parameter's gradient between autograd and
  the hook: not modelled; the tied embedding's sum of two: ``grads/embedding_sum``).
* **the step** (``step``): ``_partition_all_parameters`` first (the gathered weights
  are released); the fp16 loss scaler's overflow check (``has_overflow`` with
  ``partition_gradients``: ``torch.isinf(grad_partitions_flat_buffer).any()`` and
  ``isnan``, one byte per local parameter) and the norm (``get_grad_norm_direct``:
  ``g.double().norm(2)`` per gradient, one 8-byte copy of a local tensor at a time) —
  both below the conversion's 6 bytes per local parameter while the largest tensor is
  under 3/4 of the partition, so not modelled as moments; per sub-group (at most
  ``sub_group_size`` = 1e9 elements) ``_prepare_fp32_grad_for_sub_group``:
  ``self.flatten(averaged_gradients).to(fp32)`` — a flat copy in the gradients' dtype
  and its FP32 conversion alive together (:data:`FLAT_GRADS`, :data:`FP32_GRADS`),
  the copy freed after the statement; the update runs on the FP32 gradient
  (:func:`stage3_step_moments`).

Not measured: DeepSpeed is not a dependency and its ZeRO kernels need an accelerator;
the figures follow the source above (DeepSpeed at ``edaa72212``, 2026).
"""

from __future__ import annotations

import math

from introspect.refined.precision import working_weight_bytes
from introspect.refined.shard_shapes import DS_REDUCE_BUCKET
from introspect.setup import TrainingSetup
from introspect.spec import ModelSpec

FP32 = 4

#: The copy of the working-dtype gradients the step flattens, and its FP32 conversion.
FLAT_GRADS = "grads/deepspeed_flat_partition"
FP32_GRADS = "grads/deepspeed_fp32_partition"
#: ``runtime/zero/config.py``: the ``sub_group_size`` default (``reduce_bucket_size``'s is
#: :data:`introspect.refined.shard_shapes.DS_REDUCE_BUCKET`).
DS_SUB_GROUP = 1_000_000_000


def is_deepspeed(setup: TrainingSetup) -> bool:
    """``--zero 2`` or ``--zero 3``: DeepSpeed's stages (on any number of devices)."""
    return setup.resolved_sharding == "zero" and setup.zero_stage >= 2


def applies(setup: TrainingSetup) -> bool:
    """Whether this module's stage-2 terms apply: DeepSpeed ZeRO-2, full training, an
    optimizer that steps on the device (CPU offload swaps the partition to the host:
    :mod:`introspect.refined.offload`)."""
    return (
        is_deepspeed(setup)
        and setup.zero_stage == 2
        and setup.finetune == "full"
        and setup.optimizer != "none"
        and setup.offload == "none"
        and not setup.optimizer_in_backward
    )


def local_parameters(spec: ModelSpec, setup: TrainingSetup) -> int:
    """Elements of this rank's flat partition: ``ceil(N / D)`` (N itself on one rank)."""
    return math.ceil(spec.n_params / setup.devices)


def master_bytes(setup: TrainingSetup) -> int | None:
    """Bytes per local parameter of ZeRO-2's FP32 partition (a clone, whatever the
    weights' dtype); None where this module does not decide it."""
    return FP32 if applies(setup) else None


def step_grad_bytes(spec: ModelSpec, setup: TrainingSetup) -> int:
    """Gradient bytes ``_optimizer_step`` runs with: the FP32 partition's gradient."""
    return FP32 * local_parameters(spec, setup)


def grad_partition_moment(
    spec: ModelSpec, setup: TrainingSetup, state: dict[str, int]
) -> dict[str, int] | None:
    """The step's conversion of the gradients into the FP32 partition's, at its
    largest: ``state`` (the persistent terms), the working-dtype gradients, their flat
    copy and, under 16-bit weights, its FP32 conversion alive together (module
    docstring). None where :func:`applies` does not."""
    if not applies(setup):
        return None
    from introspect.terms import GRADS

    n, w = local_parameters(spec, setup), working_weight_bytes(setup)
    terms = dict(state)
    terms[GRADS] = w * n
    terms[FLAT_GRADS] = w * n
    terms[FP32_GRADS] = FP32 * n if w < FP32 else 0
    return terms


def stage3_applies(setup: TrainingSetup) -> bool:
    """Whether ZeRO-3's terms apply (module docstring): DeepSpeed stage 3, full training,
    an optimizer that steps on the device (an offload keeps the partition on the host)."""
    return (
        is_deepspeed(setup)
        and setup.zero_stage == 3
        and setup.finetune == "full"
        and setup.optimizer != "none"
        and setup.offload == "none"
        and not setup.optimizer_in_backward
    )


def stage3_gathers(setup: TrainingSetup) -> bool:
    """Whether ZeRO-3 allocates what it gathers: not on one rank. With
    ``num_partitions == 1`` ``all_gather_coalesced`` returns ``_no_gather_coalesced``
    (``partition_parameters.py`` :1166-1167 and :769-779 at v0.14.2), whose
    ``NoGatherHandle`` sets ``param.data = param.ds_tensor.data.to(device).view(
    ds_shape)`` (:44-56): the partition is on the device already, so ``.to`` returns it
    and the parameter is a view of the flat partition — no gathered copy, no prefetch
    buffer."""
    return setup.devices > 1


def stage3_state(spec: ModelSpec, setup: TrainingSetup) -> dict[str, int]:
    """The IPG bucket ZeRO-3 allocates when the optimizer is built and holds to the end
    (``w · reduce_bucket_size``, one buffer); empty where :func:`stage3_applies` does
    not."""
    if not stage3_applies(setup):
        return {}
    from introspect.terms import ZERO_REDUCE_BUCKET

    return {ZERO_REDUCE_BUCKET: working_weight_bytes(setup) * DS_REDUCE_BUCKET}


def stage3_grads(spec: ModelSpec, setup: TrainingSetup) -> int | None:
    """ZeRO-3's contiguous gradient partition, ``w · ceil(N/D)``, held from the
    optimizer's construction (zeros) to the end: the gradients at every moment. None
    where :func:`stage3_applies` does not."""
    if not stage3_applies(setup):
        return None
    return working_weight_bytes(setup) * local_parameters(spec, setup)


def stage3_step_moments(
    spec: ModelSpec, setup: TrainingSetup, step: dict[str, int]
) -> list[tuple[str, dict[str, int]]]:
    """ZeRO-3's step after ``_partition_all_parameters`` (``step``, the optimizer step's
    terms, less the gathered weights; the partition still held), as (phase, terms): the
    conversion of the largest sub-group (``min(sub_group_size, ceil(N/D))`` elements:
    its flat copy, ``w`` bytes each, and its FP32 conversion; none under FP32, where
    ``.to`` returns the copy), then the update on the FP32 gradient. Empty where
    :func:`stage3_applies` does not."""
    if not stage3_applies(setup):
        return []
    from introspect.terms import GATHERED_WEIGHTS, GRADS

    held = {k: v for k, v in step.items() if k != GATHERED_WEIGHTS}
    n = local_parameters(spec, setup)
    held[GRADS] = working_weight_bytes(setup) * n
    sub, w = min(DS_SUB_GROUP, n), working_weight_bytes(setup)
    convert = {**held, FLAT_GRADS: w * sub, FP32_GRADS: FP32 * sub if w < FP32 else 0}
    update = {**held, FP32_GRADS: FP32 * sub}
    return [("master_grads", convert), ("optimizer_step", update)]
