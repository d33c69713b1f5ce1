"""A ModelSpec from tensor shapes alone, and the cross-check of a config.json against them.

Shapes fix almost everything a memory estimate needs: the embedding is ``[V, d]``; the
block indices give ``L``; q/k projections give the query and key/value widths; the
feed-forward's up projection gives its width; a ``gate`` tensor makes it gated; a missing
``lm_head`` means the output reuses the embedding (tied); norms without a bias are
RMSNorm. What shapes cannot fix is how the query width splits into heads — ``q_dim =
heads · head_dim`` — unless a per-head q_norm (Qwen3) stores ``head_dim`` weights. So the
head count is assumed (head_dim 128 when it divides both widths, else 64) and said so.

Linear weights are stored ``[out, in]``; GPT-2's Conv1D stores ``[in, out]``: the side
equal to ``hidden_size`` is the input, whichever way round it is stored.
"""

from __future__ import annotations

from collections.abc import Iterable
from math import gcd

from introspect.errors import CheckpointError
from introspect.params import parameters_by_component
from introspect.spec import ModelSpec

from .tensor_roles import TensorInfo

_UP_SIDE = ("gate", "up")


def _first(tensors: Iterable[TensorInfo], component: str, role: str) -> TensorInfo | None:
    """The tensor with this role in the lowest-numbered block (or outside blocks)."""
    found = [t for t in tensors if t.component == component and t.role == role]
    return min(found, key=lambda t: (t.layer or 0, t.expert or 0), default=None)


def _out(t: TensorInfo, hidden: int) -> int:
    """Output width of a projection whose input is ``hidden`` wide ([out, in] or Conv1D
    [in, out])."""
    if len(t.shape) != 2:
        return t.shape[0] if t.shape else 1
    rows, cols = t.shape
    if cols == hidden:
        return rows
    if rows == hidden:
        return cols
    return rows


def infer_spec(
    tensors: tuple[TensorInfo, ...],
    *,
    source: str,
    where: str,
    advice: str = "give the model's config.json",
) -> tuple[ModelSpec, tuple[str, ...]]:
    """Everything the shapes determine, and notes naming each field that had to be assumed.

    ``tensors`` are the parameters (buffers are ignored); ``where`` names the file or
    folder for error lines. Raises :class:`CheckpointError` when the tensors hold no
    recognisable transformer (no embedding, no blocks, no attention); ``advice`` ends
    those lines (empty when a config.json is already there).
    """
    hint = f"; {advice}" if advice else ""
    notes: list[str] = []
    params = [t for t in tensors if not t.is_buffer]
    has = {(t.component, t.role) for t in params}
    for t in params:
        # A zero-width or 0-d weight in a known role gives no width to infer from (and
        # a division by it); the count still holds, and a config.json still gives the spec.
        if t.component != "other" and (not t.shape or 0 in t.shape):
            raise CheckpointError(
                f"{where}: tensor {t.name} (in {t.file}) has shape {list(t.shape)}, so the "
                f"shapes cannot give the spec{hint}"
            )

    emb = _first(params, "embeddings", "embedding") or _first(params, "lm_head", "lm_head")
    if emb is None or len(emb.shape) != 2:
        raise CheckpointError(
            f"{where}: no token embedding (embed_tokens / wte) or lm_head tensor, so the "
            f"vocabulary and hidden size are unknown{hint or '; give a decoder checkpoint'}"
        )
    vocab, hidden = emb.shape
    layers = sorted({t.layer for t in params if t.layer is not None})
    if not layers:
        raise CheckpointError(
            f"{where}: no transformer blocks recognised in the tensor names "
            f"(model.layers.{{i}}.… or h.{{i}}.…){hint}"
        )
    num_layers = layers[-1] + 1
    if len(layers) != num_layers:
        notes.append(
            f"block indices are not contiguous ({len(layers)} blocks, max index {layers[-1]})"
        )

    # ---- attention widths ----------------------------------------------------------
    q, k, qkv = (_first(params, "attention", r) for r in ("q", "k", "qkv"))
    if q is not None:
        q_dim = _out(q, hidden)
        kv_dim = _out(k, hidden) if k is not None else q_dim
    elif qkv is not None:
        fused = _out(qkv, hidden)
        if fused == 3 * hidden:
            q_dim = kv_dim = hidden
        else:
            q_dim, kv_dim = hidden, (fused - hidden) // 2
            notes.append("fused qkv projection: query width assumed equal to hidden_size")
    else:
        raise CheckpointError(
            f"{where}: no attention projections (q_proj / c_attn / qkv_proj) recognised{hint}"
        )

    q_norm = _first(params, "norms", "q_norm")
    qk_norm = "none"
    if q_norm is not None:
        qk_norm = "full" if q_norm.shape[0] == q_dim and q_dim != kv_dim else "head"
    if qk_norm == "head":
        head_dim = q_norm.shape[0]
    else:
        head_dim = next((hd for hd in (128, 64) if q_dim % hd == 0 and kv_dim % hd == 0), 0)
        head_dim = head_dim or gcd(q_dim, kv_dim)
        notes.append(
            f"num_attention_heads assumed: head_dim {head_dim} → {q_dim // head_dim} query heads "
            f"and {kv_dim // head_dim} key/value heads (tensor shapes fix only the widths "
            f"q_dim={q_dim}, kv_dim={kv_dim}); give config.json for the real head count"
        )
    if q_dim % head_dim or kv_dim % head_dim or q_dim % kv_dim:
        raise CheckpointError(
            f"{where}: key/value width {kv_dim} does not divide query width {q_dim} into "
            f"heads of {head_dim}; the checkpoint's attention shapes are inconsistent"
        )
    heads, kv_heads = q_dim // head_dim, kv_dim // head_dim

    # ---- feed-forward / experts ----------------------------------------------------
    experts = {
        t.expert for t in params if t.component == "experts" and t.role in ("gate", "up", "down")
    }
    num_experts = len(experts)
    component = "experts" if num_experts else "mlp"
    up, gate = _first(params, component, "up"), _first(params, component, "gate")
    gate_up = _first(params, "mlp", "gate_up")
    if gate_up is not None:
        intermediate, gated = _out(gate_up, hidden) // 2, True
    elif up is not None or gate is not None:
        intermediate, gated = _out(up or gate, hidden), gate is not None and up is not None
    else:
        raise CheckpointError(
            f"{where}: no feed-forward projections (up_proj / fc1 / c_fc / w1) recognised{hint}"
        )

    # ---- norms ---------------------------------------------------------------------
    first_block = layers[0]
    block_norms = [
        t
        for t in params
        if t.component == "norms"
        and t.layer == first_block
        and t.role not in ("q_norm", "k_norm")
        and not t.role.endswith("_bias")
    ]
    norm_bias = any(t.component == "norms" and t.role.endswith("_bias") for t in params)
    wpe = _first(params, "embeddings", "position")
    lm_head = _first(params, "lm_head", "lm_head")

    experts_per_tok = 0
    if num_experts:
        experts_per_tok = min(2, num_experts)
        notes.append(
            f"num_experts_per_tok assumed {experts_per_tok} (not stored in tensors); "
            "give config.json for the real value"
        )
    act = "silu" if gated else "gelu"
    family = _family(has, qk_norm, num_experts, wpe is not None)
    notes.append(f"model_type guessed from tensor names as '{family}'; hidden_act assumed {act}")
    try:
        spec = ModelSpec(
            hidden_size=hidden,
            num_hidden_layers=num_layers,
            num_attention_heads=heads,
            num_key_value_heads=kv_heads if kv_heads != heads else None,
            head_dim=head_dim if q_dim != hidden else None,
            intermediate_size=intermediate,
            vocab_size=vocab,
            tie_word_embeddings=lm_head is None,
            norm="layernorm" if norm_bias else "rmsnorm",
            norm_bias=norm_bias,
            ffn="gated" if gated else "plain",
            hidden_act=act,
            qkv_bias=bool(has & {("attention", "q_bias"), ("attention", "qkv_bias")}),
            o_bias=("attention", "o_bias") in has,
            mlp_bias=bool(has & {(component, "down_bias"), (component, "up_bias")}),
            lm_head_bias=("lm_head", "lm_head_bias") in has,
            qk_norm=qk_norm,
            norms_per_layer=len(block_norms),
            position_embedding="learned" if wpe is not None else "rope",
            max_position_embeddings=wpe.shape[0] if wpe is not None else None,
            num_local_experts=num_experts,
            num_experts_per_tok=experts_per_tok,
            model_type=family,
            source=source,
            assumptions=tuple(notes),
        )
    except ValueError as e:
        raise CheckpointError(f"{where}: tensor shapes do not form a valid model: {e}") from e
    return spec, tuple(notes)


def _family(has: set[tuple[str, str]], qk_norm: str, experts: int, learned_pos: bool) -> str:
    """A best guess at Hugging Face's model_type from which roles exist."""
    if learned_pos:
        return "gpt2"
    if ("mlp", "gate") in has and ("attention", "qkv") in has:
        return "qwen"
    if experts:
        return "mixtral" if ("router", "router") in has and ("mlp", "up") not in has else "moe"
    if ("attention", "qkv") in has:
        return "phi3"
    if ("norms", "final_norm_bias") in has and ("attention", "o_bias") in has:
        return "phi"
    if qk_norm == "head":
        return "qwen3"
    if qk_norm == "full":
        return "olmo2"
    if ("attention", "q_bias") in has:
        return "qwen2"
    return "llama"


#: ModelSpec fields (or derived shapes) that tensor shapes determine, compared one by one.
_CHECKED = (
    "num_hidden_layers",
    "hidden_size",
    "vocab_size",
    "q_dim",
    "kv_dim",
    "ffn_dim",
    "tie_word_embeddings",
    "ffn",
    "num_local_experts",
    "qkv_bias",
    "lm_head_bias",
    "position_embedding",
)


def cross_check(
    config_spec: ModelSpec,
    shape_spec: ModelSpec,
    header_by_component: dict[str, int],
    *,
    config_name: str = "config.json",
) -> tuple[str, ...]:
    """Every way config.json disagrees with the tensors: field by field, then the
    structural parameter count component by component against the exact header count."""
    out = []
    for name in _CHECKED:
        said, found = getattr(config_spec, name), getattr(shape_spec, name)
        if said != found:
            out.append(f"{name}: {config_name} says {said}, the tensors say {found}")
    if config_spec.qk_norm != "none" and config_spec.qk_norm == shape_spec.qk_norm:
        if config_spec.head_size != shape_spec.head_size and config_spec.qk_norm == "head":
            out.append(
                f"head_dim: {config_name} says {config_spec.head_size}, "
                f"q_norm holds {shape_spec.head_size}"
            )
    structural = parameters_by_component(config_spec)
    for name, count in structural.items():
        held = header_by_component.get(name, 0)
        if held != count:
            out.append(
                f"{name} parameters: {config_name} implies {count:,}, the headers hold {held:,}"
            )
    total, held_total = sum(structural.values()), sum(header_by_component.values())
    if total != held_total:
        out.append(
            f"total parameters: {config_name} implies {total:,}, the headers hold {held_total:,} "
            f"({held_total - total:+,})"
        )
    return tuple(out)


_FFN = frozenset({"mlp", "experts", "router"})


def check_complete(tensors: Iterable[TensorInfo], where: str) -> None:
    """Every block that holds attention tensors must hold feed-forward tensors too: a
    block with attention and no MLP is a checkpoint missing tensors (a failed download
    or save, a shard left out), not a smaller model. A block holding any unrecognised
    name is left alone, since its feed-forward may be named in a way no table knows.
    Raises :class:`CheckpointError` naming the blocks and the tensors missing (as the
    first complete block names them)."""
    parts: dict[int, set[str]] = {}
    ffn_names: dict[int, list[str]] = {}
    first_name: dict[int, str] = {}
    for t in tensors:
        if t.layer is None or t.is_buffer:
            continue
        parts.setdefault(t.layer, set()).add(t.component)
        first_name.setdefault(t.layer, t.name)
        if t.component in _FFN:
            ffn_names.setdefault(t.layer, []).append(t.name)
    broken = sorted(
        i for i, c in parts.items() if "attention" in c and not c & _FFN and "other" not in c
    )
    if not broken:
        return
    first = broken[0]
    if ffn_names:
        ref = min(ffn_names)
        missing = [_renumber(n, ref, first) for n in sorted(ffn_names[ref])]
        shown = ", ".join(missing[:3]) + (", …" if len(missing) > 3 else "") + " missing"
    else:
        shown = "no " + first_name[first].split(f".{first}.")[0] + f".{first}.mlp.* tensor"
    layers = ", ".join(map(str, broken[:8])) + (", …" if len(broken) > 8 else "")
    raise CheckpointError(
        f"{where}: the checkpoint is incomplete: {len(broken)} of {len(parts)} blocks "
        f"(layer {layers}) hold attention but no feed-forward (MLP) tensors ({shown}); "
        "re-download or re-save it, or give every shard"
    )


def _renumber(name: str, old: int, new: int) -> str:
    """``name`` with its block index ``old`` (the first numeric path segment) as ``new``."""
    head, sep, tail = name.partition(f".{old}.")
    return f"{head}.{new}.{tail}" if sep else name
