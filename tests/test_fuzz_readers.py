"""Hypothesis fuzzing of the two readers every source goes through, with a fixed budget:
whatever the bytes, the safetensors header reader and the config reader return a result
or raise :class:`IntrospectError` / ValueError (the one-line errors the CLI prints) —
never another exception, never a hang."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from corpus.cases import CONFIG, header, st, tensors
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as hs
from introspect.adapters.hf_config import load_config, spec_from_config
from introspect.adapters.safetensors import read_checkpoint, read_header

from introspect.errors import IntrospectError

BUDGET = settings(
    max_examples=200,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)

_json_leaf = hs.one_of(
    hs.none(),
    hs.booleans(),
    hs.integers(min_value=-(2**70), max_value=2**70),
    hs.floats(allow_nan=True, allow_infinity=True),
    hs.text(max_size=12),
)
_json = hs.recursive(
    _json_leaf,
    lambda inner: hs.one_of(
        hs.lists(inner, max_size=4), hs.dictionaries(hs.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
_dims = hs.lists(
    hs.one_of(
        hs.sampled_from([0, 1, 16, 32, 48, 64]),
        hs.integers(min_value=-2, max_value=2**65),
        hs.floats(allow_nan=False, allow_infinity=False),
        hs.text(max_size=3),
    ),
    max_size=3,
)
_dtype = hs.sampled_from(["BF16", "F16", "F32", "I8", "F8_E4M3", "F99", "", "bf16", 7])


def _write(data: bytes) -> Path:
    folder = Path(tempfile.mkdtemp(prefix="fuzz-"))
    path = folder / "model.safetensors"
    path.write_bytes(data)
    return path


def _reads_or_refuses(call) -> None:
    try:
        call()
    except (IntrospectError, ValueError):
        pass


@BUDGET
@given(data=hs.binary(max_size=256))
def test_header_reader_on_random_bytes(data):
    _reads_or_refuses(lambda: read_header(_write(data)))


@BUDGET
@given(
    index=hs.integers(min_value=0, max_value=len(tensors()) - 1),
    shape=_dims,
    dtype=_dtype,
    name=hs.one_of(hs.none(), hs.text(min_size=1, max_size=20)),
    extra=hs.dictionaries(hs.text(max_size=8), _json, max_size=2),
    with_config=hs.booleans(),
)
def test_checkpoint_reader_on_mutated_headers(index, shape, dtype, name, extra, with_config):
    """The tiny Llama header with one tensor's shape, dtype and name changed and extra
    keys added, read as a whole checkpoint (headers, roles, shape inference, cross-check)."""
    entries = tensors()
    entries[index] = (name or entries[index][0], dtype, shape)
    head = header(entries, extra=extra)
    path = _write(st(head))
    if with_config:
        (path.parent / "config.json").write_text(json.dumps(CONFIG))
    _reads_or_refuses(lambda: read_checkpoint(path.parent))


@BUDGET
@given(data=hs.binary(max_size=256))
def test_config_loader_on_random_bytes(data):
    path = _write(data).with_name("config.json")
    path.write_bytes(data)
    _reads_or_refuses(lambda: load_config(path))


@BUDGET
@given(
    changes=hs.dictionaries(
        hs.sampled_from(
            [
                *CONFIG,
                "head_dim",
                "num_local_experts",
                "num_experts_per_tok",
                "text_config",
                "rope_scaling",
                "max_position_embeddings",
                "n_layer",
            ]
        ),
        _json,
        max_size=4,
    ),
    model_type=hs.sampled_from(["llama", "qwen2", "qwen3", "mixtral", "gpt2", "phi", "gemma", ""]),
)
def test_config_reader_on_mutated_configs(changes, model_type):
    config = {**CONFIG, "model_type": model_type, **changes}
    _reads_or_refuses(lambda: spec_from_config(config, source="fuzz", path="fuzz/config.json"))


@BUDGET
@given(
    bits=_json,
    method=hs.sampled_from(["gptq", "awq", "GPTQ", "", "fp8", "bitsandbytes", 4]),
    packed=hs.sampled_from(["I32", "U32", "F32", "I8"]),
)
def test_checkpoint_reader_on_quantized_configs(bits, method, packed):
    """The tiny Llama with its q_proj packed GPTQ-style (``qweight``/``qzeros``/``scales``)
    under a config.json whose ``quantization_config`` says any ``bits`` and method: the
    count or one of the one-line errors (``bits: 0`` once divided by zero)."""
    from corpus.files import gptq_entries

    entries = [(n, packed if n.endswith("qweight") else d, s) for n, d, s in gptq_entries(4)]
    path = _write(st(header(entries)))
    config = {**CONFIG, "quantization_config": {"quant_method": method, "bits": bits}}
    (path.parent / "config.json").write_text(json.dumps(config))
    _reads_or_refuses(lambda: read_checkpoint(path.parent))
