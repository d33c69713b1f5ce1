"""One every-type row at another sequence length: the closed form over the dry run of the
real transformers class (FakeTensorMode), the default config shrunk as
``benchmarks/every_type.py`` shrinks it, B=1, the row's setup with T changed.

    .venv/bin/python benchmarks/every_type_at.py gemma4_unified_text amp 2048

The every-type cells at T = 64 mostly peak at the optimizer step; a longer T shows the
activation side (Gemma 4 unified under autocast with checkpointing: 0.971 at T = 64,
0.927 at T = 2048).
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

SETUP_NAMES = {"fp32": "fp32 eager", "amp": "amp ckpt", "bf16": "bf16 sdpa"}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model_type", help="a model_type transformers ships")
    parser.add_argument("setup", choices=sorted(SETUP_NAMES), help="the every-type setup")
    parser.add_argument("seq_len", type=int, help="tokens per sample (T)")
    args = parser.parse_args()
    if args.seq_len < 1:
        parser.error("seq_len: must be at least 1")

    import every_type as et
    from introspect.adapters.hf_config import spec_from_config

    from introspect import refined
    from introspect._record import replace
    from introspect.measure import runner

    row = et.count_row(args.model_type)
    if "raw" not in row:
        parser.error(f"{args.model_type}: {row.get('note', 'not read')}")
    small = et.shrink(row["raw"], widths=True)
    spec = spec_from_config(small, source=args.model_type)
    setup = replace(et.setup_for(SETUP_NAMES[args.setup]), seq_len=args.seq_len)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        measured, _ = runner.measure(
            spec, setup, device="fake", impl="transformers", census=False,
            config=(small, args.model_type),
        )  # fmt: skip
    closed = refined.estimate(spec, setup).total
    print(
        f"{args.model_type} {SETUP_NAMES[args.setup]} T={args.seq_len}: closed form "
        f"{closed:,} bytes, dry run {measured.peak_bytes:,} bytes, "
        f"closed/dry {closed / measured.peak_bytes:.3f}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
