"""`introspect measure`: a real training step (MLX or torch), or a torch dry run, beside
the simplified and refined estimates — measured peak, both estimates, measured/estimate,
what was alive at the peak, what autograd saved, step time and tokens per second."""

from __future__ import annotations

import argparse
import os
import sys

from introspect import report
from introspect.commands._args import add_common, choice, positive_int
from introspect.errors import IntrospectError
from introspect.setup import ATTENTIONS, TrainingSetup
from introspect.spec import ModelSpec

FRAMEWORKS = ("torch", "mlx", "mlx_compiled")
DEVICES = ("cpu", "cuda", "fake")
IMPLS = ("reference", "transformers", "mlx_lm")
OPTIMIZERS = ("adam", "adamw", "sgd", "sgd_momentum")

EPILOG = """\
SOURCE is a nominal size of the seed's table (10M, 20M, 40M, 100M, 300M, 1B, 7B, 70B),
a path, a bundled model or a Hub id (as for 'introspect profile'), or nothing when the
shape flags describe the model. Shape flags given with a SOURCE change that field.

The step is FP32 Adam at B=1 unless flags say otherwise, written as users write it:
zero_grad(set_to_none=True), F.cross_entropy(logits.view(-1, V), targets.view(-1)),
backward(), step(). A warm-up step runs first so Adam's state exists; the peak counter
is reset before the measured step. Peaks: mx.get_peak_memory() on MLX,
torch.cuda.max_memory_allocated() on CUDA, torch's live-storage tracker (MemTracker) on
CPU and in a dry run (--device fake: FakeTensorMode, no memory used, any size). An MLX
dry run (--framework mlx --device fake) traces the step's graph without evaluating it
and replays it through MLX's CPU evaluator (introspect.measure.mlx_replay).

examples:
  introspect measure 10M --framework torch --seq 256 512 1024
  introspect measure 40M --framework mlx-compiled --seq 2048
  introspect measure 10M --llama --framework torch --impl transformers --seq 512
  introspect measure meta-llama/Llama-2-7b-hf --framework torch --device fake --seq 2048
  introspect measure meta-llama/Llama-2-7b-hf --framework mlx --device fake --seq 2048
  introspect measure --layers 4 --d-emb 256 --heads 4 --vocab 8192 --framework mlx --json
"""


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "measure",
        help="a real training step (MLX or torch) beside the estimates",
        description="Measure one training step's peak memory and compare it with the "
        "seed's simplified estimate and the refined estimate. Decimal GB.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "source",
        nargs="?",
        metavar="SOURCE",
        help="10M, 40M, …, a path, a bundled model or a Hub id",
    )
    run_g = p.add_argument_group("what runs")
    run_g.add_argument(
        "--framework",
        type=choice(FRAMEWORKS),
        required=True,
        help="torch, mlx (uncompiled step) or mlx-compiled (mx.compile, as the seed measured)",
    )
    run_g.add_argument(
        "--device",
        type=choice(DEVICES),
        default="cpu",
        help="cpu (default), cuda (torch), or fake: a dry run that allocates nothing, for "
        "models larger than this machine (torch: FakeTensorMode; MLX: the graph replayed)",
    )
    run_g.add_argument(
        "--impl",
        type=choice(IMPLS),
        default="reference",
        help="reference (default: our model built from the spec), transformers "
        "(LlamaForCausalLM, torch) or mlx-lm (mlx_lm.models.llama.Model); the last two "
        "need a Llama-style shape",
    )
    run_g.add_argument(
        "--repeats",
        type=positive_int,
        default=1,
        metavar="K",
        help="MLX: measure K steps after the warm-up, each with its own peak reset, and "
        "report the largest peak (MLX's peak varies a few percent step to step; default 1)",
    )
    run_g.add_argument(
        "--no-census",
        action="store_true",
        help="skip the saved-tensor census (torch: one more forward pass)",
    )
    setup_g = p.add_argument_group("training setup")
    setup_g.add_argument(
        "--batch",
        type=positive_int,
        nargs="+",
        default=[1],
        metavar="B",
        help="micro-batch size B (default 1); several values sweep",
    )
    setup_g.add_argument(
        "--seq",
        type=positive_int,
        nargs="+",
        default=[512],
        metavar="T",
        help="sequence length T in tokens (default 512); several values sweep",
    )
    setup_g.add_argument(
        "--dtype",
        type=choice(("fp32", "bf16")),
        default="fp32",
        help="fp32 (default) or bf16: weights, gradients, optimizer state and activations",
    )
    setup_g.add_argument(
        "--optimizer",
        type=choice(OPTIMIZERS),
        default="adam",
        help="adam (default), adamw, sgd, sgd-momentum",
    )
    setup_g.add_argument(
        "--attention",
        type=choice(ATTENTIONS),
        default="eager",
        help="eager (default: explicit T×T scores and softmax) or memory-efficient "
        "(torch SDPA / mx.fast.scaled_dot_product_attention)",
    )
    shape = p.add_argument_group("model shape (without SOURCE, or changing it)")
    for flag, dest, meta, text in (
        ("--layers", "num_hidden_layers", "L", "transformer layers"),
        ("--d-emb", "hidden_size", "D", "embedding dimension d"),
        ("--heads", "num_attention_heads", "H", "attention heads"),
        ("--vocab", "vocab_size", "V", "vocabulary size"),
        ("--kv-heads", "num_key_value_heads", "H_KV", "K/V heads (GQA; default = --heads)"),
        ("--head-dim", "head_dim", "N", "width of one head (default d/h)"),
        ("--intermediate", "intermediate_size", "F", "feed-forward width (default 4d)"),
    ):
        shape.add_argument(flag, dest=dest, type=positive_int, metavar=meta, help=text)
    shape.add_argument("--norm", type=choice(("layernorm", "rmsnorm")), help="layernorm or rmsnorm")
    shape.add_argument("--ffn", type=choice(("plain", "gated")), help="plain d→f→d or gated")
    shape.add_argument("--act", dest="hidden_act", metavar="NAME", help="gelu, silu, relu, …")
    shape.add_argument("--tied", action="store_true", help="tie the output to the input embedding")
    shape.add_argument(
        "--llama",
        action="store_true",
        help="Llama-style variant of the shape: RMSNorm, SwiGLU (f ≈ 8d/3), h/4 K/V heads",
    )
    add_common(p, json_help="print JSON: spec, and per row the measurement and both estimates")
    p.set_defaults(run=run)


def spec_from_args(args: argparse.Namespace) -> ModelSpec:
    from introspect.measure.shapes import known_nominals, llama_style, nominal_spec

    fields = {
        k: getattr(args, k)
        for k in (
            "num_hidden_layers",
            "hidden_size",
            "num_attention_heads",
            "vocab_size",
            "num_key_value_heads",
            "head_dim",
            "intermediate_size",
            "norm",
            "ffn",
            "hidden_act",
        )
        if getattr(args, k) is not None
    }
    if args.tied:
        fields["tie_word_embeddings"] = True
    if args.source:
        spec = nominal_spec(args.source)
        if spec is None:
            from introspect.adapters import resolve

            spec = resolve(args.source).spec
        spec = spec.replace(num_parameters=None, **fields) if fields else spec
    else:
        needed = ("num_hidden_layers", "hidden_size", "num_attention_heads", "vocab_size")
        missing = [
            f"--{n}"
            for n, k in zip(("layers", "d-emb", "heads", "vocab"), needed, strict=True)
            if k not in fields
        ]
        if missing:
            raise IntrospectError(
                f"measure needs a SOURCE ({known_nominals()}, a path or a Hub id) or the "
                f"shape flags; missing {', '.join(missing)}"
            )
        fields.setdefault("norm", "layernorm")
        spec = ModelSpec(model_type="custom", source="shape flags", **fields)
    if fields.get("norm") == "rmsnorm":
        spec = spec.replace(norm_bias=False)
    return llama_style(spec) if args.llama else spec


def setups_from_args(args: argparse.Namespace) -> list[TrainingSetup]:
    return [
        TrainingSetup(
            batch_size=b,
            seq_len=t,
            activation_dtype=args.dtype,
            weights_dtype=args.dtype,
            precision="bf16" if args.dtype == "bf16" else "fp32",
            optimizer=args.optimizer,
            attention=args.attention,
            framework=args.framework,
            # A dry run's fake tensors live on the CPU: torch runs its CPU optimizer path.
            device="cuda" if args.device == "cuda" else "cpu",
            implementation=args.impl,
        )
        for b in args.batch
        for t in args.seq
    ]


def check_args(args: argparse.Namespace) -> None:
    mlx = args.framework.startswith("mlx")
    if mlx and args.device not in ("cpu", "fake"):
        raise IntrospectError(
            f"--device {args.device} is for torch; MLX runs on its default device (CPU on "
            "Linux, the GPU on Apple silicon)"
        )
    if args.impl == "transformers" and mlx:
        raise IntrospectError("--impl transformers is a torch model; use --framework torch")
    if args.impl == "mlx_lm" and not mlx:
        raise IntrospectError("--impl mlx-lm is an MLX model; use --framework mlx or mlx-compiled")
    if args.impl not in ("reference", "mlx_lm") and args.device == "fake":
        raise IntrospectError(
            "--device fake builds the reference model (MLX: or mlx-lm's Llama); drop --impl"
        )
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise IntrospectError(
                "--device cuda: torch sees no CUDA device on this machine; use --device cpu "
                "or --device fake"
            )
    if mlx:
        try:
            import mlx.core  # noqa: F401
        except ImportError as err:
            raise IntrospectError(
                "MLX is not installed; pip install 'introspect[mlx]' (mlx[cpu] on Linux)"
            ) from err


def available_bytes(device: str) -> int | None:
    """Memory a real step may use: free CUDA memory, else the OS's available RAM."""
    if device == "cuda":
        import torch

        return torch.cuda.mem_get_info()[0]
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def refuse_if_too_big(spec: ModelSpec, setup: TrainingSetup, device: str) -> None:
    from introspect import simplified

    if device == "fake":
        return
    need = simplified.estimate(spec, setup).total
    have = available_bytes(device)
    if have is not None and need > have:
        raise IntrospectError(
            f"B={setup.batch_size}, T={setup.seq_len} needs about {report.gb(need)} GB by the "
            f"seed's estimate but {report.gb(have)} GB is available on {device}; use "
            "--device fake (torch) for a dry run, or a smaller --seq/--batch"
        )


def run(args: argparse.Namespace) -> int:
    from introspect.measure import runner

    check_args(args)
    spec = spec_from_args(args)
    setups = setups_from_args(args)
    for s in setups:
        refuse_if_too_big(spec, s, args.device)
    results = []
    bar = _progress(len(setups))
    for s in setups:
        if bar is not None:
            bar.set_description(f"B={s.batch_size} T={s.seq_len}")
        results.append(
            runner.run_one(
                spec,
                s,
                device=args.device,
                impl=args.impl,
                census=not args.no_census,
                repeats=args.repeats,
            )
        )
        if bar is not None:
            bar.update()
    if bar is not None:
        bar.close()
    if args.json:
        print(report.dumps(runner.to_json(spec, args.impl, results)))
    else:
        print(runner.render(spec, args.impl, results))
    return 0


def _progress(total: int):
    if total < 2:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, file=sys.stderr, unit="step", leave=False)
