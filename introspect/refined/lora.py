"""LoRA and QLoRA: a frozen base, trained low-rank adapters, and what each one keeps.

From peft's source (``peft/tuners/lora/layer.py``, ``Linear.forward``, peft 0.21)::

    result = self.base_layer(x)
    x = self._cast_input_dtype(x, lora_A.weight.dtype)
    result = result + lora_B(lora_A(dropout(x))) * scaling

* Trainable parameters per targeted linear: ``lora_A`` (d_in × r) and ``lora_B``
  (r × d_out), no bias: ``r·(d_in + d_out)``. ``get_peft_model`` keeps adapters in FP32
  over a 16-bit base (``autocast_adapter_dtype=True``), so their weights, gradients and
  Adam state are FP32.
* What autograd keeps, checked with the saved-tensor census on a peft model (Llama,
  transformers 5, torch 2.13 CPU): a frozen linear saves nothing for its own weight
  gradient (its input is not kept unless another op needs it); ``lora_A`` keeps its
  input, ``lora_B`` keeps ``lora_A``'s output (B·T·r). Over a 16-bit base, ``x.to(fp32)``
  is a new FP32 tensor per adapter (B·T·d_in·4) that ``lora_A`` keeps; with
  ``lora_dropout > 0`` the dropped input (B·T·d_in) and its mask are kept per adapter
  (the mask is the input's dtype on CPU; a bool on CUDA, ``aten/native/cuda/Dropout.cu``).
  Frozen norm weights drop RMSNorm's normalized ``x·rstd``; a frozen output head drops
  the final norm's output; a frozen embedding drops the embedding output. Everything the
  gradient must pass through (norm statistics, attention, the activation function's
  input, the loss's log-softmax) is kept as in full training.
* Under ``torch.autocast`` (census of real steps, CPU): each ``lora_A`` keeps autocast's
  BF16 cast of its FP32 input, over a 4-bit base too; ``lora_A``'s output is BF16; every
  adapter weight and each 16-bit base linear's weight get a kept BF16 copy. Over an
  NF4 base, bitsandbytes' ``MatMul4Bit`` (``autograd/_functions.py``, 0.50) keeps only
  the packed weight — not its input: ``ctx.tensors = (None, B)`` — and is no autocast
  op (no copies), and ``Linear4bit`` returns the input's dtype, so the feed-forward's
  gate, up and activation outputs are FP32.
* The frozen base, as bitsandbytes stores it (``bitsandbytes/functional.py``,
  ``quantize_4bit``, 0.50): NF4 packs two weights per byte, with one FP32 absmax per
  64-weight block; double quantization (``compress_statistics``) stores those absmax in
  8 bits (``quantize_blockwise(absmax, blocksize=256)``) with one FP32 absmax per 256
  blocks, a 256-entry FP32 code and an FP32 offset. LLM.int8 (``Int8Params``) stores
  one byte per weight and one FP32 scale per output row. Only the blocks' linears are
  quantized: embeddings, the output head and norms stay at the working dtype
  (transformers' bitsandbytes integration skips the output head).

With ``--num-layers K`` (peft's ``layers_to_transform``, mlx-lm's ``num_layers``) the
adapters sit in the top K blocks only, and the blocks below the first adapted one keep
nothing for the backward (:func:`first_recorded`): measured on peft steps, every peak
within 0.02% of the closed form at K = 1, 3 and L (``tests/test_num_layers.py``).

On hybrid stacks (Qwen3.5, Qwen3-Next, OLMo-Hybrid, Granite 4.0-H, Nemotron-H:
:func:`hybrid`) the adapters are each layer kind's own linears, as peft's all-linear
finds them; a frozen Gated DeltaNet keeps less (:func:`_frozen_deltanet`), its
out_proj's input only through the adapter. Checked: adapter counts equal to
``get_peft_model`` on the real classes, the DeltaNet's LoRA saved set equal to a census
of the real mixer with peft's adapters, and the steps within 1% of the dry run of the
peft-wrapped class (``tests/test_lora_hybrid.py``).

Every function returns bytes for all L layers, per device.
"""

from __future__ import annotations

from introspect.errors import IntrospectError
from introspect.refined import lora_moe
from introspect.refined.memo import per_estimate
from introspect.refined.precision import working_weight_bytes
from introspect.setup import (
    ATTENTION_INPUT_LINEARS,
    EXPERT_LINEARS,
    FFN_INPUT_LINEARS,
    HEAD_LORA_MODULES,
    LORA_MODULES,
    OPTIMIZER_STATE_BYTES,
    TrainingSetup,
)
from introspect.spec import ModelSpec
from introspect.terms import ADAM_M, ADAM_V, MOMENTUM

FP32 = 4
#: The linears that read a block's first norm output: the attention's, the Gated
#: DeltaNet's (``modeling_qwen3_next.py`` in_proj_qkvz/in_proj_ba; ``modeling_qwen3_5.py``
#: in_proj_qkv/_z/_b/_a; ``modeling_olmo_hybrid.py`` q/k/v/a/b/g_proj) and Mamba-2's
#: in_proj (``modeling_granitemoehybrid.py``, ``modeling_nemotron_h.py``).
MIXER_INPUT_LINEARS = (
    *ATTENTION_INPUT_LINEARS,
    *("in_proj_qkvz", "in_proj_ba", "in_proj_qkv", "in_proj_z", "in_proj_b", "in_proj_a"),
    *("a_proj", "b_proj", "g_proj", "in_proj"),
)
NF4_BLOCK = 64
NF4_DOUBLE_BLOCK = 256
#: bitsandbytes' dynamic 8-bit code for the second level: 256 FP32 values.
NF4_CODE_BYTES = 256 * FP32


@per_estimate
def linear_shapes(spec: ModelSpec) -> dict[str, tuple[int, int]]:
    """(d_in, d_out) of each linear in one block, by its Hugging Face name; a plain
    feed-forward has only ``up_proj`` and ``down_proj``. A fused projection
    (``spec.fused_linears``) is one linear: ``qkv_proj`` d → q + 2·kv for Phi-3's
    ``qkv_proj`` and GPT-2's ``c_attn``, ``gate_up_proj`` d → 2f for Phi-3's; peft's
    all-linear puts one adapter on each (``peft/tuners/tuners_utils.py``,
    ``_maybe_include_all_linear_layers``)."""
    d, f = spec.hidden_size, spec.ffn_dim
    shapes = {
        "q_proj": (d, spec.q_dim),
        "k_proj": (d, spec.kv_dim),
        "v_proj": (d, spec.kv_dim),
        "o_proj": (spec.q_dim, d),
        "up_proj": (d, f),
        "down_proj": (f, d),
    }
    if spec.ffn == "gated":
        shapes["gate_proj"] = (d, f)
    if "qkv" in spec.fused_linears:
        for name in ("q_proj", "k_proj", "v_proj"):
            del shapes[name]
        shapes["qkv_proj"] = (d, spec.q_dim + 2 * spec.kv_dim)
    if "gate_up" in spec.fused_linears and spec.ffn == "gated":
        del shapes["gate_proj"], shapes["up_proj"]
        shapes["gate_up_proj"] = (d, 2 * f)
    return {name: shapes[name] for name in LORA_MODULES if name in shapes}


def _experts(spec: ModelSpec, name: str) -> int:
    """Copies of a linear per layer: every expert's feed-forward under MoE."""
    return (spec.num_local_experts or 1) if name in EXPERT_LINEARS else 1


def peft_moe(spec: ModelSpec, setup: TrainingSetup) -> bool:
    """transformers 5 with peft on an MoE model (:mod:`introspect.refined.lora_moe`):
    the experts are parameters, not linears. mlx-lm's ``SwitchLinear`` experts keep the
    per-expert linear view."""
    return setup.framework == "torch" and spec.is_moe


#: Mixers whose linears are not the attention's q/k/v/o: the Gated DeltaNet's
#: (``linear``), Mamba-2's in_proj/out_proj, and none (Nemotron-H's MLP-only blocks).
_OWN_LINEARS = ("linear", "mamba2", "none")


def hybrid(spec: ModelSpec) -> bool:
    """Whether some layer kind's linears are not the attention's names (a Gated DeltaNet,
    a Mamba-2 mixer, a block without a mixer or without a feed-forward) or not its
    widths (Qwen3.5's and Qwen3-Next's gated attention, q_proj 2·q_dim wide): peft's
    all-linear adapts each layer's own ``nn.Linear`` modules, ``module_shapes`` of its
    kind (measured against ``get_peft_model`` on Qwen3.5, OLMo-Hybrid, Nemotron-H and
    Granite 4.0-H: ``tests/test_lora_hybrid.py``)."""
    for kind, _ in spec.kinds:
        att = kind.attention
        if att.kind in _OWN_LINEARS or att.output_gate or kind.feed_forward.ffn == "none":
            if kind.shared is None and kind.mixer is None:
                return True
    return False


def per_kind(spec: ModelSpec, setup: TrainingSetup) -> bool:
    """Whether the adapters are read per layer kind off the modules transformers 5
    builds (:func:`module_shapes`): peft on an MoE model (:func:`peft_moe`) or on a
    hybrid stack (:func:`hybrid`)."""
    return setup.framework == "torch" and (spec.is_moe or hybrid(spec))


@per_estimate
def module_shapes(spec: ModelSpec) -> dict[str, tuple[int, int]]:
    """One layer kind's ``nn.Linear`` modules in transformers 5, by name: the attention's
    (:func:`_attention_modules`); an MoE layer's feed-forward linears are its shared
    expert's (``shared_intermediate_size`` wide) and the shared expert's gate (d → 1),
    its experts and router not being linears; a dense layer's are :func:`linear_shapes`'."""
    ff = spec.kinds[0][0].feed_forward
    ffn = {k: v for k, v in linear_shapes(spec).items() if k in EXPERT_LINEARS}
    shapes = _attention_modules(spec)
    if ff.ffn == "none":  # Nemotron-H's mixer-only blocks (NemotronHBlock: one branch)
        return shapes
    if not ff.is_moe:
        return shapes | ffn
    if ff.shared_intermediate_size:
        shared = spec.replace(intermediate_size=ff.shared_intermediate_size)
        shapes.update({k: v for k, v in linear_shapes(shared).items() if k in EXPERT_LINEARS})
    if ff.shared_expert_gate:
        shapes["shared_expert_gate"] = (spec.hidden_size, 1)
    return shapes


def _attention_modules(spec: ModelSpec) -> dict[str, tuple[int, int]]:
    """The attention's linears as transformers names them: q/k/v/o (q twice as wide
    with Qwen3-Next's output gate); DeepSeek's MLA (``modeling_deepseek_v3.py``:
    ``q_a_proj``/``q_b_proj`` or ``q_proj``, ``kv_a_proj_with_mqa``, ``kv_b_proj``,
    ``o_proj``); Gated DeltaNet's (``modeling_qwen3_next.py``: ``in_proj_qkvz``,
    ``in_proj_ba``, ``out_proj``; ``modeling_qwen3_5.py`` l. 536, 540-543: ``in_proj_qkv``,
    ``in_proj_z``, ``in_proj_b``, ``in_proj_a``, ``out_proj``)."""
    att, d = spec.kinds[0][0].attention, spec.hidden_size
    if att.kind == "none":  # Nemotron-H's MLP-only blocks
        return {}
    if att.kind == "mamba2":
        from introspect.refined.mamba2 import widths

        size = widths(att, d)
        return {"in_proj": (d, size["P"]), "out_proj": (size["I"], d)}
    if att.kind == "linear":
        nk, dk = att.linear_num_key_heads, att.linear_key_head_dim
        nv, dv = att.linear_num_value_heads, att.linear_value_head_dim
        K, V = nk * dk, nv * dv
        if att.linear_projections == "separate":  # OlmoHybridGatedDeltaNet's names
            return {"q_proj": (d, K), "k_proj": (d, K), "v_proj": (d, V), "a_proj": (d, nv),
                    "b_proj": (d, nv), "g_proj": (d, V), "o_proj": (V, d)}  # fmt: skip
        if att.linear_projections == "qkv_z_b_a":  # Qwen3_5GatedDeltaNet's names
            return {"in_proj_qkv": (d, 2 * K + V), "in_proj_z": (d, V), "in_proj_b": (d, nv),
                    "in_proj_a": (d, nv), "out_proj": (V, d)}  # fmt: skip
        return {
            "in_proj_qkvz": (d, 2 * nk * dk + 2 * nv * dv),
            "in_proj_ba": (d, 2 * nv),
            "out_proj": (nv * dv, d),
        }
    if att.kind == "mla":
        h = att.num_attention_heads
        qk = att.qk_nope_head_dim + att.qk_rope_head_dim
        shapes = (
            {"q_proj": (d, h * qk)}
            if att.q_lora_rank is None
            else {"q_a_proj": (d, att.q_lora_rank), "q_b_proj": (att.q_lora_rank, h * qk)}
        )
        return shapes | {
            "kv_a_proj_with_mqa": (d, att.kv_lora_rank + att.qk_rope_head_dim),
            "kv_b_proj": (att.kv_lora_rank, h * (att.qk_nope_head_dim + att.v_head_dim)),
            "o_proj": (h * att.v_head_dim, d),
        }
    shapes = {k: v for k, v in linear_shapes(spec).items() if k not in EXPERT_LINEARS}
    if att.output_gate:
        shapes["q_proj"] = (d, 2 * shapes["q_proj"][1])
    return shapes


def _kinds(spec: ModelSpec, setup: TrainingSetup | None = None) -> list[tuple[ModelSpec, int]]:
    """Each layer kind as a homogeneous spec, with its count (with ``setup``, its count
    among the adapted blocks: :func:`adapted_kinds`)."""
    counts = spec.kinds if setup is None else adapted_kinds(spec, setup)
    return [(spec.for_kind(kind), count) for kind, count in counts if count]


def adapted_layers(spec: ModelSpec, setup: TrainingSetup) -> int:
    """K, the top blocks the adapters sit on: ``--num-layers`` (mlx-lm's ``num_layers``,
    peft's ``layers_to_transform``), every block without it. mlx-lm's
    ``linear_to_lora_layers`` slices ``model.layers[-max(num_layers, 0):]``
    (``mlx_lm/tuner/utils.py``), which takes every block for K ≥ L."""
    L = spec.num_hidden_layers
    return L if setup.num_layers is None else min(setup.num_layers, L)


def first_recorded(spec: ModelSpec, setup: TrainingSetup) -> int:
    """The lowest block the backward runs through: L − K. A frozen block below the
    first adapted one reads a tensor that needs no gradient and has no parameter that
    needs one, so autograd records none of its ops and saves nothing for them
    (``torch/csrc/autograd/function.h``: a node is made only when an input requires
    grad; MLX's ``vjp`` in ``mlx/transforms.cpp`` differentiates only the ops that
    depend on the trained arrays). Measured: a peft step with ``layers_to_transform``
    saves no tensor in those blocks (``tests/test_num_layers.py``).

    Under torch checkpointing, 0: ``get_peft_model`` on a checkpointed model calls
    ``enable_input_require_grads`` (``peft/peft_model.py`` ``__init__`` →
    ``_prepare_model_for_gradient_checkpointing``; transformers' Trainer and TRL do the
    same for reentrant checkpointing), a forward hook making the embedding's output
    require grad, so every block is recorded, keeps its checkpoint input and is
    recomputed in the backward though nothing below it is trained."""
    if setup.activation_checkpointing and setup.framework == "torch":
        return 0
    return spec.num_hidden_layers - adapted_layers(spec, setup)


def adapted_kinds(spec: ModelSpec, setup: TrainingSetup) -> list[tuple[object, int]]:
    """Each layer kind with its count among the top K blocks (:func:`adapted_layers`),
    read off the stack's runs from the top."""
    return _top_kinds(spec, adapted_layers(spec, setup))


def recorded_kinds(spec: ModelSpec, setup: TrainingSetup) -> list[tuple[object, int]]:
    """Each layer kind with its count among the blocks the backward runs through
    (:func:`first_recorded` and up)."""
    return _top_kinds(spec, spec.num_hidden_layers - first_recorded(spec, setup))


def _top_kinds(spec: ModelSpec, k: int) -> list[tuple[object, int]]:
    if k >= spec.num_hidden_layers:
        return list(spec.kinds)
    counts = {kind: 0 for kind, _ in spec.kinds}
    left = k
    for run in reversed(spec.runs):
        take = min(run.count, left)
        counts[run.kind] += take
        left -= take
        if not left:
            break
    return list(counts.items())


def frozen_block_parameters(spec: ModelSpec, setup: TrainingSetup) -> int:
    """Parameters of the blocks below the adapted ones (none without ``--num-layers``)."""
    if adapted_layers(spec, setup) == spec.num_hidden_layers:
        return 0
    from introspect.params import layer_parameters

    adapted = dict(adapted_kinds(spec, setup))
    return sum(
        (count - adapted.get(kind, 0)) * layer_parameters(spec, kind) for kind, count in spec.kinds
    )


def _kind_targets(spec: ModelSpec, setup: TrainingSetup) -> tuple[str, ...]:
    """The linear modules of one layer kind (homogeneous ``spec``) the adapters sit on
    under transformers 5 and peft: a converted model's feed-forward names are taken
    over by its experts (:mod:`lora_moe`), so no linear keeps them."""
    shapes = module_shapes(spec)
    wanted = shapes if "all-linear" in setup.lora_targets else setup.lora_targets
    consumed = lora_moe.CONSUMED if lora_moe.converts(spec) else ()
    return tuple(t for t in shapes if t in wanted and t not in consumed)


@per_estimate
def targets(spec: ModelSpec, setup: TrainingSetup) -> tuple[str, ...]:
    """The block linears the adapters sit on. Names the model lacks, or a rank above a
    targeted layer's width, are an IntrospectError naming what the model has. Under
    transformers 5 with peft on an MoE model or a hybrid stack (:func:`per_kind`), the
    linear modules any layer kind has (:func:`module_shapes`: a Gated DeltaNet's or a
    Mamba-2 mixer's own); the experts' parameter adapters are :mod:`lora_moe`'s."""
    _check_block_target(setup)
    if per_kind(spec, setup):
        return _moe_targets(spec, setup)
    shapes = linear_shapes(spec)
    if "all-linear" in setup.lora_targets:
        chosen = tuple(shapes)
    else:
        missing = [t for t in block_target_names(setup) if t not in shapes]
        if missing:
            raise IntrospectError(
                f"--lora-targets: this model has no {', '.join(missing)}; its block's "
                f"linears are {', '.join(shapes)} (or all-linear)"
            )
        chosen = tuple(t for t in shapes if t in setup.lora_targets)
    width = min(min(shapes[t]) for t in chosen)
    if setup.lora_rank > width:
        raise IntrospectError(
            f"--lora-rank {setup.lora_rank} is above the narrowest targeted layer's width "
            f"({width}); use a rank of at most {width}"
        )
    return chosen


def head_targets(setup: TrainingSetup) -> tuple[str, ...]:
    """``lm_head`` and ``embed_tokens`` where ``--lora-targets`` names them (peft's
    ``EMBEDDING_LAYER_NAMES``; ``all-linear`` leaves the output head out,
    ``peft/tuners/tuners_utils.py`` ``_maybe_include_all_linear_layers``)."""
    return tuple(t for t in HEAD_LORA_MODULES if t in setup.lora_targets)


def block_target_names(setup: TrainingSetup) -> tuple[str, ...]:
    """``--lora-targets`` without the head's and the embedding's names."""
    return tuple(t for t in setup.lora_targets if t not in HEAD_LORA_MODULES)


def _check_block_target(setup: TrainingSetup) -> None:
    if not block_target_names(setup):
        raise IntrospectError(
            "--lora-targets: lm_head/embed_tokens alone are not modelled; name at least one "
            "block linear beside them (e.g. q_proj v_proj lm_head) or all-linear"
        )


def head_shapes(spec: ModelSpec, setup: TrainingSetup) -> dict[str, tuple[tuple[int, int], ...]]:
    """Each head target's adapter shapes, as peft makes them: ``lm_head`` a Linear d → V
    (``lora_A`` (r, d), ``lora_B`` (V, r)); ``embed_tokens`` an ``Embedding``
    (``lora_embedding_A`` (r, V), ``lora_embedding_B`` (d, r), ``peft/tuners/lora/layer.py``
    ``Embedding.update_layer``). A tied head gets adapters of its own: peft ties them only
    with ``ensure_weight_tying=True`` (and warns that it is not set)."""
    r, V, d = setup.lora_rank, spec.vocab_size, spec.hidden_size
    shapes = {"lm_head": ((r, d), (V, r)), "embed_tokens": ((r, V), (d, r))}
    return {t: shapes[t] for t in head_targets(setup)}


def head_adapter_parameters(spec: ModelSpec, setup: TrainingSetup) -> int:
    """``r·(d + V)`` per head target (:func:`head_shapes`)."""
    return sum(a[0] * a[1] + b[0] * b[1] for a, b in head_shapes(spec, setup).values())


def _moe_targets(spec: ModelSpec, setup: TrainingSetup) -> tuple[str, ...]:
    lora_moe.check(spec, setup)
    _check_moe_names(spec, setup)
    _check_peft_refusals(spec, setup)
    chosen: list[str] = []
    for kind, _ in _kinds(spec, setup):
        chosen += [t for t in _kind_targets(kind, setup) if t not in chosen]
    return tuple(chosen)


#: The model types whose ``out_proj`` (and ``conv1d``) peft refuses to adapt
#: (``peft/tuners/tuners_utils.py`` ``_check_lora_target_modules_mamba``, peft 0.21.2:
#: ``mamba_model_types``), all-linear included.
PEFT_MAMBA_TYPES = frozenset({"falcon_h1", "mamba", "mamba2", "falcon_mamba", "nemotron_h"})


def _check_peft_refusals(spec: ModelSpec, setup: TrainingSetup) -> None:
    """peft's ValueError for an ``out_proj`` target on a Mamba model type (all-linear
    reaches every Mamba-2 mixer's out_proj), as an IntrospectError naming the way out."""
    if spec.model_type not in PEFT_MAMBA_TYPES:
        return
    has = any("out_proj" in module_shapes(kind) for kind, _ in _kinds(spec))
    if has and ("all-linear" in setup.lora_targets or "out_proj" in setup.lora_targets):
        raise IntrospectError(
            f"--lora-targets: peft refuses LoRA on out_proj for {spec.model_type} (its "
            "Mamba mixers' out_proj, which all-linear includes); name the linears instead, "
            "e.g. in_proj q_proj k_proj v_proj o_proj up_proj down_proj"
        )


def _check_moe_names(spec: ModelSpec, setup: TrainingSetup) -> None:
    """A named target no layer kind has (nor the experts' names) is an IntrospectError,
    as :func:`targets` says for a dense model."""
    names: dict[str, tuple[int, int]] = {}
    for kind, _ in _kinds(spec):
        names.update(module_shapes(kind))
    if "all-linear" not in setup.lora_targets:
        known = set(names) | set(lora_moe.CONSUMED)
        missing = [t for t in block_target_names(setup) if t not in known]
        if missing:
            raise IntrospectError(
                f"--lora-targets: this model has no {', '.join(missing)}; its block's "
                f"linears are {', '.join(names)} (or all-linear)"
            )


def _moe_adapter_parameters(spec: ModelSpec, setup: TrainingSetup) -> int:
    lora_moe.check(spec, setup)  # what peft refuses (or adapts otherwise) on the experts
    _check_moe_names(spec, setup)  # else an unknown name adapts nothing, silently
    _check_peft_refusals(spec, setup)
    r = setup.lora_rank
    total = 0
    for kind, count in _kinds(spec, setup):
        shapes = module_shapes(kind)
        per_layer = sum(r * sum(shapes[t]) for t in _kind_targets(kind, setup))
        total += count * (per_layer + lora_moe.adapter_parameters(kind, setup))
    return total + head_adapter_parameters(spec, setup)


@per_estimate
def adapter_parameters(spec: ModelSpec, setup: TrainingSetup) -> int:
    """Trainable adapter parameters, all adapted layers: ``K · Σ r·(d_in + d_out)``, K
    the top blocks adapted (:func:`adapted_layers`, L without ``--num-layers``; under
    transformers 5 with peft on an MoE model, each kind's linears and its experts' and
    router's parameter adapters, :mod:`lora_moe`)."""
    if per_kind(spec, setup):
        return _moe_adapter_parameters(spec, setup)
    r = setup.lora_rank
    shapes = linear_shapes(spec)
    per_layer = sum(r * sum(shapes[t]) * _experts(spec, t) for t in targets(spec, setup))
    heads = head_adapter_parameters(spec, setup)
    K = adapted_layers(spec, setup)
    return K * per_layer + _mlx_router_adapters(spec, setup) + heads


def _mlx_router_adapters(spec: ModelSpec, setup: TrainingSetup) -> int:
    """mlx-lm's ``linear_to_lora_layers`` without keys adapts every ``nn.Linear`` of a
    block (``mlx_lm/tuner/utils.py``), an MoE layer's router ``gate`` (d → E) too."""
    if not (spec.is_moe and setup.framework.startswith("mlx")):
        return 0
    if "all-linear" not in setup.lora_targets:
        return 0
    r, d = setup.lora_rank, spec.hidden_size
    return sum(
        count * r * (d + kind.feed_forward.num_experts)
        for kind, count in adapted_kinds(spec, setup)
        if kind.feed_forward.is_moe
    )


def embedding_parameters(spec: ModelSpec) -> int:
    """The input embedding and, when untied, the output head: V·d each."""
    vd = spec.vocab_size * spec.hidden_size
    return vd if spec.tie_word_embeddings else 2 * vd


def trainable_parameters(spec: ModelSpec, setup: TrainingSetup) -> int:
    """Adapters, plus the embeddings and head under ``train_embeddings``."""
    extra = embedding_parameters(spec) if setup.train_embeddings else 0
    return adapter_parameters(spec, setup) + extra


def _base_linears(spec: ModelSpec, setup: TrainingSetup | None) -> list[tuple[int, int, int]]:
    """(d_in, d_out, copies over all layers) of every block linear bitsandbytes would
    replace: each expert's linears in the per-expert view; under transformers 5 on an
    MoE model only the ``nn.Linear`` modules (:func:`module_shapes`; the experts are
    parameters, which ``replace_with_bnb_linear`` leaves at the working dtype)."""
    if setup is not None and per_kind(spec, setup):
        return [
            (i, o, count) for kind, count in _kinds(spec) for i, o in module_shapes(kind).values()
        ]
    L = spec.num_hidden_layers
    return [(i, o, L * _experts(spec, t)) for t, (i, o) in linear_shapes(spec).items()]


def block_linear_parameters(spec: ModelSpec, setup: TrainingSetup | None = None) -> int:
    """Weights of the blocks' linears, all layers (the part bitsandbytes quantizes)."""
    return sum(i * o * k for i, o, k in _base_linears(spec, setup))


def nf4_tensor_bytes(n: int, double_quant: bool) -> int:
    """One weight of ``n`` values as bitsandbytes' ``quantize_4bit`` stores it: the packed
    4-bit values, then the quant state — the 16-value FP32 NF4 code and, per 64-block,
    an FP32 absmax; with double quantization an 8-bit absmax per block, one FP32 absmax
    per 256 blocks, a 256-value FP32 code and an FP32 offset."""
    blocks = -(-n // NF4_BLOCK)
    state = 16 * FP32
    if double_quant:
        state += blocks + -(-blocks // NF4_DOUBLE_BLOCK) * FP32 + NF4_CODE_BYTES + FP32
    else:
        state += blocks * FP32
    return -(-n // 2) + state


def quantized_bytes(
    spec: ModelSpec, quant: str, double_quant: bool, setup: TrainingSetup | None = None
) -> int:
    """Bytes of the blocks' linear weights stored as ``quant`` (see module docstring)."""
    shapes = _base_linears(spec, setup)
    if quant == "nf4":
        return sum(k * nf4_tensor_bytes(i * o, double_quant) for i, o, k in shapes)
    if quant == "int8":
        return sum(k * (i * o + o * FP32) for i, o, k in shapes)
    if quant.startswith("affine"):  # MLX's (introspect.refined.mlx.affine_tensor_bytes)
        from introspect.refined.affine import affine_tensor_bytes, constant_bytes

        g = setup.group_size if setup is not None else 64
        s = constant_bytes(setup) if setup is not None else FP32
        bits = int(quant.removeprefix("affine"))
        return sum(k * affine_tensor_bytes(i, o, bits, g, s) for i, o, k in shapes)
    from introspect.units import dtype_bytes

    return block_linear_parameters(spec, setup) * dtype_bytes(quant)


def frozen_other_bytes(setup: TrainingSetup, wb: int) -> int:
    """Bytes per frozen parameter outside the block linears (embeddings, head, norms,
    transformers' expert tensors): the model's load dtype — a 16/32-bit base's own
    (``--base-quant fp32`` loads the whole model in FP32), else (a quantized base, whose
    quantization touches the block linears only) the working dtype ``wb``, FP32 under
    FSDP2's mixed precision (the model kept as FP32 parameters, cast per unit)."""
    quant = setup.resolved_base_quant
    if quant in ("fp32", "bf16", "fp16"):
        from introspect.units import dtype_bytes

        return dtype_bytes(quant)
    if setup.precision == "mixed" and setup.resolved_sharding == "fsdp":
        return FP32
    return wb


def adapter_bytes(setup: TrainingSetup) -> int:
    """Bytes per adapter value: FP32 — ``get_peft_model``'s ``autocast_adapter_dtype``
    (default True) casts 16-bit adapters to FP32 whatever the base's dtype; with
    ``--adapter-dtype bf16`` (``autocast_adapter_dtype=False``) they keep the base layer's
    dtype (``peft/tuners/tuners_utils.py`` ``_move_adapter_to_device_of_base_layer``:
    the weight's dtype, a 4-bit layer's ``compute_dtype``), 16-bit under ``--precision
    bf16`` — as LitGPT's and torchtune's ``bf16-true`` LoRA keep them."""
    return 2 if setup.adapter_dtype == "bf16" else FP32


def embedding_copy_bytes(spec: ModelSpec, setup: TrainingSetup, wb: int) -> int:
    """Trainable embeddings are peft's ``modules_to_save`` (as Qwen's fine-tuning script
    sets them): ``ModulesToSaveWrapper`` keeps the frozen original and trains a copy,
    so the copies are extra weights at the working dtype."""
    return embedding_parameters(spec) * wb if setup.train_embeddings else 0


def optimizer_state(setup: TrainingSetup) -> dict[str, int]:
    """FP32-state bytes per parameter by term (``execution.optimizer_state``'s names)."""
    per = OPTIMIZER_STATE_BYTES[setup.optimizer]
    if setup.optimizer in ("adam", "adamw", "adam8bit"):
        return {ADAM_M: per // 2, ADAM_V: per // 2}
    if setup.optimizer == "sgd_momentum":
        return {MOMENTUM: per}
    return {}


def state_terms(spec: ModelSpec, setup: TrainingSetup, wb: int, opt: dict[str, int]) -> dict:
    """The persistent state of a LoRA step: the frozen base (its linears as
    :attr:`TrainingSetup.resolved_base_quant` stores them, the rest at the working dtype
    ``wb``), the adapters, and optimizer state over the trainable parameters only
    (``opt`` is bytes per trainable parameter by term at the working precision; the
    adapters, FP32, keep FP32 state)."""
    # FP32 adapters keep FP32 state; 16-bit ones (--adapter-dtype bf16) 16-bit state.
    full_state = optimizer_state(setup)  # FP32 state, whatever the precision
    if adapter_bytes(setup) == 2:
        full_state = {k: v // 2 for k, v in full_state.items()}
    quant = setup.resolved_base_quant
    linear = block_linear_parameters(spec, setup)
    rest = spec.n_params - linear
    adapters = adapter_parameters(spec, setup)
    terms = {
        "weights/base_linears": quantized_bytes(spec, quant, setup.double_quant, setup),
        "weights/base_other": rest * frozen_other_bytes(setup, wb),
        "weights/lora_adapters": adapters * adapter_bytes(setup),
    }
    if setup.train_embeddings:
        terms["weights/trainable_embedding_copies"] = embedding_copy_bytes(spec, setup, wb)
    embeddings = trainable_parameters(spec, setup) - adapters
    for name, per in opt.items():
        terms[name] = adapters * full_state[name] + embeddings * per
    return terms  # one device's; introspect.refined.lora_sharded spreads them


def grad_bytes(spec: ModelSpec, setup: TrainingSetup, n_params: int, wb: int) -> int:
    """Gradients made once backward has passed ``n_params`` of the model's parameters
    (head first): the head's and embedding's under ``train_embeddings`` (at ``wb``),
    then each layer's adapters in proportion to the layers done."""
    head = embedding_parameters(spec) if setup.train_embeddings else 0
    adapters = adapter_parameters(spec, setup)
    # With --num-layers the adapters all sit above the frozen blocks: backward has made
    # them all once it has passed the adapted blocks.
    span = spec.n_params - frozen_block_parameters(spec, setup)
    frac = min(1.0, n_params / span) if span > 0 else 1.0
    value = head * wb + round(frac * adapters) * adapter_bytes(setup)
    return value  # one device's; introspect.refined.lora_sharded spreads them


@per_estimate
def largest_trainable(spec: ModelSpec, setup: TrainingSetup) -> int:
    """Elements of the largest trainable tensor (one adapter matrix, or V·d)."""
    if per_kind(spec, setup):
        largest = 0
        for kind, _ in _kinds(spec):
            shapes = module_shapes(kind)
            sizes = [setup.lora_rank * max(shapes[t]) for t in _kind_targets(kind, setup)]
            largest = max(largest, *sizes, lora_moe.largest_adapter(kind, setup))
    else:
        shapes = linear_shapes(spec)
        largest = max(setup.lora_rank * max(shapes[t]) for t in targets(spec, setup))
    if setup.train_embeddings:
        largest = max(largest, spec.vocab_size * spec.hidden_size)
    if head_targets(setup):  # lm_head's lora_B (V, r), the embedding's lora_embedding_A
        largest = max(largest, spec.vocab_size * setup.lora_rank)
    return largest


def adapter_compute_bytes(setup: TrainingSetup) -> int:
    """Bytes per adapter value in the forward: FP32 (:func:`adapter_bytes`), except
    under FSDP2's ``MixedPrecisionPolicy(param_dtype=bf16)`` (precision ``mixed`` with
    ``--fsdp``), which gathers every parameter of a unit, the FP32 adapters too, as BF16
    for the forward and backward (``_fsdp_param.py``: the all-gather input is cast to
    ``param_dtype``). Measured: a real FSDP2 LoRA step on a fake process group
    (``tests/test_lora_sharded.py``)."""
    if setup.precision == "mixed" and setup.resolved_sharding == "fsdp":
        return 2
    return adapter_bytes(setup)


def adapter_x_bytes(setup: TrainingSetup) -> int:
    """Bytes per element of ``x`` as the adapter branch sees it: peft's ``Linear.forward``
    casts it to the adapter's dtype (:func:`adapter_compute_bytes`). On bitsandbytes'
    4-bit layers under ``torch.autocast`` (precision ``amp``) peft's forward skips that
    cast (``peft/tuners/lora/bnb.py``), but there ``x`` is FP32 already: the residual
    stream and the norms' outputs stay FP32 under autocast."""
    return adapter_compute_bytes(setup)


def dropout_mask_bytes(setup: TrainingSetup) -> int:
    """Bytes per element of dropout's saved mask: the input's dtype on CPU, a bool on
    CUDA (``aten/src/ATen/native/cuda/Dropout.cu``); 0 without dropout."""
    if setup.lora_dropout == 0:
        return 0
    return adapter_x_bytes(setup) if setup.resolved_device == "cpu" else 1


def adapter_input_bytes(setup: TrainingSetup) -> int:
    """Bytes per input element each adapter keeps of its own (0: it shares the input the
    block already keeps): ``lora_A`` keeps its input — the cast (or dropped) ``x``, or
    under autocast its 16-bit re-cast — and dropout its mask. Under autocast every
    adapter makes that re-cast, over a 4-bit base too: autocast's cast in ``lora_A``'s
    ``F.linear`` is a new tensor per call whatever peft did before it (saved-tensor
    census of a QLoRA step under CPU autocast: one B·T·d_in BF16 copy per adapter)."""
    s, x = setup.activation_bytes, adapter_x_bytes(setup)
    if setup.precision == "amp":
        kept = s
    else:
        kept = 0 if setup.lora_dropout == 0 and x == s else x
    return kept + dropout_mask_bytes(setup)


def a_output_bytes(setup: TrainingSetup) -> int:
    """Bytes per element of ``lora_A``'s output, kept by ``lora_B``: the adapters' compute
    dtype (:func:`adapter_compute_bytes`), the activations' dtype under autocast (its
    ``mm`` output)."""
    return setup.activation_bytes if setup.precision == "amp" else adapter_compute_bytes(setup)


def autocast_weight_bytes(spec: ModelSpec, setup: TrainingSetup, full: int) -> int:
    """One layer's autocast weight copies under LoRA, from full training's ``full``
    (every block linear's BF16 copy, kept by its ``mm`` for the input's gradient):
    bitsandbytes' 4-bit matmul is a custom autograd Function that autocast does not
    cast (``bitsandbytes/autograd/_functions.py`` ``MatMul4Bit``: it keeps only the
    packed weight), so an NF4 base has no copies; every adapter's ``lora_A`` and
    ``lora_B`` weights get one each (census: r·(d_in + d_out) BF16 per adapter)."""
    if not full:
        return 0
    shapes = module_shapes(spec) if per_kind(spec, setup) else linear_shapes(spec)
    base = full
    if setup.resolved_base_quant == "nf4":
        base -= 2 * sum(i * o for i, o in shapes.values())
    return max(0, base) + 2 * _layer_adapter_elements(spec, setup)


def _layer_adapter_elements(spec: ModelSpec, setup: TrainingSetup) -> int:
    """One layer's adapter weight elements, ``Σ r·(d_in + d_out)`` over its targets."""
    moe = per_kind(spec, setup)
    shapes = module_shapes(spec) if moe else linear_shapes(spec)
    order = _kind_targets(spec, setup) if moe else targets(spec, setup)
    return sum(setup.lora_rank * sum(shapes[t]) for t in order)


def autocast_cache_bytes(spec: ModelSpec, setup: TrainingSetup) -> int:
    """autocast's weight cache under LoRA: 2 bytes for every FP32 adapter parameter
    (:func:`adapter_parameters`, the adapted layers only under ``--num-layers``).

    autocast caches a cast only for a leaf FP32 tensor that requires grad
    (``cached_cast``, ``aten/src/ATen/autocast_mode.cpp``: ``arg.requires_grad() &&
    arg.is_leaf()``), so the frozen base weights are cast anew at every use and freed
    with their ``mm`` (under checkpointing nothing saves them); only the FP32 adapters'
    ``lora_A`` and ``lora_B`` copies stay cached until the outermost region exits.
    16-bit adapters (``--adapter-dtype bf16``) are not cast, so nothing is cached.
    Checked on torch 2.13: two ``F.linear`` calls under autocast share the saved BF16
    copy of a trainable weight and make two of a frozen one."""
    if adapter_bytes(setup) != FP32:
        return 0
    return 2 * adapter_parameters(spec, setup)


#: Outputs of a dense feed-forward's base linears (and the activation of one).
_FFN_OUTPUTS = ("feed_forward/gate", "feed_forward/up", "feed_forward/act")


def nf4_under_autocast(spec: ModelSpec, setup: TrainingSetup) -> bool:
    """Whether a dense layer's base linears return FP32 under autocast: bitsandbytes'
    ``Linear4bit.forward`` (``nn/modules.py``) returns ``matmul_4bit(...).to(inp_dtype)``,
    the input's dtype, FP32 under autocast, and peft adds the BF16 adapter output to it
    (FP32 by type promotion). Census: gate, up and the activation's output FP32."""
    return (
        setup.precision == "amp"
        and setup.resolved_base_quant == "nf4"
        and not spec.kinds[0][0].feed_forward.is_moe
    )


def per_layer(spec: ModelSpec, setup: TrainingSetup, full: dict[str, int]) -> dict[str, int]:
    """One layer's saved bytes under LoRA, from the full-training set ``full``
    (:func:`introspect.refined.saved.per_layer`): what only frozen weights needed
    dropped, the adapters' own tensors added (module docstring)."""
    moe = per_kind(spec, setup)
    order = _kind_targets(spec, setup) if moe else targets(spec, setup)
    chosen = set(order)
    shapes = module_shapes(spec) if moe else linear_shapes(spec)
    experts = moe and lora_moe.experts_targeted(spec, setup)
    BT = setup.tokens
    a = a_output_bytes(setup)
    own = adapter_input_bytes(setup)
    plain_input = own == 0
    out = dict(full)
    out.pop("layernorm/normalized", None)
    out.pop("layernorm/qk_norm/normalized", None)
    out.pop("layernorm/branch_outputs/normalized", None)
    n = spec.norms_per_layer or 1
    norm_out = full.get("layernorm", 0) // n
    keep_norms = 0
    if plain_input and chosen & set(MIXER_INPUT_LINEARS):
        keep_norms += 1
    if (plain_input and chosen & set(FFN_INPUT_LINEARS) or experts) and n > 1:
        # (Adapted experts and their router read the norm's output with a weight that
        # needs a gradient: kept, as in full training.)
        keep_norms += 1
    out["layernorm"] = keep_norms * norm_out
    # The down projection's input (gated: the product; plain: the activation's output)
    # is kept only by down_proj itself (adapted experts keep all they keep in full
    # training, their own parametrized copies besides).
    last = "feed_forward/product" if spec.ffn == "gated" else "feed_forward/act"
    routed = moe and spec.kinds[0][0].feed_forward.is_moe
    if routed and not experts:
        # Frozen experts: their grouped matmuls need no input for a weight gradient, so
        # neither the gathered rows nor the down projection's input is kept (a shared
        # expert's down_proj adapter keeps only its own input, in "shared").
        out.pop("feed_forward/routed_input", None)
        out[last] = 0
    elif not (plain_input and "down_proj" in chosen or experts) and last in out:
        out[last] = 0
    if "autocast_weights" in out:
        out["autocast_weights"] = autocast_weight_bytes(spec, setup, out["autocast_weights"])
    if nf4_under_autocast(spec, setup):
        for name in _FFN_OUTPUTS:
            if name in out:
                out[name] = out[name] * FP32 // setup.activation_bytes
    if experts:
        out["lora/experts/effective_weights"] = lora_moe.effective_weights(
            spec, setup, working_weight_bytes(setup)
        )
    # Eager attention's context is kept only by o_proj; SDPA keeps its own output. A
    # Gated DeltaNet's gated output is kept only by its out_proj (OLMo-Hybrid's o_proj):
    # a frozen one keeps none, its adapter's lora_A the output itself when it shares it.
    deltanet = spec.kinds[0][0].attention.kind == "linear"
    out_linear = "out_proj" if "out_proj" in shapes else "o_proj"
    if (setup.attention == "eager" or deltanet) and not (plain_input and out_linear in chosen):
        out["attention/linear/context"] = 0
    if deltanet:
        out.update(_frozen_deltanet(spec, setup, out))
        if "attention/linear/autocast_weights" in out:  # each adapter's BF16 A and B
            adapters = sum(setup.lora_rank * sum(shapes[t]) for t in order if t in shapes)
            out["attention/linear/autocast_weights"] += 2 * adapters
    k = spec.num_experts_per_tok if spec.is_moe else 1
    copies = 0
    for t in order:
        d_in = shapes[t][0]
        tokens = BT * (k if t in EXPERT_LINEARS and not moe else 1)
        copies += tokens * d_in * own
        out[f"lora/{t}/a_output"] = tokens * setup.lora_rank * a
    if copies:
        out["lora/inputs"] = copies
    return {k_: v for k_, v in out.items() if v}


def _frozen_deltanet(spec: ModelSpec, setup: TrainingSetup, out: dict[str, int]) -> dict:
    """What a Gated DeltaNet keeps less with its own parameters frozen (peft trains none
    of them). ``Qwen3_5RMSNormGated.forward`` (``modeling_qwen3_5.py`` l. 204-220;
    ``Qwen3NextRMSNormGated``, OLMo-Hybrid's the same): ``self.weight *
    hidden_states.to(input_dtype)`` keeps the normalized input only for the weight's
    gradient, B·T·V·a. ``g = -self.A_log.float().exp() * F.softplus(a.float() +
    self.dt_bias)`` (``Qwen3_5GatedDeltaNet.forward``): A_log frozen, ``exp`` is not
    recorded (its n_v·4 output not kept) and the product keeps the softplus output only
    for A_log's side, B·T·n_v·4; softplus keeps its input, the product ``-exp(A_log)``."""
    att = spec.kinds[0][0].attention
    nv, V = att.linear_num_value_heads, att.linear_num_value_heads * att.linear_value_head_dim
    BT = setup.tokens
    return {
        "attention/deltanet/gated_norm": out["attention/deltanet/gated_norm"]
        - BT * V * setup.activation_bytes,
        "attention/linear/gates": out["attention/linear/gates"] - BT * nv * FP32 - nv * FP32,
        # Under autocast a frozen linear's mm keeps no BF16 cast of its input (only its
        # weight's, for the input's gradient): lora_A's own cast is in lora/inputs.
        "attention/linear/input_casts": 0,
    }


def _mixer_input_adapters(spec: ModelSpec, setup: TrainingSetup, after: tuple = ()) -> dict:
    """Each adapted mixer input projection's ``lora_A`` output and its own input copy
    (:func:`adapter_input_bytes`), but those named in ``after``."""
    BT, r = setup.tokens, setup.lora_rank
    shapes = module_shapes(spec)
    ins = [t for t in _kind_targets(spec, setup) if t in MIXER_INPUT_LINEARS and t not in after]
    own = adapter_input_bytes(setup)
    out = {"lora/inputs": sum(BT * shapes[t][0] * own for t in ins)}
    out.update({f"lora/{t}/a_output": BT * r * a_output_bytes(setup) for t in ins})
    return out


#: Mixer input projections a Gated DeltaNet runs after its kernel: OLMo-Hybrid's output
#: gate (``g_proj``); Qwen3-Next's and Qwen3.5's gate comes from in_proj_z, before it.
AFTER_KERNEL_LINEARS = ("g_proj",)


def deltanet_at_forward_peak(spec: ModelSpec, setup: TrainingSetup, layer: dict) -> dict:
    """What a Gated DeltaNet layer (homogeneous ``spec``) under LoRA holds at its
    forward's peak in the kernel (:func:`introspect.refined.deltanet.forward_moments`)
    beyond its attention-side LoRA terms (``layer``, :func:`per_layer`) and the
    full-training ``forward_extra``: that extra subtracts the full saved set not yet made
    (the gated norm's, out_proj's input), of which LoRA keeps less, so the difference
    (:func:`_frozen_deltanet`'s gated-norm share, the context out_proj no longer keeps)
    is added back; and the adapters already run — each input projection's ``lora_A``
    output and its own input copy (:func:`adapter_input_bytes`)."""
    from introspect.refined import saved as full_saved

    full = full_saved.per_layer(spec, setup)
    names = ("attention/deltanet/gated_norm", "attention/linear/context")
    out = {
        # (added to forward_extra's own term: what the forward holds beyond the saved set)
        "attention/deltanet/forward": sum(full.get(n, 0) - layer.get(n, 0) for n in names),
    }
    out.update(_mixer_input_adapters(spec, setup))
    return {k: v for k, v in out.items() if v}


def deltanet_at_backward_peak(spec: ModelSpec, setup: TrainingSetup) -> dict[str, int]:
    """What a Gated DeltaNet layer (homogeneous ``spec``) under LoRA still holds of its
    adapters inside its kernel's first ``solve_triangular`` backward
    (:func:`introspect.refined.deltanet.backward_transient`): the input projections made
    before the kernel have not run their backward, so each one's ``lora_A`` output and
    its own input copy are alive. Those run after it (:data:`AFTER_KERNEL_LINEARS`) and
    the out projection have run theirs, and their adapters' saved sets are freed. Read
    off a live-storage trace of OLMo-Hybrid's LoRA step (the dry run's peak at that
    ``neg``: five BF16 input casts and five B·T·r A outputs, one per q/k/v/a/b
    adapter)."""
    out = _mixer_input_adapters(spec, setup, after=AFTER_KERNEL_LINEARS)
    return {k: v for k, v in out.items() if v}


def first_layer_saving(spec: ModelSpec, setup: TrainingSetup) -> dict[str, int]:
    """What the first layer keeps less than the others when the embedding is frozen:
    its input needs no gradient, so its first norm keeps no statistics and dropout on the
    adapters that read that norm keeps no mask (census: layer 0 has neither). An
    adapted embedding (``embed_tokens``) makes its output need a gradient, as a trained
    one does."""
    if setup.train_embeddings or "embed_tokens" in head_targets(setup):
        return {}
    BT = setup.tokens
    saving = {"layernorm/statistics": (2 if spec.norm == "layernorm" else 1) * BT * FP32}
    if setup.lora_dropout > 0:
        mask = dropout_mask_bytes(setup)
        first = [t for t in targets(spec, setup) if t in ATTENTION_INPUT_LINEARS]
        saving["lora/inputs"] = len(first) * BT * spec.hidden_size * mask
    return saving


def final_terms(spec: ModelSpec, setup: TrainingSetup, final: dict[str, int]) -> dict[str, int]:
    """After the last layer: a frozen head keeps no final-norm output, frozen norm
    weights no normalized input; the statistics stay (the gradient passes through), and
    so does autocast's BF16 copy of the frozen head's weight, which its ``mm`` keeps for
    the input's gradient (census of a LoRA step under CPU autocast: V·d BF16).
    LoRA on ``lm_head``: its adapters keep what a block linear's keep (:func:`per_layer`),
    over the final norm's output: ``lora_A``'s input — its own cast (or dropped) copy, or
    the output itself when shared — and ``lora_A``'s output (B·T·r)."""
    kept = ("final_norm/statistics", "logits/autocast_weight")
    if setup.activation_checkpointing:  # the norm's input, for the input's gradient
        kept += ("final_norm/input",)
    out = dict(final) if setup.train_embeddings else {k: v for k, v in final.items() if k in kept}
    if "lm_head" in head_targets(setup):
        BT, own = setup.tokens, adapter_input_bytes(setup)
        if own or not setup.train_embeddings:  # else the kept output is the input
            out["lora/lm_head/input"] = BT * spec.hidden_size * (own or setup.activation_bytes)
        out["lora/lm_head/a_output"] = BT * setup.lora_rank * adapter_bytes(setup)
    return out


def embedding_terms(spec: ModelSpec, setup: TrainingSetup) -> dict[str, int]:
    """LoRA on ``embed_tokens`` (peft's ``lora.Embedding.forward``): ``after_A =
    F.embedding(x, lora_embedding_A.T)`` (the token ids saved, already alive) and
    ``after_A @ lora_embedding_B.T``, which keeps ``after_A`` (B·T·r at the adapters'
    dtype: no cast of x, an index tensor)."""
    if "embed_tokens" not in head_targets(setup):
        return {}
    return {
        "activations/lora/embed_tokens/a_output": setup.tokens
        * setup.lora_rank
        * adapter_bytes(setup)
    }


#: Why each LoRA term has its size (merged into :mod:`introspect.refined.causes`).
CAUSES: dict[str, str] = {
    "weights/base_linears": "the frozen base's block linears, stored as {quant}",
    "weights/base_other": "embeddings, head and norms (and transformers' MoE expert "
    "parameters, which bitsandbytes does not quantize), frozen, at the model's dtype",
    "activations/layer/lora/experts/effective_weights": "peft's parametrized copy of each "
    "adapted layer's experts and router weight, kept for the backward",
    "weights/lora_adapters": "adapters A (d_in×r) and B (r×d_out) per targeted linear, "
    "{adapter_dtype}",
    "weights/trainable_embedding_copies": "peft's modules_to_save: a trained copy of the "
    "embedding and head beside the frozen originals",
    "activations/layer/lora": "lora_A's output (B·T·r), kept by lora_B",
    "activations/lora/lm_head/input": "lm_head's adapter input: the final norm's output, or "
    "its FP32 cast (or dropped copy), kept by lora_A",
    "activations/lora/lm_head/a_output": "lm_head's lora_A output (B·T·r), kept by lora_B",
    "activations/lora/embed_tokens/a_output": "the embedding adapter's F.embedding(x, A.T) "
    "(B·T·r), kept by the matmul with lora_embedding_B",
    "activations/layer/lora/inputs": "each adapter's own input copy: the FP32 cast over a "
    "16-bit base and/or the dropped input and its mask",
}
