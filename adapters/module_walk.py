"""Recognise a decoder-only transformer from the flat list of a live module's parameters.

The torch and MLX walkers (:mod:`introspect.adapters.torch_module`,
:mod:`introspect.adapters.mlx_module`) reduce a module tree to a :class:`ModuleTree`:
every parameter as (qualified name, shape, tie key, owning module) plus the module objects
by qualified name. Everything below is framework-independent and reads shapes and names
only, never tensor data, so a 7B model on torch's meta device or as lazy MLX arrays is
described without allocating its weights.

How the structure is read (the role tables live in :mod:`introspect.adapters.module_roles`):

- parameters sharing a tie key (the same Parameter/array object) are counted once;
- the token embedding is the (V, d) table of an ``Embedding`` module (or the first 2-D
  table named like one); a second embedding table of width d is a learned position table;
- the repeated blocks are the list of same-class children (``layers.0``, ``layers.1`` …)
  holding the most parameters; its length is ``num_hidden_layers``;
- inside block 0, names give the roles (q/k/v/o, fused qkv, gate/up/down, experts,
  router, norms) and shapes give the widths: a projection's side that is not d is its
  width, so Linear (out, in) and GPT-2's Conv1D (in, out) read the same;
- heads come from attributes (``num_heads``, ``n_kv_heads``, ``head_dim``, a ``config``
  or ``args`` object …); without them head_dim 128 (or 64) is assumed and said so;
- the output projection is the (V, d) matrix outside the blocks; none, or the
  embedding's own Parameter, means tied embeddings.

The exact count is the sum of the unique tensors' sizes; the spec carries it as
``num_parameters``. Where the spec's structural count (:func:`introspect.params.
parameter_count`) differs from it, a note names the components that differ.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping
from dataclasses import dataclass

from introspect.adapters import module_roles as roles

from introspect.errors import UnsupportedArchitecture
from introspect.layers import Attention
from introspect.params import COMPONENTS, parameters_by_component
from introspect.spec import ModelSpec


class UnrecognizedModule(UnsupportedArchitecture):
    """A live module that cannot be read as a decoder-only transformer."""


@dataclass(frozen=True)
class ParamEntry:
    """One parameter as a walker saw it; ``tie_key`` is equal for shared storage."""

    name: str
    shape: tuple[int, ...]
    tie_key: Hashable
    owner: str  # qualified name of the module that holds it directly

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


@dataclass(frozen=True)
class ModuleTree:
    """What a framework walker hands over: parameters in order (tied ones repeated)
    and the module objects by qualified name (``""`` is the root)."""

    framework: str
    params: tuple[ParamEntry, ...]
    modules: Mapping[str, object]
    #: What the walker itself had to say (e.g. quantized layers read at full size).
    notes: tuple[str, ...] = ()

    @property
    def root_class(self) -> str:
        return type(self.modules.get("")).__name__


@dataclass(frozen=True)
class TensorInfo:
    """One parameter tensor and what it is; a tied alias has ``tied_to`` set and is
    not counted again."""

    name: str
    shape: tuple[int, ...]
    role: str
    component: str
    tied_to: str | None = None


@dataclass(frozen=True)
class ModuleDescription:
    """A live module, described: the spec, the exact count and where it sits."""

    spec: ModelSpec
    parameter_count: int
    params_by_component: dict[str, int]
    tensors: tuple[TensorInfo, ...]
    notes: tuple[str, ...]
    framework: str


@dataclass
class _Block:
    prefix: str  # e.g. "model.layers"
    count: int


def describe_tree(tree: ModuleTree, *, name: str | None = None) -> ModuleDescription:
    """Recognise ``tree`` and return its description (see the module docstring)."""
    return _Reader(tree, name).describe()


class _Reader:
    def __init__(self, tree: ModuleTree, name: str | None) -> None:
        self.tree = tree
        self.label = tree.root_class
        self.source = name or f"{tree.framework} module {tree.root_class}"
        self.notes: list[str] = list(tree.notes)
        self.assumptions: list[str] = []
        self.unique: list[ParamEntry] = []
        self.aliases: list[tuple[ParamEntry, str]] = []
        # One canonical name per tie key: the embedding's when an embedding holds it (so
        # an lm_head declared before the embedding it shares still reads as tied).
        canonical: dict[Hashable, ParamEntry] = {}
        for p in tree.params:
            held = canonical.get(p.tie_key)
            if held is None or (not self.in_embedding(held) and self.in_embedding(p)):
                canonical[p.tie_key] = p
        for p in tree.params:
            chosen = canonical[p.tie_key]
            if p is chosen:
                self.unique.append(p)
            else:
                self.aliases.append((p, chosen.name))
        self.placed: dict[str, tuple[str, str]] = {}  # name -> (role, component)

    def in_embedding(self, p: ParamEntry) -> bool:
        return "embedding" in type(self.tree.modules.get(p.owner)).__name__.lower()

    def fail(self, what: str) -> UnrecognizedModule:
        return UnrecognizedModule(
            f"cannot read {self.tree.framework} module {self.label} as a decoder-only "
            f"transformer: {what}"
        )

    def assume(self, text: str) -> None:
        self.assumptions.append(text)

    # ---- the walk --------------------------------------------------------------------
    def describe(self) -> ModuleDescription:
        if not self.unique:
            raise self.fail("it has no parameters")
        block = self.find_blocks()
        inside = [p for p in self.unique if p.name.startswith(block.prefix + ".")]
        outside = [p for p in self.unique if not p.name.startswith(block.prefix + ".")]
        outside, per_layer_vocab = self.per_layer_inputs(outside)
        embed, positions = self.find_embeddings(outside)
        V, d = embed.shape
        tied, lm_head_bias = self.read_outside(outside, embed, positions, V, d)
        fields = self.read_blocks(block, inside, d)
        shared0 = fields.pop("_shared", 0)
        self.attention0 = fields.pop("_attention", None)
        spec_fields = dict(
            hidden_size=d,
            num_hidden_layers=block.count,
            vocab_size=V,
            tie_word_embeddings=tied,
            lm_head_bias=lm_head_bias,
            embedding_norm=self.has_role("norm.embedding"),
            head_transform=self.has_role("head.dense") and self.has_role("norm.head"),
            position_embedding="learned" if positions else self.rotary_or_none(),
            max_position_embeddings=positions.shape[0] if positions else None,
            model_type=self.lookup_str("model_type") or "module",
            source=self.source,
            **fields,
        )
        if spec_fields.get("per_layer_input_size"):
            spec_fields["per_layer_input_vocab"] = per_layer_vocab
        exact = sum(p.numel for p in self.unique)
        try:
            spec = ModelSpec(
                **spec_fields, num_parameters=exact, assumptions=tuple(self.assumptions)
            )
        except ValueError as e:
            raise self.fail(f"the shapes read give an impossible spec ({e})") from e
        if any(self.block_kinds) or shared0 or self.attention0 is not None:
            spec = self.heterogeneous(spec, spec_fields, shared0)
        by_component = {c: 0 for c in COMPONENTS}
        for p in self.unique:
            by_component[self.placed[p.name][1]] += p.numel
        self.compare_with_structure(spec, by_component)
        return ModuleDescription(
            spec=spec,
            parameter_count=exact,
            params_by_component=by_component,
            tensors=self.tensors(),
            notes=tuple(self.assumptions + self.notes),
            framework=self.tree.framework,
        )

    def heterogeneous(self, spec: ModelSpec, spec_fields: dict, shared0: int) -> ModelSpec:
        """``spec`` with one layer kind per block: block 0's fields with each differing
        block's own read over them (its feed-forward, its heads), the shared experts
        beside a block's routed ones (``FeedForward.shared_intermediate_size``) and a
        block's multi-head latent attention (:meth:`mla_attention`), which the flat
        fields cannot carry."""
        from introspect._record import replace
        from introspect.layers import runs_from_list

        kinds = []
        for own in self.block_kinds:
            own = dict(own)
            shared = own.pop("_shared", 0) if own else shared0
            attention = own.pop("_attention", None) if own else self.attention0
            kind = spec.default_kind
            if own:
                fields = {**spec_fields, **own}
                if not own.get("num_local_experts"):
                    fields.update(num_local_experts=0, num_experts_per_tok=0)
                try:
                    kind = ModelSpec(**fields).default_kind
                except ValueError as e:
                    raise self.fail(f"a block's shapes give an impossible spec ({e})") from e
            if shared and kind.feed_forward.is_moe:
                ff = replace(kind.feed_forward, shared_intermediate_size=shared)
                kind = replace(kind, feed_forward=ff)
            if attention is not None:
                kind = replace(kind, attention=attention)
            kinds.append(kind)
        return spec.replace(layers=runs_from_list(kinds))

    def tensors(self) -> tuple[TensorInfo, ...]:
        out = []
        for p in self.tree.params:
            role, component = self.placed.get(p.name, (None, None))
            if role is not None:
                out.append(TensorInfo(p.name, p.shape, role, component))
        for p, canonical in self.aliases:
            role, component = self.placed[canonical]
            out.append(TensorInfo(p.name, p.shape, role, component, tied_to=canonical))
        return tuple(out)

    # ---- blocks ----------------------------------------------------------------------
    def find_blocks(self) -> _Block:
        """The list of same-class children (``<prefix>.<i>``, i = 0..n-1) that holds the
        most parameters."""
        children: dict[str, dict[int, str]] = {}
        for qname, obj in self.tree.modules.items():
            parent, _, index = qname.rpartition(".")
            if index.isdigit() and parent:
                children.setdefault(parent, {})[int(index)] = type(obj).__name__
        best: tuple[int, int, str] | None = None
        for prefix, kids in children.items():
            if sorted(kids) != list(range(len(kids))) or len(set(kids.values())) != 1:
                continue
            held = sum(p.numel for p in self.unique if p.name.startswith(prefix + "."))
            key = (held, -prefix.count("."), prefix)
            if held and (best is None or key > best):
                best = key
        if best is None:
            raise self.fail("no repeated blocks (a list of same-class layers) found")
        prefix = best[2]
        return _Block(prefix, len(children[prefix]))

    def read_blocks(self, block: _Block, inside: list[ParamEntry], d: int) -> dict:
        """Roles inside the blocks: block 0 sets the spec; other blocks inherit its roles
        by relative name (a block that differs is noted)."""
        by_block: dict[int, list[tuple[str, ParamEntry]]] = {}
        for p in inside:
            index, _, rel = p.name[len(block.prefix) + 1 :].partition(".")
            by_block.setdefault(int(index), []).append((rel, p))
        first = by_block.get(0, [])
        owner_class = {rel: type(self.tree.modules.get(p.owner)).__name__ for rel, p in first}
        try:
            found = roles.classify_block([(rel, p.shape, owner_class[rel]) for rel, p in first], d)
        except roles.RoleError as e:
            raise self.fail(f"{e} (blocks at {block.prefix})") from e
        for note in found.notes:
            self.notes.append(f"block 0: {note}")
        block0 = {rel: p.shape for rel, p in first}
        differing = []
        self.block_kinds: list[dict] = []  # per block: its fields where it differs
        for i, entries in sorted(by_block.items()):
            own = found
            if {rel: p.shape for rel, p in entries} != block0:
                differing.append(str(i))
                own = self.classify_other(block, i, entries, d)
            for rel, p in entries:
                role = own.roles.get(rel) or roles.fallback_role(rel, p.shape)
                self.placed[p.name] = role
            self.block_kinds.append(
                {} if own is found else self.block_fields(block, own, d, index=i)
            )
        if differing:
            self.notes.append(
                f"blocks {', '.join(differing)} differ from block 0; each is read as its "
                "own layer kind"
            )
        return self.block_fields(block, found, d)

    def classify_other(self, block: _Block, i: int, entries: list, d: int) -> roles.BlockRoles:
        """Block ``i``'s own roles (a dense first block before MoE blocks, as Exaone-MoE
        and GLM-4-MoE build ``mlp_layer_types``)."""
        owner = {rel: type(self.tree.modules.get(p.owner)).__name__ for rel, p in entries}
        try:
            return roles.classify_block([(rel, p.shape, owner[rel]) for rel, p in entries], d)
        except roles.RoleError as e:
            raise self.fail(f"{e} (block {i} at {block.prefix})") from e

    def norm_modules(self, block: _Block, index: int):
        """(qualified name, lower-case leaf name, class name) of each norm module inside
        block ``index`` (:func:`~introspect.adapters.module_roles.is_norm`)."""
        prefix = f"{block.prefix}.{index}."
        for qname, obj in self.tree.modules.items():
            leaf, cls = qname.rpartition(".")[2], type(obj).__name__
            if qname.startswith(prefix) and roles.is_norm(leaf, cls):
                yield qname, leaf.lower(), cls

    def weightless_norm(self, block: _Block, index: int) -> str | None:
        """The kind of block ``index``'s norms when none of them has a parameter: the class
        names of its norm modules (OLMo's ``OlmoLayerNorm``, "LayerNorm but with no
        learnable weight or bias", ``F.layer_norm(x, shape, None, None)``:
        ``transformers/models/olmo/modeling_olmo.py`` l. 49-60); None when it has none
        (q/k norms are not the block's)."""
        kinds = {
            roles.norm_kind(cls, False)
            for _, leaf, cls in self.norm_modules(block, index)
            if not (roles._Q_NORM.match(leaf) or roles._K_NORM.match(leaf))
        }
        if not kinds:
            return None
        return "rmsnorm" if kinds == {"rmsnorm"} else "layernorm"

    def weightless_qk_norm(self, block: _Block, index: int) -> bool:
        """Whether block ``index`` norms q and k with parameterless RMS norms (NanoChat's
        ``self.q_norm = NanoChatRMSNorm(eps=…)`` on the rotated heads, ``x.float() *
        rsqrt(mean(x²) + eps)`` cast back: ``models/nanochat/modeling_nanochat.py``
        l. 44-53, 200-224) — the saved set of Llama 4's L2 norm (``qk_norm = "l2"``)."""
        owners = {p.owner for p in self.tree.params}
        seen = set()
        for qname, leaf, cls in self.norm_modules(block, index):
            if qname in owners or "rms" not in cls.lower():
                continue
            if roles._Q_NORM.match(leaf):
                seen.add("q")
            elif roles._K_NORM.match(leaf):
                seen.add("k")
        return seen == {"q", "k"}

    def block_fields(
        self, block: _Block, found: roles.BlockRoles, d: int, *, index: int = 0
    ) -> dict:
        attn_obj = self.tree.modules.get(f"{block.prefix}.{index}.{found.attention_path}")
        block_obj = self.tree.modules.get(f"{block.prefix}.{index}")
        local = [attn_obj, block_obj]
        mla = self.mla_attention(found, local, index) if found.mla else None
        if mla is not None:
            heads = kv_heads = mla.num_attention_heads
            head_dim = mla.qk_head_dim
        else:
            heads, kv_heads, head_dim = self.heads(found.q_dim, found.kv_dim, local)
        norm = found.norm or self.weightless_norm(block, index)
        fields = dict(
            num_attention_heads=heads,
            num_key_value_heads=kv_heads,
            head_dim=head_dim,
            intermediate_size=found.ffn_width,
            norm=norm or "rmsnorm",
            norm_bias=found.norm_bias,
            ffn=found.ffn,
            hidden_act=self.activation(found, block.prefix),
            qkv_bias=found.qkv_bias,
            o_bias=found.o_bias,
            mlp_bias=found.mlp_bias,
            qk_norm=self.qk_norm_kind(found, head_dim),
            norms_per_layer=found.norms_per_layer,
        )
        if found.norm is None and norm is not None:
            fields["norm_weight"] = False
        if fields["qk_norm"] == "none" and self.weightless_qk_norm(block, index):
            # a weightless RMSNorm per head on q and k: Llama 4's L2 norm's saved set
            fields["qk_norm"] = "l2"
        if found.fused_qkv:
            fields["fused_linears"] = ("qkv",)
        if found.per_layer_input_size:
            fields["per_layer_input_size"] = found.per_layer_input_size
        if mla is not None:
            fields["_attention"] = mla
        if norm is None:
            self.assume("no norm module found in the blocks; assumed RMSNorm")
        if found.num_experts:
            moe_obj = self.tree.modules.get(f"{block.prefix}.{index}.{found.moe_path}")
            top_k = self.lookup_int(roles.TOP_K_NAMES, [moe_obj, block_obj])
            if top_k is None:
                top_k = min(2, found.num_experts)
                self.assume(f"experts used per token not stated; assumed {top_k}")
            fields.update(num_local_experts=found.num_experts, num_experts_per_tok=top_k)
            if found.shared_width:
                fields["_shared"] = found.shared_width
        return fields

    def heads(self, q_dim: int, kv_dim: int, local: list) -> tuple[int, int, int]:
        """Query heads, K/V heads and head width: head_dim or the head count from
        attributes, checked against the projection widths; else an assumed head_dim."""
        head_dim = self.lookup_int(roles.HEAD_DIM_NAMES, local)
        heads = self.lookup_int(roles.HEADS_NAMES, local)
        if head_dim and q_dim % head_dim == 0 and kv_dim % head_dim == 0:
            pass
        elif heads and q_dim % heads == 0 and kv_dim % (q_dim // heads) == 0:
            head_dim = q_dim // heads
        else:
            head_dim = 128 if q_dim % 128 == 0 and kv_dim % 128 == 0 else 64
            if q_dim % head_dim or kv_dim % head_dim:
                head_dim = math.gcd(q_dim, kv_dim)
            self.assume(
                f"head count not found on the module; assumed head_dim={head_dim} "
                f"({q_dim // head_dim} heads)"
            )
        if heads and heads * head_dim != q_dim:
            self.notes.append(
                f"the module says {heads} heads but q width {q_dim} / head_dim {head_dim} "
                f"gives {q_dim // head_dim}; the widths win"
            )
        return q_dim // head_dim, kv_dim // head_dim, head_dim

    def mla_attention(self, found: roles.BlockRoles, local: list, index: int) -> Attention:
        """Block ``index``'s multi-head latent attention, as DeepSeek-V3's reader gives it
        (:func:`introspect.adapters.families.deepseek._mla`), from the weight shapes
        (:class:`~introspect.adapters.module_roles.MLAWidths`) and two numbers the shapes
        do not split: the head count h (``num_heads`` on the attention module, or the
        config's ``num_attention_heads``) and the rotary width ``qk_rope_head_dim`` (the
        module's or the config's). Then, as ``DeepseekV3Attention.__init__`` builds them
        (``models/deepseek_v3/modeling_deepseek_v3.py`` l. 370-403): kv_a's output is
        r_kv + rope (checked against ``kv_a_layernorm``'s r_kv), q's is h·(nope + rope),
        kv_b's h·(nope + v) and o_proj's input h·v (all checked). Its forward splits Q
        into nope and rope parts, rotates the rope parts (``rope_interleave`` or not: the
        same saved tensors), expands the latent through kv_b and runs the attention on
        h heads of nope + rope (Q, K) and v (V): the kind ``mla`` prices exactly that.

        The keys and values have h heads, yet the attention interface ``repeat_kv``s them
        by ``num_key_value_groups``; above 1 the real step fails on a shape mismatch
        (:func:`~introspect.adapters.families.deepseek._check_mla_kv_heads`), so such a
        module is not read."""
        w = found.mla
        where = f"block {index}'s MLA"
        heads = self.lookup_int(("num_heads", "num_attention_heads"), local)
        rope = self.lookup_int(("qk_rope_head_dim",), local)
        if heads is None or rope is None:
            raise self.fail(f"{where}: no num_heads / qk_rope_head_dim on the module or config")
        groups = self.lookup_int(("num_key_value_groups",), local[:1])
        if groups not in (None, 1):
            raise self.fail(
                f"{where}: num_key_value_groups {groups}: MLA's keys and values have {heads} "
                "heads, and repeat_kv by it does not match the queries"
            )
        if w.kv_a_width != w.kv_lora_rank + rope:
            raise self.fail(
                f"{where}: kv_a_proj_with_mqa's output {w.kv_a_width} is not kv_lora_rank "
                f"{w.kv_lora_rank} + qk_rope_head_dim {rope}"
            )
        if w.q_width % heads or w.kv_b_width % heads or w.o_width % heads:
            raise self.fail(
                f"{where}: q {w.q_width}, kv_b {w.kv_b_width} or o_proj's input {w.o_width} "
                f"does not split into {heads} heads"
            )
        nope = w.q_width // heads - rope
        v = w.o_width // heads
        if nope <= 0 or w.kv_b_width // heads != nope + v:
            raise self.fail(
                f"{where}: kv_b_proj's {w.kv_b_width // heads} per head is not "
                f"qk_nope_head_dim {nope} + v_head_dim {v}"
            )
        return Attention(
            kind="mla",
            num_attention_heads=heads,
            num_key_value_heads=heads,
            head_dim=v,
            qkv_bias=found.qkv_bias,
            o_bias=found.o_bias,
            q_lora_rank=w.q_lora_rank,
            kv_lora_rank=w.kv_lora_rank,
            qk_rope_head_dim=rope,
            qk_nope_head_dim=nope,
            v_head_dim=v,
        )

    def qk_norm_kind(self, found: roles.BlockRoles, head_dim: int) -> str:
        if not found.qk_norm_width:
            return "none"
        return "head" if found.qk_norm_width == head_dim else "full"

    def activation(self, found: roles.BlockRoles, prefix: str) -> str:
        """The feed-forward's activation: the ``hidden_act`` name of a transformers
        activation module the block's feed-forward holds (what runs:
        :data:`~introspect.adapters.module_roles.ACTIVATION_CLASSES`), else the config's
        name, else one guessed from a class name."""
        mlp_prefix = f"{prefix}.0.{found.mlp_path}" if found.mlp_path else f"{prefix}.0"
        for qname, obj in self.tree.modules.items():
            if qname.startswith(mlp_prefix + "."):
                exact = roles.ACTIVATION_CLASSES.get(type(obj).__name__)
                if exact:
                    return exact
        named = self.lookup_str("hidden_act", "activation_function", "hidden_activation")
        if named:
            return named
        for qname, obj in self.tree.modules.items():
            if qname == mlp_prefix or qname.startswith(mlp_prefix + "."):
                guess = roles.activation_from_class(type(obj).__name__)
                if guess:
                    return guess
            if qname == mlp_prefix:
                for attr in ("act_fn", "act", "activation", "activation_fn"):
                    fn = getattr(obj, attr, None)
                    guess = roles.activation_from_class(getattr(fn, "__name__", "") or "")
                    if fn is not None and not guess:
                        guess = roles.activation_from_class(type(fn).__name__)
                    if guess:
                        return guess
        guess = "silu" if found.ffn == "gated" else "gelu"
        self.assume(f"activation not visible on the module; assumed {guess}")
        return guess

    def rotary_or_none(self) -> str:
        for qname, obj in self.tree.modules.items():
            if roles.is_rotary(qname, type(obj).__name__):
                return "rope"
        if self.lookup_any(("rope_theta", "rotary_emb", "freqs_cis", "rope")) is not None:
            return "rope"
        self.assume("no learned position table and no rotary module seen; assumed RoPE")
        return "rope"

    # ---- outside the blocks ----------------------------------------------------------
    def per_layer_inputs(self, outside: list[ParamEntry]) -> tuple[list[ParamEntry], int]:
        """Gemma 4's model-level per-layer-input parts (:data:`module_roles.
        PER_LAYER_INPUT_OUTSIDE`: ``embed_tokens_per_layer`` (V_pl, L·d_pl), counted in
        embeddings with ``per_layer_model_projection`` (L·d_pl, d), and
        ``per_layer_projection_norm`` (d_pl), in norms) placed; returns the rest and V_pl
        (0 without them)."""
        rest, vocab = [], 0
        for p in outside:
            role = roles.PER_LAYER_INPUT_OUTSIDE.get(p.owner.rpartition(".")[2])
            if role is None:
                rest.append(p)
                continue
            self.placed[p.name] = (role, "norms" if len(p.shape) == 1 else "embeddings")
            if role == "per_layer_input.embedding" and len(p.shape) == 2:
                vocab = p.shape[0]
        return rest, vocab

    def find_embeddings(self, outside: list[ParamEntry]) -> tuple[ParamEntry, ParamEntry | None]:
        tables = [p for p in outside if len(p.shape) == 2 and self.in_embedding(p)]
        if not tables:
            tables = [
                p for p in outside if len(p.shape) == 2 and roles.looks_like_embedding(p.name)
            ]
        if not tables:
            raise self.fail("no token embedding (an Embedding module or a 2-D embedding table)")
        token = next((p for p in tables if roles.is_token_table(p.name)), None)
        positions_named = [p for p in tables if roles.is_position_table(p.name)]
        if token is None:
            rest = [p for p in tables if p not in positions_named] or tables
            token = max(rest, key=lambda p: p.shape[0])
        self.placed[token.name] = ("embed_tokens", "embeddings")
        d = token.shape[1]
        positions = next((p for p in positions_named if p is not token and p.shape[1] == d), None)
        if positions is None:
            others = [p for p in tables if p is not token and p.shape[1] == d]
            positions = others[0] if len(others) == 1 else None
        if positions is not None:
            self.placed[positions.name] = ("position_embeddings", "embeddings")
        for p in tables:
            if p.name not in self.placed:
                self.placed[p.name] = ("embedding (other)", "embeddings")
                self.notes.append(f"{p.name}: an extra embedding table, counted in embeddings")
        return token, positions

    def read_outside(
        self, outside: list[ParamEntry], embed: ParamEntry, positions, V: int, d: int
    ) -> tuple[bool, bool]:
        """Output projection, its bias and the final norm; returns (tied, lm_head_bias)."""
        head = None
        candidates = [
            p
            for p in outside
            if p.name not in self.placed and len(p.shape) == 2 and sorted(p.shape) == sorted((V, d))
        ]
        if candidates:
            head = next((p for p in candidates if roles.is_lm_head(p.name)), candidates[-1])
            self.placed[head.name] = ("lm_head", "lm_head")
        head_owner = head.owner if head else None
        tied_alias = any(canonical == embed.name for _, canonical in self.aliases)
        for p in outside:
            if p.name in self.placed:
                continue
            if head_owner is not None and p.owner == head_owner and p.shape == (V,):
                self.placed[p.name] = ("lm_head.bias", "lm_head")
            elif self.is_norm(p):
                self.placed[p.name] = (self.outside_norm(p, outside, d), "norms")
            elif p.shape == (d, d) and self.sibling(p, outside, self.is_norm) is not None:
                self.placed[p.name] = ("head.dense", "lm_head")
            elif len(p.shape) == 1 and p.shape == (V,) and roles.is_lm_head(p.name):
                self.placed[p.name] = ("lm_head.bias", "lm_head")
            else:
                component = (
                    "embeddings" if V in p.shape else "norms" if len(p.shape) == 1 else "embeddings"
                )
                self.placed[p.name] = ("unrecognised", component)
                self.notes.append(
                    f"{p.name} {p.shape}: not recognised outside the blocks; counted in {component}"
                )
        lm_head_bias = self.has_role("lm_head.bias")
        if head is not None:
            return False, lm_head_bias
        if not tied_alias:
            tied_flag = self.lookup_any(("tie_word_embeddings",))
            text = (
                "no output projection found: the embedding serves as the output (tied, as "
                "mlx-lm's embed_tokens.as_linear)"
            )
            if tied_flag is True:
                self.notes.append(f"{text}; the config agrees (tie_word_embeddings=True)")
            else:
                suffix = "" if tied_flag is None else f", though the config says {tied_flag!r}"
                self.assume(text + suffix)
        return True, lm_head_bias

    def has_role(self, role: str) -> bool:
        return any(r == role for r, _ in self.placed.values())

    def outside_norm(self, p: ParamEntry, outside: list[ParamEntry], d: int) -> str:
        """The role of a norm outside the blocks: on the embedding output when it or its
        module is named for the embedding (ModernBERT-decoder's ``model.embeddings.norm``,
        BLOOM's ``transformer.word_embeddings_layernorm``) and another norm can be the final
        one (LFM2's only norm outside the blocks is named ``embedding_norm`` but runs after
        them, ``models/lfm2/modeling_lfm2.py`` l. 463, 523), the
        head transform's when a d×d dense shares its parent (``lm_head.norm`` beside
        ``lm_head.dense``), else the final norm."""
        norms = [q for q in outside if q.owner != p.owner and self.is_norm(q)]
        if _embedding_named(p.owner) and any(not _embedding_named(q.owner) for q in norms):
            return "norm.embedding"
        if self.sibling(p, outside, lambda q: q.shape == (d, d)) is not None:
            return "norm.head"
        return "norm.final"

    def is_norm(self, q: ParamEntry) -> bool:
        """A 1-D parameter's module is a norm (by its name or class)."""
        owner_class = type(self.tree.modules.get(q.owner)).__name__
        return len(q.shape) == 1 and roles.is_norm(q.owner.rpartition(".")[2], owner_class)

    def sibling(self, p: ParamEntry, outside: list[ParamEntry], match) -> ParamEntry | None:
        """The first parameter outside the blocks whose module shares ``p``'s parent module
        (not the root) and that ``match`` accepts: a head transform's dense and norm
        (``lm_head.dense`` beside ``lm_head.norm``)."""
        parent = p.owner.rpartition(".")[0]
        if not parent:
            return None
        return next((q for q in outside if q.owner.rpartition(".")[0] == parent and match(q)), None)

    # ---- attributes ------------------------------------------------------------------
    def sources(self, local: list | None = None) -> list:
        """Objects whose attributes may state heads etc.: the given module objects, then
        the root and the modules on the path to the blocks, each with its config/args."""
        objs = [o for o in (local or []) if o is not None]
        for qname, obj in self.tree.modules.items():
            if qname.count(".") <= 1 and not qname.rpartition(".")[2].isdigit():
                objs.append(obj)
        out = []
        for obj in objs:
            out.append(obj)
            for attr in ("config", "args", "cfg", "params", "model_args"):
                sub = _safe_getattr(obj, attr)
                if sub is not None and not callable(sub):
                    out.append(sub)
        return out

    def lookup(self, names: tuple[str, ...], accept, local: list | None = None):
        """The first attribute among ``names`` that ``accept`` takes, over the sources."""
        for obj in self.sources(local):
            for attr in names:
                value = _safe_getattr(obj, attr)
                if value is not None and accept(value):
                    return value
        return None

    def lookup_int(self, names: tuple[str, ...], local: list | None = None) -> int | None:
        return self.lookup(names, _positive_int, local)

    def lookup_str(self, *names: str) -> str | None:
        return self.lookup(names, lambda v: isinstance(v, str) and bool(v))

    def lookup_any(self, names: tuple[str, ...]):
        return self.lookup(names, lambda v: True)

    def compare_with_structure(self, spec: ModelSpec, actual: dict[str, int]) -> None:
        implied = parameters_by_component(spec)
        differ = [
            f"{c} {implied[c]:,} vs {actual[c]:,}" for c in COMPONENTS if implied[c] != actual[c]
        ]
        if differ:
            self.notes.append(
                "the spec's structure implies a different count than the module holds ("
                + "; ".join(differ)
                + "); num_parameters carries the exact count"
            )


def _embedding_named(owner: str) -> bool:
    """A module named for the embedding, or inside one named so."""
    parent, _, name = owner.rpartition(".")
    return any("emb" in part.lower() for part in (name, parent.rpartition(".")[2]))


def _positive_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _safe_getattr(obj: object, attr: str):
    """An attribute or None: config properties may raise more than AttributeError, and
    a description must not fail on a property it only hoped to read."""
    try:
        return getattr(obj, attr, None)
    except Exception:
        return None


def block_list(tree: ModuleTree) -> tuple[str, int] | None:
    """(prefix, count) of the list of blocks (``<prefix>.<i>``, i = 0..n-1) holding the
    most parameters, whatever the blocks' classes (a hybrid stack mixes them: Jamba's
    attention and Mamba decoder layers); ``None`` without one."""
    children: dict[str, set[int]] = {}
    for qname in tree.modules:
        parent, _, index = qname.rpartition(".")
        if index.isdigit() and parent:
            children.setdefault(parent, set()).add(int(index))
    best: tuple[int, int, str] | None = None
    for prefix, kids in children.items():
        if sorted(kids) != list(range(len(kids))):
            continue
        held = sum(p.numel for p in tree.params if p.name.startswith(prefix + "."))
        key = (held, -prefix.count("."), prefix)
        if held and (best is None or key > best):
            best = key
    return None if best is None else (best[2], len(children[best[2]]))


def unmodelled_parts(tree: ModuleTree) -> tuple[str, ...]:
    """The parts of each block the closed form has no layer kind for, as
    ``"<Class> (<child name>) in <k> of <L> layers"``, in order of first appearance.

    Each block is split into its direct children (``self_attn``, ``mamba``, ``mixer``,
    ``feed_forward``, the norms). A child is not modelled when its class names a mixer
    with no layer kind (:func:`module_roles.unmodelled_class`: Mamba, RG-LRU, RWKV, short
    convolutions …), when it is a cross-attention (BART's decoder as a causal LM: its
    ``encoder_attn``), when it is a list of several attentions (LongCat-Flash's
    ``self_attn``, a ModuleList of two MLA sub-blocks: a layer kind has one attention,
    :func:`module_roles.listed_attentions`), or when it holds a parameter no role table
    knows
    (:func:`module_roles.unrecognised`). Read per block, not from block 0, so a stack
    whose layers differ (Nemotron-H's ``mixer`` is a Mamba-2 mixer, an attention or an
    MLP by layer) names each kind it has."""
    found = block_list(tree)
    if found is None:
        return ()
    prefix, count = found
    by_child: dict[tuple[int, str], list[ParamEntry]] = {}
    for p in tree.params:
        if not p.name.startswith(prefix + "."):
            continue
        index, _, rel = p.name[len(prefix) + 1 :].partition(".")
        if index.isdigit():
            by_child.setdefault((int(index), rel.partition(".")[0]), []).append(p)
    layers: dict[str, set[int]] = {}
    for (index, child), entries in sorted(by_child.items()):
        obj = tree.modules.get(f"{prefix}.{index}.{child}")
        cls = (
            type(obj).__name__
            if obj is not None
            else type(tree.modules.get(f"{prefix}.{index}")).__name__
        )
        listed = [
            (p.name[len(f"{prefix}.{index}.") :], p.shape, type(tree.modules.get(p.owner)).__name__)
            for p in entries
        ]
        unknown = roles.unrecognised(listed)
        attentions = roles.listed_attentions(child, listed)
        if attentions > 1:
            inner = type(tree.modules.get(f"{prefix}.{index}.{child}.0")).__name__
            layers.setdefault(
                f"{inner} ({child}: {attentions} attentions in one block)", set()
            ).add(index)
        elif roles.is_cross_attention(child, cls) and any(len(p.shape) > 1 for p in entries):
            layers.setdefault(f"{cls} ({child}: cross-attention)", set()).add(index)
        elif roles.unmodelled_class(cls, tree.root_class):
            layers.setdefault(f"{cls} ({child})", set()).add(index)
        elif unknown:
            inner = [rel.removeprefix(child + ".").removesuffix(".weight") for rel in unknown]
            named = ", ".join(dict.fromkeys(inner[:3])) + (", …" if len(inner) > 3 else "")
            layers.setdefault(f"{cls} ({child}: {named} not recognised)", set()).add(index)
    return tuple(f"{name} in {len(held)} of {count} layers" for name, held in layers.items())
