"""Every pair of the setups users run, the closed form held to the whole-stack dry run.

Run:  .venv/bin/python benchmarks/combinations.py --seed 0     # development
      .venv/bin/python benchmarks/combinations.py --draw       # a fresh seed, printed first

A covering array (every pair of levels of every two dimensions in at least one row:
:mod:`covering`, a seeded greedy AETG construction) over :func:`dimensions` — the family
(``tests/small_configs.py``'s, at d = 256 or 512 with its published vocabulary:
:func:`scaled`), fine-tuning, sharding, D, offload, precision, checkpointing, attention,
cross-entropy, optimizer, the loop, B, T, and gradient accumulation where
``TrainingSetup`` has it. Each row is one ``TrainingSetup`` (the table maps each level
to its fields); for it:

* the closed form as ``introspect profile`` prices it: ``unmodelled.check_closed_form``
  then ``refined.estimate`` (``introspect/commands/profile.py``);
* the truth, the whole stack as a dry run (FakeTensorMode): one device,
  ``introspect.measure.runner.measure(..., device="fake", impl="transformers")`` (a
  ``--devices D`` replica without sharding is one device's step); a sharded setup,
  ``introspect.measure.fake_sharded.dry_run`` where that module exists
  (:data:`SHARDED_DRY_RUN`; DeepSpeed's ZeRO-2/3 have none).

Which rows: first a probe — the base row (every dimension's first level) and one row per
other level with the rest at the base — says which levels run at all on this branch.
The array then holds valid rows first (only levels that ran in their probe, each row
passing every cheap check of both sides: :func:`prepare`), covering every pair they can,
and after them rows covering the pairs left, which hold a level that does not run (or a
pair that is refused together): so the array covers every pair, and the rows it runs
are not spent on a level that cannot run. The rows depend on the seed and on what runs
on the branch; the JSON keeps both the probe and the rows.

A row that a side refuses or cannot run is counted under its outcome and reason, never
dropped: ``setup refused`` (``TrainingSetup``/``applies.py``), ``closed form refused``
(``NotModelled``, the class refusal), ``dry run refused`` (the dry run's own line),
``no dry run`` (no module runs that setup as a dry run yet) and ``failed`` (an
unexpected exception: a bug, shown with its type). Error = closed form / dry run − 1.
A row's cause: the tracker category (``refined.causes.tracker_category``) whose bytes
differ most, the closed form's largest term in it and the module computing that term
(``introspect.terms``); for the worst rows (``--isolate``), the level that makes the
error: each non-base level set back to the base's in turn, the one whose reverting
leaves the smallest error named.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))
import covering  # noqa: E402
from small_configs import FAMILIES  # noqa: E402

#: Each family's published vocabulary (its config.json's ``vocab_size``), so the logits
#: weigh what they weigh in the models users train.
VOCAB = {
    "llama": 32000, "ministral": 131072, "qwen2": 151936, "qwen3": 151936, "gemma": 256000,
    "gemma2": 256000, "gemma3_text": 262144, "phi": 51200, "phi3": 32064, "olmo2": 100352,
    "cohere2": 256000, "gpt2": 50257, "mixtral": 32000, "qwen3_moe": 151936,
    "qwen2_moe": 151936, "gpt_oss": 201088, "deepseek_v3": 129280, "llama4_text": 202048,
    "qwen3_next": 151936,
}  # fmt: skip

#: Widths small_configs.py sets for d = 256, scaled with d (the other keys are kept).
_WIDTHS = (
    "intermediate_size", "moe_intermediate_size", "shared_expert_intermediate_size",
    "intermediate_size_mlp",
)  # fmt: skip


def scaled(name: str, d: int) -> dict:
    """``FAMILIES[name]`` at hidden size ``d`` (8 heads: 32–64 wide), its widths scaled by
    d / 256 (f = 2.5·d for the dense ones) and the family's own vocabulary."""
    raw = dict(FAMILIES[name])
    factor = d / 256
    if raw["model_type"] == "gpt2":
        return dict(raw, n_embd=d, vocab_size=VOCAB["gpt2"], n_positions=1024)
    raw["hidden_size"] = d
    for key in _WIDTHS:
        if key in raw:
            raw[key] = int(raw[key] * factor)
    raw["vocab_size"] = VOCAB.get(raw["model_type"], raw["vocab_size"])
    return raw


@dataclass(frozen=True)
class Dimension:
    """One axis of the array: its levels and the ``TrainingSetup`` fields each sets
    (``fields`` None: the level shapes the model's config instead)."""

    name: str
    levels: tuple
    fields: Callable[[object], dict] | None = None


#: Sharding levels → TrainingSetup fields (``setup.SHARDINGS``; ZeRO-1 is torch's
#: ZeroRedundancyOptimizer under DDP, ZeRO-2/3 DeepSpeed's, fsdp FSDP2's fully_shard).
SHARDING = {
    "none": dict(sharding="none"),
    "ddp": dict(sharding="ddp"),
    "zero1": dict(sharding="zero", zero_stage=1),
    "zero2": dict(sharding="zero", zero_stage=2),
    "zero3": dict(sharding="zero", zero_stage=3),
    "fsdp": dict(sharding="fsdp"),
    "fsdp_keep": dict(sharding="fsdp", reshard_after_forward=False),
}


def _field(name: str) -> Callable[[object], dict]:
    return lambda level: {name: level}


def dimensions() -> tuple[Dimension, ...]:
    """The array's axes, read from ``introspect.setup`` where it lists the choices (a
    new cross-entropy or a ``grad_accum`` field plugs in as a level or an axis)."""
    from introspect import setup
    from introspect._record import field_names

    dims = [
        Dimension("family", tuple(FAMILIES)),
        Dimension("d", (256, 512)),
        Dimension("finetune", setup.FINETUNES, _field("finetune")),
        Dimension("sharding", tuple(SHARDING), SHARDING.__getitem__),
        Dimension("devices", (2, 8), _field("devices")),
        Dimension("offload", setup.OFFLOADS, _field("offload")),
        Dimension("precision", setup.PRECISIONS, _field("precision")),
        Dimension("checkpointing", (False, True), _field("activation_checkpointing")),
        Dimension("attention", setup.ATTENTIONS, _field("attention")),
        Dimension("cross_entropy", setup.CROSS_ENTROPIES, _field("cross_entropy")),
        Dimension(
            "optimizer", tuple(o for o in setup.OPTIMIZERS if o != "none"), _field("optimizer")
        ),  # fmt: skip
        Dimension("loop", setup.LOOPS, _field("loop")),
        Dimension("batch", (1, 2), _field("batch_size")),
        Dimension("seq", (128, 512), _field("seq_len")),
    ]
    if "grad_accum" in field_names(setup.TrainingSetup):
        dims.append(Dimension("grad_accum", (1, 4), _field("grad_accum")))
    return tuple(dims)


def setup_fields(levels: dict, dims: tuple[Dimension, ...] | None = None) -> dict:
    """The TrainingSetup fields of one row: every dimension's, and what a dry run of
    transformers' class is (``device="cpu"``: fake tensors live on the CPU, as
    ``introspect measure --device fake`` sets it)."""
    out = dict(implementation="transformers", device="cpu")
    for d in dims or dimensions():
        if d.fields is not None:
            out.update(d.fields(levels[d.name]))
    return out


def label(levels: dict) -> str:
    """A row in a few words."""
    lv = levels
    parts = [
        f"{lv['family'].split(',')[0]} d{lv['d']}", lv["finetune"],
        lv["sharding"] + (f" D{lv['devices']}" if lv["sharding"] != "none" else ""),
        f"off:{lv['offload']}" if lv["offload"] != "none" else "", lv["precision"],
        "ckpt" if lv["checkpointing"] else "", "sdpa" if lv["attention"] != "eager" else "eager",
        f"ce:{lv['cross_entropy']}" if lv["cross_entropy"] != "standard" else "",
        lv["optimizer"], lv["loop"], f"B{lv['batch']} T{lv['seq']}",
        f"accum{lv['grad_accum']}" if lv.get("grad_accum", 1) != 1 else "",
    ]  # fmt: skip
    return " ".join(p for p in parts if p)


# ---- the truth: which dry run runs a row ---------------------------------------------

#: Sharding levels whose dry run is ``introspect.measure.fake_sharded.dry_run`` (DDP,
#: torch's ZeRO-1 and FSDP2, the steps ``measure/distributed_worker.py`` runs for real).
SHARDED_DRY_RUN = ("ddp", "zero1", "fsdp", "fsdp_keep")
#: Why the other sharded levels have no truth here.
NO_DRY_RUN = {
    "zero2": "DeepSpeed ZeRO-2 is run by no step here (refined/sharding.py prices it from "
    "DeepSpeed's source)",
    "zero3": "DeepSpeed ZeRO-3 is run by no step here (refined/sharding.py prices it from "
    "DeepSpeed's source)",
}
_NO_SHARDED = (
    "introspect.measure.fake_sharded (the one-process sharded dry run) is not on this branch yet"
)


class Refused(Exception):
    """A side that will not price or run the row: ``outcome`` (``setup refused``,
    ``closed form refused``, ``dry run refused``, ``no dry run``) and the one line."""

    def __init__(self, outcome: str, reason: str):
        super().__init__(reason)
        self.outcome, self.reason = outcome, reason


def _where(err: BaseException) -> str:
    """The innermost frame of ``err``'s traceback inside introspect (else the innermost
    one): where a failed row's bug is, for its report."""
    import traceback

    frames = traceback.extract_tb(err.__traceback__)
    ours = [f for f in frames if "/introspect/" in f.filename] or frames
    f = ours[-1]
    name = f.filename
    if "/introspect/" in name:
        name = "introspect/" + name.split("/introspect/")[-1]
    return f"{name}:{f.lineno} {f.name}"


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return text[0] if text else type(err).__name__


@cache
def model(family: str, d: int):
    """(raw config, where it came from, ModelSpec) of a family at width ``d``."""
    from introspect.adapters.hf_config import spec_from_config

    raw = scaled(family, d)
    return raw, f"tests/small_configs.py {family!r} at d={d}", spec_from_config(raw, source=family)


def prepare(levels: dict, dims: tuple[Dimension, ...] | None = None):
    """The row's TrainingSetup and model, every cheap check of both sides passed (no
    estimate, no step): the setup's own (``TrainingSetup``, ``applies.py``),
    ``introspect profile``'s (``unmodelled.check_closed_form``) and the dry run's
    (:func:`dry_run_check`). Raises :class:`Refused`."""
    from introspect.errors import IntrospectError
    from introspect.setup import TrainingSetup
    from introspect.unmodelled import check_closed_form

    try:
        setup = TrainingSetup(**setup_fields(levels, dims))
    except (ValueError, IntrospectError) as err:
        raise Refused("setup refused", _first_line(err)) from err
    raw, where, spec = model(levels["family"], levels["d"])
    try:
        check_closed_form(spec, setup)
    except (ValueError, IntrospectError) as err:
        raise Refused("closed form refused", _first_line(err)) from err
    dry_run_check(levels, setup)
    return setup, raw, where, spec


def dry_run_check(levels: dict, setup) -> None:
    """What the row's dry run refuses before it builds anything: one device, what
    ``introspect measure`` checks (``applies.unmeasured``, ``measure.supported``); a
    sharded step, whether a module runs it (:data:`SHARDED_DRY_RUN`) and that module's
    own ``check``."""
    import importlib.util

    from introspect import applies
    from introspect.errors import IntrospectError
    from introspect.measure.supported import measured_dtype

    how = levels["sharding"]
    if how in NO_DRY_RUN:
        raise Refused("no dry run", NO_DRY_RUN[how])
    try:
        if how != "none":
            if importlib.util.find_spec("introspect.measure.fake_sharded") is None:
                raise Refused("no dry run", _NO_SHARDED)
            from introspect.measure import fake_sharded

            applies.unmeasured(setup, "measure")
            if hasattr(fake_sharded, "check"):
                fake_sharded.check(setup)
            return
        applies.unmeasured(setup, "measure")
        measured_dtype(replica(setup), "torch")
    except (ValueError, IntrospectError) as err:
        raise Refused("dry run refused", _first_line(err)) from err


def replica(setup):
    """A ``--devices D`` setup without sharding is D copies of one device's step."""
    return setup.replace(devices=1) if setup.devices > 1 else setup


@dataclass(frozen=True)
class Truth:
    """What a dry run found, and the categories both sides are compared in."""

    peak_bytes: int
    peak_phase: str | None
    #: The dry run's bytes at its peak by category, and the closed form's in the same.
    categories: dict[str, int]
    closed_form_categories: dict[str, int]
    #: The category a closed-form term is counted in (for naming a gap's term).
    category_of: Callable[[str], str]


def dry_run(levels: dict, raw: dict, where: str, spec, setup, execution) -> Truth:
    """The row's truth beside the closed form's ``execution`` breakdown. One device:
    transformers' class under FakeTensorMode, as ``introspect measure --impl
    transformers --device fake``, in the tracker's categories
    (``refined.causes.tracker_category``, as ``introspect profile`` prints the peak);
    sharded: ``introspect.measure.fake_sharded.dry_run`` in one process, its largest
    rank, in the split the sharded ``measure`` prints (``measure.distributed``'s
    ``measured_split`` / ``estimate_split``)."""
    from introspect.errors import IntrospectError
    from introspect.refined.causes import tracker_category

    try:
        if levels["sharding"] == "none":
            from introspect.measure import runner

            m, _ = runner.measure(
                spec, replica(setup), device="fake", impl="transformers", census=False,
                config=(raw, where),
            )  # fmt: skip
            return Truth(
                m.peak_bytes, m.peak_phase, dict(m.categories),
                split(execution.items(), tracker_category), tracker_category,
            )  # fmt: skip
        from introspect.measure import fake_sharded
        from introspect.measure.distributed import estimate_split, measured_split

        big = largest_rank(fake_sharded, raw, where, spec, setup)

        def category_of(term: str) -> str:
            return next(k for k, v in estimate_split({term: 1}).items() if v)

        return Truth(
            big.peak_bytes, big.peak_phase, measured_split(big.categories),
            estimate_split(dict(execution.items())), category_of,
        )  # fmt: skip
    except (ValueError, IntrospectError) as err:
        raise Refused("dry run refused", _first_line(err)) from err


def largest_rank(fake_sharded, raw: dict, where: str, spec, setup):
    """The largest rank's peak of a sharded dry run. DDP and FSDP2 ranks are symmetric
    (the dry run runs rank 0). ZeRO-1's ranks differ only in ZeroRedundancyOptimizer's
    partition (``torch/distributed/optim/zero_redundancy_optimizer.py``
    ``_partition_parameters``: whole tensors, largest first, each to the rank with the
    fewest so far), so rank 0 is run, its step reports torch's own partition of every
    rank, and the rank holding the most parameters (the most Adam state) is run too
    where it is another: two ranks, not D."""
    import inspect

    if "ranks" not in inspect.signature(fake_sharded.dry_run).parameters:
        return fake_sharded.dry_run(raw, where, spec, setup).largest
    first = fake_sharded.dry_run(raw, where, spec, setup, ranks=(0,)).largest
    partition = list(getattr(first, "partition", None) or [])
    if setup.resolved_sharding != "zero" or not partition:
        return first
    most = max(range(len(partition)), key=lambda r: (partition[r], -r))
    if partition[most] == partition[0]:
        return first
    other = fake_sharded.dry_run(raw, where, spec, setup, ranks=(most,)).largest
    return max((first, other), key=lambda r: r.peak_bytes)


# ---- one row -------------------------------------------------------------------------


def split(items, category_of: Callable[[str], str]) -> dict[str, int]:
    """(term, bytes) pairs summed by ``category_of(term)``."""
    out: dict[str, int] = {}
    for term, value in items:
        key = category_of(term)
        out[key] = out.get(key, 0) + value
    return out


def cause(truth: Truth, execution) -> dict:
    """The category whose bytes differ most (closed form − dry run) where either side
    names it, the closed form's largest term in it and the module computing that term
    (``introspect.terms``' ``computed_by``)."""
    from introspect import terms

    est, measured = truth.closed_form_categories, truth.categories
    gaps = {k: est.get(k, 0) - measured.get(k, 0) for k in {*est, *measured}}
    if not gaps:
        return {}
    worst = max(sorted(gaps), key=lambda k: abs(gaps[k]))
    inside = [(v, t) for t, v in execution.items() if truth.category_of(t) == worst and v]
    term = max(inside)[1] if inside else None
    record = terms.lookup(term) if term else None
    return {
        "category": worst,
        "gap_bytes": gaps[worst],
        "largest_term": term,
        "module": record.computed_by[0].split(":")[0] if record and record.computed_by else None,
    }


def run_row(levels: dict, dims: tuple[Dimension, ...] | None = None) -> dict:
    """One row: its setup, the closed form, the dry run, and how they compare; a refusal
    or a failure is the row's ``outcome`` and ``reason``; ``seconds`` its wall time."""
    start = time.perf_counter()
    out = {"levels": levels, "label": label(levels)}
    try:
        out |= _row(levels, dims)
    except Refused as err:
        out |= {"outcome": err.outcome, "reason": err.reason}
    except Exception as err:  # a bug in either side: counted, shown, never dropped
        out |= {"outcome": "failed", "reason": f"{type(err).__name__}: {_first_line(err)}"}
        out["where"] = _where(err)
    return out | {"seconds": time.perf_counter() - start}


def _row(levels: dict, dims: tuple[Dimension, ...] | None) -> dict:
    from introspect import refined
    from introspect.errors import IntrospectError
    from introspect.refined.causes import tracker_phase_of

    out: dict = {"setup_fields": setup_fields(levels, dims)}
    setup, raw, where, spec = prepare(levels, dims)
    out["n_params"] = spec.n_params
    try:
        est = refined.estimate(spec, setup)
    except (ValueError, IntrospectError) as err:
        raise Refused("closed form refused", _first_line(err)) from err
    t = dry_run(levels, raw, where, spec, setup, est.execution)
    return out | {
        "outcome": "ran",
        "closed_form": est.total,
        "closed_form_phase": tracker_phase_of(est.execution.meta, "torch"),
        "closed_form_moment": est.peak_phase,
        "closed_form_categories": t.closed_form_categories,
        "dry_run": t.peak_bytes,
        "dry_run_phase": t.peak_phase,
        "dry_run_categories": t.categories,
        "error": est.total / t.peak_bytes - 1,
        "cause": cause(t, est.execution),
    }


# ---- which rows: the probe and the array ---------------------------------------------


def base(dims: tuple[Dimension, ...]) -> dict:
    """The row every probe starts from: each dimension's first level."""
    return {d.name: d.levels[0] for d in dims}


def probe(dims: tuple[Dimension, ...]) -> list[dict]:
    """The base row, then one row per other level of each dimension, the rest at the
    base: which levels run at all on this branch (the array's valid rows are built of
    those), each row's outcome and reason as :func:`run_row` gives it."""
    start = base(dims)
    rows = [run_row(start, dims) | {"probe": "base"}]
    for d in dims:
        for level in d.levels[1:]:
            rows.append(run_row(start | {d.name: level}, dims) | {"probe": f"{d.name}={level}"})
    return rows


def runnable_levels(probes: list[dict], dims: tuple[Dimension, ...]) -> set[tuple[str, object]]:
    """(dimension, level) pairs whose probe row ran (the base's levels with the base)."""
    ran = {r["probe"] for r in probes if r["outcome"] == "ran"}
    if "base" not in ran:
        return set()
    out = {(d.name, d.levels[0]) for d in dims}
    out |= {(d.name, lv) for d in dims for lv in d.levels[1:] if f"{d.name}={lv}" in ran}
    return out


def validity(dims: tuple[Dimension, ...], runnable: set[tuple[str, object]]):
    """The array's predicate on a partial row (level indices, None unchosen): every
    chosen level ran in its probe, and the row, unchosen dimensions at their first
    level, passes every cheap check of both sides (:func:`prepare`)."""

    @cache
    def valid(row: tuple[int | None, ...]) -> bool:
        levels = {}
        for d, i in zip(dims, row, strict=True):
            level = d.levels[0 if i is None else i]
            if (d.name, level) not in runnable:
                return False
            levels[d.name] = level
        try:
            prepare(levels, dims)
        except Refused:
            return False
        return True

    return valid


def draw(
    seed: int,
    dims: tuple[Dimension, ...] | None = None,
    runnable: set[tuple[str, object]] | None = None,
) -> list[dict]:
    """The rows of the covering array for ``seed``, each a {dimension: level} dict; with
    ``runnable`` (:func:`runnable_levels`) the rows that can run come first."""
    dims = dims or dimensions()
    valid = validity(dims, runnable) if runnable else None
    rows = covering.pairwise([len(d.levels) for d in dims], seed, valid=valid)
    return [{d.name: d.levels[i] for d, i in zip(dims, row, strict=True)} for row in rows]


#: A level is named as (part of) a row's cause when setting it back to the base's leaves
#: at most this share of the row's error.
ISOLATED_SHARE = 0.25


def isolate(row: dict, dims: tuple[Dimension, ...]) -> dict | None:
    """Which of a row's levels make its error: the row rerun with each dimension that
    differs from the base row set back to the base's level, one at a time. Each rerun
    that ran gives the error without that level; the levels whose reverting leaves at
    most :data:`ISOLATED_SHARE` of the error are named (two or more: the error needs
    them together, an interaction). None when no rerun ran."""
    if row.get("outcome") != "ran":
        return None
    start = base(dims)
    without: dict[str, float] = {}
    for d in dims:
        if row["levels"][d.name] == start[d.name]:
            continue
        r = run_row(row["levels"] | {d.name: start[d.name]}, dims)
        if r["outcome"] == "ran":
            without[f"{d.name}={row['levels'][d.name]}→{start[d.name]}"] = r["error"]
    if not without:
        return None
    bound = ISOLATED_SHARE * abs(row["error"])
    named = sorted((k for k, e in without.items() if abs(e) <= bound), key=lambda k: without[k])
    return {"levels": named, "error_without": without}


# ---- the report ----------------------------------------------------------------------


def _mb(n: float | None) -> str:
    return "" if n is None else f"{n / 1e6:,.1f}"


def _reason_key(reason: str) -> str:
    """A reason with its numbers and quoted values blanked, cut at its first clause, so
    rows refused for one reason count together."""
    key = re.sub(r"\d[\d,.]*", "N", reason)
    key = re.sub(r"'[^']*'", "'…'", key)
    return key.split(";")[0][:110]


def summary(rows: list[dict], seed: int, seconds: float) -> str:
    from introspect._tabulate import tabulate

    ran = [r for r in rows if r["outcome"] == "ran"]
    errs = [abs(r["error"]) for r in ran]
    phase = sum(r["dry_run_phase"] == r["closed_form_phase"] for r in ran)
    outcomes = Counter(r["outcome"] for r in rows)
    lines = [
        f"seed {seed}: {len(rows)} rows (pairwise over {len(dimensions())} dimensions), "
        f"{seconds:.0f} s",
        "",
        tabulate(
            [
                ["rows run", f"{len(ran)} of {len(rows)}"],
                *[[f"  {k}", v] for k, v in sorted(outcomes.items()) if k != "ran"],
                ["within ±1%", sum(e <= 0.01 for e in errs)],
                ["within ±3%", sum(e <= 0.03 for e in errs)],
                ["within ±5%", sum(e <= 0.05 for e in errs)],
                [
                    "range",
                    f"{min(r['error'] for r in ran):+.2%} to {max(r['error'] for r in ran):+.2%}"
                    if ran
                    else "",
                ],
                ["peak phase agrees", f"{phase} of {len(ran)}"],
            ],
            headers=["seed " + str(seed), ""],
            tablefmt="github",
        ),
    ]
    return "\n".join(lines)


def exercised(rows: list[dict], dims: tuple[Dimension, ...]) -> tuple[int, int, list[str]]:
    """Pairs the array covers, how many of them some row that ran covers, and those no
    run row covers (named)."""
    sizes = [len(d.levels) for d in dims]
    index = [{v: i for i, v in enumerate(d.levels)} for d in dims]
    every = covering.all_pairs(sizes)
    run = set()
    for r in rows:
        if r["outcome"] == "ran":
            run |= covering.pairs_of(
                tuple(index[k][r["levels"][d.name]] for k, d in enumerate(dims))
            )
    named = [
        f"{dims[i].name}={dims[i].levels[a]} × {dims[j].name}={dims[j].levels[b]}"
        for i, a, j, b in sorted(every - run)
    ]
    return len(every), len(every & run), named


def by_level(rows: list[dict], dims: tuple[Dimension, ...], limit: int = 12) -> str:
    """The levels whose rows miss most often: for each level, the rows with it that ran,
    how many are beyond ±3% and ±1%, and the worst error; the levels with a row beyond
    ±1% first (most beyond ±3%), at most ``limit``."""
    from introspect._tabulate import tabulate

    ran = [r for r in rows if r["outcome"] == "ran"]
    table = []
    for d in dims:
        for level in d.levels:
            mine = [r["error"] for r in ran if r["levels"][d.name] == level]
            over1 = sum(abs(e) > 0.01 for e in mine)
            if not over1:
                continue
            over3 = sum(abs(e) > 0.03 for e in mine)
            table.append((over3 / len(mine), over1, f"{d.name}={level}", len(mine), over3,
                          max(mine, key=abs)))  # fmt: skip
    table.sort(key=lambda t: (-t[0], -t[1], t[2]))
    return tabulate(
        [[name, n, f"{o3} ({share:.0%})", o1, f"{w:+.2%}"]
         for share, o1, name, n, o3, w in table[:limit]],
        headers=["level", "rows run", "beyond ±3%", "beyond ±1%", "worst"],
        tablefmt="github",
    )  # fmt: skip


def failing_pairs(rows: list[dict], dims: tuple[Dimension, ...], limit: int = 8) -> list[str]:
    """Pairs of levels (two dimensions) every row of which that ran is beyond ±3%, held
    by at least two such rows, most rows first: where an interaction lives."""
    import itertools

    ran = [r for r in rows if r["outcome"] == "ran"]
    counts: dict[tuple, list[int]] = {}
    for r in ran:
        miss = abs(r["error"]) > 0.03
        for a, b in itertools.combinations(dims, 2):
            key = (f"{a.name}={r['levels'][a.name]}", f"{b.name}={r['levels'][b.name]}")
            n = counts.setdefault(key, [0, 0])
            n[0] += 1
            n[1] += miss
    bad = [(n, k) for k, (n, m) in counts.items() if n >= 2 and m == n]
    bad.sort(key=lambda t: (-t[0], t[1]))
    return [f"{a} × {b} ({n} of {n})" for n, (a, b) in bad[:limit]]


def tables(rows: list[dict], worst: int, slowest: int) -> str:
    from introspect._tabulate import tabulate

    ran = sorted((r for r in rows if r["outcome"] == "ran"), key=lambda r: -abs(r["error"]))
    worst_rows = []
    for r in ran[:worst]:
        c = r["cause"]
        why = f"{c['category']} {c['gap_bytes'] / 1e6:+,.1f} MB"
        if c.get("largest_term"):
            why += f" (its largest closed-form term: {c['largest_term']}, {c['module']})"
        iso = r.get("isolated")
        if iso and iso["levels"]:
            why += "; without " + " or ".join(
                f"{k} {iso['error_without'][k]:+.2%}" for k in iso["levels"]
            )
        elif iso:
            why += "; no one level's base removes it"
        worst_rows.append(
            [r["label"], _mb(r["dry_run"]), _mb(r["closed_form"]), f"{r['error']:+.2%}",
             f"{r['dry_run_phase']} / {r['closed_form_phase']}", why]
        )  # fmt: skip
    reasons = Counter(
        (r["outcome"], _reason_key(r["reason"]) + (f" (at {r['where']})" if "where" in r else ""))
        for r in rows
        if r["outcome"] != "ran"
    )
    slow = sorted(rows, key=lambda r: -r["seconds"])[:slowest]
    return "\n\n".join(
        [
            "worst rows (error = closed form / dry run − 1; cause = closed form − dry run)",
            tabulate(
                worst_rows,
                headers=[
                    "row",
                    "dry run MB",
                    "closed MB",
                    "error",
                    "phase (dry / closed)",
                    "cause",
                ],
                tablefmt="github",
            ),  # fmt: skip
            "rows not run, by outcome and reason",
            tabulate(
                [[o, n, k] for (o, k), n in reasons.most_common()],
                headers=["outcome", "rows", "reason"],
                tablefmt="github",
            ),
            "slowest rows",
            tabulate(
                [[r["label"], r["outcome"], f"{r['seconds']:.2f}"] for r in slow],
                headers=["row", "outcome", "s"],
                tablefmt="github",
            ),
        ]
    )


def probe_table(probes: list[dict]) -> str:
    """The levels whose probe row did not run, with the outcome and reason."""
    from introspect._tabulate import tabulate

    rows = [[r["probe"], r["outcome"], r["reason"][:120]] for r in probes if r["outcome"] != "ran"]
    return tabulate(rows, headers=["level (probe)", "outcome", "reason"], tablefmt="github")


def pair_lines(rows: list[dict], dims: tuple[Dimension, ...], runnable: set) -> str:
    """How many pairs rows that ran cover: every pair is in the array; those no run row
    holds are split into pairs with a level no probe ran, and the others (named)."""
    total, run, missing = exercised(rows, dims)
    if not runnable:  # no probe (--unconstrained)
        return f"pairs: {total} in the array, every one covered by a row; {run} in a row that ran"
    level_of = {f"{d.name}={lv}": (d.name, lv) for d in dims for lv in d.levels}
    other = [m for m in missing if all(level_of[half] in runnable for half in m.split(" × "))]
    line = (
        f"pairs: {total} in the array, every one covered by a row; {run} in a row that ran; "
        f"{len(missing) - len(other)} hold a level whose probe did not run"
    )
    if other:
        line += f"; {len(other)} others in no row that ran: " + ", ".join(other[:30])
        line += " …" if len(other) > 30 else ""
    return line


def how_made(seconds: float) -> str:
    """The results file's header line: date, machine, versions, run time."""
    import datetime
    import platform

    import torch
    import transformers

    return (
        f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC, {platform.machine()} "
        f"{platform.system()}, {os.cpu_count()} CPUs; torch {torch.__version__}, "
        f"transformers {transformers.__version__}; {seconds / 60:.1f} minutes (probe, "
        "array and the worst rows' isolation)."
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    how = p.add_mutually_exclusive_group()
    how.add_argument("--seed", type=int, default=0, help="the array's seed (default 0)")
    how.add_argument("--draw", action="store_true", help="draw a fresh seed (os.urandom), print it")
    p.add_argument("--json", type=Path, metavar="PATH", help="write every row as JSON")
    p.add_argument("--md", type=Path, metavar="PATH", help="write the report as Markdown")
    p.add_argument("--max-rows", type=int, default=None, help="run only the first N rows")
    p.add_argument("--worst", type=int, default=10, help="worst rows shown (default 10)")
    p.add_argument(
        "--isolate", type=int, default=3, metavar="N",
        help="rerun the N worst rows one level back at a time, naming the level (default 3)",
    )  # fmt: skip
    p.add_argument(
        "--unconstrained", action="store_true",
        help="no probe: the plain pairwise array (most rows then hold a level that cannot run)",
    )  # fmt: skip
    p.add_argument(
        "--budget", type=float, default=None, metavar="S",
        help="run no row after S seconds (the rest are counted as over budget; default: none)",
    )  # fmt: skip
    p.add_argument("--quiet", action="store_true", help="no line per row")
    args = p.parse_args(argv)
    import warnings

    # FSDP2's and ModTracker's per-step UserWarnings under a fake group would bury the rows.
    warnings.filterwarnings("ignore", category=UserWarning, module=r"torch\.distributed")
    seed = int.from_bytes(os.urandom(4), "little") if args.draw else args.seed
    print(f"seed {seed}", flush=True)
    dims = dimensions()
    start = time.perf_counter()
    probes = [] if args.unconstrained else probe(dims)
    runnable = runnable_levels(probes, dims) if probes else set()
    if probes and not runnable:
        print(f"the base row did not run: {probes[0]['outcome']}: {probes[0].get('reason')}")
        return 1
    levels = draw(seed, dims, runnable or None)[: args.max_rows]
    print(f"probe: {len(probes)} rows, {time.perf_counter() - start:.0f} s; array: {len(levels)}")
    rows = []
    for i, lv in enumerate(levels):
        if args.budget is not None and time.perf_counter() - start > args.budget:
            why = f"--budget {args.budget:g} s was spent before this row"
            r = {"levels": lv, "label": label(lv), "outcome": "over budget", "reason": why}
            rows.append(r | {"seconds": 0.0})
            continue
        r = run_row(lv, dims)
        rows.append(r)
        if not args.quiet:
            what = f"{r['error']:+.2%}" if r["outcome"] == "ran" else r["outcome"]
            print(f"{i + 1:4d} {r['seconds']:6.2f}s {r['label']:88s} {what}", flush=True)
    ran = sorted((r for r in rows if r["outcome"] == "ran"), key=lambda r: -abs(r["error"]))
    for r in ran[: args.isolate]:
        r["isolated"] = isolate(r, dims)
    seconds = time.perf_counter() - start
    parts = [summary(rows, seed, seconds), pair_lines(rows, dims, runnable)]
    if probes:
        ran = [r for r in probes if r["outcome"] == "ran"]
        parts.append(
            f"probe: {len(probes)} rows (the base and one per other level), {len(ran)} ran, "
            f"{sum(abs(r['error']) <= 0.01 for r in ran)} within ±1%"
            + (f", worst {max((r['error'] for r in ran), key=abs):+.2%}" if ran else "")
        )
        parts += ["levels whose probe (the base row with that level) did not run",
                  probe_table(probes)]  # fmt: skip
    if any(r["outcome"] == "ran" and abs(r["error"]) > 0.01 for r in rows):
        parts += ["levels whose rows miss most (beyond ±1%)", by_level(rows, dims)]
        pairs = failing_pairs(rows, dims)
        if pairs:
            parts.append("pairs whose every row that ran is beyond ±3%: " + "; ".join(pairs))
    parts.append(tables(rows, args.worst, 10))
    text = "\n\n".join(parts)
    print("\n" + text)
    command = "python benchmarks/combinations.py " + (
        f"--draw (drew {seed})" if args.draw else f"--seed {seed}"
    )
    if args.md:
        args.md.write_text(
            f"# Covering array: closed form vs dry run\n\n    {command}\n\n{how_made(seconds)}"
            f"\n\n{text}\n"
        )
    if args.json:
        doc = {"seed": seed, "command": command, "probes": probes, "rows": rows}
        args.json.write_text(json.dumps(doc, indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
