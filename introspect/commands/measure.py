"""`introspect measure`: a real training step (MLX or torch), or a torch dry run, beside
the simplified and refined estimates — measured peak, both estimates, measured/estimate,
what was alive at the peak, what autograd saved, step time and tokens per second."""

from __future__ import annotations

import argparse
import re
import sys

from introspect import bounds, report
from introspect.bounds import MAX_REPEATS
from introspect.commands._args import add_common, add_setup_flags, bounded_int, choice, positive_int
from introspect.commands._memory import available_bytes
from introspect.commands._memory import process_limit_bytes as process_limit_bytes
from introspect.errors import IntrospectError
from introspect.measure.supported import MLX_STEPS
from introspect.setup import TrainingSetup
from introspect.spec import ModelSpec

TYPE_CHECKING = False
if TYPE_CHECKING:
    from introspect.measure.runner import Row as runner_Row

#: measure's own --device choice on top of the shared ones.
FAKE_DEVICE = (
    (
        "fake",
        "measure only: a torch dry run under FakeTensorMode that allocates nothing, for "
        "models larger than this machine (torch's CPU kernels and optimizer defaults)",
    ),
)

EPILOG = """\
SOURCE is a nominal size of the seed's table (10M, 20M, 40M, 100M, 300M, 1B, 7B, 70B),
a path, a bundled model or a Hub id (as for 'introspect profile'), or nothing when the
shape flags describe the model. Shape flags given with a SOURCE change that field.

The setup flags are profile's and table's, with the same names, meanings and defaults
(except --seq, 512 here), so `introspect measure` runs exactly the setup `profile`
estimated. --device auto (the default) measures on CUDA when torch sees a GPU, else on
the CPU; add --device fake for a dry run of a model larger than this machine (then
--optimizer-impl foreach gives the CUDA default's update). The step is written as its
users write it: zero_grad(set_to_none=True), the loss, backward(), step().
--loop logits: logits = model(x); loss = F.cross_entropy(logits.view(-1, V), y.view(-1))
(the logits held through backward). --loop labels (the default with --impl
transformers): loss = model(input_ids=x, labels=x).loss, the output dropped: the HF
Trainer's compute_loss. The optimizer's state exists before the measured step (torch on
the CPU and in a dry run: made directly at its real shapes; MLX and CUDA: a warm-up step,
then the peak counter is reset). Peaks: mx.get_peak_memory() on MLX,
torch.cuda.max_memory_allocated() on CUDA, torch's live-storage tracker (MemTracker) on
CPU and in a dry run (--device fake).

--impl transformers builds the config's own class (AutoConfig.for_model →
AutoModelForCausalLM.from_config; never trust_remote_code); --impl mlx-lm builds
mlx-lm's class (mlx_lm.models.<model_type>.Model) and runs mlx-lm's default_loss.
An MLX dry run (--framework mlx --device fake) traces the step's graph without evaluating
it and replays it through MLX's CPU evaluator (introspect.measure.mlx_replay): our
reference model or, with --impl mlx-lm, mlx-lm's Llama for a Llama-shaped model.

examples:
  introspect measure 10M --framework torch --device cpu --seq 256 512 1024
  introspect measure 40M --framework mlx-compiled --seq 2048
  introspect measure Qwen/Qwen3-0.6B --impl transformers --device fake --seq 2048 \\
      --precision amp --checkpointing --attention memory-efficient
  introspect measure Qwen/Qwen2.5-0.5B --impl transformers --device fake --loop logits
  introspect measure meta-llama/Llama-3.1-8B --impl transformers --device fake \\
      --finetune qlora --precision bf16 --seq 2048   (peft and bitsandbytes, fake tensors)
  introspect measure meta-llama/Llama-2-7b-hf --framework torch --device fake --seq 2048
  introspect measure meta-llama/Llama-2-7b-hf --framework mlx --device fake --seq 2048
  introspect measure benchmarks/configs/qwen2-7m --devices 2 --fsdp --seq 256
                      (a sharded step: the config's transformers class in 2 gloo processes)
  introspect measure meta-llama/Llama-3.1-8B --impl transformers --device fake --fsdp \\
      --devices 8 --seq 2048 --precision mixed
                      (the same sharded step as a dry run: one process, any --devices)
  introspect measure --layers 4 --d-emb 256 --heads 4 --vocab 8192 --framework mlx --json
"""


SHAPE_FLAGS = (
    ("--layers", "num_hidden_layers", "L", "transformer layers"),
    ("--d-emb", "hidden_size", "D", "embedding dimension d"),
    ("--heads", "num_attention_heads", "H", "attention heads"),
    ("--vocab", "vocab_size", "V", "vocabulary size"),
    ("--kv-heads", "num_key_value_heads", "H_KV", "K/V heads (GQA; default = --heads)"),
    ("--head-dim", "head_dim", "N", "width of one head (default d/h)"),
    ("--intermediate", "intermediate_size", "F", "feed-forward width (default 4d)"),
)
#: The flag that sets each spec field, for the sanity bounds' messages.
FLAGS = {dest: flag for flag, dest, _, _ in SHAPE_FLAGS}
FLAGS |= {"norm": "--norm", "ffn": "--ffn", "hidden_act": "--act"}


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
    add_setup_flags(p, seq_default=512, extra_devices=FAKE_DEVICE)
    run_g = p.add_argument_group("measuring")
    run_g.add_argument(
        "--repeats",
        type=bounded_int(MAX_REPEATS, "steps"),
        default=None,  # given or not: torch and the MLX dry run refuse it (introspect.applies)
        metavar="K",
        help="MLX: measure K steps after the warm-up, each with its own peak reset, and "
        "report the largest peak, as a run's peak is its largest step's (MLX's peak "
        f"moves a few percent from step to step; default {MLX_STEPS}, at most {MAX_REPEATS})",
    )
    run_g.add_argument(
        "--no-census",
        action="store_true",
        help="skip the saved-tensor census (torch: one more forward pass)",
    )
    shape = p.add_argument_group("model shape (without SOURCE, or changing it)")
    for flag, dest, meta, text in SHAPE_FLAGS:
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
    from introspect.commands._args import add_config_flag

    add_config_flag(p)  # a trainer's config: its values where the flags go (as profile)
    from introspect.commands import _sharded

    _sharded.add_flags(p)  # with --devices D and --ddp | --zero 1 | --fsdp: a sharded step
    add_common(p, json_help="print JSON: spec, and per row the measurement and both estimates")
    from introspect.commands._args import add_plot_flag

    add_plot_flag(p, "the refined estimate vs the measured peak, per category and row")
    p.set_defaults(run=run)


def spec_from_args(args: argparse.Namespace) -> ModelSpec:
    """The model the flags describe: SOURCE's spec with the shape flags set on it, or the
    shape flags alone; a shape ModelSpec refuses names the flags (:func:`flags_named`)."""
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
    # The flags' own values first: a 40-digit --d-emb is implausible before it fails to
    # divide by --heads.
    if not args.force:
        bounds.check_fields(fields, "the flags", flags=FLAGS)
    try:
        return _spec(args, fields)
    except ValueError as err:
        raise IntrospectError(flags_named(str(err), fields)) from None


def flags_named(message: str, given: dict) -> str:
    """ModelSpec's refusal (``num_key_value_heads=3 must divide num_attention_heads=4``)
    with each field the flags set written as its flag (``--kv-heads 3``); a field a
    SOURCE set keeps its config name, where it came from."""

    def named(match: re.Match) -> str:
        field, value = match[1], match[2]
        return f"{FLAGS[field]} {value}" if field in given and field in FLAGS else match[0]

    message = re.sub(r"\b([a-z_]+)=(\S+)", named, message)
    return message.replace("(or give head_dim)", "(or give --head-dim)")


def _spec(args: argparse.Namespace, fields: dict) -> ModelSpec:
    from introspect.measure.shapes import known_nominals, llama_style, nominal_spec

    if args.source:
        spec = nominal_spec(args.source)
        if spec is None:
            from introspect.adapters import resolve

            spec = resolve(args.source, force=args.force, timeout=args.timeout).spec
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


def measure_device(args: argparse.Namespace) -> str:
    """Where the step really runs: --device, with auto = cuda when torch sees one (else
    cpu) for torch, and MLX's default device (metal on Apple silicon, else cpu)."""
    if args.device != "auto":
        return args.device
    if getattr(args, "trainer", "loop") != "loop":
        return "cpu"  # the Trainer run is a CPU one (use_cpu=True)
    if args.framework.startswith("mlx"):
        import platform

        return "metal" if platform.system() == "Darwin" else "cpu"
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def setups_from_args(args: argparse.Namespace) -> list[TrainingSetup]:
    """Every (--batch, --seq) setup; a dry run's fake tensors live on the CPU, so its
    setup's device is cpu (torch's CPU optimizer default unless --optimizer-impl says)."""
    from introspect.commands._args import setup_from_args

    device = measure_device(args)
    device = "cpu" if device == "fake" else device
    return [
        setup_from_args(args, batch_size=b, seq_len=t, device=device)
        for b in args.batch
        for t in args.seq
    ]


def check_args(args: argparse.Namespace) -> None:
    mlx = args.framework.startswith("mlx")
    device = measure_device(args)
    if mlx and device not in ("cpu", "metal", "fake"):
        raise IntrospectError(
            f"--device {device} is for torch; MLX runs on its default device (CPU on "
            "Linux, the GPU on Apple silicon)"
        )
    if args.impl == "transformers" and mlx:
        raise IntrospectError("--impl transformers is a torch model; use --framework torch")
    if args.impl == "mlx_lm" and not mlx:
        raise IntrospectError("--impl mlx-lm is an MLX model; use --framework mlx or mlx-compiled")
    lora = getattr(args, "finetune", None) in ("lora", "qlora") or getattr(args, "lora_rank", None)
    if mlx and lora and device == "fake" and args.impl != "mlx_lm":
        raise IntrospectError(
            "--device fake: the MLX dry run replays LoRA on mlx-lm's classes only; add "
            "--impl mlx-lm, or drop --finetune"
        )
    if device == "metal" and not mlx:
        raise IntrospectError("--device metal is MLX's; use --device cpu, cuda or fake for torch")
    if device == "cuda":
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


def check_act(args: argparse.Namespace) -> None:
    """``--act`` names an activation the reference model builds (its ``ACTIVATIONS``:
    ``introspect/measure/torch_model.py``, ``mlx_model.py``), before any step runs; the
    other implementations' classes read their config's own (or a Llama's SiLU)."""
    name = args.hidden_act
    if name is None or args.impl != "reference":
        return
    try:
        if args.framework.startswith("mlx"):
            from introspect.measure.mlx_model import ACTIVATIONS
        else:
            from introspect.measure.torch_model import ACTIVATIONS
    except ImportError:  # the framework's own line comes from check_args
        return
    if name not in ACTIVATIONS:
        from introspect.units import shown

        raise IntrospectError(
            f"--act {shown(name)} has no reference implementation; use one of "
            f"{', '.join(ACTIVATIONS)}"
        )


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


def shape_overrides(args: argparse.Namespace) -> dict:
    """Shape flags that change a SOURCE's config (Hugging Face config names)."""
    from introspect.measure.hf_models import SHAPE_KEYS

    return {k: getattr(args, k) for k in SHAPE_KEYS if getattr(args, k, None) is not None}


def implementation_config(args: argparse.Namespace, spec: ModelSpec):
    """The raw config the implementation's own class is built from, or None."""
    if args.impl == "transformers":
        from introspect.measure.hf_models import source_config

        return source_config(args.source, spec)
    if args.impl == "mlx_lm":
        from introspect.measure.mlx_lm_models import source_config

        return source_config(args.source, spec)
    return None


def default_impl(args: argparse.Namespace) -> str:
    """The class a step runs without --impl: a published model's own (transformers' on
    torch, mlx-lm's on MLX); our reference model for the seed's nominal sizes, the shape
    flags."""
    from introspect.commands import _sharded
    from introspect.measure.shapes import nominal_spec

    if args.source is None or nominal_spec(args.source) is not None:
        return "reference"
    if _sharded.wants_sharded(args) and args.framework != "torch":
        return "reference"  # refused by the sharded step with its own line
    from introspect.setup import default_implementation

    return default_implementation(args.framework)


def run(args: argparse.Namespace) -> int:
    from introspect import applies
    from introspect.commands import _sharded
    from introspect.commands._args import check_plot
    from introspect.measure import runner
    from introspect.positions import check_positions

    check_plot(args.plot)  # matplotlib and the path before the (possibly long) step
    from introspect.commands import _config

    shape_model = not args.source and any(getattr(args, k, None) for k in SHAPE_DESTS)
    # a trainer's config (or --trainer hf|trl alone): its values where the flags go
    resolved = _config.apply(args, shape_model=shape_model, mlx_defaults=False)
    args.impl = args.impl or default_impl(args)
    applies.check_measure(args)
    if args.impl == "transformers":  # a remote-code or unknown config, before reading it
        from introspect.measure.hf_models import precheck

        precheck(args.source)
    spec = bounds.check_spec(spec_from_args(args), "the model", force=args.force, flags=FLAGS)
    bounds.check_rotary(spec, flags=FLAGS)
    check_act(args)
    if _sharded.wants_sharded(args):
        if spec.unmodelled:  # the sharded step is laid beside a refined per-rank estimate
            from introspect.unmodelled import NotModelled, parts

            raise NotModelled(
                f"not modelled: {parts(spec)}; a sharded step is printed beside the refined "
                "per-rank estimate, which does not apply: measure one device"
            )
        config = implementation_config(args, spec) if args.impl == "transformers" else None
        if args.device == "fake":  # the sharded step as a dry run, in this process, any D
            from introspect.commands import _fake_sharded

            return _fake_sharded.run(args, spec, config)
        return _sharded.run(args, spec, config[0] if config else None)
    check_args(args)
    setups = _config.build(args, resolved, setups_from_args)
    device = measure_device(args)
    for s in setups:
        check_positions(spec, s)
        applies.check_model(spec, s)
        applies.unmeasured(s, "measure")  # never a step beside an estimate of another setup
        refuse_if_too_big(spec, s, device)
    config = implementation_config(args, spec)
    overrides = shape_overrides(args) if args.source else None
    results = []
    bar = _progress(len(setups))
    from introspect.allocator.recording import for_command

    replay = for_command(args)
    for s in setups:
        if bar is not None:
            bar.set_description(f"B={s.batch_size} T={s.seq_len}")
        try:
            if s.trainer != "loop":
                row = _trainer_row(spec, s, config, overrides)
            else:
                with replay():
                    row = runner.run_one(
                        spec,
                        s,
                        device=device,
                        impl=args.impl,
                        census=not args.no_census,
                        repeats=args.repeats or MLX_STEPS,
                        config=config,
                        overrides=overrides,
                    )
        except MemoryError as e:
            raise IntrospectError(
                f"B={s.batch_size}, T={s.seq_len}: the step ran out of memory on {device}; "
                "use a smaller --seq/--batch, or --device fake for a dry run"
            ) from e
        except RuntimeError as e:
            if "memory" not in str(e).lower() and "alloc" not in str(e).lower():
                raise
            raise IntrospectError(
                f"B={s.batch_size}, T={s.seq_len}: the step could not allocate memory on "
                f"{device} ({str(e).strip().splitlines()[0][:160]}); use a smaller "
                "--seq/--batch, or --device fake for a dry run"
            ) from e
        results.append(row)
        if bar is not None:
            bar.update()
    if bar is not None:
        bar.close()
    if args.plot:
        from introspect import plot

        plot.measured_vs_estimate(
            [
                (
                    f"B={r.comparison.measurement.setup['batch_size']} "
                    f"T={r.comparison.measurement.setup['seq_len']}",
                    r.comparison.measurement.categories,
                    r.comparison.refined,
                )
                for r in results
                if r.comparison.refined is not None
            ],
            args.plot,
        )
    if args.json:
        out = runner.to_json(spec, args.impl, results)
        if resolved is not None:
            out["config"] = _config.to_json(resolved, setups[0])
        print(report.dumps(out))
    else:
        if resolved is not None:
            print(_config.render(resolved, setups[0]) + "\n")
        print(runner.render(spec, args.impl, results))
    return 0


#: The shape flags' destinations (a model without SOURCE).
SHAPE_DESTS = ("num_hidden_layers", "hidden_size", "num_attention_heads", "vocab_size")


def _trainer_row(spec: ModelSpec, setup: TrainingSetup, config, overrides) -> runner_Row:
    """The real Trainer / SFTTrainer run (:mod:`introspect.measure.trainer_run`) beside
    both estimates of the same setup (``setup.trainer`` set)."""
    from introspect.measure import trainer_run
    from introspect.measure.compare import compare
    from introspect.measure.runner import Row
    from introspect.refined.implementations import resolve_attention

    setup = resolve_attention(spec, setup)  # the row and the estimate agree
    raw, where = config
    m = trainer_run.measure(raw, where, spec, setup, overrides=overrides)
    return Row(compare(spec, setup, m), None, spec)


def _progress(total: int):
    if total < 2:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, file=sys.stderr, unit="step", leave=False)
