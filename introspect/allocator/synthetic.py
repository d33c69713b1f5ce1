"""A stream for the closed form: the peak's tensors, in the order a step makes them.

The closed form knows the bytes of every term at the peak, not the order of the step's
allocations and frees, so the stream it can replay is the one without frees: the state
first (every parameter tensor of the model and, for each state term — weights, gradients,
each optimizer state — one tensor per parameter tensor, sized in proportion to its
elements), then the saved activations layer by layer (each ``activations/layer/...``
term as one tensor per layer), then every other term as one tensor. Replayed through
:class:`~introspect.allocator.caching.CachingAllocator`, it reads what the allocator's
block rounding, segment sizes and partly used pools add at the peak; the holes a freed
earlier phase leaves (what a recorded stream shows: ``measure --device fake``) are not
in it. Derived from torch's source, not measured on a GPU.
"""

from __future__ import annotations

from introspect.allocator.config import AllocatorConfig
from introspect.allocator.replay import Replay, replay

#: Terms held once per parameter tensor (their bytes split in proportion to its elements).
STATE_PREFIXES = ("weights", "grads", "optimizer/", "master")


def parameter_tensors(spec) -> list[int]:
    """Element counts of the model's parameter tensors: per layer the four attention
    projections (and their biases), the feed-forward's linears for every expert (and a
    router), the norms; the embedding, the final norm and an untied head."""
    d, h, kv, hd = spec.hidden_size, spec.num_attention_heads, spec.kv_heads, spec.head_size
    inner = spec.intermediate_size or 4 * d
    experts = spec.num_local_experts or 1
    per_layer = [d * h * hd, d * kv * hd, d * kv * hd, h * hd * d]
    if spec.qkv_bias:
        per_layer += [h * hd, kv * hd, kv * hd]
    linears = 3 if spec.ffn == "gated" else 2
    per_layer += [d * inner] * (linears * experts)
    if spec.num_local_experts:
        per_layer.append(d * spec.num_local_experts)
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
