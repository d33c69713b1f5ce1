"""`introspect profile --exact`: the closed form beside a FakeTensorMode dry run of the
real class, for the same setup."""

from __future__ import annotations

import json

import pytest

from introspect.cli import main

CONFIG = {
    "model_type": "qwen2",
    "hidden_size": 64,
    "intermediate_size": 176,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 512,
    "max_position_embeddings": 1024,
    "tie_word_embeddings": True,
    "rms_norm_eps": 1e-6,
}


@pytest.fixture
def config_path(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(CONFIG))
    return path


@pytest.mark.parametrize("attention", ["eager", "sdpa"])
def test_exact_dry_run_beside_the_closed_form(capsys, config_path, attention):
    code = main(["profile", str(config_path), "--seq", "64", "--attention", attention,
                 "--exact", "--json"])  # fmt: skip
    assert code == 0
    exact = json.loads(capsys.readouterr().out)["exact"]
    assert exact["setup"]["implementation"] == "transformers"
    assert exact["peak_bytes"] > 0 and exact["peak_phase"]
    assert exact["measured_over_refined"] == pytest.approx(1.0, abs=0.03)
    assert sum(exact["categories"].values()) == exact["peak_bytes"]


def test_exact_text_and_refusals(capsys, config_path):
    assert main(["profile", str(config_path), "--seq", "64", "--exact"]) == 0
    assert "dry run / refined" in capsys.readouterr().out
    assert main(["profile", str(config_path), "--framework", "mlx", "--exact"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--exact" in err[0]
