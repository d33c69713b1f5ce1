"""Derive the MLX closed form's per-layer counts from traced graphs (the replay is the oracle).

    python benchmarks/mlx_derive.py          # writes introspect/refined/data/mlx_counts/*.json

For every structure the closed form knows (:data:`introspect.refined.mlx.STRUCTURES`),
trace mlx-lm's class (or the reference model) at tiny shapes, replay each step through
:mod:`introspect.measure.mlx_replay_eval`, and at the largest moment — overall and
within the update's ops — sort every live buffer by its *shape kind* (B·T·d, B·T·f,
B·h·T², B·T·V, V·d, …; at each derivation shape no two kinds have the same size) and
item size, less the weights and Adam state (which the closed form counts from the
parameter count). A candidate is that moment's bytes per element of each kind at
L = 4, 10, 16 and 32 (whole tensors); the closed form interpolates between the depths.

    python benchmarks/mlx_derive.py --lora   # only the LoRA counts, the rest kept

``--lora`` derives mlx-lm's LoRA step for :data:`introspect.refined.mlx.LORA_STRUCTURES`
as ``mlx_lm.lora`` builds it (``model.freeze()``, ``linear_to_lora_layers(model, -1,
{"rank": LORA_RANK, "scale": 20.0, "dropout": 0.0})``: every nn.Linear of every block,
``mlx_lm/tuner/utils.py``), Adam over the adapters: the same shapes and depths, at rank
:data:`LORA_RANK` (B·T·r, d·r, kv·r, f·r distinct from every other kind there); the
frozen base, the adapters and their Adam state are the state subtracted, as the weights
and moments are under full fine-tuning.

    python benchmarks/mlx_derive.py --lora STRUCTURE ...   # those structures' LoRA keys

With structures named, ``--lora`` derives their LoRA keys only (every other key kept,
the files written after each key), at L = 1, 2, 3 directly (what ``--shallow`` adds to
the L = 2 of a bare ``--lora``) and at L = 5–9 (:data:`DENSE_BETWEEN`: the largest
moment shifts by a few ops with each layer added, so no depth up to 10 is left to the
straight line). mlx-lm's default keys are every ``nn.Linear`` of a block, whatever they
are called (``linear_to_lora_layers`` in ``mlx_lm/tuner/utils.py`` collects them with
``apply_to_modules``): Phi-3's fused ``qkv_proj`` (its ``lora_b`` r × (q + 2kv), kind
``qkv·r``) and ``gate_up_proj`` (r × 2f, ``2f·r``); GPT-2's ``c_attn`` (r × 3d, ``3d·r``),
``attn.c_proj``, ``mlp.c_fc`` and ``mlp.c_proj``; StarCoder2's q/k/v/o and ``c_fc``,
``c_proj``; Gemma's and Gemma 2's the seven of Llama's; Qwen3's and Gemma 3's q/k norms
and every norm stay frozen, not adapted.

    python benchmarks/mlx_derive.py --lora-keys q_proj,v_proj STRUCTURE ...   # named keys

``--lora-keys`` derives LoRA on the linears named only (mlx-lm's ``lora_parameters.keys``,
which ``linear_to_lora_layers`` matches against each block's module paths: ``q_proj``
is ``self_attn.q_proj``; mlx-tune's and peft's default q/v, or q/k/v/o) at the same
shapes and depths as ``--lora STRUCTURE``, keys ``<structure>/<dtype>/<mode>/lora/<names>``.
MLX's graph for a subset differs from the all-linear one only in which adapters exist:
no ``LoRALinear`` on the others, so no B·T·r branch, adapter, gradient or update for
them, and the backward keeps fewer of the base's activations (a frozen linear's VJP
needs its weight, not its input: only an adapter's ``lora_a`` gradient reads ``x``). The
same kinds are read (B·T·r, d·r, kv·r, f·r), stored as the all-linear counts are.

    python benchmarks/mlx_derive.py --between STRUCTURE ...   # add L = 5–9 to LoRA keys

``--between`` adds the counts at L = 5–9 to the LoRA keys of structures derived before
``--lora`` read them (Gemma 3, OLMo 2, Phi-3), every count already there kept: the same
files as a fresh ``--lora STRUCTURE`` (the replays are deterministic).

    python benchmarks/mlx_derive.py --shallow [STRUCTURE ...]   # add L = 1, 2, 3 counts

``--shallow`` reads every candidate's counts at each depth of :data:`ALL_SHALLOW` that
its file lacks (its ``shallow``), keeping every count already there: the same shapes, the
same moment (a shape's first candidate the largest overall, its second the largest
within the update), so that no depth below the shallowest counted is extrapolated — the
line from L = 4 to 10 run down to L = 1–3 overshoots a one- or two-layer step with a
large vocabulary by 11–12% (``benchmarks/results/mlx-regimes.md``).

    python benchmarks/mlx_derive.py --short STRUCTURE ...   # add the short-T shapes

``--short`` adds, for full fine-tuning of the structures named, candidates at
:data:`SHORT_SHAPES` (T = 12: the weights' kinds outweigh B·T·d 30-fold, as in
SmolLM2-135M at T = 128), counted at :data:`SHORT_LAYERS`. There the largest moment is
one no other shape puts on top — a weight gradient's ``Reduce`` in the backward with
many layers' gradients and Adam updates still alive — and it changes op with depth
(16: an update's ``Sqrt``; 24: that ``Reduce``), so it is counted at 20, 24 and 28 too.
Without them the closed form is 0.60 of the replay at T = 12, V = 16000, L = 24, and
0.946 of a measured SmolLM2-135M step at T = 128.

    python benchmarks/mlx_derive.py --from qwen3_moe   # the MoE structures, the rest kept

The mixture-of-experts structures (:data:`introspect.refined.mlx.MOE_STRUCTURES`: mlx-lm's
``qwen3_moe`` and ``mixtral``) are traced with their sorted experts' weight gradients
rebuilt (:mod:`introspect.measure.mlx_replay_moe`), FP32 only (MLX's CPU ``GatherMM``
runs no other dtype), with E = 12 experts, k = 4 per token, each f = 216 wide
(:data:`EXPERTS`), at one more T (:data:`MOE_SHAPES`) and at every depth from 2 to 16 and
at 24 and 32 (:data:`MOE_LAYERS`).

Derivation shapes: B=3, d=128, 8 heads of 16, 2 K/V heads, f=216 (GPT-2: 4d; Phi's
rotary 12 of 16), T ∈ {44, 176}, V ∈ {1000, 4000, 16000} — no row of any check. The
counts carry to other shapes because MLX's evaluation order, buffer lifetimes and the
~110-dispatch window depend on the graph's structure, not its sizes.
"""

from __future__ import annotations

import collections
import contextlib
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

#: Where the counts go: one JSON file per structure (:mod:`introspect.refined.mlx_counts`).
OUT = ROOT / "introspect" / "refined" / "data" / "mlx_counts"
#: The derivation shape (every kind a distinct size: checked by :func:`kind_table`).
DERIVE = dict(batch=3, seq=44, d=128, heads=8, kv=2, ffn=216, vocab=1000)
LAYERS = (4, 10, 16, 32)
#: Seeds per tape and phase: its largest ops.
SEEDS = 3
#: The derivation shapes: B=3, d=128, 8 heads of 16, 2 K/V heads, f=216, and T × V
#: spanning the regimes a peak can fall in (the logits', the T×T tensors', the
#: weights'): every kind a distinct size at each (checked by :func:`kind_table`).
SHAPES = tuple(dict(DERIVE, seq=T, vocab=V) for T in (44, 176) for V in (1000, 4000, 16000))
#: The MoE structures' experts at the derivation shapes (``ffn`` each expert's width):
#: B·T·E, B·T·k, B·T·k·d, B·T·k·fe, d·E and E·d·fe distinct from every other kind.
EXPERTS = dict(experts=12, top_k=4)
#: The MoE structures' depths: every one from 2 to 16, then 24 and 32. Their largest
#: moment moves with the depth in a cycle of a few layers (the ~110 pending dispatches
#: against a MoE layer's many small routing ops): the straight line from 4 to 10 misses
#: the replay by up to 5.5% between them; counted at each depth, the closed form is
#: the replay's own there.
MOE_LAYERS = (*range(2, 17), 24, 32)
#: The MoE structures' shapes beyond :data:`SHAPES`: T = 704, where the T×T tensors
#: outweigh the experts' B·T·k·fe ones several times over (as at T ≥ 1024 with a few
#: heads). Without it, a 4-layer Qwen3-MoE at T = 1024 compiled peaks at a moment no
#: candidate holds: the closed form 6% under the replay.
MOE_SHAPES = tuple(dict(DERIVE, seq=704, vocab=V) for V in (1000, 16000))
#: Phi's partial rotary factor at the derivation shape.
ROTARY = 0.75
#: Buffers of an unknown shape up to this size are counted as plain bytes.
SMALL = 256
#: LoRA's rank at the derivation shapes (``--lora``).
LORA_RANK = 6
#: LoRA's counts below the shallowest of :data:`LAYERS` (a candidate's ``shallow``):
#: small models are LoRA's (a 2-layer step is seconds on a laptop), and the line from
#: L = 4 to 10 extended down to 2 misses what a 2-layer graph keeps.
SHALLOW = (2,)
#: The same for mlx-lm's dense classes derived last (:data:`introspect.refined.mlx.
#: DENSE_STRUCTURES`): their peak at L = 2 and 3 is off the L = 4→10 line by up to 40%
#: (Phi-3's fused projections: the largest moment is another op below L = 4).
DENSE_SHALLOW = (2, 3)
#: Short-T shapes (``--short``): B·T·d a thirtieth of a block's weights.
SHORT_SHAPES = tuple(dict(DERIVE, seq=12, vocab=V) for V in (1000, 16000))
#: Their depths: the main ones, those below 4, and 20, 24, 28 (a candidate's ``between``
#: there: the largest moment changes op between 16 and 32).
SHORT_LAYERS = (4, 10, 16, 32)
SHORT_BETWEEN = (20, 24, 28)
#: Every structure's depths below 4 (``--shallow``): L = 1 is a step with one block
#: (the embedding, one layer, the head), which no line from deeper steps reaches.
ALL_SHALLOW = (1, 2, 3)
#: And between the first two of :data:`LAYERS` (a candidate's ``between``): there the
#: largest moment shifts by a few ops with each layer added (the ~110 pending dispatches
#: end elsewhere in the layer), 4–10% off the L = 4→10 line at L = 5–9; from L = 12 on
#: within ±3.3% of it (replays of these classes at d=96, B=2, T=96).
DENSE_BETWEEN = (5, 6, 7, 8, 9)


def build(
    structure: str,
    dtype: str,
    shape: dict,
    layers: int,
    compiled: bool,
    lora: bool = False,
    keys: tuple[str, ...] = (),
):
    """(model, optimizer, step, batch) for one structure at one shape (with mlx-lm's
    LoRA on every block under ``lora``: on every nn.Linear, mlx-lm's default, or on the
    linears named ``keys``, e.g. ``("q_proj", "v_proj")``, as ``lora_parameters.keys``
    gives them to ``linear_to_lora_layers``)."""
    import mlx.core as mx
    import mlx.optimizers as optim

    from introspect.measure import mlx_lm_models
    from introspect.measure import mlx_replay as mr
    from introspect.refined import mlx as closed

    dt = mx.bfloat16 if dtype == "bf16" else mx.float32
    family, tied = closed.STRUCTURES[structure]
    B, T, V = shape["batch"], shape["seq"], shape["vocab"]
    if family.startswith("reference"):
        from introspect.measure import mlx_model, mlx_step

        spec = reference_spec(family, tied, shape, layers)
        model = mlx_model.build(spec, "eager", dt)
        loss = mlx_step.loss_fn
        tokens = mx.random.randint(0, V, (B, T), key=mx.random.key(1))
        targets = mx.random.randint(0, V, (B, T), key=mx.random.key(2))
        mx.eval(tokens, targets)
        batch = (tokens, targets)
    else:
        kv = shape["heads"] if family in ("phi", "gpt2") else shape["kv"]
        cfg = mr.family_config(
            family, shape["d"], layers, shape["ffn"], shape["heads"], kv, shape["vocab"],
            **(EXPERTS if structure in closed.MOE_STRUCTURES else {}),
        )  # fmt: skip
        if family in ("llama", "qwen2"):
            cfg["tie_word_embeddings"] = tied
        if family == "phi":  # a rotary width unlike any other kind's: 12 of 16
            cfg["partial_rotary_factor"] = ROTARY
        if family in mr.DENSE_FAMILIES:
            cfg["tie_word_embeddings"] = tied
        model = mr.mlx_lm_model(cfg, dt)
        mlx_lm_models.tie_as_checkpoint(model, family, tied)
        if lora:
            from mlx_lm.tuner.utils import linear_to_lora_layers

            model.freeze()
            config = {"rank": LORA_RANK, "scale": 20.0, "dropout": 0.0}
            if keys:  # the block's paths ending in those names (self_attn.q_proj, ...)
                config["keys"] = mlx_lm_models.lora_keys(model, keys)
            linear_to_lora_layers(model, -1, config)
            mx.eval(model.parameters())
        loss = mr.mlx_lm_loss
        batch = mr.mlx_lm_batch(V, B, T)
    optimizer = optim.Adam(learning_rate=1e-4)
    optimizer.init(model.trainable_parameters())
    step = mr.make_step(model, optimizer, loss, compiled)
    return model, optimizer, step, batch


def reference_spec(family: str, tied: bool, shape: dict, layers: int):
    from introspect.spec import ModelSpec

    llama = family == "reference-llama"
    return ModelSpec(
        hidden_size=shape["d"],
        num_hidden_layers=layers,
        num_attention_heads=shape["heads"],
        num_key_value_heads=shape["kv"] if llama else shape["heads"],
        intermediate_size=shape["ffn"],
        vocab_size=shape["vocab"],
        norm="rmsnorm" if llama else "layernorm",
        norm_bias=not llama,
        ffn="gated" if llama else "plain",
        hidden_act="silu" if llama else "gelu",
        tie_word_embeddings=tied,
    )


def dims_of(structure: str, shape: dict, lora: bool = False) -> dict:
    """The closed form's dimension names at ``shape`` for ``structure``."""
    from introspect.refined import mlx as closed

    family, _ = closed.STRUCTURES[structure]
    d, h = shape["d"], shape["heads"]
    kv = h if family in ("phi", "gpt2", "reference-standard") else shape["kv"]
    f = 4 * d if family == "gpt2" else shape["ffn"]
    moe = structure in closed.MOE_STRUCTURES
    return closed.Dims(
        B=shape["batch"], T=shape["seq"], d=d, f=f, h=h, kv=kv, hd=d // h, V=shape["vocab"],
        positions=4096, rot=int(d // h * ROTARY) if family == "phi" else d // h,
        r=LORA_RANK if lora else 0,
        E=EXPERTS["experts"] if moe else 0, k=EXPERTS["top_k"] if moe else 0,
        fe=shape["ffn"] if moe else 0,
    )  # fmt: skip


def kind_table(dims) -> dict[int, str]:
    """Size in elements → kind name; fails if two kinds collide at the derivation shape."""
    from introspect.refined import mlx as closed

    table: dict[int, str] = {}
    for name in closed.kinds(dims):
        n = closed.numel(name, dims)
        if n in table:
            raise SystemExit(f"kinds {table[n]} and {name} both have {n} elements here")
        table[n] = name
    return table


class Census:
    """Live bytes by (kind, item size) at each op's largest allocation, kept up to date
    as the replay allocates and frees (the evaluator's own bookkeeping, observed)."""

    def __init__(self, table: dict[int, str]) -> None:
        self.table = table
        self.live: collections.Counter = collections.Counter()
        self.kind_of: dict[int, str] = {}
        self.per_op: dict[int, tuple[int, dict]] = {}
        self.array: int | None = None


@contextlib.contextmanager
def observed(census: Census):
    from introspect.measure import mlx_replay_eval as ev

    orig = ev.Evaluator.malloc, ev.Evaluator.drop_buf, ev.Evaluator.fresh, ev.Evaluator.like
    orig_execute = ev.Evaluator.execute

    def execute(self, k, arr):
        # Every op has an entry (one that donates or makes a view allocates nothing), so
        # the tapes of the two worker bounds line up op for op.
        census.per_op[self.current[1]] = (self.active, dict(census.live))
        return orig_execute(self, k, arr)

    def malloc(self, nbytes, owner):
        b = orig[0](self, nbytes, owner)
        size = self.g.itemsize(census.array) if census.array is not None else None
        kind = key_of(nbytes, size, census.table)
        census.kind_of[b] = kind
        census.live[kind] += nbytes
        best = census.per_op.get(self.current[1])
        if best is None or self.active > best[0]:
            census.per_op[self.current[1]] = (self.active, dict(census.live))
        return b

    def drop_buf(self, b):
        n = self.buf_size.get(b, 0)
        orig[1](self, b)
        if b not in self.buf_size:
            census.live[census.kind_of.pop(b)] -= n

    def fresh(self, a, owner, nbytes=None):
        census.array = a
        try:
            return orig[2](self, a, owner, nbytes)
        finally:
            census.array = None

    def like(self, a, src, owner):
        census.array = a
        try:
            return orig[3](self, a, src, owner)
        finally:
            census.array = None

    ev.Evaluator.malloc, ev.Evaluator.drop_buf = malloc, drop_buf
    ev.Evaluator.fresh, ev.Evaluator.like = fresh, like
    ev.Evaluator.execute = execute
    try:
        yield
    finally:
        ev.Evaluator.malloc, ev.Evaluator.drop_buf, ev.Evaluator.fresh, ev.Evaluator.like = orig
        ev.Evaluator.execute = orig_execute


def key_of(nbytes: int, size: int | None, table: dict[int, str]) -> str:
    """The kind of a buffer (a temporary with no array, a matmul's copy, is tried as
    FP32, then 16-bit)."""
    for s in (size,) if size else (4, 2):
        if nbytes % s == 0 and nbytes // s in table:
            return table[nbytes // s]
    if nbytes <= SMALL:  # lengths, step counts, scalars: counted as bytes
        return "1"
    return f"elements:{nbytes}"


def tape(
    structure: str,
    dtype: str,
    compiled: bool,
    shape: dict,
    layers: int,
    worker: str = "behind",
    lora: bool = False,
    keys: tuple[str, ...] = (),
):
    """Per op of the replayed tape: (signature, phase, bytes by kind beyond the state)."""
    from introspect.measure import mlx_replay as mr
    from introspect.measure.mlx_replay_eval import update_nodes

    model, optimizer, step, batch = build(structure, dtype, shape, layers, compiled, lora, keys)
    graph = mr.graph_of(model, optimizer, step, batch, compiled)
    table = kind_table(dims_of(structure, dict(shape), lora))
    census = Census(table)
    with observed(census):
        rep = mr.replay(graph, worker=worker)
    state = collections.Counter()
    for a in graph.released:
        state[key_of(graph.nbytes(a), graph.itemsize(a), table)] += graph.nbytes(a)
    update = update_nodes(graph)
    out = []
    for idx, arr in enumerate(rep.order):
        if idx not in census.per_op:
            continue
        k = graph.producer[arr]
        node = graph.nodes[k]
        sig = f"{node.name}:{key_of(graph.nbytes(arr), graph.itemsize(arr), table)}"
        live = collections.Counter(census.per_op[idx][1])
        live.subtract(state)
        out.append((sig, "optimizer_step" if k in update else "backward", dict(live)))
    return out, rep


def derive(
    structure: str, dtype: str, compiled: bool, lora: bool = False, keys: tuple[str, ...] = ()
) -> list[dict]:
    """The candidate moments of one structure: at each derivation shape, the live bytes
    by kind at the replay's largest moment (and at the update's largest) at each L of
    :data:`LAYERS` (:data:`MOE_LAYERS` for a MoE structure) give, by :func:`fit`, its
    counts at each depth (LoRA on the linears named ``keys`` when given)."""
    from introspect.refined import mlx as closed

    moe = structure in closed.MOE_STRUCTURES
    shapes = SHAPES + MOE_SHAPES if moe else SHAPES
    dims_by = [dims_of(structure, dict(shape), lora) for shape in shapes]
    for dims in dims_by:
        kind_table(dims)
    out = []
    layers = MOE_LAYERS if moe else LAYERS
    for shape, dims in zip(shapes, dims_by, strict=True):
        shallow_depths = () if moe else shallow_of(structure, lora)
        # LoRA's counts (every structure's) and the dense classes' full ones: L = 5–9 too.
        between = DENSE_BETWEEN if shallow_depths else ()
        depths = layers + shallow_depths + between
        tapes = [
            tape(structure, dtype, compiled, dict(shape), L, lora=lora, keys=keys)[0]
            for L in depths
        ]
        for phase in ("any", "optimizer_step"):
            tops = []
            for t in tapes:
                ops = [x for x in t if phase == "any" or x[1] == phase]
                if ops:
                    tops.append(max(ops, key=lambda x: sum(x[2].values())))
            if len(tops) < len(depths):
                continue
            c = fit(structure, dtype, tops[: len(layers)], dims, layers)
            if shallow_depths:
                n = len(layers) + len(shallow_depths)
                shallow = fit(structure, dtype, tops[len(layers) : n], dims, shallow_depths)
                c["shallow"] = shallow["at"]
            if between:
                c["between"] = fit(structure, dtype, tops[n:], dims, between)["at"]
            c["shape"] = {k: shape[k] for k in ("seq", "vocab")}
            out.append(c)
    return out


def add_shallow(structure: str, dtype: str, compiled: bool, lora: bool, rows: list[dict]):
    """``rows`` (one key's candidates, as :func:`row_of` makes them) with their counts at
    each depth of :data:`ALL_SHALLOW` not yet counted: per derivation shape, the largest
    moment overall (the shape's first candidate) and within the update (its second),
    read as :func:`derive` reads them."""
    return add_depths(structure, dtype, compiled, lora, rows, ALL_SHALLOW, "shallow")


def add_depths(
    structure: str, dtype: str, compiled: bool, lora: bool, rows: list[dict], wanted, part: str
):
    """``rows`` with their counts at each depth of ``wanted`` not yet counted, kept in the
    candidates' ``part`` (``shallow`` below L = 4, ``between`` for 5–9): per derivation
    shape, the largest moment overall (the shape's first candidate) and within the update
    (its second), read as :func:`derive` reads them."""
    from introspect.refined import mlx as closed

    moe = structure in closed.MOE_STRUCTURES
    shapes = SHAPES + MOE_SHAPES if moe else SHAPES
    for shape in shapes:
        mine = [
            c
            for c in rows
            if (c["shape"]["seq"], c["shape"]["vocab"]) == (shape["seq"], shape["vocab"])
        ]
        have = (
            {L for p in ("at", "shallow", "between") for L in mine[0].get(p, {})} if mine else set()
        )
        depths = tuple(L for L in wanted if L not in have and runs(structure, L))
        if not mine or not depths:
            continue
        dims = dims_of(structure, dict(shape), lora)
        tapes = [tape(structure, dtype, compiled, dict(shape), L, lora=lora)[0] for L in depths]
        for c, phase in zip(mine, ("any", "optimizer_step"), strict=False):
            tops = [
                max(
                    (x for x in t if phase == "any" or x[1] == phase),
                    key=lambda x: sum(x[2].values()),
                )
                for t in tapes
            ]
            got = fit(structure, dtype, tops, dims, depths)["at"]
            c[part] = dict(sorted({**c.get(part, {}), **got}.items()))
            shape = c.pop("shape")  # the row's keys in row_of's order: shape last
            c["shape"] = shape
    return rows


def add_short(structure: str, dtype: str, compiled: bool, rows: list[dict]) -> list[dict]:
    """``rows`` with candidates at :data:`SHORT_SHAPES` (any earlier ones there replaced):
    the largest moment overall and within the update at each depth of
    :data:`SHORT_LAYERS`, :data:`ALL_SHALLOW` and :data:`SHORT_BETWEEN`."""
    short = {(x["seq"], x["vocab"]) for x in SHORT_SHAPES}
    rows = [c for c in rows if (c["shape"]["seq"], c["shape"]["vocab"]) not in short]
    shallow = tuple(L for L in ALL_SHALLOW if runs(structure, L))
    depths = SHORT_LAYERS + shallow + SHORT_BETWEEN
    for shape in SHORT_SHAPES:
        dims = dims_of(structure, dict(shape))
        kind_table(dims)
        tapes = [tape(structure, dtype, compiled, dict(shape), L)[0] for L in depths]
        for phase in ("any", "optimizer_step"):
            tops = [
                max((x for x in t if phase in ("any", x[1])), key=lambda x: sum(x[2].values()))
                for t in tapes
            ]
            n, m = len(SHORT_LAYERS), len(SHORT_LAYERS) + len(shallow)
            c = fit(structure, dtype, tops[:n], dims, SHORT_LAYERS)
            c["shallow"] = fit(structure, dtype, tops[n:m], dims, shallow)["at"]
            c["between"] = fit(structure, dtype, tops[m:], dims, SHORT_BETWEEN)["at"]
            c["shape"] = {k: shape[k] for k in ("seq", "vocab")}
            rows.append(c)
    return rows


def runs(structure: str, layers: int) -> bool:
    """Whether mlx-lm's class runs an L-layer stack: Gemma 3's ``__call__`` reads the
    cache of layer ``sliding_window_pattern - 1`` for its global mask
    (``mlx_lm/models/gemma3_text.py``), an IndexError below that many layers (2 at the
    derivation shapes: ``mlx_replay.dense_config``), so no 1-layer Gemma 3 step exists."""
    from introspect.refined import mlx as closed

    return not (closed.STRUCTURES[structure][0] == "gemma3_text" and layers < 2)


def shallow_of(structure: str, lora: bool) -> tuple[int, ...]:
    """The depths below :data:`LAYERS` a structure's counts are also read at (LoRA:
    every one of :data:`ALL_SHALLOW` the class runs, what ``--shallow`` adds to a
    derivation at :data:`SHALLOW`)."""
    from introspect.refined import mlx as closed

    if lora:
        return tuple(L for L in ALL_SHALLOW if runs(structure, L))
    return DENSE_SHALLOW if closed.STRUCTURES[structure][0] in closed.DENSE_STRUCTURES else ()


def fit(structure: str, dtype: str, tops: list, dims, layers: tuple = LAYERS) -> dict:
    """A candidate: its bytes per element of each kind at each L of :data:`LAYERS`
    (whole tensors: 4 for one FP32 tensor, 2 for a BF16 one), which the closed form
    interpolates between (:func:`introspect.refined.mlx.counts_at`).

    The largest moment is the same op of the graph at every L only up to the scheduler:
    which op the window's ~110 dispatches end on, and how the breadth-first order
    interleaves a layer's weight gradients with the next layer's backward, shift by a
    few ops as layers are added, so the bytes are not exactly linear in L; three depths
    bound the error of the straight lines between them."""
    from introspect.refined import mlx as closed

    at = {}
    for L, top in zip(layers, tops, strict=True):
        counts = {}
        for kind, nbytes in top[2].items():
            if kind.startswith("elements:"):
                raise SystemExit(f"{structure}/{dtype}: unknown kind {kind}")
            n = closed.numel(kind, dims)
            if nbytes % n:
                raise SystemExit(f"{structure}/{dtype}: {kind} not whole tensors")
            if nbytes:
                counts[kind] = nbytes // n
        at[L] = counts
    return {"phase": tops[0][1], "op": tops[0][0], "at": at}


def main() -> None:
    from introspect.refined import mlx as closed
    from introspect.refined import mlx_counts

    done = {}
    if sys.argv[1:2] == ["--short"]:
        counts = {k: [row_of(c) for c in cs] for k, cs in mlx_counts.all_counts().items()}
        for k, rows in counts.items():
            structure, dtype, mode = k.split("/")[:3]
            if structure in sys.argv[2:] and "/lora" not in k:
                counts[k] = add_short(structure, dtype, mode == "compiled", rows)
                print(k, len(counts[k]), "candidates", flush=True)
        write(counts)
        return
    if sys.argv[1:2] == ["--shallow"]:
        names = sys.argv[2:] or list(closed.STRUCTURES)
        counts = {k: [row_of(c) for c in cs] for k, cs in mlx_counts.all_counts().items()}
        for k, rows in counts.items():
            structure, dtype, mode = k.split("/")[:3]
            if structure in names and k.count("/") < 4:  # named keys: L = 1–3 read already
                add_shallow(structure, dtype, mode == "compiled", k.endswith("/lora"), rows)
                print(k, "shallow", sorted(rows[0].get("shallow", {})), flush=True)
        write(counts)
        return
    if sys.argv[1:2] == ["--between"]:
        between_of(sys.argv[2:])
        return
    if sys.argv[1:2] == ["--lora"] and sys.argv[2:]:
        lora_of(sys.argv[2:])
        return
    if sys.argv[1:2] == ["--lora-keys"] and sys.argv[3:]:
        lora_of(sys.argv[3:], tuple(sorted(sys.argv[2].split(","))))
        return
    if len(sys.argv) > 1:  # --from STRUCTURE / --lora: keep the others
        done = {k: [row_of(c) for c in cs] for k, cs in mlx_counts.all_counts().items()}
    lora_only = sys.argv[1:2] == ["--lora"]
    names = list(closed.STRUCTURES)
    first = names.index(sys.argv[2]) if len(sys.argv) > 2 and sys.argv[1] == "--from" else 0
    wanted = [
        (structure, dtype, compiled, lora, ())
        for lora in (False, True)
        for structure in (closed.LORA_STRUCTURES if lora else names)
        for dtype in ("fp32", "bf16")
        for compiled in (False, True)
        # MLX's CPU GatherMM runs FP32 only (cpu/masked_mm.cpp): no BF16 MoE step.
        if dtype == "fp32" or structure not in closed.MOE_STRUCTURES
    ]
    wanted += [  # the named keys (--lora-keys), after the all-linear ones
        (structure, dtype, compiled, True, keys)
        for keys, structures in closed.NAMED_KEYS.items()
        for structure in structures
        for dtype in ("fp32", "bf16")
        for compiled in (False, True)
    ]
    counts: dict[str, list[dict]] = {}
    for structure, dtype, compiled, lora, keys in wanted:
        k = closed.key(structure, dtype, compiled, lora, keys)
        if k in done and (lora_only and not lora or names.index(structure) < first):
            counts[k] = done[k]
        else:
            counts[k] = derive(structure, dtype, compiled, lora, keys)
        print(k, len(counts[k]), "candidates", flush=True)
    write(counts)


def lora_of(structures: list[str], keys: tuple[str, ...] = ()) -> None:
    """``--lora STRUCTURE ...``: derive the LoRA keys of the structures named (each
    dtype and compilation), every other key kept; a structure's file is written after
    each of its keys, so an interrupted run keeps what it finished, and runs for
    different structures can go side by side. ``--lora-keys q_proj,v_proj STRUCTURE
    ...``: the same for LoRA on the linears named only (``keys``: the counts' keys
    ``…/lora/k_proj,v_proj``), every other key kept."""
    from introspect.refined import mlx as closed
    from introspect.refined import mlx_counts

    counts = {k: [row_of(c) for c in cs] for k, cs in mlx_counts.all_counts().items()}
    for structure in structures:
        if structure not in closed.STRUCTURES:
            raise SystemExit(f"--lora {structure}: not one of {', '.join(closed.STRUCTURES)}")
        for dtype in ("fp32", "bf16"):
            if dtype == "bf16" and structure in closed.MOE_STRUCTURES:
                continue  # MLX's CPU GatherMM runs FP32 only (cpu/masked_mm.cpp)
            for is_compiled in (False, True):
                k = closed.key(structure, dtype, is_compiled, lora=True, keys=keys)
                counts[k] = derive(structure, dtype, is_compiled, lora=True, keys=keys)
                print(k, len(counts[k]), "candidates", flush=True)
                # this structure's file only: runs for other structures may be under way
                write({k: v for k, v in counts.items() if k.split("/", 1)[0] == structure})


def between_of(structures: list[str]) -> None:
    """``--between STRUCTURE ...``: add the counts at L = 5–9 (:data:`DENSE_BETWEEN`) to
    the LoRA keys of the structures named (derived before ``--lora`` read them), every
    count already there kept; a structure's file is written after each of its keys."""
    from introspect.refined import mlx_counts

    counts = {k: [row_of(c) for c in cs] for k, cs in mlx_counts.all_counts().items()}
    for structure in structures:
        keys = [k for k in counts if k.split("/")[0] == structure and k.endswith("/lora")]
        if not keys:
            raise SystemExit(f"--between {structure}: no LoRA counts to add to (--lora first)")
        for k in keys:
            dtype, mode = k.split("/")[1:3]
            compiled = mode == "compiled"
            add_depths(structure, dtype, compiled, True, counts[k], DENSE_BETWEEN, "between")
            print(k, "between", sorted(counts[k][0].get("between", {})), flush=True)
            write({k: v for k, v in counts.items() if k.split("/", 1)[0] == structure})


def row_of(candidate) -> dict:
    """A loaded :class:`introspect.refined.mlx_counts.Candidate` as the row ``derive``
    makes (``shallow`` and ``between`` only where counted)."""
    row = {"phase": candidate.phase, "op": candidate.op, "at": candidate.at}
    if candidate.shallow:
        row["shallow"] = candidate.shallow
    if candidate.between:
        row["between"] = candidate.between
    row["shape"] = candidate.shape
    return row


#: The longest line a counts file gets (a row of counts longer than this is wrapped).
WIDTH = 160


def write(counts: dict[str, list[dict]], out: Path = OUT) -> None:
    """One JSON file per structure under ``out`` (:mod:`introspect.refined.mlx_counts`
    reads them): how it was made, then its keys' candidates, each row of counts on a
    line of its own (wrapped at :data:`WIDTH`) so that a diff shows which moved."""
    out.mkdir(parents=True, exist_ok=True)
    by_structure: dict[str, dict[str, list[dict]]] = {}
    for k, rows in counts.items():
        by_structure.setdefault(k.split("/", 1)[0], {})[k] = rows
    for structure, keys in by_structure.items():
        doc = {
            "about": [
                "Generated by `python benchmarks/mlx_derive.py`: do not edit by hand.",
                f"For each dtype and compilation of {structure}: the candidate moments of "
                "MLX's peak, bytes per element",
                "of each shape kind alive beyond the weights and Adam state at each depth "
                "L counted (see introspect/refined/mlx.py).",
                "Read from replays of the traced step (introspect/measure/mlx_replay_eval.py)"
                ", never from a measured one.",
            ],
            "command": command(structure, keys),
            **(
                {"named_keys_commands": named_commands(structure, keys)}
                if named_commands(structure, keys)
                else {}
            ),
            "derivation": derivation(structure, keys),
            "counts": keys,
        }
        text = dump(doc, 0) + "\n"
        if json.loads(text) != json.loads(json.dumps(doc)):  # the layout changed nothing
            raise SystemExit(f"{structure}: the JSON written does not read back")
        (out / f"{structure}.json").write_text(text, encoding="utf-8")


def command(structure: str, keys: dict[str, list[dict]]) -> str:
    """The commands that made a file: the derivation, ``--shallow`` where L = 1 is
    counted, ``--short`` where the short-T shapes are."""
    rows = [c for cs in keys.values() for c in cs]
    out = "python benchmarks/mlx_derive.py"
    if any(1 in c.get("shallow", {}) for c in rows):
        out += "; python benchmarks/mlx_derive.py --shallow"
    if any(c["shape"]["seq"] == SHORT_SHAPES[0]["seq"] for c in rows):
        out += f"; python benchmarks/mlx_derive.py --short {structure}"
    if any(k.endswith("/lora") for k in keys):
        out += f"; python benchmarks/mlx_derive.py --lora {structure}"
    return out


def named_commands(structure: str, keys: dict[str, list[dict]]) -> list[str]:
    """The ``--lora-keys`` commands that made a file's named-keys counts (one per key
    set, in the file's order; none for a file without them)."""
    names = dict.fromkeys(k.split("/")[4] for k in keys if k.count("/") == 4)
    return [f"python benchmarks/mlx_derive.py --lora-keys {n} {structure}" for n in names]


def derivation(structure: str, keys: dict[str, list[dict]]) -> dict:
    """The sizes a file's counts were read at (:func:`dims_of` at :data:`DERIVE`), and its
    T × V shapes and depths, from the rows themselves."""
    x = dims_of(structure, DERIVE)
    sizes = {"batch": x.B, "d": x.d, "heads": x.h, "kv": x.kv, "ffn": x.f}
    if x.rot != x.hd:
        sizes["rotary_dims"] = x.rot
    if x.E:
        sizes.update(experts=x.E, top_k=x.k)
    shapes = sorted(
        {(c["shape"]["seq"], c["shape"]["vocab"]) for rows in keys.values() for c in rows}
    )
    depths: dict[str, dict[str, list[int]]] = {}
    for k, rows in keys.items():
        parts = k.removesuffix("/ckpt").split("/")  # mlx_derive_ckpt.py's keys too
        name = (
            f"lora (rank {LORA_RANK}, {parts[4] if len(parts) > 4 else 'all-linear'})"
            if len(parts) > 3 and parts[3] == "lora"
            else "full fine-tuning"
        )
        seen = depths.setdefault(name, {})
        for c in rows:
            for part in ("at", "shallow", "between"):
                if part in c:
                    seen[part] = sorted(set(seen.get(part, [])) | set(c[part]))
    return {**sizes, "seq_vocab": [list(s) for s in shapes], "depths": depths}


def dump(value, indent: int) -> str:
    """``value`` as JSON, on one line where it fits in :data:`WIDTH` at ``indent``, else one
    item per line; a long row of numbers (a depth's counts) is packed several to a line."""
    flat = json.dumps(value, ensure_ascii=False)
    if indent + len(flat) <= WIDTH or not isinstance(value, (dict, list)) or not value:
        return flat
    pad = " " * (indent + 2)
    if isinstance(value, dict) and all(not isinstance(v, (dict, list)) for v in value.values()):
        items = [
            f"{json.dumps(str(k), ensure_ascii=False)}: {json.dumps(v)}" for k, v in value.items()
        ]
        lines, line = [], ""
        for item in items:
            if line and len(pad) + len(line) + len(item) + 2 > WIDTH:
                lines.append(line + ",")
                line = ""
            line = f"{line}, {item}" if line else item
        lines.append(line)
        return "{\n" + "\n".join(pad + x for x in lines) + "\n" + " " * indent + "}"
    if isinstance(value, dict):
        items = [
            f"{pad}{json.dumps(str(k), ensure_ascii=False)}: {dump(v, indent + 2)}"
            for k, v in value.items()
        ]
        return "{\n" + ",\n".join(items) + "\n" + " " * indent + "}"
    items = [pad + dump(v, indent + 2) for v in value]
    return "[\n" + ",\n".join(items) + "\n" + " " * indent + "]"


if __name__ == "__main__":
    main()
