"""Role tables: which parameter inside a transformer block is which, by name and shape.

Names come from the codebases people actually write and load: Hugging Face transformers
(``q_proj``, ``gate_proj``, GPT-2's ``c_attn``/``c_fc``/``c_proj``, Falcon's
``query_key_value``, Mixtral's ``experts.gate_up_proj``), Meta's reference Llama
(``wq``/``w1``/``w2``/``w3``), nanoGPT, mlx-lm (``switch_mlp``), and
``torch.nn.MultiheadAttention`` (``in_proj_weight``, ``out_proj``).

Widths come from shapes, not orientation: a projection has one side equal to the hidden
size d and the other is its width, so torch/MLX ``Linear`` (out, in) and GPT-2's
``Conv1D`` (in, out) read alike; a 3-D tensor is (experts, ·, ·).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

ATTENTION_KEYS = {
    "q": ("q_proj", "q", "wq", "query", "q_lin", "to_q", "q_linear"),
    "k": ("k_proj", "k", "wk", "key", "k_lin", "to_k", "k_linear"),
    "v": ("v_proj", "v", "wv", "value", "v_lin", "to_v", "v_linear"),
    "qkv": ("c_attn", "qkv", "qkv_proj", "wqkv", "query_key_value", "in_proj", "att_proj"),
    "kv": ("kv_proj", "wkv", "kv"),
    "o": (
        "o_proj", "o", "wo", "out_proj", "c_proj", "dense", "proj", "out", "out_lin",
        "to_out", "o_linear", "output",
    ),
}  # fmt: skip
#: Multi-head latent attention's projections (DeepSeek-V2/V3, ``DeepseekV3Attention.
#: __init__``, ``transformers/models/deepseek_v3/modeling_deepseek_v3.py`` l. 370-403):
#: the query latent ``q_a_proj`` (d → r_q) and its expansion ``q_b_proj`` (r_q →
#: h·(nope + rope)), or a plain ``q_proj``; ``kv_a_proj_with_mqa`` (d → r_kv + rope: the
#: K/V latent and the one shared rotary key head) and ``kv_b_proj`` (r_kv → h·(nope + v)).
MLA_KEYS = {
    "q_a": ("q_a_proj",),
    "q_b": ("q_b_proj",),
    "kv_a": ("kv_a_proj_with_mqa",),
    "kv_b": ("kv_b_proj",),
}
#: The RMSNorms on the two latents (``q_a_layernorm`` of width r_q, ``kv_a_layernorm`` of
#: width r_kv): inside the attention, counted there, not block norms.
MLA_NORMS = {"q_a_layernorm": "q_a_norm", "kv_a_layernorm": "kv_a_norm"}
MLP_KEYS = {
    "gate": ("gate_proj", "wi_0", "w_gate", "gate"),
    "up": (
        "up_proj", "c_fc", "fc1", "fc_in", "fc", "dense_h_to_4h", "linear1", "wi", "wi_1",
        "w_in", "lin1", "up", "w_up",
    ),
    "down": (
        "down_proj", "c_proj", "fc2", "fc_out", "dense_4h_to_h", "linear2", "wo", "w_out",
        "lin2", "down", "proj", "w_down", "out_proj",
    ),
    "gate_up": ("gate_up_proj", "w12", "gate_up"),
}  # fmt: skip
ROUTER_KEYS = ("gate", "router", "gate_network", "wg", "classifier", "shared_expert_gate")
EXPERT_SEGMENTS = ("experts", "switch_mlp", "expert")
MLP_SEGMENTS = ("mlp", "ffn", "feed_forward", "feedforward", "ff", "ffwd", "moe", "mlp_block")

HEADS_NAMES = ("num_attention_heads", "num_heads", "n_head", "n_heads", "heads")
HEAD_DIM_NAMES = ("head_dim", "head_size", "d_head", "dim_head", "attention_head_size")
TOP_K_NAMES = (
    "num_experts_per_tok", "top_k", "num_experts_per_token", "moe_top_k",
    "n_activated_experts", "num_selected_experts",
)  # fmt: skip

_Q_NORM = re.compile(r"^(q|query)_?(layer)?_?norm$")
_K_NORM = re.compile(r"^(k|key)_?(layer)?_?norm$")
_NORM_NAME = re.compile(r"(^|_)(ln|norm|layernorm|layer_norm|rmsnorm|rms_norm)(_?\d+)?$|^ln_?\w*$")


class RoleError(ValueError):
    """Block 0 lacks something every transformer block has; the message says what."""


@dataclass
class BlockRoles:
    """What block 0 holds: each relative name's (role, component) and the facts read."""

    roles: dict[str, tuple[str, str]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    attention_path: str = ""
    mlp_path: str = ""
    moe_path: str = ""
    q_dim: int = 0
    kv_dim: int = 0
    qkv_bias: bool = False
    o_bias: bool = False
    #: Q, K and V come from one fused projection (c_attn, query_key_value, qkv_proj,
    #: Wqkv …): ``ModelSpec.fused_linears`` has "qkv".
    fused_qkv: bool = False
    ffn: str = "plain"
    ffn_width: int = 0
    mlp_bias: bool = False
    norm: str | None = None
    norm_bias: bool = False
    norms_per_layer: int = 0
    qk_norm_width: int = 0
    num_experts: int = 0
    #: A dense feed-forward beside the experts (shared experts, run on every token): its
    #: width f, or 0.
    shared_width: int = 0
    #: Gemma 4's per-layer input width d_pl (``per_layer_input_gate``'s output), or 0.
    per_layer_input_size: int = 0
    #: Multi-head latent attention read from the weight shapes (:class:`MLAWidths`), or
    #: None for Q/K/V attention.
    mla: MLAWidths | None = None


@dataclass(frozen=True)
class MLAWidths:
    """What MLA's weight shapes state (``DeepseekV3Attention.__init__``, ``models/
    deepseek_v3/modeling_deepseek_v3.py`` l. 370-403): the query rank r_q (None: a plain
    ``q_proj``), the query width h·(nope + rope), kv_a's output r_kv + rope, the K/V rank
    r_kv (``kv_a_layernorm``'s width), kv_b's output h·(nope + v) and o_proj's input h·v.
    The head count and the rope/nope split are not in the shapes: the walker reads them
    from the module (:meth:`introspect.adapters.module_walk._Reader.mla_attention`)."""

    q_lora_rank: int | None
    q_width: int
    kv_a_width: int
    kv_lora_rank: int
    kv_b_width: int
    o_width: int


def is_norm(module_name: str, class_name: str) -> bool:
    """A norm: its class says so (LayerNorm, RMSNorm, LlamaRMSNorm, …) or its name does
    (ln_1, input_layernorm, norm, attention_norm, q_norm)."""
    return "norm" in class_name.lower() or bool(_NORM_NAME.search(module_name.lower()))


def norm_kind(class_name: str, has_bias: bool) -> str:
    """RMSNorm when the class says RMS; LayerNorm when it says LayerNorm (with or without a
    bias, as nanoGPT's); otherwise a bias means LayerNorm and a lone weight RMSNorm."""
    lower = class_name.lower()
    if "rms" in lower:
        return "rmsnorm"
    if "layernorm" in lower or "layer_norm" in lower or has_bias:
        return "layernorm"
    return "rmsnorm"


def is_token_table(name: str) -> bool:
    leaf = name.rsplit(".", 2)[-2] if "." in name else name
    return bool(re.search(r"wte|tok|word|embed_tokens|embed_in|^embedding$|^emb$|^embed$", leaf))


def is_position_table(name: str) -> bool:
    leaf = name.rsplit(".", 2)[-2] if "." in name else name
    return bool(re.search(r"wpe|pos", leaf))


def looks_like_embedding(name: str) -> bool:
    return bool(re.search(r"emb|wte|wpe|tok", name.lower()))


def is_lm_head(name: str) -> bool:
    return bool(re.search(r"lm_head|output|head|embed_out|unembed|logits", name.lower()))


def is_rotary(qname: str, class_name: str) -> bool:
    text = f"{qname} {class_name}".lower()
    return "rotary" in text or "rope" in text


#: transformers' activation modules (``transformers/activations.py`` ``ACT2CLS``) by class
#: name, as the ``hidden_act`` name the estimators read. A class's own table can run
#: another activation than its config's name says: OpenAI GPT's ``afn="gelu"`` is
#: ``gelu_new`` (``ACT_FNS``, ``models/openai/modeling_openai.py`` l. 43), whose
#: ``NewGELUActivation`` keeps three tensors more than ``F.gelu``.
ACTIVATION_CLASSES: dict[str, str] = {
    "NewGELUActivation": "gelu_new",
    "FastGELUActivation": "gelu_fast",
    "AccurateGELUActivation": "gelu_accurate",
    "QuickGELUActivation": "quick_gelu",
    "GELUTanh": "gelu_pytorch_tanh",
    "ReLUSquaredActivation": "relu2",
}


def activation_from_class(name: str) -> str | None:
    lower = name.lower()
    for needle, act in (("silu", "silu"), ("swish", "silu"), ("swiglu", "silu")):
        if needle in lower:
            return act
    for needle, act in (("gelu", "gelu"), ("relu", "relu"), ("tanh", "tanh")):
        if needle in lower:
            return act
    return None


def width(shape: tuple[int, ...], d: int, name: str) -> int:
    """The side of a projection that is not d (d when both are)."""
    a, b = shape[-2:]
    if a == d:
        return b
    if b == d:
        return a
    raise RoleError(f"{name} has shape {shape}; neither side is the hidden size {d}")


def fallback_role(rel: str, shape: tuple[int, ...]) -> tuple[str, str]:
    """A parameter of a later block that block 0 lacks: the closest component by name."""
    lower = rel.lower()
    if any(s in lower for s in EXPERT_SEGMENTS):
        return ("unrecognised", "experts")
    if ("attn" in lower or "attention" in lower) and "norm" not in lower:
        return ("unrecognised", "attention")
    if len(shape) == 1:
        return ("unrecognised", "norms")
    return ("unrecognised", "mlp")


def _split(rel: str) -> tuple[list[str], str, str]:
    """(container path, key, kind) of ``rel``: ``self_attn.q_proj.weight`` →
    (["self_attn"], "q_proj", "weight"); ``attn.in_proj_bias`` → (["attn"], "in_proj", "bias");
    ``mlp.experts.gate_up_proj`` → (["mlp", "experts"], "gate_up_proj", "weight")."""
    segs = rel.split(".")
    pname, mods = segs[-1], segs[:-1]
    kind = "bias" if pname == "bias" or pname.endswith("_bias") else "weight"
    if pname in ("weight", "bias") and mods:
        return mods[:-1], mods[-1], kind
    key = re.sub(r"_(weight|bias)$", "", pname)
    return mods, key, kind


def _lookup(table: dict[str, tuple[str, ...]], key: str) -> str | None:
    lower = key.lower()
    return next((role for role, keys in table.items() if lower in keys), None)


def _mlp_role(key: str, siblings: set[str]) -> str | None:
    """gate/up/down; Meta's w1/w2/w3 (w2 is down) and Qwen-7B's w1/w2 + c_proj."""
    lower = key.lower()
    if lower in ("w1", "w2", "w3"):
        if "w3" in siblings:
            return {"w1": "gate", "w3": "up", "w2": "down"}[lower]
        if "c_proj" in siblings:
            return {"w1": "up", "w2": "gate"}.get(lower)
        return {"w1": "up", "w2": "down"}.get(lower)
    return _lookup(MLP_KEYS, key)


def classify_block(entries: list[tuple[str, tuple[int, ...], str]], d: int) -> BlockRoles:
    """Roles of block 0's parameters, given as (relative name, shape, owner class)."""
    out = BlockRoles()
    parsed = [(rel, shape, owner, *_split(rel)) for rel, shape, owner in entries]
    siblings: dict[str, set[str]] = {}
    for _, _, _, path, key, _ in parsed:
        siblings.setdefault(".".join(path), set()).add(key.lower())
    experts = _count_experts(parsed)
    out.num_experts = experts
    attn: dict[str, list[tuple[tuple[int, ...], str]]] = {}
    dense: dict[str, list[tuple[tuple[int, ...], str]]] = {}
    expert0: dict[str, list[tuple[tuple[int, ...], str]]] = {}
    norm_modules: dict[str, tuple[str, bool, int]] = {}
    mla: dict[str, list[tuple[tuple[int, ...], str]]] = {}
    for rel, shape, owner, path, key, kind in parsed:
        if len(shape) == 1 and is_norm(key, owner):
            norm_path = ".".join(path + [key])
            if key.lower() in MLA_NORMS:
                out.roles[rel] = (f"attention.mla.{MLA_NORMS[key.lower()]}", "attention")
                if kind == "weight":
                    mla.setdefault(MLA_NORMS[key.lower()], []).append((shape, kind))
                continue
            if not path and key.lower() == PER_LAYER_INPUT_NORM:
                out.roles[rel] = ("norm.per_layer_input", "norms")
                continue
            cls, bias, w = norm_modules.get(norm_path, (owner, False, shape[0]))
            norm_modules[norm_path] = (cls, bias or kind == "bias", w)
            out.roles[rel] = ("norm", "norms")
            continue
        if not path and key.lower() in PER_LAYER_INPUT_KEYS and len(shape) == 2:
            # Gemma 4's per-layer input gate (d_pl, d) and projection (d, d_pl)
            which = PER_LAYER_INPUT_KEYS[key.lower()]
            out.roles[rel] = (f"per_layer_input.{which}", "mlp")
            if which == "gate" and kind == "weight":
                out.per_layer_input_size = shape[0]
            continue
        lowered = [s.lower() for s in path]
        expert_at = next((i for i, s in enumerate(lowered) if s in EXPERT_SEGMENTS), None)
        if expert_at is not None or len(shape) == 3:
            out.moe_path = ".".join(path[: expert_at if expert_at is not None else -1])
            role = _mlp_role(key, siblings[".".join(path)])
            in_first = len(shape) == 3 or (
                expert_at is not None
                and (len(path) <= expert_at + 1 or not path[expert_at + 1].isdigit()
                     or path[expert_at + 1] == "0")
            )  # fmt: skip
            out.roles[rel] = (f"experts.{role or 'unrecognised'}", "experts")
            if role and in_first:
                expert0.setdefault(role, []).append((shape, kind))
            elif not role:
                out.notes.append(f"{rel} {shape}: an expert tensor of unknown role")
            continue
        if (
            experts
            and len(shape) <= 2
            and key.lower() in ROUTER_KEYS
            or (experts and "router" in owner.lower())
        ):
            # Qwen2-MoE's shared_expert_gate is (1, d): a router for the shared expert.
            if experts in shape or 1 in shape or kind == "bias":
                out.roles[rel] = ("router", "router")
                continue
        in_attn = any("attn" in s or "attention" in s for s in lowered)
        in_mlp = any(s in MLP_SEGMENTS or "mlp" in s or "ffn" in s for s in lowered)
        mla_role = _lookup(MLA_KEYS, key) if not in_mlp else None
        if mla_role:
            out.attention_path = ".".join(path)
            out.roles[rel] = (f"attention.mla.{mla_role}", "attention")
            mla.setdefault(mla_role, []).append((shape, kind))
            continue
        attn_role = _lookup(ATTENTION_KEYS, key) if not in_mlp else None
        mlp_role = _mlp_role(key, siblings[".".join(path)]) if not in_attn else None
        if in_attn and attn_role or (not in_mlp and attn_role and not mlp_role):
            out.attention_path = ".".join(path)
            out.roles[rel] = (f"attention.{attn_role}", "attention")
            attn.setdefault(attn_role, []).append((shape, kind))
        elif mlp_role:
            out.mlp_path = ".".join(path)
            out.roles[rel] = (f"mlp.{mlp_role}", "mlp")
            dense.setdefault(mlp_role, []).append((shape, kind))
        else:
            component = "attention" if in_attn else "mlp"
            out.roles[rel] = ("unrecognised", component)
            out.notes.append(f"{rel} {shape}: not recognised; counted in {component}")
    _read_norms(out, norm_modules)
    if mla:
        _read_mla(out, mla, attn, d)
    else:
        _read_attention(out, attn, d)
    if experts:
        if not expert0:
            raise RoleError("experts found but none of their projections recognised")
        out.ffn, out.ffn_width, out.mlp_bias = _read_ffn(expert0, d, "expert")
        if dense:
            out.notes.append("a dense feed-forward beside the experts (shared expert)")
            _, out.shared_width, _ = _read_ffn(dense, d, "shared expert")
    else:
        if not dense:
            raise RoleError("no feed-forward projections (gate/up/down, c_fc/c_proj, fc1/fc2)")
        out.ffn, out.ffn_width, out.mlp_bias = _read_ffn(dense, d, "mlp")
    return out


def _count_experts(parsed: list) -> int:
    indices: set[str] = set()
    for _, shape, _, path, _, _ in parsed:
        if len(shape) == 3:
            return shape[0]
        lowered = [s.lower() for s in path]
        for i, s in enumerate(lowered):
            if s in EXPERT_SEGMENTS and i + 1 < len(path) and path[i + 1].isdigit():
                indices.add(".".join(path[: i + 2]))
    return len(indices)


def _read_norms(out: BlockRoles, modules: dict[str, tuple[str, bool, int]]) -> None:
    block_norms = []
    for path, (cls, bias, w) in modules.items():
        leaf = path.rpartition(".")[2].lower()
        if _Q_NORM.match(leaf) or _K_NORM.match(leaf):
            if _Q_NORM.match(leaf) or not out.qk_norm_width:
                out.qk_norm_width = w
            continue
        block_norms.append((cls, bias))
    out.norms_per_layer = len(block_norms)
    kinds = {norm_kind(cls, bias) for cls, bias in block_norms}
    if kinds:
        out.norm = "rmsnorm" if kinds == {"rmsnorm"} else "layernorm"
        out.norm_bias = any(bias for _, bias in block_norms)
        odd = [c for c, b in block_norms if "norm" not in c.lower() and not b]
        if odd:
            out.notes.append(f"norm class {odd[0]} has only a weight: read as RMSNorm")


def _read_attention(out: BlockRoles, attn: dict, d: int) -> None:
    def weight(role: str) -> tuple[int, ...] | None:
        return next((s for s, k in attn.get(role, []) if k == "weight"), None)

    def has_bias(*names: str) -> bool:
        return any(k == "bias" for r in names for _, k in attn.get(r, []))

    o = weight("o")
    if weight("q") is not None:
        out.q_dim = width(weight("q"), d, "the query projection")
        if weight("k") is not None:
            out.kv_dim = width(weight("k"), d, "the key projection")
        elif weight("kv") is not None:
            out.kv_dim = width(weight("kv"), d, "the fused kv projection") // 2
        else:
            raise RoleError("a query projection but no key/value projection")
    elif weight("qkv") is not None:
        fused = width(weight("qkv"), d, "the fused qkv projection")
        out.fused_qkv = True
        out.q_dim = width(o, d, "the output projection") if o is not None else d
        out.kv_dim = (fused - out.q_dim) // 2
        if out.kv_dim <= 0 or (fused - out.q_dim) % 2:
            raise RoleError(f"fused qkv width {fused} does not split as q {out.q_dim} + 2·kv")
    else:
        raise RoleError("no attention projections (q/k/v, or fused c_attn/qkv) in block 0")
    out.qkv_bias = has_bias("q", "k", "v", "qkv", "kv")
    out.o_bias = has_bias("o")


def _read_mla(out: BlockRoles, mla: dict, attn: dict, d: int) -> None:
    """MLA's widths from its weights (:class:`MLAWidths`): q from ``q_proj`` (d → q) or
    ``q_b_proj`` (r_q → q, r_q being ``q_a_proj``'s output), kv_a's output, the K/V rank
    from ``kv_a_layernorm`` and kv_b's output (its side that is not r_kv); o_proj's input
    (h·v). A Linear is (out, in) in torch and MLX, so the latent-side matrices are read
    by the side that is not the rank."""

    def weight(table: dict, role: str) -> tuple[int, ...] | None:
        return next((s for s, k in table.get(role, []) if k == "weight"), None)

    def other_side(shape: tuple[int, ...], rank: int, name: str) -> int:
        a, b = shape[-2:]
        if b == rank:
            return a
        if a == rank:
            return b
        raise RoleError(f"{name} has shape {shape}; neither side is the latent rank {rank}")

    kv_a, kv_b, o = weight(mla, "kv_a"), weight(mla, "kv_b"), weight(attn, "o")
    kv_norm = weight(mla, "kv_a_norm")
    if kv_a is None or kv_b is None or kv_norm is None or o is None:
        raise RoleError(
            "MLA needs kv_a_proj_with_mqa, kv_a_layernorm, kv_b_proj and o_proj; block 0 "
            f"has {', '.join(sorted({*mla, *attn}))}"
        )
    if weight(attn, "k") is not None or weight(attn, "v") is not None or weight(attn, "qkv"):
        raise RoleError("MLA projections beside separate k/v projections")
    q_a, q_b, q = weight(mla, "q_a"), weight(mla, "q_b"), weight(attn, "q")
    if q is not None and q_a is None and q_b is None:
        q_rank, q_width = None, width(q, d, "the query projection")
    elif q is None and q_a is not None and q_b is not None and weight(mla, "q_a_norm"):
        q_rank = width(q_a, d, "q_a_proj")
        if weight(mla, "q_a_norm")[0] != q_rank:
            raise RoleError(f"q_a_layernorm's width differs from q_a_proj's output {q_rank}")
        q_width = other_side(q_b, q_rank, "q_b_proj")
    else:
        raise RoleError("MLA's query is neither q_proj nor q_a_proj + q_a_layernorm + q_b_proj")
    kv_rank = kv_norm[0]
    out.mla = MLAWidths(
        q_lora_rank=q_rank,
        q_width=q_width,
        kv_a_width=width(kv_a, d, "kv_a_proj_with_mqa"),
        kv_lora_rank=kv_rank,
        kv_b_width=other_side(kv_b, kv_rank, "kv_b_proj"),
        o_width=width(o, d, "the output projection"),
    )
    out.q_dim = q_width
    out.kv_dim = q_width
    roles_with_bias = ("q", "q_a", "kv_a")
    out.qkv_bias = any(k == "bias" for r in roles_with_bias for _, k in {**attn, **mla}.get(r, []))
    out.o_bias = any(k == "bias" for _, k in attn.get("o", []))


def _read_ffn(found: dict, d: int, where: str) -> tuple[str, int, bool]:
    """(plain or gated, width f, biases) from gate/up/down or a fused gate_up (2f)."""

    def weight(role: str) -> tuple[int, ...] | None:
        return next((s for s, k in found.get(role, []) if k == "weight"), None)

    bias = any(k == "bias" for items in found.values() for _, k in items)
    if weight("gate_up") is not None:
        return "gated", width(weight("gate_up"), d, f"{where} gate_up") // 2, bias
    gated = weight("gate") is not None
    source = weight("up") or weight("gate") or weight("down")
    if source is None:
        raise RoleError(f"no {where} projection weights recognised")
    f = width(source, d, f"{where} projection")
    down = weight("down")
    if not gated and weight("up") is not None and down is not None:
        f_down = width(down, d, f"{where} down projection")
        if f == 2 * f_down:
            # An up projection twice as wide as down's input: gate and up fused, split by
            # ``chunk(2, dim=-1)`` (ModernBERT's ``Wi``: ``input, gate = self.Wi(x).chunk(2,
            # dim=-1)``, models/modernbert_decoder/modeling_modernbert_decoder.py l. 86-88);
            # a plain MLP's down reads all of up's output.
            return "gated", f_down, bias
    return ("gated" if gated else "plain"), f, bias


#: Class names of token mixers the closed form has no layer kind for, whatever their
#: parameters are called: state-space mixers (Mamba, Mamba-2: ``MambaMixer``,
#: ``JambaMambaMixer``, ``NemotronHMamba2Mixer``, ``BambaMixer``, ``FalconH1Mixer``),
#: recurrences (RecurrentGemma's ``RecurrentGemmaRecurrentBlock`` with its RG-LRU,
#: RWKV), short convolutions (LFM2's ``Lfm2ShortConv``), lightning / linear attention
#: (MiniMax) and Gated DeltaNet outside the Qwen3-Next reader.
UNMODELLED_CLASS = re.compile(
    r"mamba|ssm|mixer|recurrent|rglru|rg_lru|rwkv|shortconv|lightning|deltanet|"
    r"retention|hyena|linearattention",
    re.IGNORECASE,
)
#: Class names of the parts that do have layer kinds: a class named so is judged by its
#: parameters alone (Qwen3.5's ``Qwen3_5Attention`` is an attention whatever the family).
_MODELLED_CLASS = re.compile(r"norm|mlp|moe|expert|feedforward|ffn|attention|attn", re.IGNORECASE)
#: What a model class adds to its family's name (``SeedOssForCausalLM`` → ``SeedOss``).
_ROOT_SUFFIX = re.compile(r"(For[A-Z]\w*|LMHeadModel|Model)$")


def unmodelled_class(cls: str, root: str) -> bool:
    """Whether a block part's class names a mixer with no layer kind
    (:data:`UNMODELLED_CLASS`), read without the family's own name (``root``: the model's
    class), so RecurrentGemma's norms or Seed-OSS's MLP do not read as recurrent or SSM."""
    family = _ROOT_SUFFIX.sub("", root)
    own = cls[len(family) :] if family and cls.startswith(family) else cls
    return not _MODELLED_CLASS.search(own) and bool(UNMODELLED_CLASS.search(own))


def is_cross_attention(name: str, cls: str) -> bool:
    """A block part that attends to another sequence (an encoder's output): no layer
    kind has one (``encoder_attn``, ``crossattention``, ``cross_attn``)."""
    text = f"{name} {cls}".lower()
    return "cross" in text and "att" in text or "encoder_attn" in text


#: Parameter keys of modelled parts beyond the projection tables, as :func:`_split` reads
#: them (a ``_bias`` suffix dropped): gpt-oss's attention sinks, the router correction
#: biases of DeepSeek-V3 / ERNIE 4.5 (``e_score_correction_bias``) and AFMoE
#: (``expert_bias``): one number per expert, no activation.
EXTRA_KNOWN_KEYS = ("sinks", "e_score_correction", "expert")

#: Gemma 4's per-layer-input parts of a block (``models/gemma4/modeling_gemma4.py`` l.
#: 1345-1350): ``per_layer_input_gate`` (d → d_pl), ``per_layer_projection`` (d_pl → d)
#: and the norm on the projection's output, ``post_per_layer_input_norm`` (width d),
#: which is not one of the block's branch norms (``ModelSpec.per_layer_input_size``).
PER_LAYER_INPUT_KEYS = {"per_layer_input_gate": "gate", "per_layer_projection": "projection"}
PER_LAYER_INPUT_NORM = "post_per_layer_input_norm"
#: The model-level parts (``Gemma4TextModel.__init__``, l. 1565-1580), by module name.
PER_LAYER_INPUT_OUTSIDE = {
    "embed_tokens_per_layer": "per_layer_input.embedding",
    "per_layer_model_projection": "per_layer_input.model_projection",
    "per_layer_projection_norm": "per_layer_input.norm",
}


def listed_attentions(child: str, entries: list[tuple[str, tuple[int, ...], str]]) -> int:
    """How many attentions a block child ``child`` holds as a list (``self_attn.0.``,
    ``self_attn.1.`` …, each item with an output projection: LongCat-Flash's two
    ``LongcatFlashMLA``, ``models/longcat_flash/modeling_longcat_flash.py`` l. 462); 0
    when the child is not such a list."""
    items = set()
    for rel, _shape, _owner in entries:
        segs = rel.split(".")
        if len(segs) > 3 and segs[0] == child and segs[1].isdigit():
            _path, key, _kind = _split(rel)
            if _lookup(ATTENTION_KEYS, key) == "o" or _lookup(MLA_KEYS, key):
                items.add(segs[1])
    return len(items)


def unrecognised(entries: list[tuple[str, tuple[int, ...], str]]) -> list[str]:
    """The relative names among ``entries`` (relative name, shape, owner class) that no
    role table knows: not a norm, not an attention or feed-forward projection, not an
    expert tensor or a router. A block part holding any is one the closed form does not
    model (a Mamba mixer's ``conv1d``, ``x_proj``, ``A_log``; RWKV's ``time_decay``;
    DeepSeek-V2's ``kv_a_proj_with_mqa`` when no reader maps it)."""
    parsed = [(rel, shape, owner, *_split(rel)) for rel, shape, owner in entries]
    siblings: dict[str, set[str]] = {}
    for _, _, _, path, key, _ in parsed:
        siblings.setdefault(".".join(path), set()).add(key.lower())
    out = []
    for rel, shape, owner, path, key, _kind in parsed:
        lower = key.lower()
        if len(shape) == 1 and is_norm(key, owner):
            continue
        if lower in EXTRA_KNOWN_KEYS or lower in ROUTER_KEYS or _lookup(MLA_KEYS, key):
            continue
        if not path and lower in PER_LAYER_INPUT_KEYS and len(shape) == 2:
            continue
        if any(s.lower() in EXPERT_SEGMENTS for s in path) and _mlp_role(
            key, siblings[".".join(path)]
        ):
            continue
        if _lookup(ATTENTION_KEYS, key) or _mlp_role(key, siblings[".".join(path)]):
            continue
        out.append(rel)
    return out
