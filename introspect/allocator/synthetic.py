"""Streams for the closed form: the step's tensors, in the order a step makes them.

The closed form knows the bytes of every term at each of the step's moments
(``introspect.refined.execution.moments``: the forward's end, each backward layer, the
optimizer step), not the allocation and free calls between them. Two streams follow:

* :func:`moment_stream` walks the moments in order and turns each change of a term into
  frees and allocations: a term that shrinks frees its newest tensors first (backward
  frees the last layer's activations first), one that grows allocates new ones. A term's
  tensors are: for the state (weights, gradients, each optimizer state, a master copy)
  one per parameter tensor, sized in proportion to its elements (gradients appear in the
  reverse order, as backward makes them); for ``activations/layer/...`` one per layer
  (its largest bytes ÷ L); any other term one tensor. Frees come before the allocations
  of the same step, so the stream's live bytes at each moment are the moment's own
  total: its allocated peak is the closed form's (up to torch's block rounding).
  Replayed, the blocks one phase frees and the next cannot use (activations' sizes are
  not the optimizer's) stay reserved, as on the GPU.
* :func:`stream`: the peak moment's tensors alone, no frees (block and segment rounding
  only).

What no closed form has: the order of the operations inside a moment and the
operations' own temporaries between moments (a recorded dry-run stream has both:
``measure --device fake``). Derived from torch's source, not measured on a GPU.
"""

from __future__ import annotations

from introspect.allocator.config import AllocatorConfig
from introspect.allocator.replay import Replay, replay

#: Terms held once per parameter tensor (their bytes split in proportion to its elements).
STATE_PREFIXES = ("weights", "grads", "optimizer/", "master")


def parameter_tensors(spec) -> list[int]:
    """Element counts of the model's parameter tensors: per layer the four attention
    projections (and their biases), the feed-forward's linears, the norms; the embedding,
    the final norm and an untied head. A mixture of experts holds its experts as two 3-D
    tensors and a router (transformers 5.24, e.g. ``MixtralExperts`` in
    ``models/mixtral/modeling_mixtral.py``: ``gate_up_proj`` (E, 2I, d) and
    ``down_proj`` (E, d, I))."""
    d, h, kv, hd = spec.hidden_size, spec.num_attention_heads, spec.kv_heads, spec.head_size
    inner = spec.intermediate_size or 4 * d
    experts = spec.num_local_experts
    per_layer = [d * h * hd, d * kv * hd, d * kv * hd, h * hd * d]
    if spec.qkv_bias:
        per_layer += [h * hd, kv * hd, kv * hd]
    linears = 3 if spec.ffn == "gated" else 2
    if experts:
        per_layer += [experts * (linears - 1) * inner * d, experts * d * inner, d * experts]
    else:
        per_layer += [d * inner] * linears
    per_layer += [d] * max(spec.norms_per_layer, 1)
    out = per_layer * spec.num_hidden_layers
    out += [spec.vocab_size * d, d]
    if not spec.tie_word_embeddings:
        out.append(spec.vocab_size * d)
    return out


def _split(total: int, weights: list[int]) -> list[int]:
    whole = sum(weights)
    parts = [total * w // whole for w in weights]
    parts[max(range(len(parts)), key=parts.__getitem__)] += total - sum(parts)
    return [p for p in parts if p > 0]


def stream(spec, terms: dict[str, int]) -> list[tuple]:
    """The allocation stream of the peak's ``terms`` (no frees), as above."""
    tensors = parameter_tensors(spec)
    events: list[tuple] = []

    def add(nbytes: int, phase: str) -> None:
        events.append(("alloc", len(events), nbytes, phase))

    layered: list[tuple[str, int]] = []
    for name, value in terms.items():
        if value <= 0:
            continue
        if name.startswith(STATE_PREFIXES):
            for part in _split(value, tensors):
                add(part, "state")
        elif name.startswith("activations/layer/"):
            layered.append((name, value))
    layers = max(spec.num_hidden_layers, 1)
    for _ in range(layers):
        for _name, value in layered:
            if value // layers:
                add(value // layers, "forward")
    for name, value in terms.items():
        if value > 0 and not name.startswith((*STATE_PREFIXES, "activations/layer/")):
            add(value, "peak")
    return events


def reserve(spec, terms: dict[str, int], cfg: AllocatorConfig) -> Replay:
    """The replay of :func:`stream` with ``cfg``: its reserved peak and fragmentation."""
    return replay(stream(spec, terms), cfg)


def _sizes(name: str, largest: int, tensors: list[int], layers: int) -> list[int] | None:
    """The sizes of term ``name``'s tensors in the order they are made (None: one tensor
    of whatever the term needs)."""
    if name.startswith(STATE_PREFIXES):
        sizes = _split(largest, tensors)
        return sizes[::-1] if name.startswith("grads") else sizes  # backward: last first
    if name.startswith("activations/layer/"):
        return [max(largest // layers, 1)] * layers
    return None


def _pieces(sizes: list[int] | None, need: int, start: int) -> list[int]:
    """The next tensors, from the ``start``-th, adding up to ``need`` bytes (the last
    one cut to fit)."""
    out = []
    for size in (sizes or ())[start:]:
        if need <= 0:
            break
        out.append(min(size, need))
        need -= out[-1]
    if need > 0:
        out.append(need)
    return out


def moment_stream(
    spec,
    moments: list[tuple[str, dict[str, int]]],
    side: dict[str, int] | None = None,
    prelude: tuple[list[tuple], dict[str, list[tuple]]] | None = None,
) -> list[tuple]:
    """The stream through the closed form's ``moments`` (phase, terms), in order; within
    a moment the state's allocations come first. ``side`` names the terms whose tensors
    are allocated on another CUDA stream (term → stream; the rest on the default
    stream, 0): the caching allocator keeps each stream's blocks apart
    (:mod:`introspect.allocator.caching`). ``prelude`` is what ran before the step
    (:func:`load_stream`: its events, and per term the tensors it left alive, which the
    step's first moment takes over)."""
    tensors = parameter_tensors(spec)
    layers = max(spec.num_hidden_layers, 1)
    side = side or {}
    largest: dict[str, int] = {}
    for _, terms in moments:
        for name, value in terms.items():
            largest[name] = max(largest.get(name, 0), value)
    sizes = {name: _sizes(name, value, tensors, layers) for name, value in largest.items()}
    live: dict[str, list[tuple]] = {}
    held_bytes: dict[str, int] = {}
    events: list[tuple] = []
    serial = 0
    if prelude is not None:
        events += prelude[0]
        for name, held in prelude[1].items():
            live[name] = list(held)
            held_bytes[name] = sum(nbytes for _, nbytes in held)
    for phase, terms in moments:
        grow = []
        for name in [*live, *(n for n in terms if n not in live)]:
            held = live.setdefault(name, [])
            have, target = held_bytes.get(name, 0), max(terms.get(name, 0), 0)
            while held and have > target:  # newest first
                key, nbytes = held.pop()
                events.append(("free", key))
                have -= nbytes
            held_bytes[name] = have
            if target > have:
                grow.append((name, target - have))
        grow.sort(key=lambda g: not g[0].startswith(STATE_PREFIXES))  # the state first
        for name, need in grow:
            held = live[name]
            stream = side.get(name, 0)
            for nbytes in _pieces(sizes.get(name), need, len(held)):
                serial += 1
                events.append(("alloc", serial, nbytes, phase, stream))
                held.append((serial, nbytes))
            held_bytes[name] += need
    return events


def moment_reserve(spec, moments: list[tuple[str, dict[str, int]]], cfg: AllocatorConfig) -> Replay:
    """The replay of :func:`moment_stream` with ``cfg``."""
    return replay(moment_stream(spec, moments), cfg)


def steps_stream(
    spec,
    steps: list[list[tuple[str, dict[str, int]]]],
    side: dict[str, int] | None = None,
    prelude: tuple[list[tuple], dict[str, list[tuple]]] | None = None,
) -> list[tuple]:
    """Several steps' moments one after another, each step with its own shapes (a batch
    whose T is its longest sample's: the logits, the saved activations and the loss's
    temporaries change size from step to step). The state terms (weights, gradients,
    optimizer state, master copy: :data:`STATE_PREFIXES`) keep their names, so their
    tensors stay held across steps as on the GPU; every other term is the step's own
    (``name@k``), its tensors sized by that step's bytes, and freed at the next step's
    first moment before that step allocates (:func:`moment_stream`'s order). Replayed with
    expandable segments off, a longer step after shorter ones cannot use the smaller
    blocks they left cached: they stay reserved (the PyTorch tuning guide's "preallocate
    memory in case of variable input length"); with them on, freed pages are unmapped and
    the segment grows in place."""
    moments: list[tuple[str, dict[str, int]]] = []
    for k, step in enumerate(steps):
        for phase, terms in step:
            own = {
                (name if name.startswith(STATE_PREFIXES) else f"{name}@{k}"): value
                for name, value in terms.items()
            }
            moments.append((phase, own))
    side = side or {}
    own_side = {f"{name}@{k}": st for name, st in side.items() for k in range(len(steps))}
    return moment_stream(spec, moments, {**side, **own_side}, prelude)


#: Where the sharded wrappers allocate what they gather: FSDP2's all-gather output on its
#: ``all_gather_copy_in_stream`` (torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py
#: ``foreach_all_gather``: ``all_gather_copy_in`` under ``device_handle.stream(
#: all_gather_copy_in_stream)``; the unsharded parameters are copied out on the default
#: stream); DeepSpeed ZeRO-3's gathered parameters and prefetch on the coordinator's
#: ``__allgather_stream`` (deepspeed/runtime/zero/partitioned_param_coordinator.py
#: ``__all_gather_params_``: ``all_gather_coalesced`` under ``get_accelerator().stream(
#: self.__allgather_stream)``, :460-463 at v0.14.2).
SIDE_STREAM = 1


def side_terms(setup) -> dict[str, int]:
    """The terms the setup's sharding allocates on a side stream (term → stream)."""
    from introspect.refined import deepspeed
    from introspect.refined.shard_shapes import strategy
    from introspect.terms import FSDP_ALL_GATHER, GATHERED_WEIGHTS, ZERO_ALL_GATHER

    if strategy(setup) == "fsdp":
        return {FSDP_ALL_GATHER: SIDE_STREAM}
    if deepspeed.is_deepspeed(setup) and setup.zero_stage == 3:
        return {GATHERED_WEIGHTS: SIDE_STREAM, ZERO_ALL_GATHER: SIDE_STREAM}
    return {}


def load_stream(spec, setup) -> tuple[list[tuple], dict[str, list[tuple]]] | None:
    """What the setup's wrapper allocates and frees on the device before the first step,
    as the source does it, with the model on the host before (None where no wrapper
    builds its state on the device this way). ``torch.cuda.reset_peak_memory_stats``
    does not return these blocks, and no ``empty_cache`` follows the wrap in the
    scripts read (fsdp_qlora train.py calls it after loading, before the wrap; the HF
    Trainer's DeepSpeed path not at all), so the cache they leave is the step's first.

    * DeepSpeed ZeRO-3, a model loaded without ``zero.Init`` (``from_pretrained`` before
      the Trainer's arguments): ``engine.py`` ``_configure_distributed_model``
      (:1096-1112 at v0.14.2) ``module.half()`` on the host then ``module.to(device)`` —
      every tensor whole; the optimizer's ``DeepSpeedZeRoOffload`` partitions each
      (``_convert_to_zero_parameters``: the partition allocated, the whole freed);
      ``_create_fp16_partitions_with_defragmentation`` → ``defragment`` (stage3.py
      :526-556 at v0.14.2) copies the partitions to the host, frees them, calls
      ``empty_cache()`` and copies them back as one flat buffer — the load's cache is
      returned there; ``_create_fp32_partitions`` the FP32 flat copy
      (``.clone().float()``: a 16-bit clone beside it, freed);
      ``initialize_optimizer_states`` a zero FP32 gradient of the largest sub-group,
      the Adam state made by one step on it, the gradient freed; then the IPG bucket
      and the contiguous gradient partition (:mod:`introspect.refined.deepspeed`).
    * FSDP2 ``fully_shard`` of a module moved to the device: each parameter whole,
      then its padded shard (``_fsdp_param.py`` ``_init_sharded_param``:
      ``new_zeros`` of the padded shard, the chunk copied), the whole freed.

    Returns the events and, per state term, the tensors left alive (key, bytes)."""
    from introspect.refined import deepspeed
    from introspect.refined.precision import working_weight_bytes
    from introspect.refined.shard_shapes import DS_PERSISTENCE_THRESHOLD, strategy
    from introspect.terms import ADAM_M, ADAM_V, GRADS, MASTER_WEIGHTS, WEIGHTS

    D, w = setup.devices, working_weight_bytes(setup)
    tensors = parameter_tensors(spec)
    events: list[tuple] = []

    def alloc(key, nbytes: int) -> tuple:
        events.append(("alloc", ("load", *key), nbytes, "load", 0))
        return ("load", *key), nbytes

    def free(handle: tuple) -> None:
        events.append(("free", handle[0]))

    if deepspeed.stage3_applies(setup):
        from introspect.refined.shard_shapes import DS_REDUCE_BUCKET

        whole = [alloc(("whole", i), w * t) for i, t in enumerate(tensors)]
        parts = []
        for i, (t, h) in enumerate(zip(tensors, whole, strict=True)):
            kept = t < DS_PERSISTENCE_THRESHOLD
            parts.append(alloc(("part", i), w * (t if kept else -(-t // D))))
            free(h)
        n = deepspeed.local_parameters(spec, setup)
        for h in parts:  # defragment: to the host, freed, the cache emptied, back as one
            free(h)
        events.append(("empty_cache",))
        flat = alloc(("lp_flat",), w * n)
        clone = alloc(("fp32_clone",), w * n)  # .to(device).clone().float()
        master = alloc(("fp32",), 4 * n)
        free(clone)
        grad = alloc(("init_grad",), 4 * min(deepspeed.DS_SUB_GROUP, n))
        m, v = alloc(("adam_m",), 4 * n), alloc(("adam_v",), 4 * n)
        free(grad)
        ipg = alloc(("ipg",), w * DS_REDUCE_BUCKET)
        partition = alloc(("grad_partition",), w * n)
        from introspect.terms import ZERO_REDUCE_BUCKET

        held = {WEIGHTS: [flat], MASTER_WEIGHTS: [master], ADAM_M: [m], ADAM_V: [v]}
        held[ZERO_REDUCE_BUCKET] = [ipg]
        held[GRADS] = [partition]
        return events, held
    if strategy(setup) == "fsdp" and setup.offload == "none":
        for i, t in enumerate(tensors):
            free(alloc(("whole", i), w * t))
        return events, {}
    return None


#: DeepSpeed ZeRO-3's ``reduce_and_partition_stream`` (stage3.py), where the fp16 loss
#: scaler's overflow check runs.
REDUCE_STREAM = 2


def with_overflow_check(events: list[tuple], spec, setup) -> list[tuple]:
    """``events`` with ZeRO-3's overflow check before the step's first event: under
    ``has_overflow(partition_gradients=True)`` (stage3.py; :2726-2740 at ``edaa72212``)
    ``torch.isinf(grad_partitions_flat_buffer).any()`` then ``isnan``, each a bool
    tensor of the partition's elements, made and freed on the
    ``reduce_and_partition_stream`` — blocks the default stream never reuses. Run only
    for an fp16 model (``_overflow_check_and_loss_scale_update``: ``if self.dtype ==
    torch.float16``, :1964-1968 at v0.14.2). Below the step's conversion in allocated
    bytes, so in the replay only (where
    :func:`introspect.refined.deepspeed.stage3_applies` holds)."""
    from introspect.refined import deepspeed

    if not deepspeed.stage3_applies(setup) or setup.activation_dtype != "fp16":
        return events
    n = deepspeed.local_parameters(spec, setup)
    check = []
    for name in ("isinf", "isnan"):
        key = ("overflow_check", name)
        check += [("alloc", key, n, "master_grads", REDUCE_STREAM), ("free", key)]
    for i, event in enumerate(events):
        if event[0] == "alloc" and event[3] in ("master_grads", "optimizer_step"):
            return events[:i] + check + events[i:]
    return events + check
