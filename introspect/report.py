"""Reports: breakdowns and tables as terminal text (tabulate), JSON, markdown and CSV.

Reports know Breakdowns, Measurements and plain rows; nothing about where a model came
from. Memory columns are decimal GB unless a column name says otherwise.
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterable, Sequence

from introspect._tabulate import tabulate
from introspect.breakdown import Breakdown
from introspect.units import display_unit, fmt_gb

TYPE_CHECKING = False  # typing's flag without importing typing (see introspect._record)
if TYPE_CHECKING:
    from typing import Any


def summary(b: Breakdown) -> dict[str, int]:
    """The seed's three parts of a breakdown, in bytes: weights, saved activations, the
    backward values (gradients and optimizer state), and their total."""
    weights = b.sum("weights")
    activations = b.sum("activations")
    backward = b.total - weights - activations
    return {
        "weights_bytes": weights,
        "activations_bytes": activations,
        "backward_bytes": backward,
        "weights_and_backward_bytes": weights + backward,
        "total_bytes": b.total,
    }


def table(
    rows: Sequence[Sequence[Any]],
    headers: Sequence[str],
    fmt: str = "text",
    *,
    colalign: Sequence[str] | None = None,
) -> str:
    """Rows as a terminal table (``text``), GitHub ``markdown`` or ``csv``. A header's
    ``GB`` names the display unit (``--units GiB`` prints GiB)."""
    headers = [unit_header(h) for h in headers]
    if fmt == "csv":
        import csv  # only here: most commands never write CSV

        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        writer.writerow(headers)
        writer.writerows(rows)
        return buf.getvalue().rstrip("\n")
    tablefmt = "github" if fmt == "markdown" else "simple"
    return tabulate(
        rows, headers=headers, tablefmt=tablefmt, disable_numparse=True, colalign=colalign
    )


def unit_header(header: str) -> str:
    """``header`` with its ``GB`` word in the display unit."""
    unit = display_unit()
    return header if unit == "GB" else re.sub(r"\bGB\b", unit, header)


def gb(n_bytes: int | float, digits: int = 3) -> str:
    """A table cell in decimal GB."""
    return fmt_gb(n_bytes, digits)


#: Version of every command's JSON output. 2: ``total_bytes`` is the refined estimate of
#: the peak everywhere (``table`` gave the architecture total, now
#: ``architecture_total_bytes``); ``table`` rows may carry an ``error``.
SCHEMA_VERSION = 2


def dumps(obj: Any) -> str:
    """JSON as the tool prints it: indented, keys in insertion order, UTF-8 kept; a
    top-level object starts with ``schema_version`` (:data:`SCHEMA_VERSION`)."""
    import json  # here: the text reports of estimate and sizes never need it

    if isinstance(obj, dict):
        obj = {"schema_version": SCHEMA_VERSION, **obj}
    return json.dumps(obj, indent=2, ensure_ascii=False)


def _top_k(setup: Any) -> bool:
    return getattr(setup, "num_layers", None) is not None and setup.finetune != "full"


def setup_line(setup: Any) -> str:
    """Every setting of a TrainingSetup that changes the figures, on one line."""
    parts = [
        f"B={setup.batch_size}",
        f"T={setup.seq_len}",
        *([f"{setup.grad_accum} micro-batches per step"] if setup.grad_accum > 1 else []),
        *([f"adapters on the top {setup.num_layers} blocks"] if _top_k(setup) else []),
        f"s={setup.activation_bytes} bytes ({setup.activation_dtype} activations)",
        f"weights {setup.weights_dtype}",
        f"precision {setup.precision}",
        f"optimizer {setup.optimizer} ({setup.resolved_optimizer_impl.replace('_', '-')})",
        attention_words(setup),
        "checkpointing" if setup.activation_checkpointing else "no checkpointing",
        f"{setup.cross_entropy} cross-entropy",
        f"{setup.devices} device{'s' if setup.devices > 1 else ''}",
        sharding_name(setup),
        f"{setup.framework} on {setup.resolved_device}",
        f"{setup.implementation.replace('_', '-')} implementation, loop {setup.loop}",
        *([TRAINER_NAMES[setup.trainer]] if getattr(setup, "trainer", "loop") != "loop" else []),
    ]
    return ", ".join(parts)


#: The trainer a figure is for, in the setup line (``TrainingSetup.trainer``).
TRAINER_NAMES = {
    "loop": "a hand-written loop",
    "hf": "stepped by transformers' Trainer",
    "trl": "stepped by TRL's SFTTrainer",
    "dpo": "stepped by TRL's DPOTrainer (2 rows per pair)",
}


def sharding_name(setup: Any) -> str:
    """How the training state is spread, by the library that does it: ``no sharding``,
    ``DDP``, ``ZeRO-1 (torch ZeroRedundancyOptimizer under DDP)``, ``DeepSpeed ZeRO-2``
    / ``ZeRO-3`` (``--zero 2|3``) or ``FSDP2 fully_shard`` (``--fsdp``; ``--no-reshard``:
    ``reshard_after_forward=False``). ``--fsdp`` sets ZeRO stage 3 internally, so a
    bare stage number would name FSDP2 as ZeRO 3."""
    how = setup.resolved_sharding
    if how == "fsdp":
        keep = ", reshard_after_forward=False" if not setup.reshard_after_forward else ""
        return f"FSDP2 fully_shard{keep}"
    if how == "zero":
        if setup.zero_stage == 1:
            return "ZeRO-1 (torch ZeroRedundancyOptimizer under DDP)"
        return f"DeepSpeed ZeRO-{setup.zero_stage}"
    return {"ddp": "DDP"}.get(how, "no sharding")


def attention_words(setup: Any) -> str:
    """The setup's attention and, when --attention was left out, where it came from
    ("memory_efficient attention (sdpa: transformers' default for LlamaForCausalLM)");
    before a model fixes it (``table``'s header), each class's own."""
    if setup.attention is None:
        return "each class's default attention (transformers': sdpa unless it has none)"
    origin = getattr(setup, "attention_origin", "")
    return f"{setup.attention} attention" + (f" ({origin})" if origin else "")


def key_value(pairs: Iterable[tuple[str, Any]]) -> str:
    """Two aligned columns with no header, for a spec or a setup."""
    return tabulate([(k, v) for k, v in pairs], tablefmt="plain", disable_numparse=True)
