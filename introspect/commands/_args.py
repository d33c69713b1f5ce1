"""Flags shared by the sub-commands: number parsing, the TrainingSetup flags, --json.

Each flag's help states its unit and default. Parsing errors become argparse's one-line
usage error (exit code 2) naming the flag and what is allowed.
"""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Callable, Iterator
from functools import cache

from introspect import applies, bounds
from introspect.setup import (
    ATTENTIONS,
    CROSS_ENTROPIES,
    DEVICES,
    DPO_REFERENCES,
    FRAMEWORKS,
    IMPLEMENTATIONS,
    LOOPS,
    OPTIMIZER_IMPLS,
    OPTIMIZERS,
    PRECISIONS,
    TRAINERS,
    TrainingSetup,
)
from introspect.units import DTYPE_CHOICES, dtype_bytes, shown

#: Names users also write for a choice: ``sdpa`` and ``flash`` are memory-efficient
#: attention kernels; ``sgd-momentum``'s hyphen is handled by :func:`choice` itself.
#: ``chunked`` was priced exactly as ``fused``; the libraries' chunked losses are named now
#: (CHANGELOG.md).
ALIASES = {"sdpa": "memory_efficient", "flash": "memory_efficient", "chunked": "fused"}


def positive_int(text: str) -> int:
    """A positive integer; accepts ``2048``, ``7e9``, ``10^6``, ``7_000_000_000``, ``1,024``
    (a power of ten up to ``10^9999``). A value
    past a float's range (``1e400``) or over 4300 digits is refused as too large; the
    flags' own maxima are :func:`bounded_int`'s and :mod:`introspect.bounds`'."""
    cleaned = text.replace("_", "").replace(",", "").strip()
    power = re.fullmatch(r"10\s*(?:\^|\*\*)\s*([0-9]{1,4})", cleaned)
    try:
        value = 10 ** int(power[1]) if power else int(cleaned)
    except ValueError:
        try:
            as_float = float(cleaned)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{shown(text)} is not a number; give a positive integer such as 2048, 7e9 or 10^6"
            ) from None
        if math.isnan(as_float):
            raise argparse.ArgumentTypeError(f"{shown(text)} is not a number") from None
        if math.isinf(as_float):
            raise argparse.ArgumentTypeError(
                f"{shown(text)} is too large to be a count; give a positive integer"
            ) from None
        if not as_float.is_integer():
            raise argparse.ArgumentTypeError(
                f"{shown(text)} is not a whole number; give a positive integer"
            ) from None
        value = int(as_float)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{shown(text)} must be positive")
    return value


def bounded_int(maximum: int, unit: str) -> Callable[[str], int]:
    """A :func:`positive_int` of at most ``maximum``: over it is argparse's one line,
    naming the flag, the value and the allowed range (``argument --repeats: '1e8' is
    over the maximum; allowed: 1 to 100 steps``)."""

    def parse(text: str) -> int:
        allowed = f"allowed: 1 to {maximum:,} {unit}"
        try:
            value = positive_int(text)
        except argparse.ArgumentTypeError as err:
            raise argparse.ArgumentTypeError(f"{err}; {allowed}") from None
        if value > maximum:
            raise argparse.ArgumentTypeError(f"{shown(text)} is over the maximum; {allowed}")
        return value

    parse.__name__ = "bounded_int"
    return parse


def positive_seconds(text: str) -> float:
    """A positive number of seconds (``30``, ``2.5``) of at most
    :data:`introspect.bounds.MAX_TIMEOUT_S`."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{shown(text)} is not a number of seconds") from None
    if not (0 < value <= bounds.MAX_TIMEOUT_S):  # also refuses nan and inf
        raise argparse.ArgumentTypeError(
            f"{shown(text)} is out of range; allowed: more than 0 and at most "
            f"{bounds.MAX_TIMEOUT_S:,} seconds ({bounds.MAX_TIMEOUT_S // 3600} hours)"
        )
    return value


def dtype_name(text: str) -> str:
    """A dtype name known to :mod:`introspect.units`."""
    try:
        dtype_bytes(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
    return text.lower()


def choice(choices: tuple) -> Callable[[str], str]:
    """A string from ``choices``, case-insensitive, with hyphens or underscores, or one of
    its :data:`ALIASES`."""

    def parse(text: str) -> str:
        value = text.lower().replace("-", "_")
        value = ALIASES.get(value, value) if ALIASES.get(value) in choices else value
        if value not in choices:
            allowed = ", ".join(c.replace("_", "-") for c in choices)
            raise argparse.ArgumentTypeError(f"{text!r} is not one of {allowed}")
        return value

    parse.__name__ = "choice"
    return parse


def units_choice(exact_bytes: bool) -> Callable[[str], str]:
    """--units: gb or gib, and bytes where the command prints exact integers
    (``exact_bytes``); elsewhere bytes would change nothing, so it is refused."""
    parse_any = choice(("gb", "gib", "bytes"))

    def parse(text: str) -> str:
        value = parse_any(text)
        if value == "bytes" and not exact_bytes:
            raise argparse.ArgumentTypeError(
                "'bytes' is table's (exact integers in its text and CSV); this command "
                "prints gb or gib, and --json gives bytes"
            )
        return value

    parse.__name__ = "choice"
    return parse


class _JsonFlag(argparse.Action):
    """--json, refused beside a typed --units (see :class:`_UnitsFlag`)."""

    def __init__(self, option_strings, dest, **kwargs):
        super().__init__(option_strings, dest, nargs=0, default=False, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        if getattr(namespace, "units", None) is not None:
            _units_with_json(parser, namespace.units)
        setattr(namespace, self.dest, True)


class _UnitsFlag(argparse.Action):
    """--units, refused beside --json: JSON carries every size as exact integer bytes
    (:func:`introspect.report.dumps`), so a unit would change nothing there."""

    def __call__(self, parser, namespace, values, option_string=None):
        if getattr(namespace, "json", False):
            _units_with_json(parser, values)
        setattr(namespace, self.dest, values)


def _units_with_json(parser: argparse.ArgumentParser, units: str) -> None:
    parser.error(
        f"--units {units} and --json contradict: JSON gives every size as exact bytes, so "
        "--units would change nothing; drop --units, or drop --json for a table in that unit"
    )


def no_hub(command: str) -> Callable[[str], float]:
    """--timeout of a command that reads nothing from the Hub: any value is refused
    (argparse's one line names --timeout), as it would bound nothing."""

    def parse(text: str) -> float:
        raise argparse.ArgumentTypeError(
            f"it bounds the Hugging Face Hub's reads, and {command} reads nothing "
            "from the Hub (it prices the shapes it is given); drop --timeout"
        )

    parse.__name__ = "no_hub"
    return parse


def add_common(
    parser: argparse.ArgumentParser,
    *,
    json_help: str | None = None,
    exact_bytes: bool = False,
    hub: bool = True,
) -> None:
    """--json and --debug, which every sub-command takes (``exact_bytes``: --units bytes
    means something, see :func:`units_choice`; ``hub``: the command may read the Hub, so
    --timeout applies; elsewhere --timeout is refused). --units beside --json is refused
    (JSON is bytes); --units left out is None, which means gb."""
    parser.add_argument(
        "--json",
        action=_JsonFlag,
        help=json_help or "print JSON (bytes as integers) instead of tables",
    )
    parser.add_argument(
        "--debug",
        dest="sub_debug",
        action="store_true",
        help="show the full traceback on errors",
    )
    parser.add_argument(
        "--force",
        action="store_true",
        help="accept values beyond the sanity bounds (10^6 layers, T over 10^8, …)",
    )
    if hub:
        parser.add_argument(
            "--timeout",
            type=positive_seconds,
            default=None,
            metavar="SECONDS",
            help="the most to wait for the Hub, all requests and retries together "
            f"(default 30, or $INTROSPECT_TIMEOUT; at most {bounds.MAX_TIMEOUT_S:,})",
        )
    else:
        command = parser.prog.split()[-1]
        parser.add_argument("--timeout", type=no_hub(command), default=None, help=argparse.SUPPRESS)
    parser.add_argument(
        "--units",
        type=units_choice(exact_bytes),
        action=_UnitsFlag,
        default=None,
        help="GB (default: decimal, 1e9 bytes, as the seed) or GiB (2^30 bytes) for printed "
        "memory"
        + ("; bytes (exact integers in the text and CSV)" if exact_bytes else "")
        + "; not with --json, which is in bytes",
    )


def add_setup_flags(
    parser: argparse.ArgumentParser,
    *,
    batch_default: int = 1,
    seq_default: int | None = 2048,
    act_default: str | None = None,
    sweep: bool = True,
    execution: bool = True,
    extra_devices: tuple[tuple[str, str], ...] = (),
) -> None:
    """The TrainingSetup flags. With ``sweep``, --batch and --seq take several values and
    every combination is one row. With ``execution``, the flags that only the refined
    (execution) estimate reads are added too; ``extra_devices`` are (name, help) pairs a
    command adds to --device (measure's ``fake``). The flags are remembered on the parsed
    namespace for :func:`given_setup_flags`."""
    first = len(parser._actions)
    _add_setup_flags(
        parser, batch_default, seq_default, act_default, sweep, execution, extra_devices
    )
    actions = parser._actions[first:]
    for a in actions:
        a.__class__ = _typed(type(a))
    parser.set_defaults(
        setup_flags=tuple((a.option_strings[0], a.dest, a.default) for a in actions)
    )


@cache
def _typed(action: type[argparse.Action]) -> type[argparse.Action]:
    """``action`` that also notes its dest in the namespace's ``typed_setup_flags`` when the
    flag is typed: argparse calls an action only for what the command line holds, so a flag
    typed at its default value (``--seq 2048`` over a config's 4096) still counts as given."""

    class Typed(action):
        def __call__(self, parser, namespace, values, option_string=None):
            namespace.__dict__.setdefault("typed_setup_flags", set()).add(self.dest)
            super().__call__(parser, namespace, values, option_string)

    Typed.__name__ = action.__name__
    return Typed


def given_setup_flags(args: argparse.Namespace) -> list[str]:
    """The setup flags given, as typed (``--seq``), in the parser's order: each typed on
    the command line (at any value, its default included: it overrides a config's), or
    holding a value other than its default (a namespace built without parsing)."""
    typed = getattr(args, "typed_setup_flags", set())
    return [
        flag
        for flag, dest, default in getattr(args, "setup_flags", ())
        if dest in typed or getattr(args, dest, default) != default
    ]


def _add_setup_flags(
    parser: argparse.ArgumentParser,
    batch_default: int,
    seq_default: int | None,
    act_default: str | None,
    sweep: bool,
    execution: bool,
    extra_devices: tuple[tuple[str, str], ...],
) -> None:
    g = parser.add_argument_group("training setup")
    nargs = "+" if sweep else None
    g.add_argument(
        "--batch",
        type=positive_int,
        nargs=nargs,
        default=[batch_default] if sweep else batch_default,
        metavar="B",
        help=f"micro-batch size B (default {batch_default})"
        + ("; several values sweep" if sweep else ""),
    )
    seq_help = "sequence length T in tokens"
    seq_help += f" (default {seq_default})" if seq_default else " (required)"
    g.add_argument(
        "--seq",
        type=positive_int,
        nargs=nargs,
        default=([seq_default] if sweep else seq_default) if seq_default else None,
        required=seq_default is None,
        metavar="T",
        help=seq_help + ("; several values sweep" if sweep else ""),
    )
    act = g.add_mutually_exclusive_group()
    act.add_argument(
        "--act-dtype",
        type=dtype_name,
        default=act_default,
        metavar="DTYPE",
        help=f"dtype of saved activations, sets s: {', '.join(DTYPE_CHOICES)} "
        + (
            f"(default {act_default}; "
            if act_default
            else "(default: bf16 under --precision bf16, amp or mixed, else fp32; "
        )
        + "fp32 is 4 bytes, bf16/fp16 2)",
    )
    act.add_argument(
        "--act-bytes",
        type=bounded_int(bounds.MAX_ACT_BYTES, "bytes"),
        default=None,
        metavar="S",
        help="bytes per saved activation s, given directly (overrides --act-dtype; "
        f"1 to {bounds.MAX_ACT_BYTES})",
    )
    g.add_argument(
        "--weights-dtype",
        type=dtype_name,
        default=None,
        metavar="DTYPE",
        help="dtype of the working weights and their gradients (default fp32); a 16-bit "
        "dtype adds the FP32 master copy of mixed precision",
    )
    g.add_argument(
        "--grad-accum",
        type=bounded_int(bounds.MAX_GRAD_ACCUM, "micro-batches"),
        default=1,
        metavar="M",
        help="gradient accumulation: M micro-batches of B per optimizer step (default 1; the "
        "HF Trainer's and torchtune's gradient_accumulation_steps); from the second on, "
        "every gradient is alive through forward and backward",
    )
    if not execution:
        return
    e = parser.add_argument_group("execution (refined estimate)")
    e.add_argument(
        "--precision",
        type=choice(PRECISIONS),
        default="fp32",
        help="fp32 (default); bf16 (pure BF16 weights, grads and optimizer state); amp "
        "(torch.autocast(bfloat16) over FP32 weights, grads and state, as plain PyTorch and "
        "the HF Trainer's bf16=True run it); mixed (16-bit working weights and grads with an "
        "FP32 master copy, as DeepSpeed, Megatron and FSDP2's MixedPrecisionPolicy hold it). "
        "A 16-bit precision implies 16-bit activations unless --act-dtype says otherwise",
    )
    e.add_argument(
        "--optimizer",
        type=choice(OPTIMIZERS),
        default="adam",
        help="adam (default, FP32 m and v: 8 bytes/param), adamw, adam8bit (2 bytes/param), "
        "sgd-momentum (4), sgd (0), none (frozen weights: no grads, no state); "
        "adafactor (transformers' Adafactor as the HF Trainer's optim='adafactor' builds it: "
        "FP32 row and column vectors per matrix, no first moment); paged-adamw-8bit, "
        "paged-adamw-32bit (bitsandbytes' paged AdamW: its state in CUDA unified memory, "
        "which torch's allocator does not count)",
    )
    e.add_argument(
        "--optimizer-impl",
        type=choice(OPTIMIZER_IMPLS),
        default="auto",
        help="torch's update: auto (default: torch's own choice, foreach on CUDA, the "
        "single-tensor loop on CPU), single-tensor, foreach (one FP32 copy of the "
        "parameters as a temporary), fused (in place)",
    )
    e.add_argument(
        "--attention",
        type=choice(ATTENTIONS),
        default=None,
        help="eager (T×T scores and probabilities kept) or memory-efficient (flash/SDPA: "
        "a log-sum-exp per row instead); sdpa and flash are accepted for memory-efficient. "
        "Default: the implementation's own — transformers' class default (sdpa unless the "
        "class has no SDPA path), eager for --impl reference, mx.fast SDPA for mlx-lm",
    )
    e.add_argument(
        "--checkpointing",
        action="store_true",
        help="activation checkpointing: keep each layer's input, recompute one layer at a time",
    )
    e.add_argument(
        "--cross-entropy",
        type=choice(CROSS_ENTROPIES),
        default="standard",
        help="standard (default: the model's loss over all B×T×V logits), fused (a generic "
        "fused linear cross-entropy: a log-sum-exp per token kept, 1024-token chunks "
        "recomputed in backward; 'chunked' is its old name), torchtune "
        "(CEWithChunkedOutputLoss: 8 output chunks, every chunk's FP32 log-softmax kept), "
        "trl (SFTTrainer's fused LM head: 4096x32768 tiles, FP32 gradients in backward) or "
        "liger (fused linear cross-entropy: the head's gradients made in the forward)",
    )
    e.add_argument(
        "--devices",
        type=positive_int,
        default=1,
        metavar="D",
        help="data-parallel devices (default 1); figures are per device",
    )
    e.add_argument(
        "--zero",
        type=int,
        choices=(0, 1, 2, 3),
        default=0,
        metavar="STAGE",
        help="ZeRO stage over the devices: 0 none (default), 1 optimizer state "
        "(torch's ZeroRedundancyOptimizer), 2 + grads, 3 + weights (DeepSpeed's stages 2 and "
        "3; --fsdp is FSDP2 full sharding)",
    )
    add_runner_flags(e, extra_devices=extra_devices)
    e.add_argument(
        "--trainer",
        type=choice(TRAINERS),
        default="loop",
        help="whose training loop steps the model: loop (default: a hand-written loop, "
        "forward, backward, step, zero_grad), hf (transformers' Trainer: its defaults "
        "unless flags or --config say otherwise, and its 32-bit bitsandbytes state for "
        "every nn.Embedding), trl (TRL's SFTTrainer: its defaults, gradient "
        "checkpointing and max_length 1024 among them, and its fused LM-head loss) or dpo "
        "(TRL's DPOTrainer: the same head over the chosen and rejected rows, 2 per pair of "
        "--batch, and its reference model)",
    )
    e.add_argument(
        "--packed-sequences",
        action="store_true",
        help="each row is several sequences packed end to end (position_ids restart, no "
        "attention_mask; TRL's padding_free/packing): transformers builds a block-diagonal "
        "T×T mask, which SDPA keeps per layer",
    )
    e.add_argument(
        "--dpo-reference",
        type=choice(DPO_REFERENCES),
        default="model",
        help="under --trainer dpo: model (default: a frozen copy of the weights, or under "
        "LoRA the adapter-free base, run each step) or precomputed "
        "(precompute_ref_log_probs: no copy held in training)",
    )
    add_sharding_flags(e)
    add_finetune_flags(parser)


def add_runner_flags(
    group,
    *,
    framework_default: str | None = "torch",
    extra_devices: tuple[tuple[str, str], ...] = (),
) -> None:
    """--framework, --device, --impl and --loop: who runs the step, with one meaning in
    every command (``extra_devices``: see :func:`add_setup_flags`)."""
    group.add_argument(
        "--framework",
        type=choice(FRAMEWORKS),
        default=framework_default,
        required=framework_default is None,
        help="torch"
        + (" (default)" if framework_default == "torch" else "")
        + ", mlx (an uncompiled MLX step) or mlx-compiled (mx.compile, as the seed measured)",
    )
    group.add_argument(
        "--device",
        type=choice(DEVICES + tuple(name for name, _ in extra_devices)),
        default="auto",
        help="where the step runs: cuda or cpu for torch, metal or cpu for MLX; auto "
        "(default) is cuda for torch and metal for MLX. With torch it decides the "
        "optimizer's default implementation (foreach on CUDA, single-tensor on CPU)"
        + "".join(f"; {text}" for _, text in extra_devices),
    )
    group.add_argument(
        "--impl",
        type=choice(IMPLEMENTATIONS),
        default=None,
        help="whose model class: transformers (the config's own Hugging Face class; the "
        "default on torch), mlx-lm (mlx-lm's class; the default on MLX) or reference "
        "(the seed's block as our own model)",
    )
    group.add_argument(
        "--loop",
        type=choice(LOOPS),
        default=None,
        help="how the step computes its loss: labels (the default with transformers' "
        "classes: the model computes its own loss from labels=, as model(input_ids=x, "
        "labels=x).loss and the HF Trainer's compute_loss do; nothing else is held) or "
        "logits (the default otherwise: the training code holds the logits through "
        "backward and calls cross-entropy on them itself)",
    )


def loop_for(args: argparse.Namespace) -> str:
    """--loop when given; else labels for transformers' classes (their users' loop and
    the HF Trainer's), logits otherwise."""
    from introspect.setup import default_implementation, default_loop

    if getattr(args, "loop", None):
        return args.loop
    impl = getattr(args, "impl", None) or default_implementation(
        getattr(args, "framework", "torch")
    )
    return default_loop(impl)


def activation_dtype_for(args: argparse.Namespace) -> str:
    """--act-dtype when given; else bf16 under a 16-bit precision, fp32 otherwise."""
    if getattr(args, "act_dtype", None):
        return args.act_dtype
    return "bf16" if getattr(args, "precision", "fp32") in ("bf16", "amp", "mixed") else "fp32"


def _cross_entropy(args: argparse.Namespace) -> str:
    """--cross-entropy; left at its default under --trainer trl, SFTTrainer's own fused
    LM head (trl/trainer/sft_trainer.py add_fused_lm_head), the only loss it runs."""
    if getattr(args, "trainer", "loop") in ("trl", "dpo") and args.cross_entropy == "standard":
        return "trl"
    return args.cross_entropy


def setup_from_args(args: argparse.Namespace, **overrides) -> TrainingSetup:
    """One TrainingSetup from the parsed flags (the first --batch/--seq value when swept;
    ``overrides`` replace fields)."""
    batch = args.batch[0] if isinstance(args.batch, list) else args.batch
    seq = args.seq[0] if isinstance(args.seq, list) else args.seq
    fields = dict(
        batch_size=batch,
        seq_len=seq,
        activation_dtype=activation_dtype_for(args),
        activation_bytes_override=args.act_bytes,
        weights_dtype=args.weights_dtype or "fp32",
        grad_accum=getattr(args, "grad_accum", 1),
    )
    if hasattr(args, "precision"):
        applies.contradictions(
            precision=args.precision,
            weights_dtype=args.weights_dtype,
            zero_stage=args.zero,
            devices=args.devices,
            sharding=next((f for f in ("ddp", "fsdp") if getattr(args, f, False)), "none"),
        )
        fields.update(
            precision=args.precision,
            optimizer=args.optimizer,
            attention=args.attention,
            activation_checkpointing=args.checkpointing,
            cross_entropy=_cross_entropy(args),
            devices=args.devices,
            zero_stage=args.zero,
            framework=args.framework,
            device=args.device,
            implementation=args.impl,
            loop=loop_for(args),
            optimizer_impl=args.optimizer_impl,
            trainer=args.trainer,
            dpo_reference=args.dpo_reference,
            packed_sequences=args.packed_sequences,
        )
        fields.update(sharding_fields(args))
    fields.update(finetune_fields(args))
    fields.update(overrides)
    setup = TrainingSetup(**fields)
    bounds.check_setup(setup, force=getattr(args, "force", False))
    return setup


def sweep_setups(args: argparse.Namespace) -> Iterator[TrainingSetup]:
    """Every (--batch, --seq) combination, batch-major, as TrainingSetups."""
    batches = args.batch if isinstance(args.batch, list) else [args.batch]
    seqs = args.seq if isinstance(args.seq, list) else [args.seq]
    for b in batches:
        for t in seqs:
            yield setup_from_args(args, batch_size=b, seq_len=t)


def add_sharding_flags(group) -> None:
    """--ddp, --fsdp, --no-reshard, --bucket-view, --tp, --pp and --micro-batches: how the
    state is spread over --devices (``introspect.refined.sharding``); --zero stays."""
    how = group.add_mutually_exclusive_group()
    how.add_argument(
        "--ddp",
        action="store_true",
        help="DistributedDataParallel over --devices: full state per device plus the "
        "reducer's gradient buckets (N gradient-sized bytes, the whole step)",
    )
    how.add_argument(
        "--fsdp",
        action="store_true",
        help="FSDP2 fully_shard over --devices, one unit per block and the root "
        "(embedding, final norm, head); with --precision mixed its MixedPrecisionPolicy "
        "(bf16 params, fp32 reduce)",
    )
    group.add_argument(
        "--no-reshard",
        action="store_true",
        help="FSDP2 reshard_after_forward=False: blocks stay gathered from forward to backward",
    )
    group.add_argument(
        "--bucket-view",
        action="store_true",
        help="DDP gradient_as_bucket_view=True: gradients are views into the buckets",
    )
    group.add_argument(
        "--tp",
        type=positive_int,
        default=1,
        metavar="T",
        help="Megatron tensor-parallel degree (default 1; a closed form, not measured)",
    )
    group.add_argument(
        "--pp",
        type=positive_int,
        default=1,
        metavar="P",
        help="pipeline-parallel stages under 1F1B (default 1; a closed form, not measured)",
    )
    group.add_argument(
        "--micro-batches",
        type=positive_int,
        default=None,
        metavar="M",
        help="micro-batches per step for the pipeline (default: --pp)",
    )


def sharding_fields(args: argparse.Namespace) -> dict:
    """The TrainingSetup sharding fields from :func:`add_sharding_flags`' flags."""
    if not hasattr(args, "fsdp"):
        return {}
    zero = getattr(args, "zero", 0)
    if zero and (args.ddp or args.fsdp):
        flag = "--ddp" if args.ddp else "--fsdp"
        raise ValueError(f"--zero {zero} and {flag} name two shardings; give one")
    sharding = "ddp" if args.ddp else "fsdp" if args.fsdp else "zero" if zero else "none"
    return {
        "sharding": sharding,
        "zero_stage": 3 if args.fsdp else zero,
        "reshard_after_forward": not args.no_reshard,
        "gradient_as_bucket_view": args.bucket_view,
        "tensor_parallel": args.tp,
        "pipeline_parallel": args.pp,
        "micro_batches": args.micro_batches,
    }


def add_finetune_flags(parser: argparse.ArgumentParser) -> None:
    """LoRA / QLoRA, CPU offload and the optimizer in backward (issue 11)."""
    from introspect.setup import (
        ADAPTER_DTYPES,
        BASE_QUANTS,
        FINETUNES,
        GROUP_SIZES,
        LORA_MODULES,
        OFFLOADS,
    )

    g = parser.add_argument_group("fine-tuning and offload (refined estimate)")
    g.add_argument(
        "--finetune",
        type=choice(FINETUNES),
        default=None,
        help="full (default: every weight trained), lora (frozen base, adapters trained) or "
        "qlora (LoRA over a 4-bit NF4 base), dora (mlx-lm's DoRA, --framework mlx only); "
        "--lora-rank alone implies lora",
    )
    g.add_argument(
        "--lora-rank",
        type=positive_int,
        default=None,
        metavar="R",
        help="adapter rank r (default 16): r·(d_in + d_out) trainable parameters per "
        "targeted linear",
    )
    g.add_argument(
        "--lora-targets",
        nargs="+",
        default=None,
        metavar="NAME",
        help=f"modules the adapters sit on: {', '.join(LORA_MODULES)} or all-linear (default); "
        "also lm_head and embed_tokens beside them (peft's LoRA on the output head and the "
        "input embedding; all-linear leaves them out)",
    )
    g.add_argument(
        "--lora-dropout",
        type=float,
        default=0.0,
        metavar="P",
        help="peft's lora_dropout (default 0); above 0 each adapter keeps its dropped input",
    )
    g.add_argument(
        "--num-layers",
        type=positive_int,
        default=None,
        metavar="K",
        help="adapters on the top K blocks only (mlx-lm's num_layers, peft's "
        "layers_to_transform); default every block. The frozen blocks below keep no "
        "activations",
    )
    g.add_argument(
        "--adapter-dtype",
        type=choice(ADAPTER_DTYPES),
        default="fp32",
        help="the LoRA adapters' dtype: fp32 (default: peft's autocast_adapter_dtype=True "
        "upcasts them) or bf16 (autocast_adapter_dtype=False: the base's 16-bit dtype, as "
        "LitGPT and torchtune keep them; needs --precision bf16)",
    )
    g.add_argument(
        "--base-quant",
        type=choice(BASE_QUANTS),
        default="auto",
        help="storage of the frozen base: auto (default: nf4 for qlora, the working dtype for "
        "lora), bf16, fp16, fp32, int8 (LLM.int8) or nf4 (4-bit, bitsandbytes); on MLX "
        "affine4 or affine8 (mx.quantize: an mlx-community 4-/8-bit checkpoint)",
    )
    g.add_argument(
        "--group-size",
        type=int,
        choices=GROUP_SIZES,
        default=64,
        help="values per scale and bias of an affine4/affine8 base (default 64, "
        "mlx_lm.convert's; 32 or 128)",
    )
    g.add_argument(
        "--no-double-quant",
        action="store_true",
        help="NF4 without double quantization (absmax kept in FP32, not 8 bits)",
    )
    g.add_argument(
        "--train-embeddings",
        action="store_true",
        help="also train the input embedding and the output head (Qwen's 'LoRA (emb)')",
    )
    g.add_argument(
        "--offload",
        type=choice(OFFLOADS),
        default="none",
        help="none (default), optimizer (state and master weights in host memory, update on "
        "the CPU) or parameters (weights too, brought over one block at a time)",
    )
    g.add_argument(
        "--freeze-tower",
        action="store_true",
        help="a multimodal model's vision/audio tower stays frozen: its weights, no "
        "gradients, master copy or optimizer state",
    )
    g.add_argument(
        "--images",
        type=int,
        default=0,
        metavar="N",
        help="images per sample for a vision-language model: the language model reads "
        "--seq text tokens plus each image's visual tokens (the model's processor rule)",
    )
    g.add_argument(
        "--image-size",
        type=image_size,
        default=None,
        metavar="HxW",
        help="each image's height x width in pixels before the processor resizes it "
        "(default 448x448 with --images)",
    )
    g.add_argument(
        "--optimizer-in-backward",
        action="store_true",
        help="step each parameter as its gradient is made (gradients never all exist)",
    )
    g.add_argument(
        "--offload-activations",
        action="store_true",
        help="saved activations to host memory as they are saved, back for their backward "
        "(torch's save_on_cpu(pin_memory=True)); host bytes are reported apart",
    )


def finetune_fields(args: argparse.Namespace) -> dict:
    """The TrainingSetup fields of :func:`add_finetune_flags` (none when absent)."""
    from introspect.errors import IntrospectError

    if not hasattr(args, "finetune"):
        return {}
    implied = args.lora_rank or args.lora_targets or args.num_layers
    finetune = args.finetune or ("lora" if implied else "full")
    if finetune == "full" and (args.lora_rank or args.lora_targets):
        raise IntrospectError("--lora-rank/--lora-targets need --finetune lora or qlora")
    targets = tuple(
        t.replace("-", "_") if t != "all-linear" else t for t in args.lora_targets or ()
    )
    return dict(
        finetune=finetune,
        lora_rank=args.lora_rank or 16,
        lora_targets=targets or ("all-linear",),
        lora_dropout=args.lora_dropout,
        num_layers=args.num_layers,
        adapter_dtype=args.adapter_dtype,
        base_quant=args.base_quant,
        group_size=args.group_size,
        double_quant=not args.no_double_quant,
        train_embeddings=args.train_embeddings,
        offload=args.offload,
        optimizer_in_backward=args.optimizer_in_backward,
        offload_activations=args.offload_activations,
        freeze_tower=args.freeze_tower,
        **image_fields(args),
    )


def image_size(text: str) -> tuple[int, int]:
    """``HxW`` (``448x448``) as two positive integers; anything else is one line."""
    parts = text.lower().replace("×", "x").split("x")
    if len(parts) != 2 or not all(p.strip().isdigit() and int(p) > 0 for p in parts):
        raise argparse.ArgumentTypeError(
            f"--image-size: {text!r} is not HxW with two positive integers (e.g. 448x448)"
        )
    return int(parts[0]), int(parts[1])


#: The image size ``--images`` alone means.
DEFAULT_IMAGE_SIZE = (448, 448)


def image_fields(args: argparse.Namespace) -> dict:
    """``images`` and ``image_size`` from ``--images`` / ``--image-size``: a size without
    images, or fewer than one image, is one line."""
    from introspect.errors import IntrospectError

    images = getattr(args, "images", 0) or 0
    size = getattr(args, "image_size", None)
    if images < 0 or (images == 0 and size is not None):
        raise IntrospectError(
            f"--images {images}: --image-size sizes the images of each sample; give "
            "--images 1 or more with it (or drop --image-size)"
        )
    if not images:
        return {}
    return {"images": images, "image_size": size or DEFAULT_IMAGE_SIZE}


def add_config_flag(parser: argparse.ArgumentParser) -> None:
    """--config FILE [FILE …]: a trainer's config read by content (issue 21,
    :mod:`introspect.adapters.trainers`); flags given beside it win."""
    parser.add_argument(
        "--config",
        nargs="+",
        default=None,
        metavar="FILE",
        help="the training config you have: TrainingArguments JSON/YAML, TRL SFT/DPO config, "
        "axolotl, LLaMA-Factory, torchtune recipe, mlx-lm lora YAML, DeepSpeed JSON, "
        "accelerate config (read by content; the model comes from it unless SOURCE is given; "
        "flags override it)",
    )


def add_plot_flag(parser: argparse.ArgumentParser, what: str) -> None:
    """--plot FILE: a figure (PNG or SVG by the suffix; needs matplotlib)."""
    parser.add_argument(
        "--plot",
        metavar="FILE",
        default=None,
        help=f"also draw {what} to FILE (.png or .svg; needs matplotlib)",
    )


def check_plot(path: str | None) -> None:
    """A bad --plot is one line before any work: the suffix, matplotlib (missing or
    broken), then the path itself (:func:`introspect.files.check_writable`: a folder, a
    missing folder, a path under a file, a dangling symlink, a read-only file)."""
    import os
    from pathlib import Path

    from introspect.errors import IntrospectError

    if path is None:
        return
    from introspect import files, plot

    p, shown_path = Path(path), files.display(path)
    if p.suffix.lower() not in (".png", ".svg"):
        raise IntrospectError(f"--plot {shown_path}: give a file name ending in .png or .svg")

    why = plot.problem()
    if why is not None:
        raise IntrospectError(why)
    if not os.path.islink(p) and not os.path.lexists(p.parent):
        raise IntrospectError(
            f"--plot {shown_path}: no folder {files.display(p.parent)}; create it or give another"
        )
    files.check_writable(p, flag="--plot")


def check_revision(source: str | None, revision: str | None) -> None:
    """--revision names a Hub branch, tag or commit; a SOURCE that is an existing local
    path is read as it is on disk (``introspect.adapters.resolve`` tries a path first), so
    a revision beside it would be ignored: one line naming both."""
    if revision is None or not source:
        return
    from pathlib import Path

    from introspect import files
    from introspect.errors import IntrospectError

    try:
        local = Path(source).expanduser().exists()
    except (OSError, ValueError, RuntimeError):  # a name too long, a NUL, no home folder
        return  # resolve says what is wrong with it
    if local:
        raise IntrospectError(
            f"--revision {shown(revision)} names a Hub branch, tag or commit, and "
            f"{files.display(source)} is a local path, read as it is on disk; drop --revision"
        )
