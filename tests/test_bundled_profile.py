"""The resolver and `introspect profile`: every bundled model gives its published exact
count through the Python API and through the CLI (by folder and by Hub id); the JSON
contract; bad input is one line on stderr and exit code 2, with nothing written."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from introspect.adapters import ResolvedModel, bundled, resolve

from introspect import simplified
from introspect.cli import main
from introspect.errors import IntrospectError
from introspect.params import COMPONENTS
from introspect.setup import TrainingSetup

BUNDLED = bundled.models()
IDS = [m.hub_id for m in BUNDLED]


def _copy_config(model, root) -> str:
    """The bundled config.json as a user's model folder ``root/<Org__Name>/``."""
    folder = root / model.folder
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(model.config(), indent=2))
    return str(folder)


def _profile_json(capsys, *argv) -> dict:
    assert main(["profile", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


# ---- the Python API -------------------------------------------------------------------


@pytest.mark.parametrize("model", BUNDLED, ids=IDS)
def test_resolve_bundled_hub_id_gives_the_published_count(model):
    resolved = resolve(model.hub_id)
    assert isinstance(resolved, ResolvedModel)
    assert (resolved.origin, resolved.location) == ("bundled", model.hub_id)
    assert resolved.spec.num_parameters == model.parameters
    assert sum(resolved.params_by_component.values()) == model.parameters


@pytest.mark.parametrize("model", BUNDLED, ids=IDS)
def test_resolve_config_folder_gives_the_published_count(model, tmp_path):
    folder = _copy_config(model, tmp_path)
    resolved = resolve(folder)
    assert (resolved.origin, resolved.location) == ("config", os.path.join(folder, "config.json"))
    assert resolved.spec.n_params == model.parameters
    assert sum(resolved.params_by_component.values()) == model.parameters


def test_bundled_lookup_by_folder_name_and_any_case():
    assert resolve("qwen/qwen2.5-0.5b").location == "Qwen/Qwen2.5-0.5B"
    assert resolve("Qwen__Qwen2.5-0.5B").location == "Qwen/Qwen2.5-0.5B"
    assert bundled.lookup("Qwen/Qwen2.5-0.5") is None


def test_a_local_path_wins_over_the_bundled_id(tmp_path, monkeypatch):
    model = bundled.lookup("Qwen/Qwen3-0.6B")
    config = model.config() | {"num_hidden_layers": 2}
    (tmp_path / "Qwen__Qwen3-0.6B").mkdir()
    (tmp_path / "Qwen__Qwen3-0.6B" / "config.json").write_text(json.dumps(config))
    monkeypatch.chdir(tmp_path)
    resolved = resolve("Qwen__Qwen3-0.6B")
    assert resolved.origin == "config" and resolved.spec.num_hidden_layers == 2


def test_config_file_path(tmp_path):
    path = tmp_path / "my-config.json"
    path.write_text(json.dumps(bundled.lookup("google/gemma-2b").config()))
    resolved = resolve(str(path))
    assert resolved.origin == "config" and resolved.spec.n_params == 2_506_172_416
    assert any("tie_word_embeddings" in a for a in resolved.spec.assumptions)


@pytest.mark.parametrize(
    "source, words",
    [
        ("", "no model given"),
        ("not-a-model", "not an existing path, a bundled model"),
        ("./missing-folder", "no such file or folder"),
        ("missing.json", "no such file or folder"),
    ],
)
def test_resolve_errors_say_what_was_tried(source, words, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(IntrospectError, match=words):
        resolve(source)


def test_folder_without_config_or_weights(tmp_path):
    with pytest.raises(IntrospectError, match="no config.json or \\*.safetensors"):
        resolve(str(tmp_path))


# ---- the CLI --------------------------------------------------------------------------


@pytest.mark.parametrize("model", BUNDLED, ids=IDS)
def test_cli_profile_folder_and_hub_id_give_the_published_count(model, tmp_path, capsys):
    by_id = _profile_json(capsys, model.hub_id)
    by_folder = _profile_json(capsys, _copy_config(model, tmp_path))
    for out in (by_id, by_folder):
        assert out["params"]["total"] == model.parameters
        assert isinstance(out["params"]["total"], int)
        assert sum(out["params"]["by_component"].values()) == model.parameters
    assert by_id["source"]["origin"] == "bundled"
    assert by_folder["source"]["origin"] == "config"
    assert by_id["params"] == by_folder["params"]


def test_json_contract(capsys):
    out = _profile_json(capsys, "Qwen/Qwen2.5-0.5B", "--batch", "2", "--seq", "512")
    assert list(out) == ["schema_version", "source", "spec", "params", "estimates", "divergences"]
    assert set(out["source"]) == {"origin", "location", "revision", "notes"}
    assert list(out["params"]) == ["total", "active_per_token", "by_component"]
    assert out["params"]["active_per_token"] == out["params"]["total"]  # dense
    assert list(out["params"]["by_component"]) == list(COMPONENTS)
    assert out["spec"]["num_parameters"] == out["params"]["total"]
    # The seed's estimate for the exact count and the setup given.
    spec = bundled.lookup("Qwen/Qwen2.5-0.5B").spec()
    expected = simplified.estimate(spec, TrainingSetup(batch_size=2, seq_len=512))
    assert out["estimates"]["simplified"] == expected.to_json()
    assert out["estimates"]["setup"]["batch_size"] == 2


def test_text_output_shows_components_summing_to_the_total(capsys):
    assert main(["profile", "mistralai/Mixtral-8x7B-v0.1", "--seq", "256"]) == 0
    text = capsys.readouterr().out
    assert "source: mistralai/Mixtral-8x7B-v0.1 (bundled)" in text
    rows = {}
    section = text.split("parameters (exact)")[1].split("\n\n")[0]
    for line in section.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[1].replace(",", "").isdigit():
            rows[parts[0]] = int(parts[1].replace(",", ""))
    total = rows.pop("total")
    assert total == 46_702_792_704 and sum(rows.values()) == total
    assert {"experts", "router"} <= set(rows)
    assert "8 per layer, 2 active" in text
    assert "total" in text.split("simplified (seed)")[1]


def test_list_shows_every_bundled_model(capsys):
    assert main(["profile", "--list"]) == 0
    text = capsys.readouterr().out
    for model in BUNDLED:
        assert model.hub_id in text and f"{model.parameters:,}" in text
    listed = _profile_json(capsys, "--list")["bundled"]
    assert [m["hub_id"] for m in listed] == IDS
    assert all(isinstance(m["parameters"], int) for m in listed)


def _bad_inputs(tmp_path) -> dict[str, str]:
    def write(name: str, content: str | bytes) -> str:
        path = tmp_path / name
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
        return str(path)

    llama = bundled.lookup("meta-llama/Llama-2-7b-hf").config()
    return {
        "unknown model_type": write("a.json", json.dumps(llama | {"model_type": "not_a_model"})),
        "missing key": write(
            "b.json", json.dumps({k: v for k, v in llama.items() if k != "vocab_size"})
        ),
        "wrong type": write("c.json", json.dumps(llama | {"hidden_size": "4096"})),
        "not JSON": write("d.json", "{ nope"),
        "not UTF-8": write("e.json", b"\xff\xfe\xfa"),
        "missing path": str(tmp_path / "nowhere" / "config.json"),
        "empty folder": str(tmp_path / "empty"),
    }


_WORDS = {
    "unknown model_type": "model_type 'not_a_model' is not supported",
    "missing key": "vocab_size is missing",
    "wrong type": "hidden_size must be an integer",
    "not JSON": "not valid JSON",
    "not UTF-8": "not UTF-8",
    "missing path": "no such file or folder",
    "empty folder": "no config.json",
}


@pytest.mark.parametrize("case", sorted(_WORDS))
def test_cli_bad_input_is_one_line_and_exit_2(case, tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    source = _bad_inputs(tmp_path)[case]
    before = sorted(p for p in tmp_path.rglob("*"))
    assert main(["profile", source, "--json"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1 and _WORDS[case] in lines[0]
    assert lines[0].startswith("introspect profile: error: ")
    assert sorted(p for p in tmp_path.rglob("*")) == before  # nothing written


def test_cli_bad_input_as_a_process_has_no_traceback(tmp_path):
    source = _bad_inputs(tmp_path)["unknown model_type"]
    proc = subprocess.run(
        [sys.executable, "-m", "introspect", "profile", source],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert "readers cover: " in proc.stderr and source in proc.stderr
