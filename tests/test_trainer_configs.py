"""``--config FILE``: trainers' configs read by content (introspect/adapters/trainers/).

Real inputs: ``TrainingArguments(...).to_dict()`` from the installed transformers, and the
trainers' own example files under ``examples/`` (fetched from their repositories). Each
test states what the trainer's source does and checks the resolved setup against it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from introspect.adapters import trainers
from introspect.adapters.trainers import _keys

from introspect.cli import main

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
BUNDLED = "Qwen/Qwen2.5-0.5B"


def _profile_json(capsys, *argv: str) -> dict:
    assert main(["profile", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.fixture(scope="module")
def training_args_dict() -> dict:
    """What the installed transformers' TrainingArguments writes (to_dict)."""
    from transformers import TrainingArguments

    args = TrainingArguments(
        output_dir="out",
        per_device_train_batch_size=3,
        gradient_checkpointing=True,
        optim="adamw_torch",
        use_cpu=True,
        report_to=[],
    )
    return json.loads(json.dumps(args.to_dict(), default=str))


def test_every_key_transformers_writes_is_known(training_args_dict):
    """A transformers that adds a field fails here, not on a user's file."""
    unknown = set(training_args_dict) - _keys.HF_TRAINING_ARGUMENTS
    assert not unknown


def test_training_args_json_and_yaml_read_the_same(tmp_path, training_args_dict):
    """By content, not by name: the same keys as JSON (named .cfg) and YAML (named .json)."""
    import yaml

    as_json = tmp_path / "a.cfg"
    as_json.write_text(json.dumps(training_args_dict))
    as_yaml = tmp_path / "b.json"
    as_yaml.write_text(yaml.safe_dump(training_args_dict))
    a, b = trainers.read([str(as_json)]), trainers.read([str(as_yaml)])
    assert a.trainer == b.trainer == "transformers TrainingArguments"
    values = {k: v.value for k, v in a.fields.items()}
    assert values == {k: v.value for k, v in b.fields.items()}
    assert values["batch_size"] == 3
    assert values["activation_checkpointing"] is True
    assert (values["optimizer"], values["optimizer_impl"]) == ("adamw", "auto")
    assert values["device"] == "cpu"
    assert "per_device_train_batch_size" in a.fields["batch_size"].origin


def test_trainer_default_optimizer_is_fused_adamw(tmp_path):
    """training_args.py:806-813: adamw_torch_fused on torch >= 2.8 (the venv's torch)."""
    import torch
    from transformers import TrainingArguments

    path = tmp_path / "t.json"
    path.write_text(json.dumps({"output_dir": "o"}))
    got = trainers.read([str(path)]).fields
    assert (got["optimizer"].value, got["optimizer_impl"].value) == ("adamw", "fused")
    assert "training_args.py:806" in got["optimizer"].origin
    if tuple(int(x) for x in torch.__version__.split(".")[:2]) >= (2, 8):
        assert TrainingArguments(output_dir="o").optim.value == "adamw_torch_fused"


def test_trl_defaults(tmp_path):
    """TRL's SFTConfig: checkpointing on, max_length 1024, bf16 = not fp16, its fused head."""
    path = tmp_path / "sft.yaml"
    path.write_text("output_dir: o\npacking: true\ndataset_text_field: text\n")
    r = trainers.read([str(path)])
    values = {k: v.value for k, v in r.fields.items()}
    assert r.trainer == "TRL SFTConfig"
    assert values["activation_checkpointing"] is True
    # packing (bfd) is padding-free: the batch of 8 bins of max_length 1024 is one row
    assert (values["batch_size"], values["seq_len"]) == (1, 8 * 1024)
    assert "sft_trainer.py:189" in r.fields["batch_size"].origin
    assert values["precision"] == "amp"
    assert values["cross_entropy"] == "trl"
    assert any("packing: true" in n and "mask" in n for n in r.notes)  # the mask: named


def test_trl_before_0_16_names_the_length_max_seq_length(tmp_path):
    path = tmp_path / "sft.json"
    path.write_text(json.dumps({"output_dir": "o", "max_seq_length": 512, "packing": False}))
    r = trainers.read([str(path)])
    assert r.trainer == "TRL SFTConfig"
    assert r.fields["seq_len"].value == 512
    assert r.fields["seq_len"].origin.endswith("max_seq_length")


def test_dpo_reads_the_trainer_and_its_reference(tmp_path):
    """DPOConfig: DPOTrainer (its fused head, pairs of rows), and precompute_ref_log_probs
    as the reference (dpo_trainer.py:909: no reference model kept)."""
    path = tmp_path / "dpo.yaml"
    path.write_text("output_dir: o\nbeta: 0.1\nprecompute_ref_log_probs: true\n")
    r = trainers.read([str(path)])
    assert r.trainer == "TRL DPOConfig"
    values = {k: v.value for k, v in r.fields.items()}
    assert values["trainer"] == "dpo" and values["cross_entropy"] == "trl"
    assert values["dpo_reference"] == "precomputed"
    assert r.fields["dpo_reference"].origin.endswith("precompute_ref_log_probs")
    path.write_text("output_dir: o\nbeta: 0.1\n")
    r = trainers.read([str(path)])
    assert r.fields["dpo_reference"].value == "model"
    assert "dpo_config.py:227" in r.fields["dpo_reference"].origin


def test_flags_override_the_file(capsys):
    cfg = str(EXAMPLES / "trl" / "example_config.yaml")
    out = _profile_json(capsys, "--config", cfg, "--seq", "256", "--batch", "2")
    setup = out["config"]["setup"]
    assert setup["seq_len"] == {"value": 256, "origin": "flag --seq"}
    assert setup["batch_size"]["origin"] == "flag --batch"
    assert setup["activation_checkpointing"]["value"] is True  # TRL's default, kept
    plain = _profile_json(capsys, BUNDLED, "--seq", "256", "--batch", "2")
    assert plain["estimates"] != out["estimates"]  # the file's checkpointing is priced


def test_a_flag_typed_at_its_default_still_overrides_the_file(capsys):
    """--seq 2048 is introspect's default and TRL's config gives 1024: typed, it wins."""
    cfg = str(EXAMPLES / "trl" / "example_config.yaml")
    file_only = _profile_json(capsys, "--config", cfg)["config"]["setup"]
    assert file_only["seq_len"]["value"] != 2048
    out = _profile_json(capsys, "--config", cfg, "--seq", "2048")
    assert out["config"]["setup"]["seq_len"] == {"value": 2048, "origin": "flag --seq"}


def test_deepspeed_auto_resolved_from_the_trainer(tmp_path, capsys):
    """integrations/deepspeed.py: auto micro-batch ← per_device_train_batch_size, bf16
    ← bf16; train_batch_size gives the world size."""
    ta = tmp_path / "ta.json"
    ta.write_text(json.dumps({"output_dir": "o", "per_device_train_batch_size": 2, "bf16": True}))
    ds = tmp_path / "ds.json"
    ds.write_text(
        json.dumps(
            {
                "train_batch_size": 8,
                "train_micro_batch_size_per_gpu": "auto",
                "bf16": {"enabled": "auto"},
                "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}},
            }
        )
    )
    setup = _profile_json(capsys, BUNDLED, "--config", str(ta), str(ds))["config"]["setup"]
    assert setup["batch_size"]["value"] == 2 and '"auto"' in setup["batch_size"]["origin"]
    assert setup["devices"]["value"] == 4
    assert (setup["sharding"]["value"], setup["zero_stage"]["value"]) == ("zero", 2)
    assert setup["precision"]["value"] == "mixed"
    assert setup["offload"]["value"] == "optimizer"


@pytest.mark.parametrize(
    "files, source, expect",
    [
        (["axolotl/lora-1b.yml"], "meta-llama/Llama-3.2-1B",
         {"finetune": "lora", "lora_rank": 16, "batch_size": 2, "seq_len": 2048,
          "optimizer": "adam8bit", "activation_checkpointing": True}),
        (["llama-factory/qwen3_lora_sft.yaml"], "Qwen/Qwen3-0.6B",
         {"finetune": "lora", "lora_rank": 8, "lora_targets": ["all-linear"],
          "activation_checkpointing": True, "seq_len": 2048, "batch_size": 1}),
        (["llama-factory/qwen3_full_sft.yaml", "llama-factory/ds_z3_config.json"],
         "Qwen/Qwen3-0.6B", {"zero_stage": 3, "precision": "mixed", "devices": 8}),
        (["torchtune/1B_lora_single_device.yaml"], None,
         {"finetune": "lora", "lora_rank": 64, "precision": "bf16", "batch_size": 4}),
        (["mlx-lm/lora_config.yaml"], "meta-llama/Llama-3.2-1B",
         {"framework": "mlx", "lora_rank": 8, "lora_targets": ["q_proj", "v_proj"]}),
        (["llama-factory/qwen3_lora_sft.yaml", "llama-factory/fsdp2_config.yaml"],
         "Qwen/Qwen3-0.6B", {"sharding": "fsdp", "devices": 2, "precision": "mixed"}),
        (["trl/example_config.yaml", "trl/deepspeed_zero3.yaml"], None,
         {"devices": 8, "zero_stage": 3, "cross_entropy": "trl", "seq_len": 1024}),
    ],
)  # fmt: skip
def test_examples_resolve(capsys, files, source, expect):
    """Every example of the README answers, with the values its file states."""
    argv = [source] if source else []
    argv += ["--config", *(str(EXAMPLES / f) for f in files)]
    if "zero_stage" in expect and "ds_z3_config.json" in files[-1]:
        argv += ["--devices", "8"]
    setup = _profile_json(capsys, *argv)["config"]["setup"]
    for field, value in expect.items():
        assert setup[field]["value"] == value, field


def test_torchtune_builder_names_a_hub_id():
    from introspect.adapters.trainers.torchtune import hub_id

    assert hub_id("torchtune.models.llama3_2.lora_llama3_2_1b") == (
        "meta-llama/Llama-3.2-1B",
        False,
    )
    assert hub_id("torchtune.models.qwen2_5.qlora_qwen2_5_0_5b_instruct") == (
        "Qwen/Qwen2.5-0.5B",
        True,
    )
    assert hub_id("torchtune.models.llama3_1.llama3_1_8b") == ("meta-llama/Llama-3.1-8B", False)
    assert hub_id("torchtune.models.nonesuch.nonesuch_1b") is None


def test_config_reading_imports_no_torch():
    """Closed-form start: reading a YAML config brings PyYAML, never torch/transformers."""
    code = (
        "import sys; from introspect.cli import main; "
        f"main(['profile', '--config', {str(EXAMPLES / 'trl' / 'example_config.yaml')!r}]); "
        "print('LOADED', [m for m in ('torch', 'transformers') if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert "LOADED []" in out.stdout, out.stderr[-500:]


EXAMPLE_FILES = sorted(
    p for p in EXAMPLES.rglob("*") if p.suffix in (".yml", ".yaml", ".json") and p.is_file()
)


@pytest.mark.parametrize("path", EXAMPLE_FILES, ids=lambda p: str(p.relative_to(EXAMPLES)))
def test_a_wrong_value_anywhere_is_one_line_not_a_traceback(tmp_path, path):
    """Every key of every example (and one level down), given a value of the wrong kind:
    the reader answers or refuses with the tool's own error, never another exception."""
    import yaml

    from introspect.errors import IntrospectError

    data = yaml.safe_load(path.read_text())
    trainer = EXAMPLES / "llama-factory" / "qwen3_full_sft.yaml"
    spots = [(k,) for k in data] + [
        (k, j) for k, v in data.items() if isinstance(v, dict) for j in v
    ]
    for spot in spots:
        for wrong in ("x", -1, [1], {"a": 1}, None):
            changed = json.loads(json.dumps(data))
            where = changed
            for key in spot[:-1]:
                where = where[key]
            where[spot[-1]] = wrong
            target = tmp_path / "c.json"
            target.write_text(json.dumps(changed))
            files = [str(target)] + ([str(trainer)] if "ds_z3" in path.name else [])
            try:
                trainers.read(files)
            except (IntrospectError, ValueError) as err:
                assert "\n" not in str(err), (spot, wrong)


def test_a_refusal_of_a_value_the_config_set_names_its_key(capsys):
    """The flag named in the refusal was set by the file: the line says which key."""
    cfg = str(EXAMPLES / "torchtune" / "1B_lora_single_device.yaml")
    assert main(["profile", "--config", cfg, "--framework", "mlx"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert err.startswith("introspect profile: error: --optimizer-impl fused")
    assert err.endswith("optimizer.fused)")
