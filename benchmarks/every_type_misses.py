"""The every-type rows the closed form models but missed by more than 3%: closed form /
dry run per setup, before and after the fixes of issue 22 part 3.

Run:  .venv/bin/python benchmarks/every_type_misses.py --save before   # on the old code
      .venv/bin/python benchmarks/every_type_misses.py --save after    # on the new code
      .venv/bin/python benchmarks/every_type_misses.py --render

Each row is :func:`every_type.count_row` + :func:`every_type.memory_row` — the same
shrunk config, setups and dry run as ``benchmarks/every_type.py --only TYPE`` — for the
types in :data:`TYPES` (every modelled row of ``results/every-type.json`` outside ±3%).
Writes ``results/every-type-misses-{before,after}.json`` and, with ``--render``,
``results/every-type-misses.md`` from both.
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import every_type  # noqa: E402

RESULTS = Path(__file__).parent / "results"
#: Every model_type with a modelled cell outside ±3% in results/every-type.json.
TYPES = (
    "afmoe aria_text beam biogpt bitnet bloom cohere exaone_moe falcon glm4_moe got_ocr2 "
    "gpt-sw3 gpt_bigcode helium hrm_text hy_v3 jais2 mimo_v2_flash minicpm3 "
    "minimax_m3_vl_text moss_transcribe_diarize nanochat olmo3 olmo_hybrid qwen3_next "
    "sarvam_moe seed_oss solar_open"
).split()


def run(names: list[str], path: Path) -> dict[str, dict]:
    """Each type's cells, written to ``path`` after each type (a stop keeps the rows)."""
    from transformers.utils import logging

    logging.set_verbosity_error()
    rows = json.loads(path.read_text()) if path.exists() else {}
    for t in names:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            row = every_type.count_row(t)
            if "raw" in row:
                every_type.memory_row(row)
        cells = {k: every_type.cell_text(v) for k, v in row.get("setups", {}).items()}
        print(t, cells, flush=True)
        rows[t] = {k: every_type.cell_text(v) for k, v in row.get("setups", {}).items()}
        rows[t]["shape"] = row.get("shape", "")
        path.write_text(json.dumps(rows, indent=1), encoding="utf-8")
    return rows


def render(before: dict, after: dict, notes: dict[str, str]) -> str:
    setups = list(every_type.SETUPS)
    lines = [
        "# Every-type misses: closed form / dry run, before and after",
        "",
        "`benchmarks/every_type_misses.py --save before` (old code), `--save after`, "
        "`--render`. Same shrunk configs, setups (B=1, T=64, AdamW) and dry run as "
        "`benchmarks/every_type.py --only TYPE`; cells are closed form / dry-run peak, "
        "`dry run` where the closed form now says what it does not model.",
        "",
        "| model_type | " + " | ".join(f"{s} before | {s} after" for s in setups) + " | what |",
        "|---|" + "---:|---:|" * len(setups) + "---|",
    ]
    for t in before:
        b, a = before[t], after.get(t, {})
        cells = [f"{b.get(s, '')} | {a.get(s, '')}" for s in setups]
        what = notes.get(t, "not diagnosed" if t in TYPES else CHANGED)
        lines.append(f"| {t} | " + " | ".join(cells) + f" | {what} |")
    lines += ["", *summary(before, after), "", *FOOTER]
    return "\n".join(lines) + "\n"


def summary(before: dict, after: dict) -> list[str]:
    """Cells within ±3% before and after, over the rows of :data:`TYPES`."""

    def within(rows: dict) -> tuple[int, int]:
        cells = [rows.get(t, {}).get(s) for t in TYPES for s in every_type.SETUPS]
        ratios = [float(c) for c in cells if c and c[0].isdigit()]
        return sum(abs(r - 1) <= 0.03 for r in ratios), len(ratios)

    (b3, bn), (a3, an) = within(before), within(after)
    return [
        f"- the {len(TYPES)} miss rows: {b3} of {bn} modelled cells within ±3% before, "
        f"{a3} of {an} after"
    ]


#: The row note of a type outside :data:`TYPES`: run because the fixes changed its spec.
CHANGED = "in range; its spec changed (dropout or walker kinds): regression check"

#: What was not done, in words, under the table.
FOOTER = [
    "Not fixed here: the Qwen2.5-VL step with activation checkpointing (the vision "
    "wrapper of tests/test_vision.py's TINY_QWEN25_VL, frozen tower, two 448×448 images) "
    "misses with or without LoRA, while the same LoRA + amp step without checkpointing and "
    "a text-only Qwen2 with LoRA + amp + checkpointing are within ±3%: the miss is the "
    "wrapper under checkpointing, not LoRA; not diagnosed.",
]


#: What changed (or why not) per type, the mechanism and its source.
NOTES: dict[str, str] = {
    "biogpt": "fixed: dropout 0.1 read from attention_probs_dropout_prob / "
    "hidden_dropout_prob (walker-built specs had none): masks, SDPA's CPU math kernel",
    "gpt-sw3": "fixed: GPT-2's attn/resid/embd_pdrop 0.1 now read on the walker path",
    "seed_oss": "fixed: attention_dropout / residual_dropout 0.1 read on the walker path",
    "cohere": "fixed: CohereLayerNorm is the hand-written FP32 LayerNorm "
    "(modeling_cohere.py l. 58-65), Cohere2's layernorm_by_hand",
    "falcon": "fixed: SDPA gets 1 K/V head beside 4 query heads, no enable_gqa "
    "(modeling_falcon.py l. 313-346): math kernel, FP32 T×T softmax",
    "exaone_moe": "fixed: the walker read block 0 (dense) for every block; each block is "
    "now its own kind, shared experts read",
    "hy_v3": "fixed: walker per-block kinds + shared experts (dense first block)",
    "sarvam_moe": "walker per-block kinds + shared experts; bf16 left: router details",
    "glm4_moe": "walker per-block kinds + shared experts; bf16 left: the router's FP32 "
    "input copy (F.linear(x.float(), …)), which the walker cannot see",
    "afmoe": "walker per-block kinds + shared experts; bf16 left (sigmoid-gated "
    "attention, router in FP32)",
    "aria_text": "fixed: shared experts beside the routed ones (walker)",
    "solar_open": "walker shared experts",
    "minimax_m3_vl_text": "walker shared experts; still off: not diagnosed",
    "mimo_v2_flash": "walker per-block kinds",
    "beam": "SwiGLU in FP32 (ClassFacts.swiglu_fp32, census-checked); the walker now "
    "reads its MoE blocks, and the rest of the step (sandwich norms, gated attention) "
    "still misses in bf16: not fixed",
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--save", choices=("before", "after"))
    parser.add_argument("--only", nargs="*", help="these model_types (default: TYPES)")
    parser.add_argument("--render", action="store_true")
    args = parser.parse_args()
    if args.save:
        run(args.only or list(TYPES), RESULTS / f"every-type-misses-{args.save}.json")
    if args.render:
        load = lambda s: json.loads((RESULTS / f"every-type-misses-{s}.json").read_text())  # noqa: E731
        text = render(load("before"), load("after"), NOTES)
        (RESULTS / "every-type-misses.md").write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
