"""Where the seed's simplified estimate and the refined one part ways, term by term.

Two kinds of row, kept apart because users act on them differently:

* ``architecture`` — the model differs from the seed's block (GQA narrows K/V, a gated
  feed-forward keeps more tensors, extra norms). ``refined_bytes`` is the architecture
  layer's value of the seed term and ``delta_bytes`` = architecture − simplified.
* ``execution`` — the framework runs the step differently from the seed's bookkeeping
  (autograd keeps fewer tensors, FP32 upcasts, the attention kernel, checkpointing,
  the phase of the peak, sharding). ``refined_bytes`` is the execution layer's value and
  ``delta_bytes`` = execution − architecture: this layer's own contribution.

So for every term: simplified + architecture delta + execution delta = execution value.
Terms the seed does not have at all (a final norm, the loss's gradient, the optimizer's
temporaries) are execution rows with a simplified value of 0.

:func:`flags` names the architecture features found, each with its rule.
"""

from __future__ import annotations

from introspect import refined, simplified
from introspect._record import asdict, record
from introspect.breakdown import Breakdown
from introspect.setup import TrainingSetup
from introspect.spec import ModelSpec

TYPE_CHECKING = False  # typing's flag without importing typing (see introspect._record)
if TYPE_CHECKING:
    from typing import Any

ARCHITECTURE, EXECUTION = "architecture", "execution"

#: Why a sub-term the architecture layer counts is absent from what autograd keeps.
NOT_KEPT: dict[str, str] = {
    "activations/layer/attention/quadratic/scores": "scores not kept (softmax saves its "
    "output; QKᵀ's backward needs Q and K)",
    "activations/layer/attention/quadratic/probs": "no T×T tensor kept (memory-efficient "
    "attention recomputes it from a log-sum-exp per row)",
    "activations/logits": "",
}


@record
class Divergence:
    """One row: a term, the seed's bytes, the refined layer's bytes, this layer's own
    delta, its cause and its kind (``architecture`` or ``execution``).

    ``baseline_bytes`` is what the delta is measured from: the seed's value for an
    architecture row, the architecture layer's value for an execution row, so that
    ``baseline_bytes + delta_bytes == refined_bytes`` on every row."""

    term: str
    simplified_bytes: int
    refined_bytes: int
    delta_bytes: int
    cause: str
    kind: str
    baseline_bytes: int = 0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@record
class Flag:
    """An architecture feature the seed's block does not have, with its figures."""

    name: str
    detail: str
    #: A few characters for a table cell (``7`` for GQA's group size).
    short: str = ""

    def to_json(self) -> dict[str, str]:
        return asdict(self)


#: The large-vocabulary rule: the logits B·T·V are flagged when they hold more values
#: than one whole layer's activations (architecture layer, T² term included).
LARGE_VOCAB_RULE = "B·T·V logits exceed one layer's activations (architecture layer)"


def flags(spec: ModelSpec, setup: TrainingSetup) -> list[Flag]:
    """The features found in ``spec``: RMSNorm; GQA with its group size; a gated
    feed-forward with its width ratio; tied embeddings; q/k norms; the stack's features
    (:func:`stack_flags`: MoE, sliding windows, sinks, MLA …); large-vocabulary logits
    (:data:`LARGE_VOCAB_RULE`)."""
    out: list[Flag] = []
    if spec.norm == "rmsnorm":
        out.append(
            Flag("rmsnorm", "RMSNorm: no mean, no bias; saves one statistic per token", "RMSNorm")
        )
    if spec.group_size > 1:
        kind = "MQA" if spec.kv_heads == 1 else "GQA"
        out.append(
            Flag(
                "gqa",
                f"{kind}: {spec.num_attention_heads}/{spec.kv_heads} heads, group size "
                f"{spec.group_size}; K/V {spec.kv_dim} wide instead of {spec.q_dim}",
                f"{kind} {spec.group_size}",
            )
        )
    if spec.head_size * spec.num_attention_heads != spec.hidden_size:
        out.append(
            Flag(
                "head_dim",
                f"head_dim {spec.head_size} ≠ d/h = {spec.hidden_size}/{spec.num_attention_heads}",
                f"head_dim {spec.head_size}",
            )
        )
    if spec.ffn == "gated":
        ratio = spec.ffn_dim / spec.hidden_size
        out.append(
            Flag(
                "gated_ffn",
                f"gated feed-forward, intermediate/hidden = {spec.ffn_dim}/"
                f"{spec.hidden_size} = {ratio:.2f}",
                f"gated {ratio:.2f}×",
            )
        )
    elif spec.ffn_dim != 4 * spec.hidden_size:
        out.append(Flag("ffn_width", f"feed-forward width {spec.ffn_dim} ≠ 4d", "d_ff≠4d"))
    if spec.tie_word_embeddings:
        out.append(
            Flag(
                "tied_embeddings",
                f"tied embeddings: V·d = {spec.vocab_size * spec.hidden_size:,} "
                "parameters counted once",
                "tied",
            )
        )
    if spec.qk_norm != "none":
        out.append(Flag("qk_norm", f"q/k norms ({spec.qk_norm})", "q/k norm"))
    out.extend(stack_flags(spec))
    logits = setup.tokens * spec.vocab_size
    arch = refined.architecture.estimate(spec, setup)
    s = setup.activation_bytes
    one_layer = arch.sum("activations/layer") // (spec.num_hidden_layers * s)
    if logits > one_layer:
        share = arch.sum("activations/logits") / max(arch.sum("activations"), 1)
        out.append(
            Flag(
                "large_vocab_logits",
                f"logits B·T·V = {logits:,} values, "
                f"{logits / one_layer:.1f}× one layer's activations, {share:.0%} of all "
                f"(rule: {LARGE_VOCAB_RULE})",
                "large vocab",
            )
        )
    return out


def _layers_with(spec: ModelSpec, test) -> tuple[int, object]:
    """How many layers pass ``test(kind)``, and the first such kind."""
    n, first = 0, None
    for kind, count in spec.kinds:
        if test(kind):
            n += count
            first = first or kind
    return n, first


def stack_flags(spec: ModelSpec) -> list[Flag]:
    """The features of a (heterogeneous) stack the seed's block lacks, each naming how
    many of the L layers have it: MoE (routed of E, shared experts, active parameters),
    sliding-window and chunked attention, attention sinks, MLA, linear attention; a
    multimodal tower and multi-token-prediction layers the checkpoint holds."""
    from introspect.params import active_parameter_count

    L = spec.num_hidden_layers
    out: list[Flag] = []
    n, kind = _layers_with(spec, lambda k: k.feed_forward.is_moe)
    if kind is not None:
        ff = kind.feed_forward
        shared = (
            f", shared experts {ff.shared_intermediate_size} wide"
            if ff.shared_intermediate_size
            else ""
        )
        active = active_parameter_count(spec)
        out.append(
            Flag(
                "moe",
                f"MoE on {n} of {L} layers: {ff.num_experts} experts of {ff.intermediate_size}, "
                f"{ff.top_k} active per token{shared}; {active:,} of {spec.n_params:,} "
                "parameters active per token",
                f"MoE {ff.top_k}/{ff.num_experts}",
            )
        )
    for name, label in (("sliding", "sliding window"), ("chunked", "chunked attention")):
        n, kind = _layers_with(spec, lambda k, name=name: k.attention.kind == name)
        if kind is not None:
            W = kind.attention.window
            short = "SWA" if name == "sliding" else "chunked"
            out.append(
                Flag(
                    f"{name}_window" if name == "sliding" else "chunked_attention",
                    f"{label} of {W} tokens on {n} of {L} layers (each query sees at most "
                    f"{W} keys)",
                    f"{short} {W} ({n}/{L})",
                )
            )
    n, kind = _layers_with(spec, lambda k: k.attention.sinks)
    if kind is not None:
        out.append(
            Flag(
                "sinks",
                f"attention sinks: a learned logit per head joins the softmax on {n} of {L} layers",
                "sinks",
            )
        )
    n, kind = _layers_with(spec, lambda k: k.attention.kind == "mla")
    if kind is not None:
        a = kind.attention
        q = f"q rank {a.q_lora_rank}, " if a.q_lora_rank else ""
        out.append(
            Flag(
                "mla",
                f"MLA on {n} of {L} layers: K/V compressed to a {a.kv_lora_rank}-wide latent "
                f"(+{a.qk_rope_head_dim} rotary), {q}decompressed to {a.num_attention_heads} "
                f"heads of {a.qk_head_dim} (K) and {a.v_head_dim} (V)",
                f"MLA {a.kv_lora_rank}",
            )
        )
    n, kind = _layers_with(spec, lambda k: k.attention.kind == "linear")
    if kind is not None:
        out.append(
            Flag(
                "linear_attention",
                f"linear attention (Gated DeltaNet) on {n} of {L} layers: no T×T scores; "
                "its chunked kernel keeps chunk×chunk matrices and a state per chunk "
                "(introspect.refined.deltanet)",
                f"linear {n}/{L}",
            )
        )
    n, kind = _layers_with(spec, lambda k: k.attention.kind == "mamba2")
    if kind is not None:
        a = kind.attention
        out.append(
            Flag(
                "mamba2",
                f"Mamba-2 mixers on {n} of {L} layers: no T×T scores; transformers' torch "
                f"scan keeps {a.mamba_chunk_size}×{a.mamba_chunk_size} chunk matrices per head "
                "and FP32 copies (introspect.refined.mamba2); on CUDA with mamba-ssm and "
                "causal-conv1d installed transformers runs their fused kernels, which keep "
                "far less: not modelled",
                f"mamba2 {n}/{L}",
            )
        )
    n, kind = _layers_with(spec, lambda k: k.mixer is not None)
    if kind is not None:
        a = kind.mixer
        out.append(
            Flag(
                "parallel_mamba2",
                f"attention and a Mamba-2 mixer in parallel on {n} of {L} layers (Falcon-H1): "
                f"both branches read the block norm's output, and the mixer's torch scan keeps "
                f"{a.mamba_chunk_size}×{a.mamba_chunk_size} chunk matrices per head and FP32 "
                "copies beside the attention's Q, K, V (introspect.refined.falcon_h1); the "
                "fused mamba-ssm kernels on CUDA keep far less: not modelled",
                f"attn ∥ mamba2 {n}/{L}",
            )
        )
    n, kind = _layers_with(spec, lambda k: k.attention.kind == "mamba1")
    if kind is not None:
        out.append(
            Flag(
                "mamba1",
                f"Mamba-1 mixers on {n} of {L} layers: no T×T scores; transformers' torch "
                "scan runs a step per token and keeps every B×I×n FP32 state and the "
                "discretized A and B (introspect.refined.mamba1); on CUDA with mamba-ssm and "
                "causal-conv1d installed transformers runs their fused kernel, which keeps "
                "far less: not modelled",
                f"mamba1 {n}/{L}",
            )
        )
    n, kind = _layers_with(spec, lambda k: k.shared is not None)
    if kind is not None:
        from introspect.params import shared_blocks

        blocks = len(shared_blocks(spec))
        out.append(
            Flag(
                "shared_block",
                f"{blocks} shared transformer block{'s' if blocks > 1 else ''} run at {n} of "
                f"{L} layers (Zamba2's hybrid layers): weights, gradients and optimizer "
                "state once per block, activations once per use "
                "(introspect.refined.shared_block)",
                f"shared block {n}/{L}",
            )
        )
    if spec.tower_parameters:
        out.append(Flag("tower", f"{spec.tower}: {spec.tower_parameters:,} parameters", "tower"))
    if spec.unbuilt_parameters:
        out.append(
            Flag(
                "unbuilt",
                f"the checkpoint also holds {spec.unbuilt} ({spec.unbuilt_parameters:,} "
                "parameters) that the built model lacks",
                "MTP",
            )
        )
    return out


def _under(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + "/")


def _cause(notes: dict[str, str], layer: Breakdown, prefix: str) -> str:
    """The notes of ``prefix`` and of its non-zero sub-terms, one clause per distinct
    note, each led by the sub-terms it explains (``k, v: GQA …``)."""
    by_note: dict[str, list[str]] = {}
    for name in layer.terms:
        if not _under(name, prefix) or name not in notes:
            continue
        if name != prefix and not layer[name]:
            continue
        by_note.setdefault(notes[name], []).append(name[len(prefix) + 1 :])
    clauses = []
    for note, labels in by_note.items():
        named = ", ".join(label for label in labels if label)
        clauses.append(f"{named}: {note}" if named else note)
    return "; ".join(clauses)


def rows(seed: Breakdown, estimate: refined.RefinedEstimate) -> list[Divergence]:
    """Every diverging term: architecture rows (seed term vs architecture layer), then
    execution rows (each seed term and each term the seed lacks, execution layer vs
    architecture layer). Rows with a zero delta are left out."""
    arch, exe = estimate.architecture, estimate.execution
    seed_names = list(seed.terms)
    out: list[Divergence] = []
    for term in seed_names:
        a = arch.sum(term)
        if a != seed[term]:
            cause = _cause(dict(arch.notes), arch, term) or "real shapes"
            out.append(
                Divergence(term, seed[term], a, a - seed[term], cause, ARCHITECTURE, seed[term])
            )
    covered = set()
    for term in seed_names:
        a, e = arch.sum(term), exe.sum(term)
        covered.update(n for n in exe.terms if _under(n, term))
        if a != e:
            parts = [_cause(dict(exe.notes), exe, term)]
            for name in arch.terms:
                if _under(name, term) and arch[name] and not exe.sum(name) and NOT_KEPT.get(name):
                    parts.append(NOT_KEPT[name])
            cause = "; ".join(p for p in parts if p) or "not held at the peak"
            out.append(Divergence(term, seed[term], e, e - a, cause, EXECUTION, a))
    extra: dict[str, int] = {}
    for name, value in exe.items():
        if name in covered or not value:
            continue
        parent = name.rpartition("/")[0]
        key = parent if parent in exe.terms and parent not in covered else name
        extra[key] = extra.get(key, 0) + value
    for name, value in extra.items():
        cause = _cause(dict(exe.notes), exe, name) or "held by the framework at the peak"
        out.append(Divergence(name, 0, value, value, cause, EXECUTION, 0))
    return out


def compare(spec: ModelSpec, setup: TrainingSetup) -> dict[str, Any]:
    """Everything a report needs, JSON-ready: both estimates, the rows and the flags."""
    seed = simplified.estimate(spec, setup)
    est = refined.estimate(spec, setup)
    return {
        "simplified": seed,
        "refined": est,
        "rows": rows(seed, est),
        "flags": flags(spec, setup),
    }


def to_json(rows_: list[Divergence], flags_: list[Flag]) -> dict[str, Any]:
    """``{"rows": [...], "flags": [...]}`` with bytes as integers."""
    return {"rows": [r.to_json() for r in rows_], "flags": [f.to_json() for f in flags_]}
