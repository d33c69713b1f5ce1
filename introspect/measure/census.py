"""Saved-tensor census: what autograd really keeps for backward, per module, by seed term.

``torch.autograd.graph.saved_tensors_hooks`` sees every tensor an autograd node saves
during the forward pass. Each saved storage is counted once (views and tensors saved by
several nodes share a storage), parameters are left out (they are the weights term), and
each storage is attributed to the module that *produced* it — tagged at creation by a
small TorchDispatchMode — then grouped into the seed's term paths
(:mod:`introspect.simplified`) with finer sub-paths:

* ``activations/embedding`` — the embedding's output (saved by whatever reads it next)
* ``activations/layer/layernorm`` — norm outputs; ``…/layernorm/stats`` their saved mean
  and inverse std (or RMS), which the seed leaves out
* ``activations/layer/residual`` — the residual stream (each norm's input), not in the seed
* ``activations/layer/attention/linear`` — Q, K, V, RoPE, probs·V, …; ``…/quadratic`` the
  B·h·T×T tensors (``…/quadratic/scores``, ``…/quadratic/probabilities``)
* ``activations/layer/feed_forward`` — the up/gate projections, activation, product
* ``activations/positions`` — a model-level RoPE table (Hugging Face's ``rotary_emb``)
* ``activations/final_norm``, ``activations/logits`` (the loss's log-softmax),
  ``activations/inputs`` (token ids and targets)

This is the framework's own answer to which of the seed's tensors exist: for instance,
eager attention keeps one B·h·T×T tensor per layer (softmax saves its output, and the
probs·V matmul saves that same storage), not the two the seed counts.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

_LAYER = re.compile(r"(^|\.)(layers|h|blocks|layer)\.(\d+)(\.|$)")


@dataclass
class Census:
    """Saved bytes by term, and the detail behind them."""

    terms: dict[str, int] = field(default_factory=dict)
    #: (producer module path, op, shape, dtype, bytes, term) per saved storage.
    rows: list[tuple[str, str, tuple[int, ...], str, int, str]] = field(default_factory=list)
    #: Saved B·h·T×T storages per layer index.
    quadratic_per_layer: dict[int, int] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return sum(self.terms.values())

    def grouped(self, depth: int) -> dict[str, int]:
        """Terms summed to their first ``depth`` path components."""
        out: dict[str, int] = {}
        for name, value in self.terms.items():
            key = "/".join(name.split("/")[:depth])
            out[key] = out.get(key, 0) + value
        return out

    def by_module(self) -> dict[str, dict[str, int]]:
        """Saved bytes per producing module, layers folded together (``layers.N.mlp``),
        then per term: where in the model each term's bytes come from."""
        out: dict[str, dict[str, int]] = {}
        for path, _op, _shape, _dtype, nbytes, term in self.rows:
            module = _LAYER.sub(lambda m: f"{m.group(1)}{m.group(2)}.N{m.group(4)}", path)
            terms = out.setdefault(module or "(model)", {})
            terms[term] = terms.get(term, 0) + nbytes
        return out

    def seed_terms(self) -> dict[str, int]:
        """Terms cut to the seed's own paths (``…/layernorm/stats`` into ``…/layernorm``,
        ``…/quadratic/scores`` into ``…/quadratic``)."""
        out: dict[str, int] = {}
        for name, value in self.terms.items():
            key = name
            for seed in (
                "activations/layer/layernorm",
                "activations/layer/attention/linear",
                "activations/layer/attention/quadratic",
                "activations/layer/feed_forward",
                "activations/logits",
            ):
                if name.startswith(seed + "/"):
                    key = seed
            out[key] = out.get(key, 0) + value
        return out


def storage_key(t: torch.Tensor) -> int:
    """Identity of a tensor's storage (works for real and fake tensors)."""
    return t.untyped_storage()._cdata


class _Producers(TorchDispatchMode):
    """Tags each new storage with the module and op that created it."""

    def __init__(self, stack: list[str]) -> None:
        super().__init__()
        self.stack = stack
        self.tags: dict[int, tuple[str, str]] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        inputs = {storage_key(t) for t in tree_leaves((args, kwargs)) if _is_tensor(t)}
        for t in tree_leaves(out):
            if _is_tensor(t):
                key = storage_key(t)
                if key not in inputs:
                    self.tags[key] = (self.stack[-1], func.__name__.split(".")[0])
        return out


def _is_tensor(t) -> bool:
    return isinstance(t, torch.Tensor)


def term_for(
    path: str,
    op: str,
    t: torch.Tensor,
    tokens: int,
    seq_len: int,
    head_size: int | None = None,
    heads: int | None = None,
) -> str:
    """The seed term (with a finer sub-path) for a saved tensor made by ``op`` inside the
    module at ``path``.

    A B·h·T×T tensor in attention is quadratic (with ``heads`` given, its size must be
    exactly that, so a (B·T, d) context with d = T is not taken for one); when a head is
    exactly T wide, Q, K and the context are T×T-shaped too, so then only softmax and
    dropout outputs count as quadratic."""
    parts = path.split(".") if path else []
    if not t.is_floating_point():
        return "activations/inputs"
    in_layer = bool(_LAYER.search(path))
    last = parts[-1] if parts else ""
    if in_layer and any(p in ("self_attn", "attn", "attention") for p in parts):
        square = t.dim() >= 2 and t.shape[-1] == t.shape[-2] == seq_len and seq_len > 1
        if heads is not None:
            square = square and t.numel() == tokens * heads * seq_len
        probs = "softmax" in op or "dropout" in op
        if square and (probs or head_size != seq_len):
            sub = "probabilities" if "softmax" in op else "scores" if "mm" in op else "other"
            return f"activations/layer/attention/quadratic/{sub}"
        return f"activations/layer/attention/linear/{_sub(parts, op)}"
    if in_layer and any(p in ("mlp", "feed_forward", "ffn") for p in parts):
        return f"activations/layer/feed_forward/{_sub(parts, op)}"
    if in_layer and ("norm" in last or last.startswith("ln")):
        whole = t.numel() >= tokens * 2  # stats are one or two values per token
        return "activations/layer/layernorm" + ("" if whole else "/stats")
    if in_layer:
        return "activations/layer/residual"
    if any("rotary" in p for p in parts):
        return "activations/positions"
    if any(p.startswith("embed") or p in ("wte", "wpe") for p in parts):
        return "activations/embedding"
    if "norm" in last or last.startswith("ln"):
        return "activations/final_norm"
    return "activations/logits" + ("" if last == "lm_head" or not parts else f"/{last}")


def _sub(parts: list[str], op: str) -> str:
    last = parts[-1]
    if last in ("self_attn", "attn", "attention", "mlp", "feed_forward", "ffn"):
        return op
    return last


def census(
    model: nn.Module,
    run_forward: Callable[[], torch.Tensor],
    *,
    tokens: int,
    seq_len: int,
    head_size: int | None = None,
    heads: int | None = None,
) -> Census:
    """Run ``run_forward`` (the forward pass and loss, returning the loss) under the
    census and return what autograd saved. ``tokens`` = B·T, ``seq_len`` = T."""
    stack = [""]
    handles = []
    for name, module in model.named_modules():
        if name:
            handles.append(module.register_forward_pre_hook(_push(stack, name)))
            handles.append(module.register_forward_hook(_pop(stack), always_call=True))
    params = {storage_key(p) for p in model.parameters()}
    saved: dict[int, torch.Tensor] = {}

    def pack(t: torch.Tensor):
        key = storage_key(t)
        if key not in params and key not in saved:
            saved[key] = t
        return t

    producers = _Producers(stack)
    try:
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), producers:
            loss = run_forward()
    finally:
        for h in handles:
            h.remove()
    result = Census()
    for key, t in saved.items():
        path, op = producers.tags.get(key, ("", "input"))
        term = term_for(path, op, t, tokens, seq_len, head_size, heads)
        nbytes = t.untyped_storage().nbytes()
        result.terms[term] = result.terms.get(term, 0) + nbytes
        result.rows.append((path, op, tuple(t.shape), str(t.dtype), nbytes, term))
        if "/quadratic" in term:
            m = _LAYER.search(path)
            if m:
                layer = int(m.group(3))
                result.quadratic_per_layer[layer] = result.quadratic_per_layer.get(layer, 0) + 1
    del loss
    return result


def _push(stack: list[str], name: str):
    def hook(module, args):
        stack.append(name)

    return hook


def _pop(stack: list[str]):
    def hook(module, args, output):
        if len(stack) > 1:
            stack.pop()

    return hook
