"""``--framework mlx --finetune lora`` with nothing else set is ``mlx_lm.lora`` run with its
defaults (issue 23): rank 8, dropout 0, every nn.Linear of the top 16 blocks, batch 4,
2048 tokens, Adam, no checkpointing — each shown with its ``CONFIG_DEFAULTS`` line; a flag
given wins. The defaults are checked against the installed mlx-lm's own ``CONFIG_DEFAULTS``
and against ``linear_to_lora_layers`` run on a real tiny mlx-lm model. Real CLI runs."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

QWEN = "Qwen/Qwen2.5-0.5B"  # 24 layers


def cli(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "introspect", *argv], capture_output=True, text=True, timeout=120
    )


def setup_of(*argv: str) -> dict:
    out = cli("profile", *argv, "--json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)["config"]


def test_defaults_are_mlx_lm_lora_config_defaults_with_their_lines():
    from mlx_lm.lora import CONFIG_DEFAULTS

    got = setup_of(QWEN, "--framework", "mlx", "--finetune", "lora")
    s = got["setup"]
    lora = CONFIG_DEFAULTS["lora_parameters"]
    assert s["lora_rank"]["value"] == lora["rank"] == 8
    assert s["lora_dropout"]["value"] == lora["dropout"] == 0.0
    assert s["num_layers"]["value"] == CONFIG_DEFAULTS["num_layers"] == 16
    assert s["batch_size"]["value"] == CONFIG_DEFAULTS["batch_size"] == 4
    assert s["seq_len"]["value"] == CONFIG_DEFAULTS["max_seq_length"] == 2048
    assert s["activation_checkpointing"]["value"] is CONFIG_DEFAULTS["grad_checkpoint"] is False
    assert s["optimizer"]["value"] == CONFIG_DEFAULTS["optimizer"] == "adam"
    assert s["lora_targets"]["value"] == ["all-linear"]
    assert "mlx_lm/lora.py:77" in s["lora_rank"]["origin"]
    assert "mlx_lm/lora.py:60" in s["batch_size"]["origin"]
    assert "mlx_lm/tuner/utils.py" in s["lora_targets"]["origin"]
    assert got["model"] == {"value": QWEN, "origin": "SOURCE"}
    assert any("scale 20.0" in n and "1e-5" in n for n in got["notes"])


def test_the_cited_lines_hold_those_keys():
    """The file:line the origins cite are the installed mlx-lm's lines for those keys."""
    import mlx_lm.lora

    lines = open(mlx_lm.lora.__file__).read().splitlines()
    for number, name in [(46, "model"), (49, "optimizer"), (59, "num_layers")]:
        assert f'"{name}"' in lines[number - 1], (number, lines[number - 1])
    for number, name in [(60, "batch_size"), (63, "learning_rate"), (71, "max_seq_length")]:
        assert f'"{name}"' in lines[number - 1], (number, lines[number - 1])
    assert '"grad_checkpoint"' in lines[72] and '"lora_parameters"' in lines[76]


def test_default_keys_are_every_linear_of_a_block():
    """``linear_to_lora_layers`` with no ``keys`` on a real tiny mlx-lm Llama adapts each
    of the block's seven linears: what ``all-linear`` counts."""
    import mlx.nn as nn
    from mlx_lm.models import llama
    from mlx_lm.tuner.lora import LoRALinear
    from mlx_lm.tuner.utils import linear_to_lora_layers

    args = llama.ModelArgs(
        model_type="llama", hidden_size=64, num_hidden_layers=3, intermediate_size=96,
        num_attention_heads=4, num_key_value_heads=2, rms_norm_eps=1e-5, vocab_size=128,
    )  # fmt: skip
    model = llama.Model(args)
    model.freeze()
    linear_to_lora_layers(model, 2, {"rank": 8, "dropout": 0.0, "scale": 20.0})
    adapted = [
        (i, name)
        for i, layer in enumerate(model.layers)
        for name, m in layer.named_modules()
        if isinstance(m, LoRALinear)
    ]
    names = {n for _, n in adapted}
    assert {i for i, _ in adapted} == {1, 2}  # the top 2 of 3 blocks
    assert {n.rsplit(".", 1)[-1] for n in names} == {
        *("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
    }
    assert len(adapted) == 2 * 7
    # every nn.Linear left in an adapted block is a LoRALinear's frozen base
    left = [n for n, m in model.layers[2].named_modules() if isinstance(m, nn.Linear)]
    assert left and all(n.endswith(".linear") for n in left)


def test_a_flag_given_wins_over_the_default():
    s = setup_of(QWEN, "--framework", "mlx", "--finetune", "lora", "--lora-rank", "4",
                 "--seq", "512", "--num-layers", "8")["setup"]  # fmt: skip
    assert s["lora_rank"] == {"value": 4, "origin": "flag --lora-rank"}
    assert s["seq_len"] == {"value": 512, "origin": "flag --seq"}
    assert s["num_layers"] == {"value": 8, "origin": "flag --num-layers"}
    assert s["batch_size"]["value"] == 4


def test_torch_and_full_keep_introspect_defaults():
    for argv in (["--finetune", "lora"], ["--framework", "mlx"]):
        out = cli("profile", QWEN, *argv, "--json")
        assert out.returncode == 0, out.stderr
        assert "config" not in json.loads(out.stdout)


def test_default_16_above_a_shallower_model_is_a_note(tmp_path):
    """mlx_lm.lora refuses num_layers 16 on a model with fewer layers (lora.py:234): the
    default is priced on every block with a note saying so; the flag is refused."""
    config = {
        "model_type": "llama", "hidden_size": 128, "num_hidden_layers": 4,
        "intermediate_size": 256, "num_attention_heads": 4, "num_key_value_heads": 2,
        "vocab_size": 1000, "rms_norm_eps": 1e-5, "tie_word_embeddings": True,
    }  # fmt: skip
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    got = setup_of(str(path), "--framework", "mlx", "--finetune", "lora")
    assert any("above" in n and "lora.py:234" in n for n in got["notes"]), got["notes"]
    out = cli("profile", str(path), "--framework", "mlx", "--finetune", "lora",
              "--num-layers", "9")  # fmt: skip
    assert out.returncode == 2 and out.stdout == ""
    line = out.stderr.strip()
    assert "\n" not in line and "--num-layers 9" in line and "Traceback" not in line


@pytest.mark.parametrize(
    "flag", [["--optimizer", "adam8bit"], ["--offload", "optimizer"], ["--adapter-dtype", "bf16"]]
)
def test_torch_only_flag_under_mlx_lora_is_one_line(flag):
    out = cli("profile", QWEN, "--framework", "mlx", "--finetune", "lora", *flag)
    assert out.returncode == 2 and out.stdout == "", out.stdout[-300:]
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and flag[0] in lines[0] and "Traceback" not in out.stderr
