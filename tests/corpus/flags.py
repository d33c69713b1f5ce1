"""Corpus cases for every flag of every command: bad numbers and choices (refused, naming
the flag), good values with what they need (ok), and contradictions between flags
(refused, naming one of the flags) — including flags that would be silently ignored.

Each command's cases start from a valid call (:data:`BASE`) and append flags; argparse
keeps the last value, so ``--seq 0`` after the base's ``--seq 8`` is what runs.
``tests/test_corpus.py`` checks that every flag the parser has appears in some case of
that command, so a new flag needs its cases here.
"""

from __future__ import annotations

from .cases import BUNDLED, Case

#: A 14-head, 2-K/V-head, 24-layer text model with tied embeddings (bundled, offline).
QWEN = BUNDLED
#: A multimodal bundled model (vision tower), for --freeze-tower.
MULTIMODAL = "google/gemma-3-4b-pt"
#: A vision-language wrapper whose processor is modelled, for --images / --image-size.
VLM = "Qwen/Qwen3-VL-8B-Instruct"
FROZEN = ("--freeze-tower", "--seq", "512")
SHAPE = ("--layers", "2", "--d-emb", "64", "--heads", "4", "--vocab", "128", "--seq", "8")
#: A valid call of each command, to which a case appends its flags.
BASE: dict[str, tuple[str, ...]] = {
    "estimate": ("estimate", "--layers", "2", "--d-emb", "64", "--heads", "4", "--vocab", "100")
    + ("--seq", "8"),
    "sizes": ("sizes",),
    "profile": ("profile", QWEN),
    "table": ("table", QWEN),
    "fit": ("fit", QWEN, "--gpu", "h200"),
    "measure": ("measure", *SHAPE, "--framework", "torch", "--device", "fake", "--no-census"),
    "explain": ("explain", "weights"),
}
#: Commands with the execution (refined estimate) flags.
REFINED = ("profile", "table", "fit", "measure")

#: Values no positive-integer flag takes (label → text).
BAD_COUNTS = {
    "zero": "0",
    "negative": "-1",
    "nan": "nan",
    "inf": "inf",
    "1e400": "1e400",
    "huge-int": "9" * 40,
    "text": "x",
    "fraction": "1.5",
    "empty": "",
}
#: Values no number-of-seconds flag takes.
BAD_SECONDS = {k: v for k, v in BAD_COUNTS.items() if k not in ("fraction", "huge-int")}
#: Values --lora-dropout (a probability in [0, 1)) does not take.
BAD_PROBABILITY = {
    "negative": "-0.1",
    "one": "1",
    "over-one": "1.5",
    "nan": "nan",
    "inf": "inf",
    "1e400": "1e400",
    "text": "x",
    "empty": "",
}
BAD_CHOICES = {"unknown": "nonesuch", "empty": ""}
BAD_BUDGETS = {
    "zero": "0GB",
    "negative": "-1GB",
    "nan": "nanGB",
    "inf": "infGB",
    "1e400": "1e400GB",
    "no-unit": "80",
    "unknown-unit": "80XB",
    "text": "lots",
    "empty": "",
}

#: Positive-integer flags per command; a value of 10^9 is beyond each one's sense too
#: (a bound, the model's heads or layers, a rank over d) except where listed in OK_1E9.
COUNTS = {
    "estimate": ("--layers", "--d-emb", "--heads", "--vocab", "--params", "--batch", "--seq")
    + ("--act-bytes", "--grad-accum"),
    "sizes": ("--seq", "--batch"),
    "profile": ("--batch", "--seq", "--act-bytes", "--devices", "--tp", "--pp")
    + ("--micro-batches", "--lora-rank", "--grad-accum", "--num-layers"),
    "fit": ("--batch", "--seq", "--act-bytes", "--devices", "--tp", "--pp", "--micro-batches")
    + ("--lora-rank", "--max-devices", "--grad-accum", "--num-layers"),
    "measure": ("--batch", "--seq", "--act-bytes", "--devices", "--tp", "--pp")
    + ("--micro-batches", "--lora-rank", "--repeats", "--layers", "--d-emb", "--heads")
    + ("--vocab", "--kv-heads", "--head-dim", "--intermediate", "--step-timeout")
    + ("--grad-accum", "--num-layers"),
}
COUNTS["table"] = COUNTS["profile"]
#: (command, flag) where 10^9 is a plausible value: a 10^9 vocabulary or parameter count.
OK_1E9 = {("estimate", "--vocab"), ("estimate", "--params"), ("measure", "--vocab")}
#: Other flags a refusal may name instead, per command: measure's tiny dry run refuses
#: LoRA on its reference model (it needs --impl transformers) and a sharded step on
#: --device fake before it looks at the values.
ALSO_NAMED = {
    ("measure", "--lora-rank"): ("--finetune", "--impl"),
    ("measure", "--lora-targets"): ("--finetune", "--impl"),
    ("measure", "--lora-dropout"): ("--finetune", "--impl"),
    ("measure", "--num-layers"): ("--finetune", "--impl"),
    ("measure", "--devices"): ("--device",),
}

CHOICES = {
    "estimate": ("--act-dtype", "--weights-dtype", "--units"),
    "sizes": ("--framework", "--units", "--finetune", "--base-quant"),
}
_REFINED_CHOICES = (
    "--act-dtype",
    "--weights-dtype",
    "--precision",
    "--optimizer",
    "--optimizer-impl",
    "--attention",
    "--cross-entropy",
    "--framework",
    "--device",
    "--impl",
    "--loop",
    "--finetune",
    "--base-quant",
    "--offload",
    "--adapter-dtype",
    "--trainer",
    "--dpo-reference",
    "--units",
    "--lora-targets",
)
for _c in REFINED:
    CHOICES[_c] = _REFINED_CHOICES
CHOICES["table"] += ("--reported",)
for _c in ("profile", "table", "fit"):  # the GPU whose context and capacity are priced
    CHOICES[_c] += ("--gpu",)
CHOICES["measure"] += ("--norm", "--ffn", "--act")

#: Good values, each with the flags it needs, valid on profile, table and fit (and
#: measure where :data:`MEASURE_OK` says): (label, flags).
GOOD: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("batch-4", ("--batch", "4")),
    ("seq-512", ("--seq", "512")),
    ("seq-7e2-notation", ("--seq", "5e2")),
    ("seq-with-separators", ("--seq", "1,024")),
    ("act-dtype-bf16", ("--act-dtype", "bf16")),
    ("act-dtype-fp8", ("--act-dtype", "fp8")),
    ("act-bytes-2", ("--act-bytes", "2")),
    ("weights-dtype-bf16", ("--weights-dtype", "bf16")),
    ("precision-bf16", ("--precision", "bf16")),
    ("precision-amp", ("--precision", "amp")),
    ("precision-mixed", ("--precision", "mixed")),
    ("precision-upper-case", ("--precision", "BF16")),
    ("optimizer-adamw", ("--optimizer", "adamw")),
    ("optimizer-adam8bit", ("--optimizer", "adam8bit")),
    ("optimizer-sgd-momentum", ("--optimizer", "sgd-momentum")),
    ("optimizer-sgd", ("--optimizer", "sgd")),
    ("optimizer-none", ("--optimizer", "none")),
    ("optimizer-adafactor", ("--optimizer", "adafactor")),
    ("optimizer-paged-adamw-8bit", ("--optimizer", "paged-adamw-8bit")),
    ("optimizer-paged-adamw-32bit", ("--optimizer", "paged-adamw-32bit")),
    ("optimizer-impl-foreach", ("--optimizer-impl", "foreach")),
    ("optimizer-impl-fused", ("--optimizer-impl", "fused")),
    ("optimizer-impl-single-tensor", ("--optimizer-impl", "single-tensor")),
    ("attention-memory-efficient", ("--attention", "memory-efficient")),
    ("attention-sdpa", ("--attention", "sdpa")),
    ("checkpointing", ("--checkpointing",)),
    ("cross-entropy-chunked", ("--cross-entropy", "chunked")),
    ("cross-entropy-fused", ("--cross-entropy", "fused")),
    ("cross-entropy-torchtune", ("--cross-entropy", "torchtune")),
    ("cross-entropy-trl", ("--cross-entropy", "trl")),
    ("cross-entropy-trl-lora", ("--cross-entropy", "trl", "--finetune", "lora")),
    ("cross-entropy-liger", ("--cross-entropy", "liger")),
    ("devices-2", ("--devices", "2")),
    ("zero-1", ("--zero", "1", "--devices", "4")),
    ("zero-3", ("--zero", "3", "--devices", "4")),
    ("zero-2-one-device", ("--zero", "2", "--devices", "1", "--precision", "mixed")),
    ("framework-mlx", ("--framework", "mlx")),
    ("framework-mlx-compiled", ("--framework", "mlx-compiled")),
    ("framework-mlx-on-cpu", ("--framework", "mlx", "--device", "cpu")),
    ("device-cpu", ("--device", "cpu")),
    ("device-cuda", ("--device", "cuda")),
    ("impl-reference", ("--impl", "reference")),
    ("impl-mlx-lm", ("--framework", "mlx", "--impl", "mlx-lm")),
    ("loop-logits", ("--loop", "logits")),
    ("ddp", ("--ddp", "--devices", "2")),
    ("ddp-bucket-view", ("--ddp", "--devices", "2", "--bucket-view")),
    ("fsdp", ("--fsdp", "--devices", "2")),
    ("fsdp-no-reshard", ("--fsdp", "--devices", "2", "--no-reshard")),
    ("tp-2", ("--tp", "2")),
    ("pp-2", ("--pp", "2")),
    ("pp-2-micro-batches-8", ("--pp", "2", "--micro-batches", "8")),
    ("finetune-lora", ("--finetune", "lora")),
    ("finetune-qlora", ("--finetune", "qlora")),
    ("lora-rank-8", ("--lora-rank", "8")),
    ("lora-targets", ("--lora-targets", "q_proj", "v_proj")),
    ("lora-targets-head", ("--lora-targets", "q_proj", "lm_head", "embed_tokens")),
    ("lora-dropout", ("--lora-rank", "8", "--lora-dropout", "0.1")),
    ("base-quant-int8", ("--finetune", "lora", "--base-quant", "int8")),
    ("base-quant-nf4", ("--finetune", "lora", "--base-quant", "nf4")),
    (
        "mlx-affine4-group-32",
        ("--framework", "mlx", "--finetune", "lora", "--base-quant", "affine4", "--group-size")
        + ("32",),
    ),
    ("qlora-no-double-quant", ("--finetune", "qlora", "--no-double-quant")),
    (
        "adapter-dtype-bf16",
        ("--finetune", "lora", "--precision", "bf16", "--adapter-dtype", "bf16"),
    ),
    ("lora-train-embeddings", ("--lora-rank", "8", "--train-embeddings")),
    ("num-layers-4", ("--num-layers", "4")),
    ("num-layers-qlora", ("--finetune", "qlora", "--num-layers", "8")),
    ("num-layers-every-block", ("--finetune", "lora", "--num-layers", "24")),
    ("offload-optimizer", ("--offload", "optimizer")),
    ("offload-parameters", ("--offload", "parameters")),
    ("optimizer-in-backward", ("--optimizer-in-backward",)),
    ("grad-accum-4", ("--grad-accum", "4")),
    ("offload-activations", ("--offload-activations",)),
    ("trainer-hf", ("--trainer", "hf")),
    ("trainer-trl", ("--trainer", "trl")),
    ("trainer-dpo", ("--trainer", "dpo")),
    ("packed-sequences", ("--packed-sequences",)),
    ("dpo-reference-precomputed", ("--trainer", "dpo", "--dpo-reference", "precomputed")),
    ("json", ("--json",)),
    ("units-gib", ("--units", "gib")),
    ("force", ("--force",)),
    ("debug", ("--debug",)),
)
#: Labels of :data:`GOOD` whose answer may equal the default's: the default spelled out
#: (--device cuda is torch's auto, foreach its update there; table's activations are
#: bf16), flags that change no figure by design, and updates that come after the peak
#: (a fused or single-tensor step, or the optimizer in backward, leave a peak reached in
#: the forward or backward pass where it was: fit and table print only peaks).
SAME_ANSWER = {"device-cuda", "force", "debug", "optimizer-impl-foreach"}
AFTER_PEAK = {"optimizer-impl-fused", "optimizer-impl-single-tensor", "optimizer-in-backward"}
#: Paged AdamW-32bit holds Adam's 8 bytes per parameter (paged) and updates in place.
AFTER_PEAK |= {"optimizer-paged-adamw-32bit"}
SAME_BY_COMMAND = {
    "profile": SAME_ANSWER,
    "fit": SAME_ANSWER | AFTER_PEAK,
    "table": SAME_ANSWER | AFTER_PEAK | {"act-dtype-bf16", "act-bytes-2"},
}
#: Labels of :data:`GOOD` a tiny dry run (measure --device fake) takes too.
MEASURE_OK = (
    "batch-4",
    "seq-512",
    "act-dtype-bf16",
    "precision-amp",
    "precision-mixed",
    "optimizer-adamw",
    "optimizer-sgd",
    "optimizer-adafactor",
    "optimizer-impl-foreach",
    "attention-memory-efficient",
    "impl-reference",
    "loop-logits",
    "grad-accum-4",
    "optimizer-in-backward",
    "offload-activations",
    "json",
    "units-gib",
)

#: Contradictions on the refined commands: (label, flags, names the line may carry).
CONTRADICTIONS: tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...] = (
    ("mlx-offload-optimizer", ("--framework", "mlx", "--offload", "optimizer"), ("--offload",)),
    ("mlx-offload-parameters", ("--framework", "mlx", "--offload", "parameters"), ("--offload",)),
    ("mlx-optimizer-impl-fused", ("--framework", "mlx", "--optimizer-impl", "fused"))
    + (("--optimizer-impl",),),
    ("mlx-optimizer-impl-foreach", ("--framework", "mlx", "--optimizer-impl", "foreach"))
    + (("--optimizer-impl",),),
    ("mlx-adam8bit", ("--framework", "mlx", "--optimizer", "adam8bit"), ("--optimizer",)),
    ("mlx-ddp", ("--framework", "mlx", "--ddp", "--devices", "2"), ("--ddp", "--framework")),
    ("mlx-fsdp", ("--framework", "mlx", "--fsdp", "--devices", "2"), ("--fsdp", "--framework")),
    ("mlx-on-cuda", ("--framework", "mlx", "--device", "cuda"), ("--device",)),
    ("torch-on-metal", ("--device", "metal"), ("--device",)),
    ("torch-mlx-lm-impl", ("--impl", "mlx-lm"), ("--impl",)),
    ("mlx-transformers-impl", ("--framework", "mlx", "--impl", "transformers"), ("--impl",)),
    ("tp-3-on-14-heads", ("--tp", "3"), ("--tp",)),
    ("tp-4-on-2-kv-heads", ("--tp", "4"), ("--tp",)),
    ("pp-over-layers", ("--pp", "100"), ("--pp",)),
    ("micro-batches-without-pp", ("--micro-batches", "4"), ("--micro-batches",)),
    ("no-reshard-without-fsdp", ("--no-reshard",), ("--no-reshard",)),
    ("no-reshard-with-ddp", ("--ddp", "--devices", "2", "--no-reshard"), ("--no-reshard",)),
    ("bucket-view-without-ddp", ("--bucket-view",), ("--bucket-view",)),
    ("bucket-view-with-fsdp", ("--fsdp", "--devices", "2", "--bucket-view"), ("--bucket-view",)),
    ("ddp-on-one-device", ("--ddp",), ("--ddp", "--devices")),
    ("fsdp-on-one-device", ("--fsdp",), ("--fsdp", "--devices")),
    ("zero-and-fsdp", ("--zero", "2", "--fsdp", "--devices", "2"), ("--zero", "--fsdp")),
    ("ddp-and-fsdp", ("--ddp", "--fsdp", "--devices", "2"), ("--ddp", "--fsdp")),
    ("lora-dropout-without-lora", ("--lora-dropout", "0.1"), ("--lora-dropout",)),
    ("lora-dropout-full", ("--finetune", "full", "--lora-dropout", "0.1"), ("--lora-dropout",)),
    ("lora-rank-full", ("--finetune", "full", "--lora-rank", "8"), ("--lora-rank",)),
    ("lora-targets-full", ("--finetune", "full", "--lora-targets", "q_proj"), ("--lora-targets",)),
    ("lora-targets-unknown-module", ("--lora-targets", "c_attn"), ("--lora-targets",)),
    ("lora-targets-head-alone", ("--lora-targets", "lm_head"), ("--lora-targets",)),
    ("mlx-lora-head", ("--framework", "mlx", "--lora-targets", "q_proj", "lm_head"))
    + (("--lora-targets",),),
    ("base-quant-without-lora", ("--base-quant", "nf4"), ("--base-quant",)),
    ("affine-on-torch", ("--finetune", "lora", "--base-quant", "affine8"), ("--base-quant",)),
    ("group-size-without-affine", ("--group-size", "128"), ("--group-size",)),
    ("mlx-qlora", ("--framework", "mlx", "--finetune", "qlora"), ("--framework", "--base-quant")),
    ("base-quant-full", ("--finetune", "full", "--base-quant", "int8"), ("--base-quant",)),
    ("qlora-base-quant-bf16", ("--finetune", "qlora", "--base-quant", "bf16"), ("--base-quant",)),
    ("no-double-quant-without-qlora", ("--no-double-quant",), ("--no-double-quant",)),
    ("no-double-quant-int8", ("--finetune", "lora", "--base-quant", "int8", "--no-double-quant"))
    + (("--no-double-quant",),),
    ("train-embeddings-full", ("--train-embeddings",), ("--train-embeddings",)),
    ("num-layers-full", ("--finetune", "full", "--num-layers", "4"), ("--num-layers",)),
    ("num-layers-above-layers", ("--num-layers", "25"), ("--num-layers",)),
    ("num-layers-train-embeddings", ("--num-layers", "4", "--train-embeddings"))
    + (("--num-layers", "--train-embeddings"),),
    ("num-layers-lm-head", ("--num-layers", "4", "--lora-targets", "q_proj", "lm_head"))
    + (("--num-layers", "--lora-targets"),),
    ("num-layers-fsdp", ("--num-layers", "4", "--fsdp", "--devices", "2"), ("--num-layers",)),
    ("num-layers-offload", ("--num-layers", "4", "--offload", "optimizer"), ("--num-layers",)),
    ("freeze-tower-text-model", ("--freeze-tower",), ("--freeze-tower",)),
    ("images-text-model", ("--images", "1"), ("--images",)),
    ("image-size-without-images", ("--image-size", "448x448"), ("--images",)),
    ("images-zero-with-size", ("--images", "0", "--image-size", "448x448"), ("--images",)),
    ("image-size-not-hxw", ("--image-size", "448"), ("--image-size",)),
    ("image-size-zero", ("--image-size", "0x448"), ("--image-size",)),
    ("optimizer-none-in-backward", ("--optimizer", "none", "--optimizer-in-backward"))
    + (("--optimizer-in-backward", "--optimizer"),),
    ("optimizer-none-offload", ("--optimizer", "none", "--offload", "optimizer"))
    + (("--offload", "--optimizer"),),
    ("units-bytes-json", ("--units", "bytes", "--json"), ("--units",)),
    ("units-gib-json", ("--units", "gib", "--json"), ("--units",)),
    ("act-bytes-and-act-dtype", ("--act-bytes", "2", "--act-dtype", "bf16"))
    + (("--act-bytes", "--act-dtype"),),
    ("zero-on-one-device", ("--zero", "1"), ("--zero",)),
    ("grad-accum-ddp", ("--grad-accum", "2", "--ddp", "--devices", "2"), ("--grad-accum",)),
    ("grad-accum-fsdp", ("--grad-accum", "2", "--fsdp", "--devices", "2"), ("--grad-accum",)),
    ("grad-accum-pp", ("--grad-accum", "2", "--pp", "2"), ("--grad-accum",)),
    ("grad-accum-in-backward", ("--grad-accum", "2", "--optimizer-in-backward"))
    + (("--grad-accum", "--optimizer-in-backward"),),
    ("grad-accum-optimizer-none", ("--grad-accum", "2", "--optimizer", "none"))
    + (("--grad-accum", "--optimizer"),),
    ("grad-accum-mixed", ("--grad-accum", "2", "--precision", "mixed"), ("--grad-accum",)),
    ("grad-accum-offload", ("--grad-accum", "2", "--offload", "optimizer"), ("--grad-accum",)),
    # MLX's accumulation is modelled over its derived steps only (introspect.refined.mlx_dora)
    ("mlx-grad-accum-sgd", ("--framework", "mlx", "--grad-accum", "2", "--optimizer", "sgd"))
    + (("--grad-accum",),),
    ("mlx-offload-activations", ("--framework", "mlx", "--offload-activations"))
    + (("--offload-activations",),),
    ("adapter-dtype-full", ("--adapter-dtype", "bf16"), ("--adapter-dtype",)),
    ("adapter-dtype-amp", ("--finetune", "lora", "--precision", "amp", "--adapter-dtype", "bf16"))
    + (("--adapter-dtype", "--precision"),),
    ("mlx-adafactor", ("--framework", "mlx", "--optimizer", "adafactor"), ("--optimizer",)),
    ("mlx-paged", ("--framework", "mlx", "--optimizer", "paged-adamw-8bit"), ("--optimizer",)),
    ("adafactor-offload", ("--optimizer", "adafactor", "--offload", "optimizer"))
    + (("--optimizer", "--offload"),),
    ("adafactor-fsdp", ("--optimizer", "adafactor", "--fsdp", "--devices", "2"), ("--optimizer",)),
    ("adafactor-optimizer-impl", ("--optimizer", "adafactor", "--optimizer-impl", "fused"))
    + (("--optimizer-impl",),),
    ("trainer-mlx", ("--framework", "mlx", "--trainer", "hf"), ("--trainer",)),
    ("trainer-reference", ("--impl", "reference", "--trainer", "hf"), ("--trainer",)),
    ("trainer-trl-liger", ("--trainer", "trl", "--cross-entropy", "liger"))
    + (("--trainer", "--cross-entropy"),),
    ("trainer-dpo-liger", ("--trainer", "dpo", "--cross-entropy", "liger"))
    + (("--trainer", "--cross-entropy"),),
    ("dpo-reference-without-dpo", ("--dpo-reference", "precomputed"), ("--dpo-reference",)),
    ("packed-sequences-reference", ("--impl", "reference", "--packed-sequences"))
    + (("--packed-sequences",),),
)
#: Contradictions of one command: (command, label, flags after BASE, names).
COMMAND_CONTRADICTIONS: tuple[tuple[str, str, tuple[str, ...], tuple[str, ...]], ...] = (
    ("estimate", "timeout-without-hub", ("--timeout", "5"), ("--timeout",)),
    ("estimate", "units-bytes-json", ("--units", "bytes", "--json"), ("--units",)),
    ("estimate", "units-gib-json", ("--units", "gib", "--json"), ("--units",)),
    ("estimate", "params-below-embeddings", ("--params", "1"), ("--params",)),
    ("sizes", "timeout-without-hub", ("--timeout", "5"), ("--timeout",)),
    ("measure", "group-size-not-measured", ("--group-size", "32"), ("--group-size",)),
    # torch's CUDA caching allocator's setting: MLX has no such allocator.
    (
        "profile",
        "expandable-segments-mlx",
        ("--expandable-segments", "--framework", "mlx"),
        ("--expandable-segments",),
    ),
    (
        "fit",
        "expandable-segments-mlx",
        ("--expandable-segments", "--framework", "mlx"),
        ("--expandable-segments",),
    ),
    (
        "table",
        "expandable-segments-mlx",
        ("--expandable-segments", "--framework", "mlx"),
        ("--expandable-segments",),
    ),
    ("sizes", "units-gib-json", ("--units", "gib", "--json"), ("--units",)),
    ("sizes", "seq-1e9", ("--seq", "1e9"), ("--seq",)),
    ("table", "csv-and-json", ("--csv", "--json"), ("--csv", "--json")),
    ("table", "markdown-and-json", ("--markdown", "--json"), ("--markdown", "--json")),
    ("table", "seed-example-and-reported", ("--seed-example", "--reported", "qwen-7b"))
    + (("--seed-example", "--reported"),),
    ("table", "markdown-and-csv", ("--markdown", "--csv"), ("--markdown", "--csv")),
    ("profile", "list-with-source", ("--list",), ("--list",)),
    ("profile", "exact-on-mlx", ("--exact", "--framework", "mlx"), ("--exact", "--framework")),
    ("fit", "budget-and-gpu", ("--budget", "80GB"), ("--budget", "--gpu")),
    ("fit", "max-devices-below-devices", ("--devices", "8", "--max-devices", "2"))
    + (("--max-devices",),),
    ("measure", "repeats-on-torch", ("--repeats", "3"), ("--repeats",)),
    ("measure", "dpo-reference-without-dpo", ("--dpo-reference", "precomputed"))
    + (("--dpo-reference",),),
    ("measure", "packed-sequences-not-measured", ("--packed-sequences",))
    + (("--packed-sequences",),),
    ("measure", "step-timeout-one-process", ("--step-timeout", "30"), ("--step-timeout",)),
    ("measure", "tp-not-measured", ("--tp", "2"), ("--tp",)),
    ("measure", "pp-not-measured", ("--pp", "2"), ("--pp",)),
    ("measure", "kv-heads-do-not-divide", ("--kv-heads", "3"), ("--kv-heads",)),
    ("measure", "llama-with-layernorm", ("--llama", "--norm", "layernorm"), ("--llama", "--norm")),
    ("measure", "llama-with-plain-ffn", ("--llama", "--ffn", "plain"), ("--llama", "--ffn")),
    ("measure", "act-unknown", ("--act", "wiggle"), ("--act",)),
    ("measure", "cross-entropy-chunked", ("--cross-entropy", "chunked"), ("--cross-entropy",)),
    ("measure", "cross-entropy-fused", ("--cross-entropy", "fused"), ("--cross-entropy",)),
    ("measure", "cross-entropy-liger-on-reference", ("--cross-entropy", "liger"))
    + (("--cross-entropy",),),
    ("profile", "cross-entropy-liger-with-lora", ("--cross-entropy", "liger", "--finetune", "lora"))
    + (("--cross-entropy", "--finetune"),),
    (
        "profile",
        "cross-entropy-trl-lora-head",
        ("--cross-entropy", "trl", "--finetune", "lora", "--lora-targets", "q_proj", "lm_head"),
        ("--cross-entropy", "--lora-targets"),
    ),
    ("profile", "cross-entropy-torchtune-with-tp", ("--cross-entropy", "torchtune", "--tp", "2"))
    + (("--cross-entropy",),),
    ("measure", "mlx-on-fake-with-transformers", ("--framework", "mlx", "--impl", "transformers"))
    + (("--impl",),),
    # the real Trainer cannot run on fake tensors (introspect.measure.trainer_run)
    ("measure", "trainer-on-fake", ("--trainer", "hf"), ("--trainer", "--device")),
)
#: Measure calls beside the tiny dry run: (label, argv, expected, names).
MEASURE_CALLS: tuple[tuple[str, tuple[str, ...], str, tuple[str, ...]], ...] = (
    ("cpu-step", ("measure", *SHAPE, "--framework", "torch", "--device", "cpu"), "ok", ()),
    ("cpu-step-json", ("measure", *SHAPE, "--device", "cpu", "--json"), "ok", ()),
    ("fake-llama", ("measure", *SHAPE, "--device", "fake", "--llama", "--no-census"), "ok", ()),
    ("fake-tied", ("measure", *SHAPE, "--device", "fake", "--tied", "--no-census"), "ok", ()),
    (
        "fake-shape-flags",
        ("measure", *SHAPE, "--device", "fake", "--kv-heads", "2", "--head-dim", "16")
        + ("--intermediate", "96", "--norm", "rmsnorm", "--ffn", "gated", "--act", "silu"),
        "ok",
        (),
    ),
    ("shape-without-vocab", ("measure", *SHAPE[:6], "--seq", "8", "--device", "fake"))
    + ("refused", ("--vocab",)),
    ("nominal-unknown", ("measure", "12M", "--device", "fake"), "refused", ("12M",)),
    ("fake-optimizer-in-backward", (*BASE["measure"], "--optimizer-in-backward"), "ok", ()),
    (
        "fake-optimizer-in-backward-mixed",
        (*BASE["measure"], "--optimizer-in-backward", "--precision", "mixed"),
        "refused",
        ("--optimizer-in-backward",),
    ),
    ("fake-debug", (*BASE["measure"], "--debug"), "ok", ()),
    (
        "fake-lora-num-layers",
        ("measure", *SHAPE, "--llama", "--impl", "transformers", "--device", "fake")
        + ("--no-census", "--num-layers", "1"),
        "ok",
        (),
    ),
    (
        "fake-lora-num-layers-above-layers",
        ("measure", *SHAPE, "--llama", "--impl", "transformers", "--device", "fake")
        + ("--no-census", "--num-layers", "3"),
        "refused",
        ("--num-layers",),
    ),
    (
        "num-layers-full",
        (*BASE["measure"], "--finetune", "full", "--num-layers", "1"),
        "refused",
        ("--num-layers",),
    ),
    # The sharded step as a dry run in one process (introspect.measure.fake_sharded).
    ("fake-ddp", (*BASE["measure"], "--ddp", "--devices", "2"), "ok", ()),
    ("fake-fsdp-no-reshard", (*BASE["measure"], "--fsdp", "--devices", "2", "--no-reshard"))
    + ("ok", ()),
    ("fake-ddp-bucket-view", (*BASE["measure"], "--ddp", "--devices", "2", "--bucket-view"))
    + ("ok", ()),
    (
        "fake-fsdp-step-timeout",
        (*BASE["measure"], "--fsdp", "--devices", "2", "--step-timeout", "30"),
        "refused",
        ("--step-timeout", "--device"),
    ),
    ("fake-ddp-bf16", (*BASE["measure"], "--ddp", "--devices", "2", "--precision", "bf16"))
    + ("refused", ("--precision",)),
    (
        "fake-fsdp-offload",
        (*BASE["measure"], "--fsdp", "--devices", "2", "--offload", "parameters"),
        "refused",
        ("--offload",),
    ),
    ("freeze-tower-text-model", (*BASE["measure"], "--freeze-tower"), "refused")
    + (("--freeze-tower",),),
    ("images-text-model", (*BASE["measure"], "--images", "1"), "refused", ("--images",)),
    ("image-size-without-images", (*BASE["measure"], "--image-size", "448x448"), "refused")
    + (("--images",),),
    ("no-double-quant-without-qlora", (*BASE["measure"], "--no-double-quant"), "refused")
    + (("--no-double-quant",),),
    ("train-embeddings-full", (*BASE["measure"], "--train-embeddings"), "refused")
    + (("--train-embeddings",),),
    ("adapter-dtype-full", (*BASE["measure"], "--adapter-dtype", "bf16"), "refused")
    + (("--adapter-dtype",),),
    ("fake-zero-2-one-device", (*BASE["measure"], "--zero", "2", "--devices", "1"), "refused")
    + (("--zero", "--device"),),
    ("fake-paged-adamw", (*BASE["measure"], "--optimizer", "paged-adamw-8bit"), "refused")
    + (("--optimizer",),),
    # the real HF Trainer on the CPU (introspect.measure.trainer_run)
    ("trainer-hf-cpu", ("measure", *SHAPE, "--llama", "--device", "cpu", "--trainer", "hf"))
    + ("ok", ()),
    (
        "trainer-no-census",
        ("measure", *SHAPE, "--llama", "--device", "cpu", "--trainer", "hf", "--no-census"),
        "refused",
        ("--no-census",),
    ),
    ("trainer-cuda", ("measure", *SHAPE, "--llama", "--device", "cuda", "--trainer", "hf"))
    + ("refused", ("--device",)),
    (
        "trainer-mixed",
        ("measure", *SHAPE, "--llama", "--device", "cpu", "--trainer", "hf")
        + ("--precision", "mixed"),
        "refused",
        ("--precision",),
    ),
)


def _case(group: str, command: str, label: str, argv, expect: str, names=(), base=None) -> Case:
    case_id = f"{group}/{command}/{label}"
    return Case(case_id, tuple(argv), {}, tuple(names), expect=expect, baseline=base)


def bad_value_cases() -> list[Case]:
    """Every flag that takes a value, on every command that has it, with values it must
    refuse; the line names the flag."""
    out = []
    for command, flags in COUNTS.items():
        for flag in flags:
            values = dict(BAD_COUNTS)
            if (command, flag) not in OK_1E9:
                values["1e9"] = "1e9"
            for label, value in values.items():
                argv = (*BASE[command], flag, value)
                names = (flag, *ALSO_NAMED.get((command, flag), ()))
                out.append(_case("flags", command, f"{flag[2:]}-{label}", argv, "refused", names))
    for command in CHOICES:
        for label, value in BAD_SECONDS.items():
            argv = (*BASE[command], "--timeout", value)
            out.append(_case("flags", command, f"timeout-{label}", argv, "refused", ("--timeout",)))
        for flag in CHOICES[command]:
            for label, value in BAD_CHOICES.items():
                argv = (*BASE[command], flag, value)
                names = (flag, *ALSO_NAMED.get((command, flag), ()))
                out.append(_case("flags", command, f"{flag[2:]}-{label}", argv, "refused", names))
    for command in REFINED:
        for label, value in BAD_PROBABILITY.items():
            argv = (*BASE[command], "--lora-rank", "8", "--lora-dropout", value)
            names = ("--lora-dropout", *ALSO_NAMED.get((command, "--lora-dropout"), ()))
            out.append(_case("flags", command, f"lora-dropout-{label}", argv, "refused", names))
        for label, value in {"five": "5", "negative": "-1", "text": "x", "half": "1.5"}.items():
            argv = (*BASE[command], "--devices", "4", "--zero", value)
            out.append(_case("flags", command, f"zero-{label}", argv, "refused", ("--zero",)))
    for label, value in BAD_BUDGETS.items():
        argv = ("fit", QWEN, "--budget", value)
        out.append(_case("flags", "fit", f"budget-{label}", argv, "refused", ("--budget",)))
    out.append(_case("flags", "fit", "no-budget-no-gpu", ("fit", QWEN), "refused", ("--budget",)))
    return out


def good_value_cases() -> list[Case]:
    """Every flag with a good value (and what it needs) answers, on each command."""
    out = []
    for command in ("profile", "table", "fit"):
        for label, flags in GOOD:
            base = None if label in SAME_BY_COMMAND[command] else BASE[command]
            out.append(_case("ok", command, label, (*BASE[command], *flags), "ok", base=base))
    for command in ("profile", "fit", "table"):  # the reserve replayed, expandable segments
        argv = (*BASE[command], "--expandable-segments")
        out.append(_case("ok", command, "expandable-segments", argv, "ok", base=BASE[command]))
    measure = dict(GOOD)
    for label in MEASURE_OK:
        out.append(_case("ok", "measure", label, (*BASE["measure"], *measure[label]), "ok"))
    for label, flags in (
        ("sweep", ("--batch", "1", "2", "--seq", "8", "16")),
        ("params", ("--params", "7e9")),
        ("act-dtype-bf16", ("--act-dtype", "bf16")),
        ("act-bytes-2", ("--act-bytes", "2")),
        ("weights-dtype-bf16", ("--weights-dtype", "bf16")),
        ("json", ("--json",)),
        ("units-gib", ("--units", "gib")),
        ("force", ("--force", "--layers", "2000000")),
        ("debug", ("--debug",)),
    ):
        out.append(_case("ok", "estimate", label, (*BASE["estimate"], *flags), "ok"))
    for label, flags in (
        ("default", ()),
        ("seq-sweep", ("--seq", "128", "256", "4096")),
        ("batch-4", ("--batch", "4")),
        ("framework-torch", ("--framework", "torch")),
        ("framework-mlx-compiled", ("--framework", "mlx-compiled")),
        (
            "mlx-lora-affine4",
            ("--framework", "mlx", "--finetune", "lora", "--base-quant", "affine4"),
        ),
        ("json", ("--json",)),
        ("units-gib", ("--units", "gib")),
        ("force-seq-1e9", ("--seq", "1e9", "--force")),
        ("debug", ("--debug",)),
    ):
        out.append(_case("ok", "sizes", label, (*BASE["sizes"], *flags), "ok"))
    for label, argv in (
        ("default-sources", ("table",)),
        ("markdown", ("table", QWEN, "--markdown")),
        ("csv", ("table", QWEN, "--csv")),
        ("csv-units-bytes", ("table", QWEN, "--csv", "--units", "bytes")),
        ("seed-example", ("table", "--seed-example")),
        ("reported", ("table", "--reported", "qwen-7b")),
        ("two-sources", ("table", QWEN, "Qwen/Qwen3-0.6B")),
        ("freeze-tower-multimodal", ("table", MULTIMODAL, "--freeze-tower")),
        ("list", ("profile", "--list")),
        ("list-json", ("profile", "--list", "--json")),
        ("freeze-tower-multimodal", ("profile", MULTIMODAL, "--freeze-tower")),
        ("exact", ("profile", QWEN, "--exact", "--seq", "128")),
        ("moe", ("profile", "Qwen/Qwen3-30B-A3B")),
        ("amp-fp32-weights", ("profile", QWEN, "--precision", "amp", "--weights-dtype", "fp32")),
        ("budget-80gb", ("fit", QWEN, "--budget", "80GB")),
        ("budget-24gib", ("fit", QWEN, "--budget", "24GiB")),
        ("budget-fraction", ("fit", QWEN, "--budget", "7.5GB")),
        ("gpu-mac", ("fit", "40M", "--gpu", "m2-8gb", "--framework", "mlx-compiled")),
        ("nominal", ("fit", "7B", "--gpu", "h100-80gb")),
        ("max-devices-2", ("fit", QWEN, "--gpu", "h200", "--max-devices", "2")),
        ("freeze-tower-multimodal", ("fit", MULTIMODAL, "--gpu", "h200", "--freeze-tower")),
        ("images-vlm", ("profile", VLM, "--images", "2", "--image-size", "448x448", *FROZEN)),
        ("images-vlm", ("table", VLM, "--images", "2", *FROZEN)),
        ("images-vlm", ("fit", VLM, "--gpu", "h200", "--images", "1", *FROZEN)),
    ):
        out.append(_case("ok", argv[0], label, argv, "ok"))
    return out


def contradiction_cases() -> list[Case]:
    out = []
    for command in ("profile", "table", "fit"):
        for label, flags, names in CONTRADICTIONS:
            out.append(_case("contra", command, label, (*BASE[command], *flags), "refused", names))
    for command, label, flags, names in COMMAND_CONTRADICTIONS:
        out.append(_case("contra", command, label, (*BASE[command], *flags), "refused", names))
    for label, argv, expect, names in MEASURE_CALLS:
        group = "ok" if expect == "ok" else "contra"
        out.append(_case(group, "measure", label, argv, expect, names))
    for label, argv in (  # table's own figures, no CUDA reserve: the flag would be ignored
        ("reported-expandable-segments", ("table", "--reported", "qwen-7b")),
        ("seed-example-expandable-segments", ("table", "--seed-example")),
    ):
        argv = (*argv, "--expandable-segments")
        out.append(_case("contra", "table", label, argv, "refused", ("--expandable-segments",)))
    return out


def explain_cases() -> list[Case]:
    """explain TERM: a registered term answers (text or JSON), --list lists; an unknown or
    empty term, none at all, or a term beside --list is refused."""
    ok = (
        ("term", ("explain", "weights")),
        ("term-json", ("explain", "weights", "--json")),
        ("slash-path", ("explain", "weights/gathered")),
        ("list", ("explain", "--list")),
        ("list-json", ("explain", "--list", "--json")),
        ("debug", ("explain", "weights", "--debug")),
    )
    refused = (
        ("unknown-term", ("explain", "nonesuch"), ("nonesuch",)),
        ("empty-term", ("explain", ""), ("TERM", "term")),
        ("no-term", ("explain",), ("TERM", "--list")),
        ("list-with-term", ("explain", "--list", "weights"), ("--list",)),
        ("unknown-flag", ("explain", "weights", "--seq", "8"), ("--seq",)),
        ("term-non-ascii", ("explain", "wéights/\u2028"), ("wéights",)),
    )
    out = [_case("ok", "explain", label, argv, "ok") for label, argv in ok]
    out += [_case("contra", "explain", label, argv, "refused", n) for label, argv, n in refused]
    return out


def file_flag_cases() -> list[Case]:
    """Flags beside a local file: --revision (a Hub revision) of a path is ignored; a
    tiny config measured with the transformers class takes --checkpointing."""
    import json

    from .cases import CONFIG

    config = {"config.json": json.dumps(CONFIG).encode()}
    path = "{dir}/config.json"
    return [
        Case(
            "contra/fit/revision-of-a-local-path",
            ("fit", path, "--gpu", "h200", "--revision", "v1"),
            config,
            ("--revision",),
        ),
        Case(
            "contra/profile/revision-of-a-local-path",
            ("profile", path, "--revision", "v1"),
            config,
            ("--revision",),
        ),
        Case(
            "ok/measure/config-checkpointing",
            ("measure", path, "--device", "fake", "--seq", "8", "--checkpointing"),
            config,
            expect="ok",
        ),
        Case(
            "contra/table/default-sources-unknown-lora-target",
            ("table", "--lora-targets", "c_attn"),
            names=("--lora-targets",),
        ),
        Case(
            "contra/profile/list-with-flags",
            ("profile", "--list", "--pp", "4"),
            names=("--list", "--pp"),
        ),
        Case(
            "env/fit-revision-offline",
            ("fit", QWEN, "--gpu", "h200", "--revision", "v1"),
            names=("--revision", QWEN),
            env={"HF_HUB_OFFLINE": "1"},
        ),
    ]


def flag_cases() -> list[Case]:
    return [
        *bad_value_cases(),
        *good_value_cases(),
        *contradiction_cases(),
        *file_flag_cases(),
        *explain_cases(),
    ]
