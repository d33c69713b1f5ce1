"""Corpus cases for files: good and broken configs and checkpoints through every command
that reads a model, quantized checkpoints with legal and illegal bits, and filesystem
faults (a missing path, a folder for a file, a dangling symlink, a FIFO, /dev/zero, a path
under a regular file, /dev/full and friends for --plot).

GPTQ packs ``32 / bits`` integers into each ``I32`` of ``…qweight`` (``[in/pack, out]``),
with ``qzeros`` ``[groups, out/pack]`` and ``scales`` ``[groups, out]`` beside it
(AutoGPTQ's layout, as ``introspect/adapters/quantized.py`` reads it): legal bits are 2,
4 and 8; anything else — 0 (a division by zero), 5, 16, 64, a string, a float, true — is a
broken config.json, refused naming it.
"""

from __future__ import annotations

import json

from .cases import CONFIG, Case, good_checkpoint, header, st, tensors
from .flags import BASE

C = "config.json"
W = "model.safetensors"


def gptq_entries(bits: int = 4, method: str = "gptq") -> list[tuple[str, str, list[int]]]:
    """The tiny Llama's tensors with every q_proj stored as ``bits``-bit packed integers
    (``qweight``, ``qzeros``, ``scales``; one group): GPTQ packs along the input
    (``qweight`` ``[in/pack, out]``), AWQ along the output (``[in, out/pack]``)."""
    per = 32 // bits
    out = []
    for name, dtype, shape in tensors():
        if name.endswith("q_proj.weight"):
            rows, cols = shape  # [out, in]
            base = name[: -len(".weight")]
            packed = [cols, rows // per] if method == "awq" else [cols // per, rows]
            out += [
                (base + ".qweight", "I32", packed),
                (base + ".qzeros", "I32", [1, max(rows // per, 1)]),
                (base + ".scales", "F16", [1, rows]),
            ]
        else:
            out.append((name, dtype, shape))
    return out


def gptq_checkpoint(bits: int = 4, method: str = "gptq") -> bytes:
    return st(header(gptq_entries(bits, method)))


def quant_config(bits, method: str = "gptq", **extra) -> bytes:
    return json.dumps(
        {**CONFIG, "quantization_config": {"quant_method": method, "bits": bits, **extra}}
    ).encode()


def _c(case_id: str, argv, files=None, names=(C,), expect="refused", **kw) -> Case:
    return Case(case_id, tuple(argv), dict(files or {}), tuple(names), expect=expect, **kw)


def quantized_cases() -> list[Case]:
    out = []
    for bits in (2, 4, 8):
        files = {C: quant_config(bits), W: gptq_checkpoint(bits)}
        out.append(_c(f"quant/gptq-{bits}-bit", ("profile", "{dir}"), files, expect="ok"))
    out.append(
        _c(
            "quant/awq-4-bit",
            ("profile", "{dir}"),
            {C: quant_config(4, "awq"), W: gptq_checkpoint(4, "awq")},
            expect="ok",
        )
    )
    illegal = {
        "zero": 0,
        "negative": -4,
        "five": 5,
        "sixteen": 16,
        "sixty-four": 64,
        "string": "4",
        "float": 4.5,
        "true": True,
        "null": None,
        "list": [4],
    }
    for label, bits in illegal.items():
        files = {C: quant_config(bits), W: gptq_checkpoint(4)}
        out.append(_c(f"quant/gptq-bits-{label}", ("profile", "{dir}"), files))
        only = ("profile", f"{{dir}}/{C}")
        out.append(_c(f"quant/config-only-bits-{label}", only, {C: files[C]}))
    for label, q in {
        "not-an-object": json.dumps({**CONFIG, "quantization_config": 4}),
        "bnb-4bit-and-8bit": json.dumps(
            {
                **CONFIG,
                "quantization_config": {
                    "quant_method": "bitsandbytes",
                    "load_in_4bit": True,
                    "load_in_8bit": True,
                },
            }
        ),
    }.items():
        out.append(_c(f"quant/{label}", ("profile", f"{{dir}}/{C}"), {C: q.encode()}))
    out.append(
        _c(
            "quant/fit-bits-zero",
            ("fit", "{dir}", "--gpu", "h200"),
            {C: quant_config(0), W: gptq_checkpoint(4)},
        )
    )
    out.append(
        _c(
            "quant/table-bits-zero",
            ("table", "{dir}"),
            {C: quant_config(0), W: gptq_checkpoint(4)},
        )
    )
    return out


def format_cases() -> list[Case]:
    """Good files answer through every reading command; more broken ones are refused."""
    good = json.dumps(CONFIG).encode()
    ok = {C: good, W: good_checkpoint()}
    out = [
        _c("format/config-ok", ("profile", f"{{dir}}/{C}"), {C: good}, expect="ok"),
        _c("format/config-folder-ok", ("profile", "{dir}"), {C: good}, expect="ok"),
        _c("format/checkpoint-ok", ("profile", "{dir}"), ok, expect="ok"),
        _c("format/checkpoint-no-config-ok", ("profile", "{dir}"), {W: ok[W]}, expect="ok"),
        _c("format/safetensors-file-ok", ("profile", f"{{dir}}/{W}"), ok, expect="ok"),
        _c("format/checkpoint-json-ok", ("profile", "{dir}", "--json"), ok, expect="ok"),
        _c("format/fit-ok", ("fit", "{dir}", "--gpu", "h200"), ok, expect="ok"),
        _c("format/fit-json-ok", ("fit", "{dir}", "--budget", "8GB", "--json"), ok, expect="ok"),
        _c("format/table-ok", ("table", "{dir}"), ok, expect="ok"),
        _c("format/table-csv-ok", ("table", "{dir}", f"{{dir}}/{C}", "--csv"), ok, expect="ok"),
        _c(
            "format/measure-ok",
            ("measure", f"{{dir}}/{C}", "--device", "fake", "--seq", "8", "--no-census"),
            {C: good},
            expect="ok",
        ),
        _c(
            "format/sharded-ok",
            ("profile", "{dir}"),
            {
                "model.safetensors.index.json": json.dumps(
                    {
                        "metadata": {"total_size": 1},
                        "weight_map": {t[0]: "model-00001-of-00001.safetensors" for t in tensors()},
                    }
                ).encode(),
                "model-00001-of-00001.safetensors": good_checkpoint(),
                C: good,
            },
            expect="ok",
        ),
    ]
    broken_configs = {
        "trailing-comma": json.dumps(CONFIG).encode()[:-1] + b",}",
        "comments": b"// a model\n" + json.dumps(CONFIG).encode(),
        "two-objects": json.dumps(CONFIG).encode() * 2,
        "model-type-empty": json.dumps({**CONFIG, "model_type": ""}).encode(),
        "kv-heads-over-heads": json.dumps({**CONFIG, "num_key_value_heads": 8}).encode(),
        "head-dim-negative": json.dumps({**CONFIG, "head_dim": -8}).encode(),
        "experts-zero": json.dumps(
            {**CONFIG, "model_type": "mixtral", "num_local_experts": 0, "num_experts_per_tok": 2}
        ).encode(),
        "experts-per-token-zero": json.dumps(
            {**CONFIG, "model_type": "mixtral", "num_local_experts": 4, "num_experts_per_tok": 0}
        ).encode(),
        "text-config-a-list": json.dumps(
            {"model_type": "gemma3", "text_config": [1], "vision_config": {}}
        ).encode(),
        "layers-1e6-plus-1": json.dumps({**CONFIG, "num_hidden_layers": 10**6 + 1}).encode(),
    }
    for label, content in broken_configs.items():
        out.append(_c(f"format/config-{label}", ("profile", f"{{dir}}/{C}"), {C: content}))
    # the same broken config through each command that reads a model
    bad = {C: b"{"}
    out += [
        _c("format/fit-bad-config", ("fit", f"{{dir}}/{C}", "--gpu", "h200"), bad),
        _c("format/table-bad-config", ("table", f"{{dir}}/{C}"), bad),
        _c("format/measure-bad-config", ("measure", f"{{dir}}/{C}", "--device", "fake"), bad),
        _c("format/fit-empty-folder", ("fit", "{dir}", "--gpu", "h200"), {"x": b"x"}, ("{dir}",)),
    ]
    first = "model.embed_tokens.weight"
    head = header(tensors())
    broken_headers = {
        "dtype-lower-case": st(header([(first, "bf16", [64, 32]), *tensors()[1:]])),
        "offsets-reversed": st({**head, first: {**head[first], "data_offsets": [4096, 0]}}),
        "offsets-negative": st({**head, first: {**head[first], "data_offsets": [-2, 4094]}}),
        "offsets-strings": st({**head, first: {**head[first], "data_offsets": ["0", "4096"]}}),
        "shape-bool": st(header([(first, "BF16", [True, 32]), *tensors()[1:]])),
        "entry-a-list": st({**head, first: [1, 2]}),
        "trailing-bytes-in-header": st(json.dumps(head).encode() + b"}}garbage"),
    }
    for label, content in broken_headers.items():
        argv = ("profile", "{dir}")
        out.append(_c(f"format/safetensors-{label}", argv, {W: content}, names=(W,)))
    return out


def filesystem_cases() -> list[Case]:
    good = json.dumps(CONFIG).encode()
    out = [
        _c("fs/missing-file", ("profile", f"{{dir}}/{C}"), {}, names=(C,)),
        _c("fs/missing-folder", ("profile", "{dir}/nope/"), {}, names=("nope",)),
        _c("fs/dangling-symlink", ("profile", f"{{dir}}/{C}"), links={C: "{dir}/gone.json"}),
        _c(
            "fs/dangling-weights-symlink",
            ("profile", "{dir}"),
            {C: good},
            names=(W,),
            links={W: "{dir}/gone.safetensors"},
        ),
        _c(
            "fs/under-a-regular-file",
            ("profile", f"{{dir}}/file/{C}"),
            {"file": b"x"},
            names=("file",),
        ),
        _c(
            "fs/safetensors-a-folder",
            ("profile", f"{{dir}}/{W}"),
            {f"{W}/x": b"x"},
            names=(W,),
        ),
        _c(
            "fs/weights-folder-in-model-folder",
            ("profile", "{dir}"),
            {C: good, f"{W}/x": b"x"},
            names=(W,),
        ),
        _c("fs/dev-null", ("profile", "/dev/null"), names=("/dev/null",)),
        _c("fs/dev-zero", ("profile", "/dev/zero"), names=("/dev/zero",)),
        _c("fs/config-link-to-dev-zero", ("profile", f"{{dir}}/{C}"), links={C: "/dev/zero"}),
        _c("fs/config-a-fifo", ("profile", f"{{dir}}/{C}"), fifos=(C,)),
        _c("fs/weights-a-fifo", ("profile", "{dir}"), {C: good}, names=(W,), fifos=(W,)),
        _c("fs/fit-missing", ("fit", "{dir}/nope.json", "--gpu", "h200"), names=("nope.json",)),
        _c("fs/table-missing", ("table", "{dir}/nope.json"), names=("nope.json",)),
        _c("fs/measure-missing", ("measure", "{dir}/nope.json"), names=("nope.json",)),
    ]
    for command in ("profile", "table", "fit", "measure"):
        base = BASE[command]
        plot = f"{command}/plot"
        out += [
            _c(
                f"fs/{plot}-png",
                (*base, "--plot", "{dir}/out.png"),
                expect="ok",
                writes=("{dir}/out.png",),
            ),
            _c(f"fs/{plot}-txt", (*base, "--plot", "{dir}/out.txt"), names=("--plot",)),
            _c(f"fs/{plot}-empty", (*base, "--plot", ""), names=("--plot",)),
            _c(f"fs/{plot}-no-folder", (*base, "--plot", "{dir}/no/out.png"), names=("--plot",)),
            _c(
                f"fs/{plot}-under-a-file",
                (*base, "--plot", "{dir}/file/out.png"),
                {"file": b"x"},
                names=("--plot",),
            ),
            _c(
                f"fs/{plot}-a-folder",
                (*base, "--plot", "{dir}/out.png"),
                {"out.png/x": b"x"},
                names=("--plot",),
            ),
            _c(
                f"fs/{plot}-dev-full",
                (*base, "--plot", "{dir}/full.png"),
                names=("--plot", "full.png"),
                links={"full.png": "/dev/full"},
            ),
            _c(
                f"fs/{plot}-dangling-link",
                (*base, "--plot", "{dir}/out.png"),
                names=("--plot", "out.png"),
                links={"out.png": "{dir}/gone/out.png"},
            ),
        ]
    out.append(
        Case(
            "fs/profile/plot-svg",
            (*BASE["profile"], "--plot", "{dir}/out.svg"),
            expect="ok",
            writes=("{dir}/out.svg",),
        )
    )
    out.append(
        Case(
            "fs/fit/plot-json",
            (*BASE["fit"], "--plot", "{dir}/out.png", "--json"),
            expect="ok",
            writes=("{dir}/out.png",),
        )
    )
    out.append(_c("fs/profile/source-dev-full", ("profile", "/dev/full"), names=("/dev/full",)))
    out.append(
        Case(
            "fs/profile/plot-uppercase-suffix",
            (*BASE["profile"], "--plot", "{dir}/OUT.PNG"),
            expect="ok",
            writes=("{dir}/OUT.PNG",),
        )
    )
    return out


def file_cases() -> list[Case]:
    return [*quantized_cases(), *format_cases(), *filesystem_cases()]
