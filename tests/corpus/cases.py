"""The bad-input corpus: configs, safetensors headers, shard indexes, arguments, the
environment and Hub faults, each a case the tool must refuse with one line — and, in
``flags.py`` and ``files.py``, every flag of every command with good and bad values, the
contradictions between flags, quantized checkpoints and filesystem faults, each with its
expected class (``ok`` or ``refused``).

A :class:`Case` is data: the files to write into a fresh folder (``{dir}`` in arguments
and expected names is that folder), the command line, and the words the error line must
contain (the file or the flag). Cases with ``env`` or ``hub`` run in a subprocess —
huggingface_hub reads HF_HOME / HF_ENDPOINT / HF_HUB_OFFLINE at import — the rest in
process through :func:`introspect.cli.main`. ``tests/test_corpus.py`` runs them.

Headers are built by hand (8-byte little-endian length, JSON, then data bytes), so a case
can hold what no writer would produce: a zero-width tensor, a 0-d norm, a shape of 2⁶²,
a dtype that does not exist.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

#: A Llama-style config small enough that every header built from it is a few kB.
CONFIG = {
    "model_type": "llama",
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "intermediate_size": 48,
    "vocab_size": 64,
    "hidden_act": "silu",
    "tie_word_embeddings": False,
}
DTYPE_BYTES = {"F16": 2, "BF16": 2, "F32": 4, "I32": 4, "U32": 4, "U8": 1, "I8": 1}
BUNDLED = "Qwen/Qwen2.5-0.5B"  # resolved offline from adapters/data
HUB_ID = "org/tiny"


@dataclass(frozen=True)
class Case:
    id: str
    argv: tuple[str, ...]
    #: Path relative to the case folder → bytes.
    files: dict[str, bytes] = field(default_factory=dict)
    #: The error line must contain one of these (``{dir}`` is the case folder).
    names: tuple[str, ...] = ()
    #: Extra environment; set (even empty) for a subprocess run.
    env: dict[str, str] | None = None
    #: A loopback Hub for the subprocess: {"files": {...}, "failing"/"fault"/"gated_token"}.
    hub: dict | None = None
    #: Symlinks to make: link path → target (both relative to the case folder).
    links: dict[str, str] = field(default_factory=dict)
    #: Run the command once before (online), e.g. to leave a bad file in the cache.
    warm_up: bool = False
    #: The outcome class: "refused" (exit 2, one stderr line naming one of ``names``) or
    #: "ok" (exit 0 with an answer on stdout).
    expect: str = "refused"
    #: Files an ok case is asked to write (``--plot {dir}/out.png``); nothing else may appear.
    writes: tuple[str, ...] = ()
    #: For an ok case: the same call without the flag under test; the answers must differ
    #: (else the flag was silently ignored).
    baseline: tuple[str, ...] | None = None
    #: Named pipes to make (relative to the case folder): a read that never ends.
    fifos: tuple[str, ...] = ()

    @property
    def subprocess(self) -> bool:
        return self.env is not None or self.hub is not None


def tensors(config: dict = CONFIG) -> list[tuple[str, str, list[int]]]:
    """(name, dtype, shape) of a Llama checkpoint of ``config``, in Hugging Face's names."""
    d, L, V = config["hidden_size"], config["num_hidden_layers"], config["vocab_size"]
    hd = d // config["num_attention_heads"]
    q, kv, f = config["num_attention_heads"] * hd, config["num_key_value_heads"] * hd, 48
    out = [("model.embed_tokens.weight", "BF16", [V, d])]
    for i in range(L):
        p = f"model.layers.{i}."
        out += [
            (p + "self_attn.q_proj.weight", "BF16", [q, d]),
            (p + "self_attn.k_proj.weight", "BF16", [kv, d]),
            (p + "self_attn.v_proj.weight", "BF16", [kv, d]),
            (p + "self_attn.o_proj.weight", "BF16", [d, q]),
            (p + "mlp.gate_proj.weight", "BF16", [f, d]),
            (p + "mlp.up_proj.weight", "BF16", [f, d]),
            (p + "mlp.down_proj.weight", "BF16", [d, f]),
            (p + "input_layernorm.weight", "BF16", [d]),
            (p + "post_attention_layernorm.weight", "BF16", [d]),
        ]
    return out + [("model.norm.weight", "BF16", [d]), ("lm_head.weight", "BF16", [V, d])]


def header(entries, *, extra: dict | None = None) -> dict:
    """A header dict with consistent data_offsets for ``entries``."""
    out: dict = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, dtype, shape in entries:
        n = DTYPE_BYTES.get(dtype, 1)
        for s in shape:
            n *= s if isinstance(s, int) and s >= 0 else 0
        out[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + n]}
        offset += n
    out.update(extra or {})
    return out


def st(head: dict | bytes, *, data: int | None = None, length: int | None = None) -> bytes:
    """A safetensors file: the 8-byte length (``length`` overrides it), the header (JSON
    of ``head``, padded to 8 bytes) and ``data`` bytes (default: what the offsets need)."""
    raw = head if isinstance(head, bytes) else json.dumps(head).encode()
    raw += b" " * (-len(raw) % 8)
    if data is None:
        ends = [
            v["data_offsets"][1]
            for v in (head.values() if isinstance(head, dict) else ())
            if isinstance(v, dict)
            and isinstance(v.get("data_offsets"), list)
            and len(v["data_offsets"]) == 2
            and isinstance(v["data_offsets"][1], int)
        ]
        data = max(ends, default=0)
    size = len(raw) if length is None else length
    return size.to_bytes(8, "little") + raw + b"\0" * min(data, 1 << 20)


def good_checkpoint() -> bytes:
    return st(header(tensors()))


def changed(name_part: str, shape: list | None = None, dtype: str | None = None):
    """The tiny checkpoint's entries with the first tensor containing ``name_part``
    changed to ``shape`` / ``dtype``."""
    out, done = [], False
    for name, dt, sh in tensors():
        if not done and name_part in name:
            out.append((name, dtype or dt, sh if shape is None else shape))
            done = True
        else:
            out.append((name, dt, sh))
    return out


def cfg(**changes) -> bytes:
    config = {k: v for k, v in CONFIG.items() if changes.get(k, 0) is not None}
    config.update({k: v for k, v in changes.items() if v is not None})
    return json.dumps(config).encode()


def without(key: str) -> bytes:
    return json.dumps({k: v for k, v in CONFIG.items() if k != key}).encode()


def raw_cfg(key: str, literal: str) -> bytes:
    """CONFIG with ``key``'s value replaced by a JSON literal written as is."""
    text = json.dumps({**CONFIG, key: "@@"})
    return text.replace('"@@"', literal).encode()


def _profile_config(case_id: str, content: bytes, name: str = "config.json") -> Case:
    return Case(f"config/{case_id}", ("profile", f"{{dir}}/{name}"), {name: content}, (name,))


def config_cases() -> list[Case]:
    c = _profile_config
    out = [
        c("empty", b""),
        c("whitespace", b"  \n\t "),
        c("not-json", b"hello"),
        c("truncated", json.dumps(CONFIG).encode()[:-7]),
        c("array", b"[1, 2, 3]"),
        c("null", b"null"),
        c("number", b"42"),
        c("string", b'"config"'),
        c("utf8-bom", b"\xef\xbb\xbf" + json.dumps(CONFIG).encode()),
        c("latin1", b'{"model_type": "llam\xe9"}'),
        c("nul-bytes", b"\0" * 64),
        c("deep-array-100k", b"[" * 100_000 + b"]" * 100_000),
        c("deep-object-100k", b'{"a":' * 100_000 + b"1" + b"}" * 100_000),
        c("int-5000-digits", raw_cfg("num_hidden_layers", "1" + "0" * 5000)),
        c("float-1e400", raw_cfg("hidden_size", "1e400")),
        c("nan", raw_cfg("hidden_size", "NaN")),
        c("infinity", raw_cfg("num_hidden_layers", "Infinity")),
        c("over-16mb", b'{"a": "' + b"x" * (17 * 2**20) + b'"}'),
        c("model-type-unknown", cfg(model_type="not-a-model")),
        c("model-type-number", cfg(model_type=5)),
        c("model-type-cyrillic", cfg(model_type="llаma")),  # a Cyrillic а
        c("heads-do-not-divide", cfg(num_attention_heads=5)),
        c("kv-heads-do-not-divide", cfg(num_key_value_heads=3)),
        c(
            "experts-per-token-over-experts",
            cfg(model_type="mixtral", num_local_experts=4, num_experts_per_tok=8),
        ),
        c("head-dim-zero", cfg(head_dim=0)),
        c("tie-word-embeddings-yes", cfg(tie_word_embeddings="yes")),
        c("layers-1e30", cfg(num_hidden_layers=10**30)),
        c("hidden-1e8", cfg(hidden_size=10**8, num_attention_heads=1, num_key_value_heads=1)),
        c("vocab-1e10", cfg(vocab_size=10**10)),
        c("intermediate-1e9", cfg(intermediate_size=10**9)),
        c(
            "params-over-1e15",
            cfg(
                num_hidden_layers=10**6,
                hidden_size=2**20,
                num_attention_heads=2**10,
                num_key_value_heads=2**10,
            ),
        ),
        c("non-ascii-file-name", b"{", name="конфиг.json"),
        Case(
            "config/is-a-folder",
            ("profile", "{dir}/config.json"),
            {"config.json/readme.txt": b"x"},
            ("config.json",),
        ),
        Case(
            "config/symlink-loop",
            ("profile", "{dir}/config.json"),
            {},
            ("config.json",),
            links={"config.json": "config.json"},
        ),
        Case("config/folder-without-model", ("profile", "{dir}"), {"readme.md": b"hi"}, ("{dir}",)),
    ]
    for key in (
        "model_type",
        "hidden_size",
        "num_hidden_layers",
        "num_attention_heads",
        "vocab_size",
    ):
        out.append(c(f"missing-{key}", without(key)))
    bad_values = {
        "zero": 0,
        "negative": -1,
        "fraction": 1.5,
        "string": "12",
        "true": True,
        "list": [],
        "object": {},
    }
    for key in (
        "hidden_size",
        "num_hidden_layers",
        "num_attention_heads",
        "vocab_size",
        "intermediate_size",
        "num_key_value_heads",
    ):
        for label, value in bad_values.items():
            out.append(c(f"{key}-{label}", cfg(**{key: value})))
    return out


def _profile_checkpoint(case_id: str, files: dict[str, bytes], names=("model.safetensors",)):
    return Case(f"safetensors/{case_id}", ("profile", "{dir}"), files, names)


def safetensors_cases() -> list[Case]:
    c = _profile_checkpoint
    ok = header(tensors())
    first = "model.embed_tokens.weight"
    return [
        c("empty-file", {"model.safetensors": b""}),
        c("seven-bytes", {"model.safetensors": b"\x08\0\0\0\0\0\0"}),
        c("length-over-file", {"model.safetensors": st(ok, length=10**6)}),
        c("length-2-63", {"model.safetensors": st(ok, length=2**63)}),
        c("length-zero", {"model.safetensors": st(b"", length=0)}),
        c("header-not-json", {"model.safetensors": st(b"hello there, no json")}),
        c("header-array", {"model.safetensors": st(b"[1,2,3]")}),
        c("header-deep", {"model.safetensors": st(b"[" * 5000 + b"]" * 5000)}),
        c("header-only-metadata", {"model.safetensors": st({"__metadata__": {}})}),
        c("metadata-a-list", {"model.safetensors": st({**ok, "__metadata__": [1]})}),
        c("dtype-unknown", {"model.safetensors": st(header(changed(first, dtype="F99")))}),
        c("shape-negative", {"model.safetensors": st(header(changed(first, [-1, 32])))}),
        c("shape-fraction", {"model.safetensors": st(header(changed(first, [1.5, 32])))}),
        c("shape-string", {"model.safetensors": st(header(changed(first, "64")))}),
        c(
            "shape-2-62-squared",
            {"model.safetensors": st(header(changed(first, [2**62, 2**62])), data=0)},
        ),
        c("shape-2-64", {"model.safetensors": st(header(changed(first, [2**64])), data=0)}),
        c(
            "offsets-disagree",
            {"model.safetensors": st({**ok, first: {**ok[first], "data_offsets": [0, 3]}})},
        ),
        c(
            "offsets-missing",
            {"model.safetensors": st({**ok, first: {"dtype": "BF16", "shape": [64, 32]}})},
        ),
        c("data-truncated", {"model.safetensors": st(ok, data=100)}),
        c("zip-not-safetensors", {"model.safetensors": b"PK\x03\x04" + b"\0" * 60}),
        c(
            "zero-width-k-proj-no-config",
            {"model.safetensors": st(header(changed("k_proj", [0, 32])))},
            ("k_proj",),
        ),
        c(
            "zero-d-norm-no-config",
            {"model.safetensors": st(header(changed("input_layernorm", [])))},
            ("input_layernorm",),
        ),
        c(
            "zero-width-q-proj-no-config",
            {"model.safetensors": st(header(changed("q_proj", [32, 0])))},
            ("q_proj",),
        ),
        c(
            "all-names-unknown",
            {
                "model.safetensors": st(
                    header([(f"weird.{i}.ünïcode", "BF16", [4, 4]) for i in range(3)])
                )
            },
            ("{dir}",),
        ),
        c(
            "tensor-in-two-files",
            {"a.safetensors": good_checkpoint(), "b.safetensors": good_checkpoint()},
            ("b.safetensors",),
        ),
        c(
            "bad-config-beside-good-header",
            {"model.safetensors": good_checkpoint(), "config.json": b"{"},
            ("config.json",),
        ),
    ]


def _index(weight_map, **extra) -> bytes:
    return json.dumps({"metadata": {"total_size": 1}, "weight_map": weight_map, **extra}).encode()


def index_cases() -> list[Case]:
    name = "model.safetensors.index.json"
    shard = "model-00001-of-00001.safetensors"
    full = {t[0]: shard for t in tensors()}

    def c(case_id: str, index: bytes, files: dict[str, bytes] | None = None, names=(name,)):
        return Case(f"index/{case_id}", ("profile", "{dir}"), {name: index, **(files or {})}, names)

    good = {shard: good_checkpoint()}
    return [
        c("not-json", b"{ nope", good),
        c("array", b"[]", good),
        c("no-weight-map", json.dumps({"metadata": {}}).encode(), good),
        c("weight-map-a-list", _index([shard]), good),
        c("weight-map-values-numbers", _index({k: 1 for k in full}), good),
        c("shard-missing", _index(full)),
        c("shard-outside-folder", _index({k: "../x.safetensors" for k in full}), good),
        c("shard-absolute", _index({k: "/etc/passwd" for k in full}), good),
        c("deep-100k", b'{"weight_map":' + b"[" * 100_000 + b"]" * 100_000 + b"}", good),
        c("int-5000-digits", b'{"metadata": {"total_size": 1' + b"0" * 5000 + b"}}", good),
        c("empty-weight-map", _index({}), good),
        c("names-a-missing-tensor", _index({**full, "model.extra.weight": shard}), good),
        c("non-utf8", b'{"weight_map": {"\xff": "x"}}', good),
    ]


def _args(case_id: str, *argv: str, names: tuple[str, ...]) -> Case:
    return Case(f"args/{case_id}", tuple(argv), {}, names)


def argument_cases() -> list[Case]:
    a = _args
    p = ("profile", BUNDLED)
    shape = ("--layers", "2", "--d-emb", "64", "--heads", "4", "--vocab", "100", "--seq", "8")
    return [
        a("seq-not-a-number", *p, "--seq", "x", names=("--seq",)),
        a("seq-zero", *p, "--seq", "0", names=("--seq",)),
        a("seq-negative", *p, "--seq", "-5", names=("--seq",)),
        a("seq-fraction", *p, "--seq", "1.5", names=("--seq",)),
        a("seq-1e12", *p, "--seq", "1e12", names=("--seq",)),
        a("seq-1e400", *p, "--seq", "1e400", names=("--seq",)),
        a("seq-nan", *p, "--seq", "nan", names=("--seq",)),
        a("batch-1e8", *p, "--batch", "1e8", names=("--batch",)),
        a("devices-zero", *p, "--devices", "0", names=("--devices",)),
        a("devices-1e7", *p, "--devices", "1e7", names=("--devices",)),
        a("zero-5", *p, "--zero", "5", names=("--zero",)),
        # DeepSpeed's --zero 2/3 run on one device; torch's ZeRO-1 has nothing to shard there.
        a("zero-1-one-device", *p, "--zero", "1", names=("--zero",)),
        a(
            "mixed-with-fp32-weights",
            *p,
            "--precision",
            "mixed",
            "--weights-dtype",
            "fp32",
            names=("--precision", "--weights-dtype"),
        ),
        a(
            "bf16-with-fp32-weights",
            *p,
            "--precision",
            "bf16",
            "--weights-dtype",
            "fp32",
            names=("--precision",),
        ),
        a("precision-unknown", *p, "--precision", "fp64", names=("--precision",)),
        a("framework-unknown", *p, "--framework", "jax", names=("--framework",)),
        a("optimizer-unknown", *p, "--optimizer", "lion", names=("--optimizer",)),
        a("attention-unknown", *p, "--attention", "linear", names=("--attention",)),
        a("cross-entropy-unknown", *p, "--cross-entropy", "focal", names=("--cross-entropy",)),
        a("act-dtype-unknown", *p, "--act-dtype", "fp7", names=("--act-dtype",)),
        a("weights-dtype-unknown", *p, "--weights-dtype", "fp7", names=("--weights-dtype",)),
        a("act-bytes-zero", *p, "--act-bytes", "0", names=("--act-bytes",)),
        a(
            "act-bytes-and-dtype",
            *p,
            "--act-bytes",
            "2",
            "--act-dtype",
            "bf16",
            names=("--act-bytes", "--act-dtype"),
        ),
        a("timeout-not-a-number", *p, "--timeout", "soon", names=("--timeout",)),
        a("timeout-negative", *p, "--timeout", "-1", names=("--timeout",)),
        a("timeout-nan", *p, "--timeout", "nan", names=("--timeout",)),
        a("unknown-flag", *p, "--fast", names=("--fast",)),
        a("unknown-command", "profiel", names=("profiel",)),
        a("top-level-unknown-flag", "--colour", names=("--colour",)),
        a("profile-no-source", "profile", names=("SOURCE",)),
        a("profile-missing-path", "profile", "./no/such/config.json", names=("no/such",)),
        a("profile-not-a-source", "profile", "not a model!", names=("not a model!",)),
        a("profile-non-ascii-source", "profile", "モデル", names=("モデル",)),
        a(
            "profile-revision-of-a-path",
            "profile",
            "./nope.json",
            "--revision",
            "v1",
            names=("nope.json",),
        ),
        a(
            "estimate-missing-layers",
            "estimate",
            "--d-emb",
            "64",
            "--heads",
            "4",
            "--vocab",
            "100",
            "--seq",
            "8",
            names=("--layers",),
        ),
        a(
            "estimate-heads-do-not-divide",
            "estimate",
            "--layers",
            "2",
            "--d-emb",
            "64",
            "--heads",
            "5",
            "--vocab",
            "100",
            "--seq",
            "8",
            names=("--heads",),
        ),
        a("estimate-layers-1e30", "estimate", *shape, "--layers", "1e30", names=("--layers",)),
        a(
            "estimate-d-emb-1e8",
            "estimate",
            *shape,
            "--d-emb",
            "1e8",
            "--heads",
            "1",
            names=("--d-emb",),
        ),
        a("estimate-vocab-1e10", "estimate", *shape, "--vocab", "1e10", names=("--vocab",)),
        a("estimate-params-1e16", "estimate", *shape, "--params", "1e16", names=("--params",)),
        a("estimate-no-seq", "estimate", *shape[:-2], names=("--seq",)),
        a("table-reported-unknown", "table", "--reported", "gpt-5", names=("--reported",)),
        a(
            "table-reported-with-source",
            "table",
            "--reported",
            "qwen-7b",
            BUNDLED,
            names=("--reported",),
        ),
        a(
            "table-seed-example-with-source",
            "table",
            "--seed-example",
            BUNDLED,
            names=("--seed-example",),
        ),
        a(
            "table-one-bad-source",
            "table",
            BUNDLED,
            "./no-such-model.json",
            names=("no-such-model.json",),
        ),
        a("table-csv-and-markdown", "table", "--csv", "--markdown", names=("--markdown",)),
        a(
            "measure-fake-seq-1e12",
            "measure",
            "10M",
            "--framework",
            "torch",
            "--device",
            "fake",
            "--seq",
            "1e12",
            names=("--seq",),
        ),
        a(
            "measure-fake-seq-1e12-forced",
            "measure",
            "10M",
            "--framework",
            "torch",
            "--device",
            "fake",
            "--seq",
            "1e12",
            "--force",
            "--no-census",
            names=("--seq", "B=1"),
        ),
        a(
            "measure-mlx-on-cuda",
            "measure",
            "10M",
            "--framework",
            "mlx",
            "--device",
            "cuda",
            names=("--device",),
        ),
        a(
            "measure-transformers-on-mlx",
            "measure",
            "10M",
            "--framework",
            "mlx",
            "--impl",
            "transformers",
            names=("--impl",),
        ),
        a("measure-old-dtype-flag", "measure", "10M", "--dtype", "bf16", names=("--dtype",)),
        a("measure-no-model", "measure", "--framework", "torch", names=("SOURCE",)),
        a("measure-unknown-nominal", "measure", "999Q", "--framework", "torch", names=("999Q",)),
        a(
            "measure-layers-1e30",
            "measure",
            "--layers",
            "1e30",
            "--d-emb",
            "64",
            "--heads",
            "4",
            "--vocab",
            "100",
            "--framework",
            "torch",
            names=("--layers",),
        ),
    ]


def _hub_repo(config: bytes | None = None, **kw) -> dict:
    files = {"config.json": json.dumps(CONFIG).encode() if config is None else config}
    return {"repos": {HUB_ID: {"files": files, **kw}}}


def environment_cases() -> list[Case]:
    profile = ("profile", HUB_ID)
    return [
        Case(
            "env/hf-home-a-file",
            profile,
            {"home": b"x"},
            ("{dir}/home",),
            env={"HF_HOME": "{dir}/home"},
        ),
        Case(
            "env/hf-home-under-a-file",
            profile,
            {"home": b"x"},
            ("{dir}/home",),
            env={"HF_HOME": "{dir}/home/sub"},
        ),
        Case(
            "env/hf-hub-cache-a-file",
            profile,
            {"cache": b"x"},
            ("{dir}/cache",),
            env={"HF_HUB_CACHE": "{dir}/cache"},
        ),
        Case(
            "env/timeout-not-a-number",
            profile,
            {},
            ("INTROSPECT_TIMEOUT",),
            env={"INTROSPECT_TIMEOUT": "soon"},
        ),
        Case(
            "env/timeout-zero",
            profile,
            {},
            ("INTROSPECT_TIMEOUT",),
            env={"INTROSPECT_TIMEOUT": "0"},
        ),
        Case(
            "env/timeout-nan",
            profile,
            {},
            ("INTROSPECT_TIMEOUT",),
            env={"INTROSPECT_TIMEOUT": "nan"},
        ),
        Case(
            "env/offline-not-cached", profile, {}, ("HF_HUB_OFFLINE",), env={"HF_HUB_OFFLINE": "1"}
        ),
        Case("env/endpoint-refused", profile, {}, ("127.0.0.1:9",), env={}),
        Case(
            "env/endpoint-not-a-url",
            profile,
            {},
            ("not-a-url", "HF_ENDPOINT"),
            env={"HF_ENDPOINT": "not-a-url"},
        ),
    ]


def hub_cases() -> list[Case]:
    profile = ("profile", HUB_ID, "--timeout", "3")
    html = b"<!DOCTYPE html><html><body>Sign in to the proxy</body></html>"
    return [
        Case("hub/repo-missing", ("profile", "org/absent"), names=("org/absent",), hub=_hub_repo()),
        Case("hub/gated", profile, names=("gated", HUB_ID), hub=_hub_repo(gated_token="t")),
        Case(
            "hub/500-everywhere",
            ("profile", HUB_ID, "--timeout", "20"),
            names=(HUB_ID,),
            hub=_hub_repo(failing=True),
        ),
        Case("hub/silent", profile, names=(HUB_ID,), hub=_hub_repo(fault="silent")),
        Case("hub/trickling", profile, names=(HUB_ID,), hub=_hub_repo(fault="trickle")),
        Case("hub/html-config", profile, names=(HUB_ID,), hub=_hub_repo(html)),
        Case("hub/invalid-json-config", profile, names=(HUB_ID,), hub=_hub_repo(b"{")),
        Case("hub/config-array", profile, names=(HUB_ID,), hub=_hub_repo(b"[]")),
        Case(
            "hub/no-config",
            profile,
            names=("config.json",),
            hub={"repos": {HUB_ID: {"files": {"README.md": b"hi"}}}},
        ),
        Case(
            "hub/revision-missing", (*profile, "--revision", "v9"), names=("v9",), hub=_hub_repo()
        ),
        Case(
            "hub/layers-1e30",
            profile,
            names=("num_hidden_layers",),
            hub=_hub_repo(json.dumps({**CONFIG, "num_hidden_layers": 10**30}).encode()),
        ),
        Case(
            "hub/cached-html-offline",
            profile,
            names=("config.json",),
            hub=_hub_repo(html),
            env={"HF_HUB_OFFLINE": "1"},
            warm_up=True,
        ),
        Case(
            "hub/table-one-silent-source",
            ("table", BUNDLED, HUB_ID, "--timeout", "3"),
            names=(HUB_ID,),
            hub=_hub_repo(fault="silent"),
        ),
    ]


def all_cases() -> list[Case]:
    from .files import file_cases
    from .flags import flag_cases
    from .trainer_configs import trainer_config_cases

    return [
        *config_cases(),
        *safetensors_cases(),
        *index_cases(),
        *argument_cases(),
        *environment_cases(),
        *hub_cases(),
        *flag_cases(),
        *file_cases(),
        *trainer_config_cases(),
    ]
