"""`introspect profile` on the other sources: a real checkpoint folder written by
transformers, and a Hugging Face cache laid out as huggingface_hub lays it out (offline,
so nothing touches the network)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from introspect.adapters import bundled, resolve
from introspect.adapters.hf_config import spec_from_config

from introspect.cli import main
from introspect.params import parameter_count

TINY_QWEN3 = {
    "model_type": "qwen3",
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 32,
    "intermediate_size": 96,
    "vocab_size": 128,
    "tie_word_embeddings": True,
}


@pytest.mark.slow
def test_profile_a_checkpoint_saved_by_transformers(tmp_path, capsys):
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("torch")
    keys = {k: v for k, v in TINY_QWEN3.items() if k != "model_type"}
    model = transformers.AutoModelForCausalLM.from_config(
        transformers.AutoConfig.for_model("qwen3", **keys)
    )
    model.save_pretrained(tmp_path / "tiny")
    expected = sum(p.numel() for p in model.parameters())  # the tied embedding once

    resolved = resolve(str(tmp_path / "tiny"))
    assert resolved.origin == "checkpoint"
    assert resolved.spec.n_params == expected == parameter_count(spec_from_config(TINY_QWEN3))
    assert sum(resolved.params_by_component.values()) == expected

    before = sorted(os.listdir(tmp_path / "tiny"))
    assert main(["profile", str(tmp_path / "tiny"), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["source"]["origin"] == "checkpoint"
    assert out["params"]["total"] == expected
    assert sorted(os.listdir(tmp_path / "tiny")) == before  # nothing written


def _fake_cache(root, repo_id: str, config: dict, commit: str = "0" * 40) -> None:
    """The layout huggingface_hub keeps: models--org--name/{refs/main, snapshots/<sha>/}."""
    repo = root / ("models--" + repo_id.replace("/", "--"))
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    snapshot = repo / "snapshots" / commit
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text(json.dumps(config))


def _profile_offline(cache, *argv) -> subprocess.CompletedProcess:
    env = dict(os.environ, HF_HUB_CACHE=str(cache), HF_HUB_OFFLINE="1", HF_HOME=str(cache))
    return subprocess.run(
        [sys.executable, "-m", "introspect", "profile", *argv],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


def test_profile_a_hub_id_from_the_cache_offline(tmp_path):
    config = bundled.lookup("meta-llama/Llama-3.2-1B").config()
    _fake_cache(tmp_path, "someone/llama-copy", config)
    proc = _profile_offline(tmp_path, "someone/llama-copy", "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["source"]["origin"] == "cache"
    assert out["source"]["location"] == "someone/llama-copy"
    assert out["params"]["total"] == 1_235_814_400


def test_hub_id_neither_cached_nor_reachable_is_one_line(tmp_path):
    proc = _profile_offline(tmp_path, "someone/not-cached")
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert "someone/not-cached" in proc.stderr


def test_revision_skips_the_bundled_copy_and_says_so(tmp_path):
    proc = _profile_offline(tmp_path, "google/gemma-2b", "--revision", "main")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert "bundled copy of google/gemma-2b is used only without --revision" in proc.stderr


@pytest.mark.slow
@pytest.mark.parametrize("config_says_tied", [True, False])
def test_cached_safetensors_headers_give_the_count(tmp_path, config_says_tied):
    """With the weights' headers in the cache, the headers are the count; a config that
    disagrees with them (here: claims an untied lm_head the checkpoint does not hold) is
    reported, not trusted."""
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("torch")
    keys = {k: v for k, v in TINY_QWEN3.items() if k != "model_type"}
    model = transformers.AutoModelForCausalLM.from_config(
        transformers.AutoConfig.for_model("qwen3", **keys)
    )
    expected = sum(p.numel() for p in model.parameters())
    _fake_cache(tmp_path, "someone/tiny", TINY_QWEN3)
    snapshot = tmp_path / "models--someone--tiny" / "snapshots" / ("0" * 40)
    model.save_pretrained(snapshot)
    (snapshot / "config.json").write_text(
        json.dumps(TINY_QWEN3 | {"tie_word_embeddings": config_says_tied})
    )
    proc = _profile_offline(tmp_path, "someone/tiny", "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["source"]["origin"] == "cache"
    assert out["params"]["total"] == expected
    assert sum(out["params"]["by_component"].values()) == expected
    notes = " ".join(out["source"]["notes"])
    if config_says_tied:
        assert "agrees with the checkpoint's safetensors headers" in notes
    else:
        untied = expected + TINY_QWEN3["vocab_size"] * TINY_QWEN3["hidden_size"]
        assert f"the config's structure {untied:,}" in notes
