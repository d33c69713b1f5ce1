"""Derive the MLX closed form's counts for checkpointed steps, from replays.

    python benchmarks/mlx_derive_ckpt.py [STRUCTURE ...]
        # writes introspect/refined/data/mlx_ckpt_counts/<structure>.json

mlx-lm's ``grad_checkpoint`` step could not be replayed (``mx.export_function`` cannot
record ``mx.checkpoint``'s ``CustomTransforms``);
:func:`introspect.measure.mlx_replay_ckpt.checkpointed_step` builds the same graph
traceably. This reads its counts exactly as ``benchmarks/mlx_derive.py`` reads the
plain step's — the same derivation shapes, the largest moment overall and within the
update at L = 4, 10, 16, 32 and (its ``--shallow``) 1, 2, 3, and (its ``--short``) the
T = 12 shapes at those depths and 20, 24, 28 — and every main shape at L = 5–9 too (the
dense classes' ``between``: :func:`add_between` says why), with that step in place of
``make_step``'s; the keys are ``<structure>/<dtype>/<eager|compiled>/ckpt``.

    python benchmarks/mlx_derive_ckpt.py --between [STRUCTURE ...]   # add L = 5–9 only
    python benchmarks/mlx_derive_ckpt.py --dtype=bf16 llama          # one dtype, others kept
    python benchmarks/mlx_derive_ckpt.py --lora [STRUCTURE ...]      # checkpointed LoRA

``--lora`` reads mlx-lm's LoRA step with ``grad_checkpoint`` on (``mlx_lm/tuner/
trainer.py`` ``grad_checkpoint``: ``mx.checkpoint`` around every layer's ``__call__``,
which ``mlx_lm.lora --grad-checkpoint`` applies to ``model.layers[0]``'s class, so to
every block, the frozen ones below ``num_layers`` included) as ``mlx_derive.py --lora
STRUCTURE`` reads the plain LoRA step — every ``nn.Linear`` of every block adapted
(mlx-lm's default keys), r = 6, the same six shapes, at L = 1–10, 16 and 32 — with
:func:`introspect.measure.mlx_replay_ckpt.checkpointed_step` in place of ``make_step``'s
(each layer's VJP over its adapters only); the keys are
``<structure>/<dtype>/<eager|compiled>/lora/ckpt`` (:data:`LORA_CKPT_STRUCTURES`).

Only the structures :data:`introspect.refined.mlx.CKPT_STRUCTURES` (mlx-lm classes with
``model.embed_tokens`` and ``input_embeddings``, which the traceable step needs), and for
``--lora`` :data:`introspect.refined.mlx.LORA_CKPT_STRUCTURES`.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import mlx_derive as derive  # noqa: E402

OUT = ROOT / "introspect" / "refined" / "data" / "mlx_ckpt_counts"


def build(structure, dtype, shape, layers, compiled, lora=False, keys=()):
    """``mlx_derive.build`` with the checkpointed step (mlx-lm's LoRA under ``lora``)."""
    from introspect.measure.mlx_replay_ckpt import checkpointed_step

    model, optimizer, _, batch = plain_build(structure, dtype, shape, layers, compiled, lora, keys)
    return model, optimizer, checkpointed_step(model, optimizer, compiled), batch


plain_build = derive.build


def counts_of(structure: str, dtype: str, compiled: bool) -> list[dict]:
    rows = derive.derive(structure, dtype, compiled)
    derive.add_shallow(structure, dtype, compiled, False, rows)
    rows = derive.add_short(structure, dtype, compiled, rows)
    return add_between(structure, dtype, compiled, rows)


def add_between(structure: str, dtype: str, compiled: bool, rows: list[dict]) -> list[dict]:
    """``rows`` with each main shape's candidates counted at L = 5–9 too (their
    ``between``; ``mlx_derive.DENSE_BETWEEN``): the checkpointed step's largest moment
    changes op between L = 4 and 10 (a checkpointed Qwen2 at T = 512: at L = 4 and 10 a
    ``Reduce`` with three layers' B·h·T² alive, the closed form on it to the byte; at
    L = 6 the recompute's q/k/v ``AddMM``, 10% under the line between them)."""
    for shape in derive.SHAPES:
        mine = [
            c
            for c in rows
            if (c["shape"]["seq"], c["shape"]["vocab"]) == (shape["seq"], shape["vocab"])
        ]
        if not mine:
            continue
        dims = derive.dims_of(structure, dict(shape))
        depths = derive.DENSE_BETWEEN
        tapes = [derive.tape(structure, dtype, compiled, dict(shape), L)[0] for L in depths]
        for c, phase in zip(mine, ("any", "optimizer_step"), strict=False):
            tops = [
                max((x for x in t if phase in ("any", x[1])), key=lambda x: sum(x[2].values()))
                for t in tapes
            ]
            c["between"] = derive.fit(structure, dtype, tops, dims, depths)["at"]
    return rows


def lora_of(structures: list[str]) -> None:
    """``--lora STRUCTURE ...``: each dtype's and compilation's checkpointed LoRA counts
    (``mlx_derive.derive`` with ``lora``: L = 1–10, 16, 32 at the six shapes), the
    structure's file written after each key."""
    from introspect.refined import mlx as closed

    for structure in structures:
        for dtype in ("fp32", "bf16"):
            for compiled in (False, True):
                k = closed.key(structure, dtype, compiled, lora=True) + "/ckpt"
                rows = derive.derive(structure, dtype, compiled, lora=True)
                print(k, len(rows), "candidates", flush=True)
                write(structure, {k: rows})


def depths_as_ints(row: dict) -> dict:
    """A candidate row with its depths as ints, in order (a file's are strings)."""
    out = dict(row)
    for part in ("at", "shallow", "between"):
        if part in row:
            out[part] = {int(L): v for L, v in sorted(row[part].items(), key=lambda x: int(x[0]))}
    return out


def write(structure: str, new: dict[str, list[dict]]) -> None:
    """The structure's file with ``new``'s keys (the others already there kept)."""
    import json

    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / f"{structure}.json"
    keys = json.loads(path.read_text())["counts"] if path.exists() else {}
    keys.update(new)
    keys = {k: [depths_as_ints(c) for c in rows] for k, rows in keys.items()}
    doc = {
        "about": [
            "Generated by `python benchmarks/mlx_derive_ckpt.py`: do not edit by hand.",
            f"For each dtype and compilation of {structure} checkpointed (mlx-lm's "
            "grad_checkpoint): the candidate moments of MLX's peak,",
            "bytes per element of each shape kind alive beyond the weights and Adam state "
            "at each depth L counted (see introspect/refined/mlx.py).",
            "Read from replays of the traced step (introspect/measure/mlx_replay_ckpt.py), "
            "never from a measured one.",
        ],
        "command": _command(structure, keys),
        "derivation": derive.derivation(structure, keys),
        "counts": keys,
    }
    path.write_text(derive.dump(doc, 0) + "\n", encoding="utf-8")


def _command(structure: str, keys: dict) -> str:
    """The commands that derive ``keys``: ``--lora`` for the LoRA keys; for the others
    ``--dtype=`` where only one dtype's keys are there (the default derives both)."""
    commands = []
    if any("/lora/" in k for k in keys):
        commands.append(f"python benchmarks/mlx_derive_ckpt.py --lora {structure}")
    dtypes = sorted({k.split("/")[1] for k in keys if "/lora/" not in k})
    if dtypes == ["bf16", "fp32"]:
        commands.append(f"python benchmarks/mlx_derive_ckpt.py {structure}")
    else:
        script = "python benchmarks/mlx_derive_ckpt.py"
        commands += [f"{script} --dtype={d} {structure}" for d in dtypes]
    return "; ".join(commands)


def main() -> None:
    from introspect.refined import mlx as closed

    derive.build = build
    if sys.argv[1:2] == ["--between"]:  # add L = 5–9 to the keys already derived
        import json

        for structure in sys.argv[2:] or closed.CKPT_STRUCTURES:
            path = OUT / f"{structure}.json"
            keys = json.loads(path.read_text())["counts"]
            for k, rows in keys.items():
                if "/lora/" in k:  # --lora reads L = 5–9 already
                    continue
                dtype, mode = k.split("/")[1:3]
                keys[k] = add_between(structure, dtype, mode == "compiled", rows)
                print(k, "between", flush=True)
                write(structure, {k: keys[k]})
        return
    if sys.argv[1:2] == ["--lora"]:  # checkpointed LoRA, every other key kept
        lora_of(sys.argv[2:] or list(closed.LORA_CKPT_STRUCTURES))
        return
    names = sys.argv[1:] or list(closed.CKPT_STRUCTURES)
    dtypes = [a.split("=", 1)[1] for a in names if a.startswith("--dtype=")] or ["fp32", "bf16"]
    for structure in (n for n in names if not n.startswith("--")):
        keys = {}
        for dtype in dtypes:
            for compiled in (False, True):
                k = closed.key(structure, dtype, compiled) + "/ckpt"
                keys[k] = counts_of(structure, dtype, compiled)
                print(k, len(keys[k]), "candidates", flush=True)
                write(structure, keys)


if __name__ == "__main__":
    main()
