"""LoRA and QLoRA under sharding: what each rank holds of a frozen base and its adapters.

The sharded strategies divide every parameter, frozen or not; only the gradients and
the optimizer state are the trainable parameters' alone. From the libraries' source:

* **FSDP2** (torch 2.13, ``torch/distributed/fsdp/_fully_shard/``): ``fully_shard``
  makes an ``FSDPParam`` of every parameter of the unit whatever its ``requires_grad``
  (``_fsdp_param.py``: dim 0 sharded, padded to a multiple of D), so a rank holds 1/D of
  the frozen base too, and a unit's all-gather gathers its whole base with its adapters
  (``_fsdp_collectives.py`` ``foreach_all_gather``: inputs of several dtypes travel as
  one uint8 buffer, so the bytes add up). ``MixedPrecisionPolicy(param_dtype=bf16)``
  casts every floating parameter for the all-gather, the FP32 adapters as well; without
  a policy each parameter is gathered in its own dtype. ``_fsdp_param_group.py``:
  ``_init_mp_dtypes`` asks a uniform dtype of the trainable parameters only, and
  ``post_backward`` reduce-scatters only the parameters that have a gradient — the
  frozen base has none, so the reduce-scatter input, the unsharded and the sharded
  gradients are the adapters' (FP32: their own dtype, and the policy's
  ``reduce_dtype``).
* **QLoRA's NF4 base under FSDP** as users run it (transformers' bitsandbytes
  integration with ``bnb_4bit_quant_storage=torch.bfloat16``, accelerate's FSDP QLoRA
  guide, answer.ai's fsdp_qlora): bitsandbytes' ``quantize_4bit``
  (``backends/default/ops.py``) packs two weights per byte and views the packed bytes as
  the storage dtype, a ``((n/2)/2, 1)`` BF16 ``Params4bit``: a parameter like any other,
  so FSDP shards and gathers its dim 0, and, the storage being ``param_dtype``, casts
  nothing. The quant state (absmax, code, second level) is no parameter: ``Linear4bit``
  keeps it on the module (``nn/modules.py`` ``fix_4bit_weight_quant_state_from_module``
  puts it back on the gathered weight, "for fsdp"), so every rank holds it whole and
  nothing gathers it. LLM.int8's scale (``SCB``) is the same: whole on every rank.
* **DeepSpeed ZeRO-3** (``runtime/zero/partition_parameters.py``): every parameter is
  partitioned, frozen ones too, except those under ``stage3_param_persistence_threshold``
  (1e5 elements; a rank-16 ``lora_A`` of a 4096-wide layer is 65,536), kept whole; the
  FP32 optimizer partitions (``stage3.py``) cover the trainable parameters only.
* **DDP, ZeRO-1/2**: the reducer buckets only the parameters that require a gradient
  (``torch/nn/parallel/distributed.py`` ``_build_params_for_reducer``), and the optimizer
  (``ZeroRedundancyOptimizer``'s partition, DeepSpeed's stage 1-2 partitions) sees only
  the adapters; the base stays whole on every rank.

Every figure is per rank, for the largest rank, in bytes.
"""

from __future__ import annotations

import math

from introspect._record import record
from introspect.refined import lora, lora_moe
from introspect.refined.memo import per_estimate
from introspect.refined.precision import working_weight_bytes
from introspect.setup import TrainingSetup
from introspect.spec import ModelSpec

FP32 = 4
#: bitsandbytes' storage dtype for a shardable NF4 base (``bnb_4bit_quant_storage``).
NF4_STORAGE_BYTES = 2


def gathered_bytes(setup: TrainingSetup, stored: int) -> int:
    """Bytes per element of a floating parameter as FSDP2 gathers it: the policy's
    ``param_dtype`` (BF16) under mixed precision, else the parameter's own dtype."""
    return 2 if setup.precision == "mixed" else stored


@record
class Unit:
    """One FSDP2 unit of a LoRA model: its frozen parameters and its trainable ones."""

    frozen_bytes: int  # one rank's shards, stored dtypes, plus what it keeps whole
    frozen_gathered: int  # the unit unsharded, gathered dtypes
    frozen_padded: int  # D · padded shard, gathered dtypes (the all-gather output)
    trainable: int  # elements
    trainable_shard: int  # one rank's padded shard, elements
    trainable_gathered: int  # bytes per trainable element gathered (param dtype)
    trainable_reduce: int  # bytes per element of its reduce-scatter and sharded gradient


def _shard(shapes: list[tuple[int, ...]], devices: int) -> int:
    return sum(math.ceil(s[0] / devices) * math.prod(s[1:]) for s in shapes)


def _linears(kind: ModelSpec, setup: TrainingSetup) -> list[tuple[int, int]]:
    """(d_in, d_out) of every base linear of one layer of the homogeneous ``kind``, as
    :func:`lora._base_linears` counts them: each expert's in the per-expert view; under
    transformers 5 on an MoE model the ``nn.Linear`` modules only."""
    if lora.per_kind(kind, setup):
        return list(lora.module_shapes(kind).values())
    return [s for t, s in lora.linear_shapes(kind).items() for _ in range(lora._experts(kind, t))]


def _stored(d_in: int, d_out: int, setup: TrainingSetup) -> tuple[tuple[int, int], int, int]:
    """One base linear as its parameter stores it: (shape, bytes per element, bytes of
    state beside it that every rank keeps whole). NF4: the packed weight viewed as BF16,
    ``((n/2)/2, 1)``, and the quant state; int8: the (d_out, d_in) bytes and one FP32
    scale per row; else the (d_out, d_in) weight at its dtype."""
    from introspect.units import dtype_bytes

    n, quant = d_in * d_out, setup.resolved_base_quant
    if quant == "nf4":
        packed = -(-n // 2)
        state = lora.nf4_tensor_bytes(n, setup.double_quant) - packed
        return (packed // NF4_STORAGE_BYTES, 1), NF4_STORAGE_BYTES, state
    if quant == "int8":
        return (d_out, d_in), 1, d_out * FP32
    return (d_out, d_in), dtype_bytes(quant), 0


def _base_linear_bytes(kind: ModelSpec, setup: TrainingSetup, D: int) -> tuple[int, int, int]:
    """One layer's base linears under FSDP2: (one rank's bytes, gathered bytes,
    all-gather bytes), the first including the state each rank keeps whole. A quantized
    weight is gathered as stored (its storage is the policy's ``param_dtype``), a
    floating one as :func:`gathered_bytes` says."""
    quant = setup.resolved_base_quant
    mine = gathered = padded = 0
    for i, o in _linears(kind, setup):
        shape, b, whole = _stored(i, o, setup)
        g = b if quant in ("nf4", "int8") else gathered_bytes(setup, b)
        shard = _shard([shape], D)
        mine += shard * b + whole
        gathered += math.prod(shape) * g
        padded += D * shard * g
    return mine, gathered, padded


def _other_tensors(kind: ModelSpec, setup: TrainingSetup) -> list[tuple[int, ...]]:
    """One block's parameter tensors that are not base linears (norms, biases,
    transformers' expert tensors and router), at the working dtype."""
    from collections import Counter

    from introspect.refined import shard_shapes as sharding

    left = Counter((o, i) for i, o in _linears(kind, setup))
    out = []
    for shape in sharding.layer_tensors(kind):
        if left[shape]:
            left[shape] -= 1
        else:
            out.append(shape)
    return out


def _adapter_shapes(kind: ModelSpec, setup: TrainingSetup) -> list[tuple[int, int]]:
    """One layer's adapter weights as nn.Linear stores them: ``lora_A`` (r, d_in),
    ``lora_B`` (d_out, r); a parameter adapter's at rank r·copies (:mod:`lora_moe`)."""
    r = setup.lora_rank
    if lora.per_kind(kind, setup):
        shapes = lora.module_shapes(kind)
        pairs = [(shapes[t][0], shapes[t][1], r) for t in lora._kind_targets(kind, setup)]
        pairs += [(i, o, rank) for _, i, o, rank in lora_moe.adapters(kind, setup)]
    else:
        shapes = lora.linear_shapes(kind)
        pairs = [
            (shapes[t][0], shapes[t][1], r)
            for t in lora.targets(kind, setup)
            for _ in range(lora._experts(kind, t))
        ]
    return [s for i, o, rank in pairs for s in ((rank, i), (o, rank))]


@per_estimate
def block_unit(kind: ModelSpec, setup: TrainingSetup) -> Unit:
    """One block of the homogeneous ``kind`` as an FSDP2 unit: its base linears as
    stored (:func:`_base_linear_bytes`), its other parameters (norms, biases,
    transformers' expert tensors) at the working dtype, its adapters FP32."""
    D = setup.devices
    ob = lora.frozen_other_bytes(setup, working_weight_bytes(setup))
    gw = gathered_bytes(setup, ob)
    mine, gathered, padded = _base_linear_bytes(kind, setup, D)
    others = _other_tensors(kind, setup)
    other = sum(math.prod(s) for s in others)
    other_shard = _shard(others, D)
    adapters = _adapter_shapes(kind, setup)
    return Unit(
        frozen_bytes=mine + other_shard * ob,
        frozen_gathered=gathered + other * gw,
        frozen_padded=padded + D * other_shard * gw,
        trainable=sum(math.prod(s) for s in adapters),
        trainable_shard=_shard(adapters, D),
        trainable_gathered=gathered_bytes(setup, FP32),
        trainable_reduce=FP32,
    )


@per_estimate
def root_unit(spec: ModelSpec, setup: TrainingSetup) -> Unit:
    """FSDP2's root unit of a LoRA model: the frozen embedding, final norm and head (at
    :func:`lora.frozen_other_bytes`), and under ``train_embeddings`` peft's trained
    copies of the embedding and head (``modules_to_save``: deep copies, the same dtype)."""
    from introspect.refined import shard_shapes as sharding

    D, wb = setup.devices, working_weight_bytes(setup)
    ob = lora.frozen_other_bytes(setup, wb)
    frozen = sharding.root_tensors(spec)
    n = sum(math.prod(s) for s in frozen)
    shard = _shard(frozen, D)
    copies = [(spec.vocab_size, spec.hidden_size)] * _copies(spec, setup)
    return Unit(
        frozen_bytes=shard * ob,
        frozen_gathered=n * gathered_bytes(setup, ob),
        frozen_padded=D * shard * gathered_bytes(setup, ob),
        trainable=sum(math.prod(s) for s in copies),
        trainable_shard=_shard(copies, D),
        trainable_gathered=gathered_bytes(setup, ob),
        trainable_reduce=FP32 if setup.precision == "mixed" else ob,
    )


def largest_block(spec: ModelSpec, setup: TrainingSetup) -> Unit:
    """The block unit of the kind with the most gathered bytes (a homogeneous stack's
    only kind): what each moment of a block's backward holds."""
    units = [block_unit(spec.for_kind(kind), setup) for kind, _ in spec.kinds]
    return max(units, key=lambda u: u.frozen_gathered + u.trainable * u.trainable_gathered)


def _layers(spec: ModelSpec, setup: TrainingSetup) -> list[tuple[Unit, int]]:
    return [(block_unit(spec.for_kind(kind), setup), count) for kind, count in spec.kinds]


def _zero3_bytes(shapes: list[tuple[int, ...]], b: int, D: int) -> tuple[int, int]:
    """(one rank's bytes, bytes partitioned) of ``shapes`` at ``b`` bytes each under
    DeepSpeed ZeRO-3: each tensor of at least ``stage3_param_persistence_threshold``
    elements ÷D (rounded up), a smaller one whole."""
    from introspect.refined.shard_shapes import DS_PERSISTENCE_THRESHOLD

    mine = parted = 0
    for s in shapes:
        n = math.prod(s)
        if n < DS_PERSISTENCE_THRESHOLD:
            mine += n * b
        else:
            mine += math.ceil(n / D) * b
            parted += n * b
    return mine, parted


def _zero3_weights(spec: ModelSpec, setup: TrainingSetup) -> dict[str, int]:
    """One ZeRO-3 rank's weights of a LoRA model (module docstring): the base linears as
    stored (:func:`_stored`: an NF4 weight is its packed BF16 ``Params4bit``), the other
    frozen tensors at the working dtype, the adapters FP32, each partitioned or
    persistent by its size; the state beside a quantized weight whole; and the live
    parameters gathered (``stage3_max_live_parameters``, as a share of the partitioned
    bytes)."""
    from introspect.refined import shard_shapes as sharding

    D, wb = setup.devices, working_weight_bytes(setup)
    linears = other = adapters = parted = elements = 0
    for kind, count in spec.kinds:
        k = spec.for_kind(kind)
        for i, o in _linears(k, setup):
            shape, b, whole = _stored(i, o, setup)
            mine, p = _zero3_bytes([shape], b, D)
            linears += count * (mine + whole)
            parted += count * p
            elements += count * i * o
        others = _other_tensors(k, setup)
        mine, p = _zero3_bytes(others, lora.frozen_other_bytes(setup, wb), D)
        other += count * mine
        ad_mine, ad_p = _zero3_bytes(_adapter_shapes(k, setup), FP32, D)
        adapters += count * ad_mine
        parted += count * (p + ad_p)
        elements += count * sum(math.prod(s) for s in others + _adapter_shapes(k, setup))
    root = sharding.root_tensors(spec)
    root_mine, root_p = _zero3_bytes(root, lora.frozen_other_bytes(setup, wb), D)
    copies = [(spec.vocab_size, spec.hidden_size)] * _copies(spec, setup)
    copies_mine, copies_p = _zero3_bytes(copies, wb, D)
    parted += root_p + copies_p
    elements += sum(math.prod(s) for s in root + copies)
    live = min(1.0, sharding.DS_MAX_LIVE_PARAMETERS / elements) if elements else 1.0
    return {
        "weights/base_linears": linears,
        "weights/base_other": other + root_mine,
        "weights/lora_adapters": adapters,
        "weights/trainable_embedding_copies": copies_mine,
        "weights/gathered": round(live * parted),
    }


def _copies(spec: ModelSpec, setup: TrainingSetup) -> int:
    """peft's trained embedding copies (``modules_to_save``): the embedding and an untied
    head under ``train_embeddings``, else none."""
    if not setup.train_embeddings:
        return 0
    return 1 if spec.tie_word_embeddings else 2


def _fsdp_weights(spec: ModelSpec, setup: TrainingSetup) -> dict[str, int]:
    """One FSDP2 rank's weights of a LoRA model: every block's and the root's shards
    (the quant state whole), split as :func:`lora.state_terms` splits them."""
    D, wb = setup.devices, working_weight_bytes(setup)
    linears = other = adapters = 0
    for kind, count in spec.kinds:
        k = spec.for_kind(kind)
        unit = block_unit(k, setup)
        mine = _base_linear_bytes(k, setup, D)[0]
        linears += count * mine
        other += count * (unit.frozen_bytes - mine)
        adapters += count * unit.trainable_shard * FP32
    root = root_unit(spec, setup)
    return {
        "weights/base_linears": linears,
        "weights/base_other": other + root.frozen_bytes,
        "weights/lora_adapters": adapters,
        "weights/trainable_embedding_copies": root.trainable_shard
        * lora.frozen_other_bytes(setup, wb),
    }


def trainable_tensors(spec: ModelSpec, setup: TrainingSetup) -> list[tuple[int, ...]]:
    """Every trainable tensor's shape: each layer's adapters, and peft's embedding
    copies under ``train_embeddings``."""
    out: list[tuple[int, ...]] = []
    for kind, count in spec.kinds:
        out += _adapter_shapes(spec.for_kind(kind), setup) * count
    return out + [(spec.vocab_size, spec.hidden_size)] * _copies(spec, setup)


def optimizer_share(spec: ModelSpec, setup: TrainingSetup) -> tuple[int, int]:
    """(elements of the trainable parameters the largest rank's optimizer updates, all
    trainable elements): FSDP2 each tensor's padded dim-0 shard; DeepSpeed ZeRO-2/3 one
    flat ÷D partition; ZeRO-1 the largest rank's greedy partition of whole tensors
    (``ZeroRedundancyOptimizer``); DDP and one device everything."""
    from introspect.refined import shard_shapes as sharding

    shapes = trainable_tensors(spec, setup)
    total = sum(math.prod(s) for s in shapes)
    how, D = sharding.strategy(setup), setup.devices
    if how == "fsdp":
        return _shard(shapes, D), total
    if how == "zero" and setup.zero_stage >= 2:
        return math.ceil(total / D), total
    if how == "zero":
        return max(sharding.zero_partition([math.prod(s) for s in shapes], D)), total
    return total, total


def state(spec: ModelSpec, setup: TrainingSetup, terms: dict[str, int]) -> dict[str, int]:
    """:func:`lora.state_terms`' one-device ``terms`` as the largest rank holds them
    (module docstring): FSDP2 and ZeRO-3 shard the whole model, frozen base included;
    every strategy divides the optimizer state as :func:`optimizer_share` says; DDP (and
    ZeRO-1 beside it) adds the reducer's buckets for the trainable parameters' gradients
    (``comm/ddp_buckets``)."""
    from introspect.refined import shard_shapes as sharding
    from introspect.terms import DDP_BUCKETS

    how = sharding.strategy(setup)
    if how == "none":
        return terms
    out = dict(terms)
    if how == "fsdp":
        out.update({k: v for k, v in _fsdp_weights(spec, setup).items() if k in terms})
    elif how == "zero" and setup.zero_stage == 3:
        weights = _zero3_weights(spec, setup)
        out.update({k: v for k, v in weights.items() if k in terms or k == "weights/gathered"})
    mine, total = optimizer_share(spec, setup)
    for name in terms:
        if name.startswith("optimizer/") and total:
            out[name] = math.ceil(terms[name] * mine / total)
    if how == "ddp" or (how == "zero" and setup.zero_stage == 1):
        out[DDP_BUCKETS] = trainable_grad_bytes(spec, setup)
    return out


def trainable_grad_bytes(spec: ModelSpec, setup: TrainingSetup) -> int:
    """Bytes of every trainable parameter's gradient, unsharded: the FP32 adapters', the
    embedding copies' at the working dtype."""
    copies = lora.embedding_parameters(spec) if setup.train_embeddings else 0
    return lora.adapter_parameters(spec, setup) * FP32 + copies * working_weight_bytes(setup)


def grad_bytes(spec: ModelSpec, setup: TrainingSetup, n_params: int, value: int) -> int:
    """:func:`lora.grad_bytes`' one-device ``value`` (backward has passed ``n_params``
    of the model's parameters, head first) on the largest rank: none beside DDP's
    buckets under ``gradient_as_bucket_view``; ÷D from DeepSpeed's stage 2; FSDP2 the
    root's trained copies unsharded until the root's reduce-scatter, the blocks done
    as their trainable shards (on the host under ``--offload parameters``), the
    current block's adapters unsharded; at the step every shard."""
    from introspect.refined import offload
    from introspect.refined import shard_shapes as sharding

    how, D = sharding.strategy(setup), setup.devices
    if how == "ddp" or (how == "zero" and setup.zero_stage == 1):
        return 0 if setup.gradient_as_bucket_view else value
    if how == "zero":
        return math.ceil(value / D)
    if how != "fsdp":
        return value
    root = root_unit(spec, setup)
    host = offload.grads_on_host(setup)
    if n_params >= spec.n_params:
        if host:
            return 0
        layers = _layers(spec, setup)
        shards = sum(count * u.trainable_shard * u.trainable_reduce for u, count in layers)
        return shards + root.trainable_shard * root.trainable_reduce
    vd = spec.vocab_size * spec.hidden_size
    head = min(n_params, vd)
    done, partial = divmod(n_params - head, sharding.block_elements(spec))
    block = largest_block(spec, setup)
    per_block = sharding.block_elements(spec)
    unsharded = root.trainable * root.trainable_gathered * head // vd
    unsharded += block.trainable * block.trainable_gathered * partial // per_block
    return unsharded + (0 if host else done * block.trainable_shard * block.trainable_reduce)


def causes(setup: TrainingSetup) -> dict[str, str]:
    """Why a sharded LoRA rank's weights have their size (FSDP2, DeepSpeed ZeRO-3)."""
    D, quant = setup.devices, setup.resolved_base_quant
    how = "FSDP2 dim-0 shard" if setup.resolved_sharding == "fsdp" else "ZeRO-3 partition"
    kept = (
        "; the quant state (absmax, codes) whole on every rank: Linear4bit keeps it on the "
        "module, not in a parameter"
        if quant == "nf4"
        else "; int8's row scales whole"
        if quant == "int8"
        else ""
    )
    stored = (
        "NF4 packed in BF16 storage (bnb_4bit_quant_storage=bf16, a Params4bit sharded "
        "like any parameter)"
        if quant == "nf4"
        else quant
    )
    return {
        "weights/base_linears": f"this rank's {how} (÷{D}) of the frozen base's block "
        f"linears, {stored}{kept}",
        "weights/base_other": f"this rank's {how} (÷{D}) of the frozen embeddings, head "
        "and norms, at the model's dtype",
        "weights/lora_adapters": f"this rank's {how} (÷{D}) of the FP32 adapters",
        "comm/reduce_scatter": "FSDP2 reduce-scatter input of the block below: its "
        "adapters' gradients only (the frozen base has none), FP32",
    }
