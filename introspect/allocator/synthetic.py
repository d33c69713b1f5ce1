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


def moment_stream(spec, moments: list[tuple[str, dict[str, int]]]) -> list[tuple]:
    """The stream through the closed form's ``moments`` (phase, terms), in order; within
    a moment the state's allocations come first."""
    tensors = parameter_tensors(spec)
    layers = max(spec.num_hidden_layers, 1)
    largest: dict[str, int] = {}
    for _, terms in moments:
        for name, value in terms.items():
            largest[name] = max(largest.get(name, 0), value)
    sizes = {name: _sizes(name, value, tensors, layers) for name, value in largest.items()}
    live: dict[str, list[tuple[int, int]]] = {}
    held_bytes: dict[str, int] = {}
    events: list[tuple] = []
    serial = 0
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
            for nbytes in _pieces(sizes[name], need, len(held)):
                serial += 1
                events.append(("alloc", serial, nbytes, phase))
                held.append((serial, nbytes))
            held_bytes[name] += need
    return events


def moment_reserve(spec, moments: list[tuple[str, dict[str, int]]], cfg: AllocatorConfig) -> Replay:
    """The replay of :func:`moment_stream` with ``cfg``."""
    return replay(moment_stream(spec, moments), cfg)


def steps_stream(spec, steps: list[list[tuple[str, dict[str, int]]]]) -> list[tuple]:
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
    return moment_stream(spec, moments)
