"""mlx-lm's own LoRA step measured on the MLX CPU against the refined estimate.

    python benchmarks/mlx_lora.py     # writes benchmarks/results/mlx-lora.md
    python benchmarks/mlx_lora.py --other   # only its other structures' section
    python benchmarks/mlx_lora.py --other gpt2 gemma   # those families' rows rerun
    python benchmarks/mlx_lora.py --keys [STRUCTURE ...]   # only its named-keys section
    python benchmarks/mlx_lora.py --ckpt [STRUCTURE ...]   # only its checkpointed section

Each row is a real step (:func:`introspect.measure.mlx_lm_models.measure` with
``finetune="lora"``: ``model.freeze()``, ``linear_to_lora_layers`` on every block with
mlx-lm's default keys, Adam over the adapters, ``default_loss``), its peak from
``mx.get_peak_memory()`` (the largest of ``REPEATS`` steps). Beside it, the refined
estimate (``introspect.refined.estimate(spec, setup).total``) as the code stands, and
*fallback*: the estimate with MLX's derived moments switched off for LoRA — torch's
moments, what an MLX LoRA estimate was before :mod:`introspect.refined.mlx` modelled
LoRA (the same number as *refined* when it does not).
"""

from __future__ import annotations

import sys
import time
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

REPORT = ROOT / "benchmarks" / "results" / "mlx-lora.md"
#: The other structures' rows (``--other FAMILY ...`` reruns those families' rows only,
#: the others' kept from here).
OTHER_JSON = ROOT / "benchmarks" / "results" / "mlx-lora-other.json"
BAND = 0.05
REPEATS = 2

#: Tiny mlx-lm shapes (none of them a shape any count was derived at).
MODELS = {
    "llama d=128 L=2 V=4096": dict(
        model_type="llama", hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, intermediate_size=352, vocab_size=4096,
        tie_word_embeddings=True, rms_norm_eps=1e-5, max_position_embeddings=1024,
    ),
    "qwen2 d=192 L=3 V=6144": dict(
        model_type="qwen2", hidden_size=192, num_hidden_layers=3, num_attention_heads=6,
        num_key_value_heads=2, intermediate_size=512, vocab_size=6144,
        tie_word_embeddings=True, rms_norm_eps=1e-6, max_position_embeddings=1024,
    ),
    "llama d=256 L=6 V=8192 (untied)": dict(
        model_type="llama", hidden_size=256, num_hidden_layers=6, num_attention_heads=8,
        num_key_value_heads=8, intermediate_size=688, vocab_size=8192,
        tie_word_embeddings=False, rms_norm_eps=1e-5, max_position_embeddings=1024,
    ),
    "llama d=192 L=4 V=6144": dict(
        model_type="llama", hidden_size=192, num_hidden_layers=4, num_attention_heads=6,
        num_key_value_heads=3, intermediate_size=512, vocab_size=6144,
        tie_word_embeddings=True, rms_norm_eps=1e-5, max_position_embeddings=1024,
    ),
    "qwen2 d=128 L=8 V=4096": dict(
        model_type="qwen2", hidden_size=128, num_hidden_layers=8, num_attention_heads=4,
        num_key_value_heads=2, intermediate_size=384, vocab_size=4096,
        tie_word_embeddings=True, rms_norm_eps=1e-6, max_position_embeddings=1024,
    ),
    # Added after the last term (the upcasts), first run as they stand:
    "qwen2 d=160 L=3 V=5000": dict(
        model_type="qwen2", hidden_size=160, num_hidden_layers=3, num_attention_heads=5,
        num_key_value_heads=1, intermediate_size=448, vocab_size=5000,
        tie_word_embeddings=True, rms_norm_eps=1e-6, max_position_embeddings=1024,
    ),
    "llama d=224 L=5 V=7000 (untied)": dict(
        model_type="llama", hidden_size=224, num_hidden_layers=5, num_attention_heads=7,
        num_key_value_heads=7, intermediate_size=600, vocab_size=7000,
        tie_word_embeddings=False, rms_norm_eps=1e-5, max_position_embeddings=1024,
    ),
}  # fmt: skip
#: The models also stepped in BF16 (mlx-lm's adapters stay FP32 over a BF16 base).
BF16 = (
    "llama d=192 L=4 V=6144",
    "qwen2 d=128 L=8 V=4096",
    "qwen2 d=160 L=3 V=5000",
    "llama d=224 L=5 V=7000 (untied)",
)
#: Models added after the derivation's last change, never looked at before it.
FRESH = ("qwen2 d=160 L=3 V=5000", "llama d=224 L=5 V=7000 (untied)")
#: What earlier runs of this benchmark found (the counts have changed since).
HISTORY = (
    "History: with torch's moments (no MLX LoRA counts), 1 of 24 rows of the first three "
    "models within ±5% (0.852–0.957). With the first LoRA counts (L = 4, 10, 16, 32 only), "
    "42 of these 56: the eager L = 2–3 rows 5–15% over (the L = 4→10 line extended to "
    "L = 2; the replay of those steps within 2.5%) — hence the counts at L = 2 — and the "
    "BF16 eager rows 4.6–9.4% under, the replay's own miss: the trace merges the identical "
    "FP32 upcasts of q/k/v's and gate/up's shared input that an eager step makes once per "
    "adapter (introspect.refined.mlx.lora_upcast_bytes, from mlx-lm's LoRALinear and MLX's "
    "type promotion). 49 of 56 with the L = 2 counts alone."
)
#: (rank, B, T) per model and compilation.
GRID = ((4, 1, 64), (8, 2, 64), (16, 1, 256), (8, 2, 256))

#: The structures whose LoRA counts were derived after Llama's and Qwen2's
#: (``python benchmarks/mlx_derive.py --lora STRUCTURE``), each tied as
#: :data:`introspect.refined.mlx.STRUCTURES` says. Each at two held-out shapes
#: (d, L, f, heads, K/V heads, V), none a derivation shape, and at one derivation shape
#: (:data:`AT_DERIVED`), reported apart.
OTHER_STRUCTURES = (
    ("qwen3", True),
    ("gemma3_text", True),
    ("phi", False),
    ("phi3", False),
    ("olmo2", False),
    ("starcoder2", True),
    ("gemma2", True),
    ("gemma", True),
    ("gpt2", True),
)
#: Classes with no K/V heads of their own: Phi's counts were read MHA, as Phi's
#: checkpoints are; GPT-2's attention is MHA (``mlx_lm/models/gpt2.py``: one ``c_attn``).
MHA = ("phi", "gpt2")
HELD_OUT = ((96, 3, 256, 4, 2, 3000), (160, 6, 448, 5, 1, 5000))
#: (rank, B, T) of the held-out rows (BF16: the first shape only).
OTHER_GRID = ((4, 1, 64), (8, 2, 256))
#: A derivation shape (``mlx_derive.py``'s B=3, d=128, 8 heads of 16, 2 K/V heads,
#: f=216, r=6, T=44, V=1000) at L = 4, a counted depth: the closed form reads its own
#: counts there, so these rows check the derivation's replay against a real step.
AT_DERIVED = dict(shape=(128, 4, 216, 8, 2, 1000), rank=6, batch=3, seq=44)
#: Gemma 3's sliding window (its counts were read with none shorter than T; a window
#: shorter than T changes the peak by one T×T mask: introspect.refined.mlx.dense_structure).
NO_WINDOW = 4096


#: The named-keys rows (``--keys``): mlx-lm's ``lora_parameters.keys`` on the linears
#: named only (mlx-tune's and peft's default q/v, and the attention's four), for the
#: structures whose counts for those keys are derived (``python benchmarks/mlx_derive.py
#: --lora-keys NAMES STRUCTURE``: B=3, d=128, 8 heads / 2 K/V, f=216, r=6, T ∈ {44, 176},
#: V ∈ {1000, 4000, 16000}, L = 1–10, 16, 32), at :data:`HELD_OUT`'s shapes.
KEYS_JSON = ROOT / "benchmarks" / "results" / "mlx-lora-keys.json"
NAMED = (("q_proj", "v_proj"), ("q_proj", "k_proj", "v_proj", "o_proj"))
KEYS_STRUCTURES = ("llama", "qwen2", "qwen3", "llama-untied")
#: (shape index, dtype, rank, B, T) of each structure's rows per keys, each eager and
#: compiled: both held-out shapes, FP32 and a BF16 base.
KEYS_GRID = (
    (0, "fp32", 4, 1, 64),
    (0, "fp32", 8, 2, 256),
    (0, "bf16", 8, 2, 256),
    (1, "fp32", 16, 1, 256),
)


def setup_of(rank: int, batch: int, seq: int, compiled: bool, dtype: str = "fp32"):
    """mlx_closed_form's mlx-lm setup, fine-tuned with LoRA at ``rank``."""
    from mlx_closed_form import setup_of as full_setup

    return full_setup("mlx_lm", dtype, batch, seq, compiled).replace(
        finetune="lora", lora_rank=rank
    )


@contextmanager
def fallback():
    """MLX's derived moments for full fine-tuning only: the estimate before LoRA had its
    own (``refined.execution_estimate`` then takes torch's moments)."""
    from introspect.refined import mlx

    applies = mlx.applies
    mlx.applies = lambda s, spec=None: s.finetune == "full" and applies(s, spec)
    try:
        yield
    finally:
        mlx.applies = applies


def grid() -> list[tuple[str, str, int, int, int, bool]]:
    """(model, dtype, rank, B, T, compiled) of every row."""
    return [
        (name, dtype, *g, compiled)
        for name in MODELS
        for dtype in ("fp32", "bf16")
        if dtype == "fp32" or name in BF16
        for g in GRID
        for compiled in (False, True)
    ]


def rows() -> list[dict]:
    from introspect.adapters.hf_config import spec_from_config

    out = []
    for name, dtype, rank, batch, seq, compiled in grid():
        raw = MODELS[name]
        spec = spec_from_config(raw, source=name)
        setup = setup_of(rank, batch, seq, compiled, dtype)
        out.append(row(raw, name, spec, setup, dtype, layers=spec.num_hidden_layers))
    return out


def row(raw: dict, name: str, spec, setup, dtype: str, **extra) -> dict:
    """One real mlx-lm LoRA step of ``raw`` under ``setup`` beside the refined estimate
    and the fallback (printed as it is made); ``extra`` joins the row as it is."""
    from introspect.measure import mlx_lm_models
    from introspect.refined import estimate

    compiled = setup.framework == "mlx_compiled"
    m = mlx_lm_models.measure(raw, name, spec, setup, compiled=compiled, repeats=REPEATS)
    now = estimate(spec, setup)
    with fallback():
        before = estimate(spec, setup).total
    print(
        f"{name} {dtype} r={setup.lora_rank} B={setup.batch_size} T={setup.seq_len} "
        f"{'compiled' if compiled else 'eager'}: measured {m.peak_bytes / 1e6:.2f} MB, "
        f"estimate {now.total / 1e6:.2f} ({now.total / m.peak_bytes:.3f}), "
        f"fallback {before / 1e6:.2f}",
        flush=True,
    )
    return dict(
        model=name, dtype=dtype, rank=setup.lora_rank, B=setup.batch_size, T=setup.seq_len,
        compiled=compiled, measured=m.peak_bytes, estimate=now.total, fallback=before,
        phase=now.execution.meta.get("peak_phase"), adapters=m.trainable_params, **extra,
    )  # fmt: skip


def other_config(family: str, tied: bool, shape: tuple) -> dict:
    """``ModelArgs`` keywords for a structure of :data:`OTHER_STRUCTURES` at ``shape``."""
    from introspect.measure import mlx_replay as mr

    d, layers, f, heads, kv, vocab = shape
    if family in MHA:
        kv = heads
    cfg = mr.family_config(family, d, layers, f, heads, kv, vocab)
    cfg["tie_word_embeddings"] = tied
    if family == "gemma3_text":
        cfg["sliding_window"] = NO_WINDOW
    return cfg


def other_grid(
    families: tuple[str, ...] = (),
) -> list[tuple[str, bool, tuple, str, int, int, int, bool, bool]]:
    """(family, tied, shape, dtype, rank, B, T, compiled, held out) of every row of the
    other structures whose LoRA counts are derived (of ``families`` only, if named)."""
    from introspect.refined import mlx

    out = []
    for family, tied in OTHER_STRUCTURES:
        if family not in mlx.LORA_STRUCTURES or families and family not in families:
            continue
        for i, shape in enumerate(HELD_OUT):
            for dtype in ("fp32", "bf16") if i == 0 else ("fp32",):
                for g in OTHER_GRID:
                    out += [(family, tied, shape, dtype, *g, c, True) for c in (False, True)]
        a = AT_DERIVED
        for compiled in (False, True):
            out.append(
                (family, tied, a["shape"], "fp32", a["rank"], a["batch"], a["seq"], compiled, False)
            )
    return out


def other_rows(families: tuple[str, ...] = ()) -> list[dict]:
    from introspect.adapters.hf_config import spec_from_config

    out = []
    for family, tied, shape, dtype, rank, batch, seq, compiled, held in other_grid(families):
        raw = other_config(family, tied, shape)
        d, layers, f, heads, kv, vocab = shape
        name = f"{family} d={d} L={layers} h={heads}/{heads if family in MHA else kv} V={vocab}"
        spec = spec_from_config(raw, source=name, use_transformers=False)
        setup = setup_of(rank, batch, seq, compiled, dtype)
        out.append(row(raw, name, spec, setup, dtype, layers=layers, held_out=held, family=family))
    return out


def keys_rows(structures: tuple[str, ...] = KEYS_STRUCTURES) -> list[dict]:
    """Real mlx-lm LoRA steps with named keys (:data:`NAMED`) of ``structures`` (tied as
    :data:`introspect.refined.mlx.STRUCTURES` says) at the held-out shapes, beside the
    estimate from those keys' counts."""
    from introspect.adapters.hf_config import spec_from_config

    from introspect.refined import mlx

    out = []
    for structure in structures:
        family, tied = mlx.STRUCTURES[structure]
        for keys in NAMED:
            for i, dtype, rank, batch, seq in KEYS_GRID:
                for compiled in (False, True):
                    raw = other_config(family, tied, HELD_OUT[i])
                    d, layers, f, heads, kv, vocab = HELD_OUT[i]
                    name = f"{family} d={d} L={layers} h={heads}/{kv} V={vocab}"
                    name += "" if tied else " (untied)"
                    spec = spec_from_config(raw, source=name, use_transformers=False)
                    setup = setup_of(rank, batch, seq, compiled, dtype)
                    setup = setup.replace(lora_targets=keys)
                    out.append(
                        row(raw, name, spec, setup, dtype, layers=layers, family=structure,
                            keys=",".join(keys))
                    )  # fmt: skip
    return out


def keys_section(rows: list[dict], seconds: float) -> list[str]:
    """The named-keys rows: the table and its summary."""
    if not rows:
        return []
    groups = [("all rows", lambda r: True)]
    groups += [(k, lambda r, k=k: r["keys"] == k) for k in dict.fromkeys(r["keys"] for r in rows)]
    groups += [
        (f, lambda r, f=f: r["family"] == f) for f in dict.fromkeys(r["family"] for r in rows)
    ]
    groups += [
        ("eager", lambda r: not r["compiled"]),
        ("compiled", lambda r: r["compiled"]),
        ("BF16 base", lambda r: r["dtype"] == "bf16"),
    ]
    lines = [
        "| keys | " + table(rows)[0].lstrip("| "),
        "|---" + table(rows)[1],
    ]
    lines += [f"| {r['keys']} " + line for r, line in zip(rows, table(rows)[2:], strict=True)]
    return [
        "",
        "## Named keys (mlx-lm's lora_parameters.keys; all held out)",
        "",
        f"    python benchmarks/mlx_lora.py --keys    # {seconds:.0f} s (rows: {KEYS_JSON.name}; "
        "`--keys STRUCTURE ...` reruns those structures' rows)",
        "",
        "`linear_to_lora_layers(model, -1, {rank, scale 20, dropout 0, keys})` with the "
        "block's paths ending in the names given (`self_attn.q_proj` for q_proj: "
        "`introspect.measure.mlx_lm_models.lora_keys`), the rest of the block frozen "
        "with no adapter. *estimate*: from those keys' own counts (`python "
        "benchmarks/mlx_derive.py --lora-keys NAMES STRUCTURE`: replays only, B=3, d=128, "
        "8 heads / 2 K/V, f=216, r=6, T ∈ {44, 176}, V ∈ {1000, 4000, 16000}, L = 1–10, 16, "
        "32); every row's shape is held out (d = 96 and 160, L = 3 and 6, GQA and MQA). "
        "*fallback*: torch's moments, what these setups were priced on before their counts "
        "(issue 23). Run after the counts were read; nothing was changed after a run.",
        "",
        *lines,
        "",
        *summary(rows, groups),
    ]


def save_keys(rows: list[dict], seconds: dict[str, int]) -> None:
    """The named-keys rows and each structure's seconds to :data:`KEYS_JSON` (every
    writer's section reads them)."""
    _save(KEYS_JSON, "--keys", rows, seconds)


def _save(path: Path, flag: str, rows: list[dict], seconds: dict[str, int]) -> None:
    """One section's rows and each structure's seconds to ``path``, with the command that
    reruns it."""
    import json

    path.write_text(
        json.dumps({"command": f"python benchmarks/mlx_lora.py {flag} [STRUCTURE ...]",
                    "rows": rows, "seconds": seconds}, indent=1) + "\n"
    )  # fmt: skip


def merged_keys(structures: tuple[str, ...], start: float) -> tuple[list[dict], dict[str, int]]:
    """``--keys [STRUCTURE ...]``: the named-keys rows of the structures named rerun (all
    of :data:`KEYS_STRUCTURES` when none is), the others' kept from :data:`KEYS_JSON`,
    with the seconds each structure's rows took."""
    return _merged("--keys", structures, KEYS_STRUCTURES, KEYS_JSON, keys_rows, start)


def _merged(
    flag: str,
    structures: tuple[str, ...],
    known: tuple[str, ...],
    path: Path,
    rows_of,
    start: float,
) -> tuple[list[dict], dict[str, int]]:
    """A section's rows of the structures named rerun by ``rows_of`` (all ``known`` when
    none is), the others' kept from ``path``, with the seconds each structure's rows took."""
    import json

    unknown = [s for s in structures if s not in known]
    if unknown:
        raise SystemExit(f"{flag} {unknown[0]}: not one of {', '.join(known)}")
    ran = structures or known
    rows = rows_of(ran)
    seconds = {s: round((time.perf_counter() - start) / len(ran)) for s in ran}
    if structures and path.exists():
        kept = json.loads(path.read_text(encoding="utf-8"))
        rows = [r for r in kept["rows"] if r["family"] not in ran] + rows
        rows.sort(key=lambda r: known.index(r["family"]))
        seconds = {**{s: t for s, t in kept["seconds"].items() if s not in ran}, **seconds}
    return rows, seconds


def write_keys(rows: list[dict], seconds: dict[str, int]) -> None:
    """``--keys``: the report's other sections kept, its named-keys section replaced."""
    save_keys(rows, seconds)
    kept = REPORT.read_text().split("\n## Named keys", 1)[0].rstrip("\n")
    sections = [*keys_section(rows, sum(seconds.values())), *kept_ckpt_section()]
    REPORT.write_text("\n".join([kept, *sections]) + "\n")


def kept_keys_section() -> list[str]:
    """The named-keys section as :data:`KEYS_JSON` has it (for the other writers)."""
    return _kept(KEYS_JSON, keys_section)


def _kept(path: Path, section) -> list[str]:
    """A section as ``path`` has it, rendered by ``section`` (empty before its first run)."""
    import json

    if not path.exists():
        return []
    doc = json.loads(path.read_text(encoding="utf-8"))
    return section(doc["rows"], sum(doc["seconds"].values()))


#: The checkpointed rows (``--ckpt``): mlx-lm's LoRA with ``grad_checkpoint`` on
#: (``mlx_lm/tuner/trainer.py``: ``mx.checkpoint`` around every block's ``__call__``),
#: every linear adapted, for the structures whose checkpointed LoRA counts are derived
#: (``python benchmarks/mlx_derive_ckpt.py --lora``: replays only, B=3, d=128, 8 heads /
#: 2 K/V, f=216, r=6, T ∈ {44, 176}, V ∈ {1000, 4000, 16000}, L = 1–10, 16, 32), at
#: :data:`HELD_OUT`'s shapes; and over a 4-bit base (``mlx_lm.utils.quantize_model``).
CKPT_JSON = ROOT / "benchmarks" / "results" / "mlx-lora-ckpt.json"
CKPT_STRUCTURES = ("llama", "llama-untied", "qwen2", "qwen3")
#: (shape index, dtype, rank, B, T, num_layers) of each structure's rows, each eager and
#: compiled: both held-out shapes, FP32 and a BF16 base, and the top 2 of 6 blocks.
CKPT_GRID = (
    (0, "fp32", 8, 2, 256, None),
    (0, "bf16", 8, 2, 256, None),
    (1, "fp32", 16, 1, 256, None),
    (1, "fp32", 8, 2, 256, 2),
)
#: The quantized rows: (structure, shape index, bits, group, dtype, B, T), eager and
#: compiled (the group divides d = 96 and 160's 32, not every f).
CKPT_QUANT = (
    ("llama", 0, 4, 32, "fp32", 2, 256),
    ("qwen2", 1, 4, 32, "bf16", 1, 256),
    ("qwen3", 1, 8, 32, "fp32", 2, 128),
)


def quantized_row(raw: dict, name: str, spec, setup, bits: int, group: int, **extra) -> dict:
    """One real checkpointed mlx-lm LoRA step over ``raw`` quantized by
    ``mlx_lm.utils.quantize_model`` (as ``benchmarks/mlx_quantized.py`` builds it), beside
    the estimate with ``base_quant`` affine ``bits``."""
    import mlx.core as mx
    from mlx_lm.utils import quantize_model

    from introspect.measure import mlx_lm_models, mlx_step
    from introspect.refined import estimate

    model = mlx_lm_models.build(raw, name, mlx_step.check_setup(setup))
    quantize_model(model, {}, group, bits)
    mlx_lm_models.to_lora(model, setup.replace(base_quant="auto", group_size=64))
    mx.eval(model.parameters())
    compiled = setup.framework == "mlx_compiled"
    with mlx_lm_models.checkpointed(model, True):
        m = mlx_step.measure_step(
            model, setup, vocab=spec.vocab_size, compiled=compiled, implementation="mlx_lm",
            loss=mlx_lm_models.trainer_loss, repeats=REPEATS,
            inputs=mlx_lm_models.trainer_batch(spec.vocab_size, setup), random_state=True,
        )  # fmt: skip
    now = estimate(spec, setup)
    dtype = "bf16" if setup.weight_bytes == 2 else "fp32"
    print(
        f"{name} affine{bits} g{group} {dtype} r={setup.lora_rank} B={setup.batch_size} "
        f"T={setup.seq_len} {'compiled' if compiled else 'eager'} ckpt: measured "
        f"{m.peak_bytes / 1e6:.2f} MB, estimate {now.total / 1e6:.2f} "
        f"({now.total / m.peak_bytes:.3f})",
        flush=True,
    )
    return dict(
        model=name, dtype=dtype, rank=setup.lora_rank, B=setup.batch_size, T=setup.seq_len,
        compiled=compiled, measured=m.peak_bytes, estimate=now.total, fallback=now.total,
        phase=now.execution.meta.get("peak_phase"), adapters=m.trainable_params,
        base=f"affine{bits} g{group}", **extra,
    )  # fmt: skip


def ckpt_rows(structures: tuple[str, ...] = CKPT_STRUCTURES) -> list[dict]:
    """Real checkpointed mlx-lm LoRA steps of ``structures`` (tied as
    :data:`introspect.refined.mlx.STRUCTURES` says) at the held-out shapes
    (:data:`CKPT_GRID`, :data:`CKPT_QUANT`), beside the estimate from the checkpointed
    LoRA counts. *fallback* here: the refined estimate of the same step without
    checkpointing (what the plain LoRA counts say), for scale."""
    from introspect.adapters.hf_config import spec_from_config

    from introspect.refined import estimate, mlx

    out = []
    for structure in structures:
        family, tied = mlx.STRUCTURES[structure]

        def named(i: int, family: str = family, tied: bool = tied) -> tuple[dict, str, object]:
            raw = other_config(family, tied, HELD_OUT[i])
            d, layers, f, heads, kv, vocab = HELD_OUT[i]
            name = f"{family} d={d} L={layers} h={heads}/{kv} V={vocab}"
            name += "" if tied else " (untied)"
            return raw, name, spec_from_config(raw, source=name, use_transformers=False)

        for i, dtype, rank, batch, seq, k in CKPT_GRID:
            for compiled in (False, True):
                raw, name, spec = named(i)
                setup = setup_of(rank, batch, seq, compiled, dtype).replace(
                    activation_checkpointing=True, num_layers=k
                )
                r = row(raw, name, spec, setup, dtype, layers=k or HELD_OUT[i][1],
                        family=structure, base="dense")  # fmt: skip
                r["fallback"] = estimate(spec, setup.replace(activation_checkpointing=False)).total
                r["num_layers"] = k
                out.append(r)
        for name_of, i, bits, group, dtype, batch, seq in CKPT_QUANT:
            if name_of != structure:
                continue
            for compiled in (False, True):
                raw, name, spec = named(i)
                setup = setup_of(8, batch, seq, compiled, dtype).replace(
                    activation_checkpointing=True, base_quant=f"affine{bits}", group_size=group
                )
                r = quantized_row(raw, name, spec, setup, bits, group,
                                  layers=HELD_OUT[i][1], family=structure)  # fmt: skip
                r["fallback"] = estimate(spec, setup.replace(activation_checkpointing=False)).total
                r["num_layers"] = None
                out.append(r)
    return out


def ckpt_section(rows: list[dict], seconds: float) -> list[str]:
    """The checkpointed rows: the table and its summary."""
    if not rows:
        return []
    groups = [("all rows", lambda r: True)]
    groups += [
        (f, lambda r, f=f: r["family"] == f) for f in dict.fromkeys(r["family"] for r in rows)
    ]
    groups += [
        ("eager", lambda r: not r["compiled"]),
        ("compiled", lambda r: r["compiled"]),
        ("BF16 base", lambda r: r["dtype"] == "bf16"),
        ("num_layers 2 of 6", lambda r: r["num_layers"] == 2),
        ("4-/8-bit base", lambda r: r["base"] != "dense"),
    ]
    head, rule, *body = table(rows)
    lines = ["| base | num_layers " + head, "|---|--:" + rule]
    lines += [
        f"| {r['base']} | {r['num_layers'] or 'all'} " + line
        for r, line in zip(rows, body, strict=True)
    ]
    lines = [x.replace("| fallback MB | fallback/measured |", "| plain MB | plain/measured |")
             for x in lines]  # fmt: skip
    return [
        "",
        "## Checkpointed (mlx-lm's grad_checkpoint; all held out)",
        "",
        f"    python benchmarks/mlx_lora.py --ckpt    # {seconds:.0f} s (rows: {CKPT_JSON.name}; "
        "`--ckpt STRUCTURE ...` reruns those structures' rows)",
        "",
        "mlx-lm's LoRA (every linear, dropout 0) with `grad_checkpoint(model.layers[0])` "
        "(`mlx_lm/tuner/trainer.py`: `mx.checkpoint` around every block's `__call__`). "
        "*estimate*: from the checkpointed LoRA counts (`python benchmarks/mlx_derive_ckpt.py "
        "--lora`: replays of `introspect.measure.mlx_replay_ckpt.checkpointed_step` only, "
        "B=3, d=128, 8 heads / 2 K/V, f=216, r=6, T ∈ {44, 176}, V ∈ {1000, 4000, 16000}, "
        "L = 1–10, 16, 32); every row's shape is held out (d = 96 and 160, L = 3 and 6, "
        "GQA and MQA). The 4-/8-bit rows: the model quantized by `mlx_lm.utils."
        "quantize_model` before `linear_to_lora_layers` (LoRALinear over QuantizedLinear), "
        "the base priced by `affine_base_bytes` under the same counts. *plain*: the estimate "
        "of the same step without checkpointing, for scale (not a check). Run after the "
        "counts were read.",
        "",
        *lines,
        "",
        *[x.replace("| fallback | fallback/measured |", "| plain | plain/measured |")
          for x in summary(rows, groups)],
    ]  # fmt: skip


def save_ckpt(rows: list[dict], seconds: dict[str, int]) -> None:
    _save(CKPT_JSON, "--ckpt", rows, seconds)


def merged_ckpt(structures: tuple[str, ...], start: float) -> tuple[list[dict], dict[str, int]]:
    """``--ckpt [STRUCTURE ...]``: the checkpointed rows of the structures named rerun (all
    of :data:`CKPT_STRUCTURES` when none is), the others' kept from :data:`CKPT_JSON`."""
    return _merged("--ckpt", structures, CKPT_STRUCTURES, CKPT_JSON, ckpt_rows, start)


def write_ckpt(rows: list[dict], seconds: dict[str, int]) -> None:
    """``--ckpt``: the report's other sections kept, its checkpointed section replaced."""
    save_ckpt(rows, seconds)
    kept = REPORT.read_text().split("\n## Checkpointed", 1)[0].rstrip("\n")
    REPORT.write_text("\n".join([kept, *ckpt_section(rows, sum(seconds.values()))]) + "\n")


def kept_ckpt_section() -> list[str]:
    """The checkpointed section as :data:`CKPT_JSON` has it (for the other writers)."""
    return _kept(CKPT_JSON, ckpt_section)


def within(rows: list[dict], key: str) -> int:
    return sum(abs(r[key] / r["measured"] - 1) <= BAND for r in rows)


def span(rows: list[dict], key: str) -> str:
    ratios = [r[key] / r["measured"] for r in rows]
    return f"{min(ratios):.3f} to {max(ratios):.3f}"


#: Summary lines: label → which rows.
GROUPS = (
    ("all rows", lambda r: True),
    ("L ≥ 4 (between the shared derived depths 4–32)", lambda r: r["layers"] >= 4),
    ("L < 4 (from the LoRA counts at L = 2 to those at 4)", lambda r: r["layers"] < 4),
    ("eager", lambda r: not r["compiled"]),
    ("compiled", lambda r: r["compiled"]),
    ("BF16 base", lambda r: r["dtype"] == "bf16"),
    (
        "the first 56 (they informed the L = 2 counts and the upcasts)",
        lambda r: r["model"] not in FRESH,
    ),
    ("fresh: models added after the last term, first run", lambda r: r["model"] in FRESH),
)


def table(rows: list[dict]) -> list[str]:
    lines = [
        "| model | dtype | r | B | T | step | adapters | measured MB | estimate MB | "
        "estimate/measured | fallback MB | fallback/measured | estimate's phase |",
        "|---|---|--:|--:|--:|---|--:|--:|--:|--:|--:|--:|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['model']} | {r['dtype']} | {r['rank']} | {r['B']} | {r['T']} | "
            f"{'compiled' if r['compiled'] else 'eager'} | {r['adapters']:,} | "
            f"{r['measured'] / 1e6:.2f} | {r['estimate'] / 1e6:.2f} | "
            f"{r['estimate'] / r['measured']:.3f} | {r['fallback'] / 1e6:.2f} | "
            f"{r['fallback'] / r['measured']:.3f} | {r['phase']} |"
        )
    return lines


def summary(rows: list[dict], groups) -> list[str]:
    lines = ["| rows | n | estimate | estimate/measured | fallback | fallback/measured |"]
    lines += ["|---|--:|--:|---|--:|---|"]
    for label, pick in groups:
        sel = [r for r in rows if pick(r)]
        if sel:
            lines.append(
                f"| {label} | {len(sel)} | {within(sel, 'estimate')} | {span(sel, 'estimate')} "
                f"| {within(sel, 'fallback')} | {span(sel, 'fallback')} |"
            )
    return lines


def other_section(rows: list[dict], seconds: float | None = None) -> list[str]:
    """The other structures' rows: the held-out shapes, then the derivation shape apart
    (``seconds``: the section was written alone, by ``--other``)."""
    if not rows:
        return []
    held = [r for r in rows if r["held_out"]]
    derived = [r for r in rows if not r["held_out"]]
    groups = [("all held-out rows", lambda r: True)]
    families = dict.fromkeys(r["family"] for r in rows)
    groups += [(f, lambda r, f=f: r["family"] == f) for f in families]
    groups += [
        ("eager", lambda r: not r["compiled"]),
        ("compiled", lambda r: r["compiled"]),
        ("BF16 base", lambda r: r["dtype"] == "bf16"),
    ]
    return [
        "",
        "## Other structures (mlx-lm's, where their LoRA counts are derived)",
        "",
        *(
            [
                f"    python benchmarks/mlx_lora.py --other    # {seconds:.0f} s (rows: "
                f"{OTHER_JSON.name}; `--other FAMILY ...` reruns those families' rows)",
                "",
            ]
            if seconds
            else []
        ),
        "Their LoRA counts: `python benchmarks/mlx_derive.py --lora STRUCTURE` (replays only, "
        "the shapes above, L = 1–10, 16 and 32; Qwen3's and Phi's L ∈ {1, 2, 3, 4, 10, 16, "
        "32}); mlx-lm's default keys adapt every nn.Linear of a block (Phi-3's fused qkv_proj "
        "and gate_up_proj one adapter each, GPT-2's c_attn, c_proj, c_fc, c_proj). "
        "*fallback*: torch's moments, what these estimates were before their counts.",
        "",
        "### Held-out shapes (d = 96 and 160, L = 3 and 6, MQA and GQA: no derivation shape)",
        "",
        *table(held),
        "",
        *summary(held, groups),
        "",
        "### At a derivation shape (B=3, d=128, 8 heads / 2 K/V, f=216, r=6, T=44, V=1000, "
        "L=4): not held out",
        "",
        *table(derived),
        "",
        *summary(derived, [("at the derivation shape", lambda r: True)]),
    ]


def write(rows: list[dict], seconds: float, others: list[dict] = ()) -> None:
    import importlib.metadata

    version = importlib.metadata.version
    lines = [
        "# mlx-lm LoRA steps (MLX CPU) vs the refined estimate",
        "",
        "    python benchmarks/mlx_lora.py    # this file",
        "",
        f"mlx {version('mlx')}, mlx-lm {version('mlx-lm')}, CPU; {seconds:.0f} s. Each row: "
        "mlx-lm's class at the shape named, `model.freeze()` and "
        "`linear_to_lora_layers(model, -1, {rank, scale 20, dropout 0})` (mlx-lm's default "
        "keys: every nn.Linear of each block = all-linear), Adam over the FP32 adapters, "
        f"`default_loss`; the peak is `mx.get_peak_memory()`, the largest of {REPEATS} "
        "steps after a warm-up. *estimate*: `introspect.refined.estimate(spec, setup).total` "
        "as the code stands (`introspect.refined.mlx`'s LoRA counts, derived by "
        "`python benchmarks/mlx_derive.py --lora` from replays only, at B=3, d=128, 8 heads "
        "(2 K/V), f=216, r=6, T ∈ {44, 176}, V ∈ {1000, 4000, 16000}, L ∈ {2, 4, 10, 16, 32}: "
        "**every row below is held out**, no row's shape was derived at); *fallback*: the "
        "same with MLX's moments limited to full fine-tuning (torch's LoRA moments: the "
        "estimate before MLX LoRA was modelled).",
        "",
    ]
    lines += table(rows)
    lines += ["", "## Summary (within ±5% of the measured peak)", ""]
    lines += summary(rows, GROUPS)
    lines += ["", HISTORY]
    lines += other_section(list(others))
    lines += kept_keys_section()
    lines += kept_ckpt_section()
    lines += [""]
    REPORT.write_text("\n".join(lines))


def write_other(others: list[dict], seconds: float) -> None:
    """``--other``: the report's Llama/Qwen2 part kept as it is, its other structures'
    section replaced by ``others``."""
    kept = REPORT.read_text().split("\n## Other structures", 1)[0].rstrip("\n")
    sections = [*other_section(others, seconds), *kept_keys_section(), *kept_ckpt_section()]
    REPORT.write_text("\n".join([kept, *sections]) + "\n")


def merged_other(families: tuple[str, ...], fresh: list[dict], seconds: float) -> list[dict]:
    """The other structures' rows of :data:`OTHER_JSON` with those of ``families``
    replaced by ``fresh`` (all of them when none is named), in :func:`other_grid`'s
    order, written back with the seconds each family's run took, and the report's
    other structures' section rewritten from them (:func:`write_other`)."""
    import fcntl
    import json
    import tempfile

    # runs for different families may go side by side: one merges and writes at a time
    with open(Path(tempfile.gettempdir()) / "mlx-lora-other.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        kept = {"rows": [], "seconds": {}}
        if families and OTHER_JSON.exists():
            kept = json.loads(OTHER_JSON.read_text(encoding="utf-8"))
        ran = families or tuple(dict.fromkeys(r["family"] for r in fresh))
        rows = [r for r in kept["rows"] if r["family"] not in ran] + fresh
        order = [f for f, _ in OTHER_STRUCTURES]
        rows.sort(key=lambda r: (order.index(r["family"]), not r["held_out"]))
        times = {f: t for f, t in kept["seconds"].items() if f not in ran}
        times.update({f: round(seconds / len(ran)) for f in ran})
        doc = {"command": "python benchmarks/mlx_lora.py --other [FAMILY ...]", "rows": rows}
        OTHER_JSON.write_text(json.dumps({**doc, "seconds": times}, indent=1) + "\n")
        if families:
            write_other(rows, sum(times.values()))
    return rows


def main() -> None:
    start = time.perf_counter()
    if sys.argv[1:2] == ["--other"]:
        families = tuple(sys.argv[2:])
        unknown = [f for f in families if f not in dict(OTHER_STRUCTURES)]
        if unknown:
            names = ", ".join(f for f, _ in OTHER_STRUCTURES)
            raise SystemExit(f"--other {unknown[0]}: not one of {names}")
        fresh = other_rows(families)
        merged_other(
            families or tuple(f for f, _ in OTHER_STRUCTURES), fresh, time.perf_counter() - start
        )
        print(REPORT.read_text())
        return
    if sys.argv[1:2] == ["--keys"]:
        write_keys(*merged_keys(tuple(sys.argv[2:]), start))
        print(REPORT.read_text())
        return
    if sys.argv[1:2] == ["--ckpt"]:
        write_ckpt(*merged_ckpt(tuple(sys.argv[2:]), start))
        print(REPORT.read_text())
        return
    found = rows()
    others = other_rows()
    merged_other((), others, 0.0)
    save_keys(*merged_keys((), time.perf_counter()))
    write(found, time.perf_counter() - start, others)
    print(REPORT.read_text())


if __name__ == "__main__":
    main()
