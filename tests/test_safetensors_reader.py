"""The local checkpoint reader on real safetensors files written here (headers only)."""

from __future__ import annotations

import json
import resource
import struct
import subprocess
import sys
from pathlib import Path

import checkpoint_factory as cf
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from introspect.adapters.hf_config import spec_from_config
from introspect.adapters.safetensors import read_checkpoint
from safetensors.numpy import save_file

from introspect.errors import CheckpointError, ConfigError
from introspect.params import COMPONENTS, parameter_count, parameters_by_component

FAMILIES = {
    "llama2-inv_freq": lambda: cf.llama(inv_freq=True),
    "llama-tied": lambda: cf.llama(tied=True),
    "qwen2-bias": lambda: cf.llama(qkv_bias=True),
    "qwen3-head-norm": lambda: cf.llama(qk_norm="head", head_dim=16, tied=True),
    "olmo2-full-norm": lambda: cf.llama(qk_norm="full"),
    "mixtral": cf.mixtral,
    "gpt2": cf.gpt2,
    "qwen-remote-code": cf.qwen,
    "phi": cf.phi,
}


def test_llama2_inv_freq_buffers_are_reported_apart(tmp_path):
    tensors, config = cf.llama(layers=3, inv_freq=True)
    ckpt = read_checkpoint(cf.write(tmp_path, tensors, config))
    assert [t.name for t in ckpt.buffers] == [
        f"model.layers.{i}.self_attn.rotary_emb.inv_freq" for i in range(3)
    ]
    assert all(t.is_buffer and t.role == "inv_freq" for t in ckpt.buffers)
    assert ckpt.buffer_count == cf.numel(tensors, buffers=True) == 3 * 4
    assert ckpt.parameter_count == cf.numel(tensors)  # buffers excluded
    assert ckpt.parameter_count == parameter_count(spec_from_config(config))
    assert ckpt.spec.num_parameters == ckpt.parameter_count
    assert sum(ckpt.params_by_dtype.values()) == ckpt.parameter_count
    assert ckpt.mismatches == ()
    assert any("3 buffers" in n for n in ckpt.notes)


DATA = Path(__file__).resolve().parents[1] / "adapters" / "data"
#: Published exact parameter counts (adapters/data/index.json; facts, not our output).
PUBLISHED = {
    m["folder"]: m["parameters"] for m in json.loads((DATA / "index.json").read_text())["models"]
}
#: The Hub's safetensors total for Llama-2-7b-hf: parameters plus 32 × 64 inv_freq values.
LLAMA2_STORED = 6_738_417_664


def _published_config(folder: str) -> dict:
    return json.loads((DATA / folder / "config.json").read_text())


def test_llama2_7b_full_size_headers_give_the_published_count(tmp_path):
    """Llama-2-7b-hf's real layout (two shards, 291 tensors plus 32 inv_freq buffers) as
    headers over sparse files: the count is the published one, the buffers apart."""
    config = _published_config("meta-llama__Llama-2-7b-hf")
    entries = cf.llama_entries(config, inv_freq=True, dtype="F16")
    ckpt = read_checkpoint(cf.write_sparse(tmp_path, entries, config, shards=2))
    assert ckpt.parameter_count == PUBLISHED["meta-llama__Llama-2-7b-hf"] == 6_738_415_616
    assert ckpt.parameter_count + ckpt.buffer_count == LLAMA2_STORED
    assert len(ckpt.buffers) == 32 and ckpt.params_by_dtype == {"F16": ckpt.parameter_count}
    assert ckpt.mismatches == ()
    assert sum(f.stat().st_size for f in ckpt.files) > 13e9  # the sizes headers describe


@pytest.mark.parametrize(
    "folder",
    [
        "Qwen__Qwen2.5-0.5B",
        "Qwen__Qwen3-0.6B",
        "meta-llama__Llama-3.1-8B",
        "google__gemma-2b",
        "mistralai__Mixtral-8x7B-v0.1",
    ],
)
def test_published_layouts_with_and_without_config(tmp_path, folder):
    config = _published_config(folder)
    entries = cf.llama_entries(config)
    with_config = read_checkpoint(cf.write_sparse(tmp_path / "a", entries, config, shards=3))
    bare = read_checkpoint(cf.write_sparse(tmp_path / "b", entries))
    assert with_config.parameter_count == bare.parameter_count == PUBLISHED[folder]
    assert with_config.mismatches == ()
    assert parameter_count(bare.spec) == PUBLISHED[folder]  # the inferred structure, exactly
    if folder == "Qwen__Qwen3-0.6B":  # q_norm holds head_dim: the heads are known, not assumed
        assert (bare.spec.num_attention_heads, bare.spec.kv_heads) == (16, 8)
        assert not any("assumed: head_dim" in n for n in bare.notes)


@pytest.mark.parametrize("family", FAMILIES)
def test_components_match_the_config_exactly(tmp_path, family):
    tensors, config = FAMILIES[family]()
    ckpt = read_checkpoint(cf.write(tmp_path, tensors, config))
    expected = parameters_by_component(spec_from_config(config))
    assert ckpt.params_by_component == expected  # every tensor got the right component
    assert list(ckpt.params_by_component) == list(COMPONENTS)
    assert ckpt.parameter_count == cf.numel(tensors)
    assert ckpt.mismatches == ()


@pytest.mark.parametrize("family", FAMILIES)
def test_without_config_the_shapes_give_the_structure(tmp_path, family):
    tensors, config = FAMILIES[family]()
    ckpt = read_checkpoint(cf.write(tmp_path, tensors))
    said, found = spec_from_config(config), ckpt.spec
    for name in ("num_hidden_layers", "hidden_size", "vocab_size", "q_dim", "kv_dim", "ffn_dim"):
        assert getattr(found, name) == getattr(said, name), name
    for name in ("tie_word_embeddings", "ffn", "norm", "qk_norm", "num_local_experts"):
        assert getattr(found, name) == getattr(said, name), name
    assert parameter_count(found) == ckpt.parameter_count == cf.numel(tensors)
    assert ckpt.config is None and ckpt.mismatches == ()
    heads_known = family.startswith("qwen3")  # a per-head q_norm stores head_dim
    assumed = [n for n in ckpt.notes if "num_attention_heads assumed" in n]
    assert bool(assumed) != heads_known
    assert set(assumed) <= set(found.assumptions)
    if heads_known:
        assert found.num_attention_heads == said.num_attention_heads


def test_head_count_assumption_is_named(tmp_path):
    tensors, _ = cf.llama(hidden=256, heads=16, kv_heads=4, ffn=64)  # head_dim 16 really
    ckpt = read_checkpoint(cf.write(tmp_path, tensors))
    # q width 256, kv width 64: 128 does not divide 64, so head_dim 64 is assumed
    assert ckpt.spec.num_attention_heads == 4 and ckpt.spec.kv_heads == 1
    (note,) = [n for n in ckpt.notes if "num_attention_heads assumed" in n]
    assert "head_dim 64" in note and "config.json" in note


def test_sharded_folder_with_index(tmp_path):
    tensors, config = cf.mixtral()
    single = read_checkpoint(cf.write(tmp_path / "one", tensors, config))
    sharded = read_checkpoint(cf.write(tmp_path / "three", tensors, config, shards=3))
    assert [f.name for f in sharded.files] == [
        f"model-0000{i}-of-00003.safetensors" for i in (1, 2, 3)
    ]
    assert sharded.parameter_count == single.parameter_count
    assert sharded.params_by_component == single.params_by_component
    assert {t.file for t in sharded.tensors} == {f.name for f in sharded.files}
    # the index itself is also accepted as the path
    via_index = read_checkpoint(tmp_path / "three" / "model.safetensors.index.json")
    assert via_index.parameter_count == single.parameter_count


def test_index_that_disagrees_with_the_shards(tmp_path):
    tensors, _ = cf.llama()
    folder = cf.write(tmp_path, tensors, shards=2)
    index_path = folder / "model.safetensors.index.json"
    index = json.loads(index_path.read_text())
    moved = "model.norm.weight"
    shards = sorted(set(index["weight_map"].values()))
    index["weight_map"][moved] = next(s for s in shards if s != index["weight_map"][moved])
    index["weight_map"]["model.ghost.weight"] = shards[0]
    index_path.write_text(json.dumps(index))
    with pytest.raises(CheckpointError) as err:
        read_checkpoint(folder)
    line = str(err.value)
    assert "weight_map disagrees" in line and "2 places" in line and moved in line
    assert "model.ghost.weight" in line and "\n" not in line


def test_missing_shard(tmp_path):
    tensors, _ = cf.llama()
    folder = cf.write(tmp_path, tensors, shards=2)
    (folder / "model-00002-of-00002.safetensors").unlink()
    with pytest.raises(CheckpointError, match="1 of 2 shards are missing"):
        read_checkpoint(folder)


def test_config_mismatch_is_reported(tmp_path):
    tensors, config = cf.llama(layers=2)
    config |= {"num_hidden_layers": 3, "intermediate_size": 64}
    ckpt = read_checkpoint(cf.write(tmp_path, tensors, config))
    text = " | ".join(ckpt.mismatches)
    assert "num_hidden_layers: config.json says 3, the tensors say 2" in text
    assert "ffn_dim: config.json says 64, the tensors say 48" in text
    assert "total parameters" in text
    assert ckpt.parameter_count == cf.numel(tensors)  # the headers stay the truth


def test_broken_config_is_one_config_error(tmp_path):
    tensors, _ = cf.llama()
    folder = cf.write(tmp_path, tensors)
    (folder / "config.json").write_text('{"model_type": "llama",')
    with pytest.raises(ConfigError) as err:
        read_checkpoint(folder)
    assert "config.json" in str(err.value) and "\n" not in str(err.value)


def test_unsupported_model_type_falls_back_to_the_shapes_with_a_note(tmp_path):
    tensors, config = cf.llama()
    ckpt = read_checkpoint(cf.write(tmp_path, tensors, config | {"model_type": "llama9"}))
    assert ckpt.parameter_count == cf.numel(tensors)
    assert ckpt.spec.hidden_size == config["hidden_size"]
    assert any("llama9" in n and "inferred from tensor shapes" in n for n in ckpt.notes)


def test_single_file_picks_up_its_config(tmp_path):
    tensors, config = cf.llama()
    folder = cf.write(tmp_path, tensors, config)
    ckpt = read_checkpoint(folder / "model.safetensors")
    assert ckpt.config == config and ckpt.spec.model_type == "llama"


def test_unknown_names_are_counted_as_other(tmp_path):
    tensors, _ = cf.llama()
    tensors["model.vision_tower.proj.weight"] = cf._z(8, 8)
    ckpt = read_checkpoint(cf.write(tmp_path, tensors))
    assert ckpt.params_by_component["other"] == 64
    assert sum(ckpt.params_by_component.values()) == ckpt.parameter_count == cf.numel(tensors)
    assert any("model.vision_tower.proj.weight" in n for n in ckpt.notes)


def test_headers_only_even_for_a_huge_sparse_file(tmp_path):
    """A 4 GB tensor in a sparse file: the reader maps it but never touches the data."""
    header = {"huge.weight": {"dtype": "F32", "shape": [50_000, 20_000], "data_offsets": [0, 4e9]}}
    raw = json.dumps(header).replace("4000000000.0", "4000000000").encode()
    path = tmp_path / "huge.safetensors"
    with path.open("wb") as f:
        f.write(struct.pack("<Q", len(raw)) + raw)
        f.truncate(8 + len(raw) + 4_000_000_000)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(CheckpointError, match="no token embedding"):
        read_checkpoint(path)  # the headers were read: only the structure is unusable
    grown_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    assert grown_kb < 200_000


# ---- malformed input: one CheckpointError line, nothing written -------------------------


def _valid_bytes(tmp_path: Path) -> bytes:
    save_file({"a": cf._z(2, 3, dtype=cf.F32), "b": cf._z(4)}, str(tmp_path / "v.safetensors"))
    return (tmp_path / "v.safetensors").read_bytes()


def _with_header(raw: bytes, header: dict | bytes) -> bytes:
    n = struct.unpack("<Q", raw[:8])[0]
    body = header if isinstance(header, bytes) else json.dumps(header).encode()
    return struct.pack("<Q", len(body)) + body + raw[8 + n :]


def _header(raw: bytes) -> dict:
    n = struct.unpack("<Q", raw[:8])[0]
    return json.loads(raw[8 : 8 + n])


def _malformed(raw: bytes) -> dict[str, tuple[bytes, str]]:
    h = _header(raw)
    return {
        "empty": (b"", "too short"),
        "truncated-length": (raw[:5], "too short"),
        "length-past-eof": (struct.pack("<Q", len(raw)) + raw[8:], "truncated"),
        "header-over-100MB": (struct.pack("<Q", 200_000_000) + raw[8:], "100,000,000-byte limit"),
        "invalid-json": (_with_header(raw, b"{" * 40), "not valid JSON"),
        "unknown-dtype": (_with_header(raw, h | {"a": h["a"] | {"dtype": "F33"}}), "dtype 'F33'"),
        "shape-vs-offsets": (_with_header(raw, h | {"a": h["a"] | {"shape": [3, 3]}}), "offsets"),
        "overlapping-offsets": (
            _with_header(raw, h | {"b": h["b"] | {"data_offsets": [0, 8]}}),
            "offsets",
        ),
    }


@pytest.mark.parametrize(
    "case",
    [
        "empty",
        "truncated-length",
        "length-past-eof",
        "header-over-100MB",
        "invalid-json",
        "unknown-dtype",
        "shape-vs-offsets",
        "overlapping-offsets",
    ],
)
def test_malformed_file_is_one_line(tmp_path, case):
    data, expected = _malformed(_valid_bytes(tmp_path))[case]
    folder = tmp_path / "user"
    folder.mkdir()
    path = folder / "model.safetensors"
    path.write_bytes(data)
    with pytest.raises(CheckpointError) as err:
        read_checkpoint(path)
    line = str(err.value)
    assert "\n" not in line and str(path) in line and expected in line
    assert sorted(p.name for p in folder.iterdir()) == ["model.safetensors"]


@pytest.mark.parametrize("case", ["missing", "empty-folder", "config-json-as-weights"])
def test_unreadable_paths_are_one_line(tmp_path, case):
    path = {
        "missing": tmp_path / "nope",
        "empty-folder": tmp_path,
        "config-json-as-weights": tmp_path / "x.safetensors",
    }[case]
    if case == "config-json-as-weights":
        path.write_text(json.dumps({"model_type": "llama"}))
    with pytest.raises(CheckpointError) as err:
        read_checkpoint(path)
    assert "\n" not in str(err.value) and str(path) in str(err.value)


def test_cli_profile_bad_checkpoint_exits_2_without_traceback(tmp_path):
    folder = tmp_path / "user"
    folder.mkdir()
    path = folder / "model.safetensors"
    path.write_bytes(_malformed(_valid_bytes(tmp_path))["length-past-eof"][0])
    run = subprocess.run(
        [sys.executable, "-m", "introspect", "profile", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 2
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and "truncated" in lines[0] and str(path) in lines[0]
    assert "Traceback" not in run.stderr
    assert sorted(p.name for p in folder.iterdir()) == ["model.safetensors"]


# ---- fuzzing: any bytes give a result or a CheckpointError, never another exception -----

FUZZ = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def _read_bytes(tmp_path: Path, data: bytes) -> None:
    path = tmp_path / "fuzz.safetensors"
    path.write_bytes(data)
    try:
        read_checkpoint(path)
    except CheckpointError as e:
        assert "\n" not in str(e)


@FUZZ
@given(data=st.binary(max_size=512))
def test_fuzz_random_bytes(tmp_path, data):
    _read_bytes(tmp_path, data)


@FUZZ
@given(cut=st.integers(min_value=0, max_value=10_000))
def test_fuzz_truncations(tmp_path, cut):
    tensors, _ = cf.llama(layers=1, hidden=8, heads=2, kv_heads=1, ffn=8, vocab=8, inv_freq=True)
    raw = (cf.write(tmp_path / "src", tensors) / "model.safetensors").read_bytes()
    _read_bytes(tmp_path, raw[: cut % (len(raw) + 1)])


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)


@FUZZ
@given(
    name=st.sampled_from(["a", "b", "__metadata__", "model.embed_tokens.weight"]),
    key=st.sampled_from(["dtype", "shape", "data_offsets", "extra"]),
    value=_JSON | st.sampled_from(["F16", "BF16", "F8_E4M3", "U64", "F4", "??"]),
    length_delta=st.sampled_from([0, 0, 0, -1, 1, 8]),
)
def test_fuzz_mutated_headers(tmp_path, name, key, value, length_delta):
    raw = _valid_bytes(tmp_path)
    header = _header(raw)
    entry = header.get(name)
    header[name] = (entry | {key: value}) if isinstance(entry, dict) else {key: value}
    data = _with_header(raw, header)
    n = struct.unpack("<Q", data[:8])[0]
    _read_bytes(tmp_path, struct.pack("<Q", max(0, n + length_delta)) + data[8:])


def test_one_shard_of_a_sharded_checkpoint_uses_the_index_beside_it(tmp_path):
    """Pointing at one shard counts the whole checkpoint: the index beside it names the
    other shards (as the folder does)."""
    tensors, config = cf.mixtral()
    folder = cf.write(tmp_path / "three", tensors, config, shards=3)
    whole = read_checkpoint(folder)
    first = sorted(folder.glob("*.safetensors"))[0]
    one = read_checkpoint(first)
    assert one.parameter_count == whole.parameter_count
    assert [f.name for f in one.files] == [f.name for f in whole.files]


# ---- incomplete checkpoints: attention without its feed-forward -------------------------


@pytest.mark.parametrize("config", [True, False])
def test_checkpoint_missing_every_mlp_is_incomplete_not_a_tiny_model(tmp_path, config):
    tensors, cfg = cf.llama(layers=3)
    kept = {n: a for n, a in tensors.items() if ".mlp." not in n}
    folder = cf.write(tmp_path / "m", kept, cfg if config else None)
    with pytest.raises(CheckpointError) as err:
        read_checkpoint(folder)
    line = str(err.value)
    assert "incomplete" in line and "layer 0, 1, 2" in line and "model.layers.0.mlp" in line
    assert "give the model's config.json" not in line


def test_one_layer_missing_its_mlp_names_the_layer_and_tensors(tmp_path):
    tensors, cfg = cf.llama(layers=3)
    kept = {n: a for n, a in tensors.items() if not n.startswith("model.layers.1.mlp.")}
    folder = cf.write(tmp_path / "m", kept, cfg)
    run = subprocess.run(
        [sys.executable, "-m", "introspect", "profile", str(folder)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 2 and "Traceback" not in run.stderr
    (line,) = run.stderr.strip().splitlines()
    assert "1 of 3 blocks (layer 1)" in line
    assert "model.layers.1.mlp.gate_proj.weight" in line and "model.layers.1.mlp.up_proj" in line


def test_unrecognised_feed_forward_names_are_not_called_missing(tmp_path):
    """A block whose feed-forward has names no table knows (counted as 'other') is not
    incomplete: the count holds, and config.json still gives the spec."""
    tensors, cfg = cf.llama(layers=2)
    renamed = {n.replace(".mlp.", ".feed_forward."): a for n, a in tensors.items()}
    ckpt = read_checkpoint(cf.write(tmp_path / "m", renamed, cfg))
    assert ckpt.parameter_count == cf.numel(tensors)
    assert ckpt.params_by_component["other"] > 0
    assert not any("give the model's config.json" in n for n in ckpt.notes)
