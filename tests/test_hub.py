"""The Hub adapter against a real HTTP server on 127.0.0.1 (HF_ENDPOINT), run in a fresh
interpreter per call because huggingface_hub reads HF_ENDPOINT / HF_HUB_OFFLINE / HF_HOME
into its constants at import. HF_HOME lives in tmp_path, so nothing is written elsewhere.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import checkpoint_factory as cf
import pytest
from hubserver import HubServer, folder_files
from introspect.adapters.hf_config import spec_from_config

from introspect.params import parameter_count

SNIPPET = """
import json, sys
from introspect.adapters.hub import fetch
from introspect.errors import IntrospectError
try:
    m = fetch(sys.argv[1], revision=sys.argv[2] or None)
except IntrospectError as e:
    print(json.dumps({"error": str(e), "type": type(e).__name__}))
else:
    print(json.dumps({k: getattr(m, k) for k in (
        "repo_id", "revision", "config", "config_path", "parameter_count", "params_by_dtype",
        "buffers_count", "origin", "commit", "params_by_component", "notes")}))
"""

LLAMA2 = "meta-llama/Tiny-Llama-2"


def _env(home: Path, server: HubServer | None, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE_"))}
    env |= {
        "HF_HOME": str(home),
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "HF_HUB_DISABLE_XET": "1",
        # an unused local port: a test that forgets the server still cannot reach the network
        "HF_ENDPOINT": server.url if server else "http://127.0.0.1:9",
    }
    return env | extra


def fetch(home: Path, server: HubServer | None, repo: str, revision: str = "", **env) -> dict:
    run = subprocess.run(
        [sys.executable, "-c", SNIPPET, repo, revision],
        env=_env(home, server, **env),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    assert run.stderr == "", run.stderr  # no warnings, no progress bars
    return json.loads(run.stdout)


def _llama2_repo(tmp_path: Path, **kw) -> tuple[dict[str, bytes], dict, dict]:
    # vocab 4096 × 64 in f16: the files are ~1 MB, far above the 100 kB first read
    tensors, config = cf.llama(vocab=4096, hidden=64, heads=4, kv_heads=4, inv_freq=True, **kw)
    folder = cf.write(tmp_path / "repo", tensors, config)
    return folder_files(folder), tensors, config


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "hf-home"


def test_hub_counts_exclude_inv_freq_and_download_no_weights(tmp_path, home):
    files, tensors, config = _llama2_repo(tmp_path)
    with HubServer() as server:
        server.add(LLAMA2, files)
        got = fetch(home, server, LLAMA2)
    assert got["origin"] == "hub"
    assert got["config"] == config
    assert got["parameter_count"] == cf.numel(tensors)
    assert got["parameter_count"] == parameter_count(spec_from_config(config))
    assert got["buffers_count"] == cf.numel(tensors, buffers=True) > 0
    assert sum(got["params_by_component"].values()) == got["parameter_count"]
    assert set(got["params_by_dtype"]) == {"F16", "F32"}
    assert Path(got["config_path"]).is_relative_to(home)
    # only headers travelled: the first ranged read, far below the file's size
    size = len(files["model.safetensors"])
    assert 0 < server.safetensors_bytes[LLAMA2] <= 100_001 < size // 5


def test_sharded_repo_reads_every_shard_header(tmp_path, home):
    tensors, config = cf.mixtral(vocab=2048, hidden=64, ffn=32)
    folder = cf.write(tmp_path / "repo", tensors, config, shards=3)
    with HubServer() as server:
        server.add("mistralai/Tiny-Mixtral", folder_files(folder))
        got = fetch(home, server, "mistralai/Tiny-Mixtral")
    assert got["parameter_count"] == cf.numel(tensors) == parameter_count(spec_from_config(config))
    assert got["params_by_component"]["experts"] > 0 and got["params_by_component"]["router"] > 0
    requested = {path.rsplit("/", 1)[1] for method, path, _ in server.requests if method == "GET"}
    assert {"model-00001-of-00003.safetensors", "model-00003-of-00003.safetensors"} <= requested


def test_second_call_comes_from_the_cache_and_works_offline(tmp_path, home):
    files, tensors, _ = _llama2_repo(tmp_path)
    with HubServer() as server:
        server.add(LLAMA2, files)
        first = fetch(home, server, LLAMA2)
        before = len(server.requests)
        again = fetch(home, server, LLAMA2, HF_HUB_OFFLINE="1")
        assert len(server.requests) == before  # offline: not one request
    assert first["origin"] == "hub" and again["origin"] == "cache"
    assert again["config"] == first["config"] and again["commit"] == first["commit"]
    # the cache holds config.json but not the weights: offline there is no exact count
    assert again["parameter_count"] is None
    assert any("offline" in n for n in again["notes"])


def test_cached_weights_give_exact_counts_offline(tmp_path, home):
    files, tensors, _ = _llama2_repo(tmp_path)
    with HubServer() as server:
        server.add(LLAMA2, files)
        # the user downloaded the model earlier (weights and config), as transformers would
        code = "from huggingface_hub import hf_hub_download as d; d('{0}', 'model.safetensors')"
        code += "; d('{0}', 'config.json')"
        subprocess.run(
            [sys.executable, "-c", code.format(LLAMA2)],
            env=_env(home, server),
            check=True,
            capture_output=True,
        )
    got = fetch(home, None, LLAMA2, HF_HUB_OFFLINE="1")
    assert got["origin"] == "cache"
    assert got["parameter_count"] == cf.numel(tensors)
    assert got["buffers_count"] == cf.numel(tensors, buffers=True)


def test_offline_with_nothing_cached_is_one_line(home):
    got = fetch(home, None, "Qwen/Qwen2.5-0.5B-Nope", HF_HUB_OFFLINE="1")
    assert got["type"] == "HubError"
    line = got["error"]
    assert "\n" not in line
    assert "offline" in line and "not in the cache" in line and "HF_HUB_OFFLINE" in line
    assert str(home) in line  # names where it looked
    assert not home.exists() or not any(home.rglob("*.json"))


def test_revision_is_passed_through(tmp_path, home):
    files, _, config = _llama2_repo(tmp_path)
    other = dict(files, **{"config.json": json.dumps(config | {"num_hidden_layers": 1}).encode()})
    with HubServer() as server:
        server.add(LLAMA2, files)
        sha = server.add(LLAMA2, other, revision="v1")
        got = fetch(home, server, LLAMA2, "v1")
        main = fetch(home, server, LLAMA2)
        missing = fetch(home, server, LLAMA2, "v9")
    assert got["config"]["num_hidden_layers"] == 1 and got["commit"] == sha
    assert main["config"]["num_hidden_layers"] == 2 and main["commit"] != sha
    assert any("/resolve/v1/" in path for _, path, _ in server.requests)
    assert "no revision 'v9'" in missing["error"] and "--revision" in missing["error"]


def test_gated_repo_needs_a_token(tmp_path, home):
    files, tensors, _ = _llama2_repo(tmp_path)
    with HubServer() as server:
        server.add(LLAMA2, files, gated_token="hf_secret")
        refused = fetch(home, server, LLAMA2)
        allowed = fetch(home, server, LLAMA2, HF_TOKEN="hf_secret")
    assert refused["type"] == "HubError" and "\n" not in refused["error"]
    assert "gated" in refused["error"] and "HF_TOKEN" in refused["error"]
    assert allowed["parameter_count"] == cf.numel(tensors)


def test_missing_repo_and_missing_config(tmp_path, home):
    files, _, _ = _llama2_repo(tmp_path)
    del files["config.json"]
    with HubServer() as server:
        server.add("acme/weights-only", files)
        missing = fetch(home, server, "acme/does-not-exist")
        no_config = fetch(home, server, "acme/weights-only")
    assert "no model acme/does-not-exist" in missing["error"] and "\n" not in missing["error"]
    assert "has no config.json" in no_config["error"]


def test_failing_hub_is_one_line(tmp_path, home):
    files, _, _ = _llama2_repo(tmp_path)
    with HubServer() as server:
        server.add(LLAMA2, files, failing=True)
        got = fetch(home, server, LLAMA2)
    line = got["error"]
    assert got["type"] == "HubError" and "\n" not in line
    assert "(500)" in line and "try again later" in line


def test_invalid_id_is_one_line(home):
    got = fetch(home, None, "not/a/valid/id")
    assert got["type"] == "HubError" and "not a valid Hub id" in got["error"]


def test_llama2_7b_sized_repo_counts_without_downloading_weights(tmp_path, home):
    """Llama-2-7b-hf's layout at full size (13.5 GB of sparse shards served from disk):
    the published parameter count, its 32 inv_freq buffers apart, ~100 kB per shard read."""
    config = json.loads(
        (
            Path(__file__).resolve().parents[1]
            / "adapters/data/meta-llama__Llama-2-7b-hf/config.json"
        ).read_text()
    )
    entries = cf.llama_entries(config, inv_freq=True, dtype="F16")
    folder = cf.write_sparse(tmp_path / "repo", entries, config, shards=2)
    with HubServer() as server:
        server.add("meta-llama/Llama-2-7b-hf", folder_files(folder, by_path=True))
        got = fetch(home, server, "meta-llama/Llama-2-7b-hf")
        served = server.safetensors_bytes["meta-llama/Llama-2-7b-hf"]
    assert got["parameter_count"] == 6_738_415_616  # published
    assert got["parameter_count"] + got["buffers_count"] == 6_738_417_664  # the Hub's total
    stored = sum(p.stat().st_size for p in folder.glob("*.safetensors"))
    assert served <= 2 * 100_001 and stored > 13e9
    assert not any(p.stat().st_size > 1e6 for p in home.rglob("*") if p.is_file())


def _cli(home: Path, server: HubServer | None, *args: str, **env: str):
    return subprocess.run(
        [sys.executable, "-m", "introspect", "profile", *args],
        env=_env(home, server, **env),
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_cli_profile_hub_id_end_to_end(tmp_path, home):
    files, tensors, _ = _llama2_repo(tmp_path)
    with HubServer() as server:
        server.add(LLAMA2, files)
        run = _cli(home, server, LLAMA2)
    assert run.returncode == 0, run.stderr
    assert f"{cf.numel(tensors):,}" in run.stdout and "hub" in run.stdout
    assert "inv_freq" in run.stdout  # the buffers are named apart from the parameters


def test_cli_profile_offline_not_cached_exits_2_with_one_line(home):
    run = _cli(home, None, "acme/never-downloaded", HF_HUB_OFFLINE="1")
    assert run.returncode == 2
    assert len(run.stderr.strip().splitlines()) == 1 and "Traceback" not in run.stderr
    assert "not in the cache" in run.stderr and run.stdout == ""
