"""Config keys are read through transformers' own aliases (each configuration class's
``attribute_map``), so a config.json written by any transformers version reads the same —
with transformers installed and without it (the bundled table,
``adapters/data/transformers_table.json``, written by ``benchmarks/transformers_table.py``).

The case that made it matter: transformers 5's ``Qwen3MoeConfig`` stores ``num_experts``
under ``num_local_experts`` (``attribute_map = {"num_experts": "num_local_experts"}``), so a
config it saves names no ``num_experts``; the reader fell back to 128 experts."""

from __future__ import annotations

import json

import pytest
from introspect.adapters import hf_table
from introspect.adapters.hf_config import spec_from_config

from introspect.cli import main


def test_aliases_go_both_ways():
    """GPT-2's ``hidden_size`` is stored as ``n_embd`` (GPT2Config.attribute_map) and
    ``n_embd`` is read as ``hidden_size``; a key no map names has no alias."""
    assert hf_table.aliases("gpt2", "hidden_size") == ("n_embd",)
    assert hf_table.aliases("gpt2", "n_embd") == ("hidden_size",)
    assert hf_table.aliases("qwen3_moe", "num_experts") == ("num_local_experts",)
    assert hf_table.aliases("qwen3_moe", "num_local_experts") == ("num_experts",)
    assert hf_table.aliases("llama", "hidden_size") == ()
    assert hf_table.aliases("no_such_type", "hidden_size") == ()
    assert hf_table.with_aliases("qwen3_moe", ("num_experts", "hidden_size")) == (
        "num_experts",
        "num_local_experts",
        "hidden_size",
    )


def test_the_bundled_table_is_transformers_attribute_maps():
    """The table equals every configuration class's ``attribute_map`` of the installed
    transformers (regenerate with ``benchmarks/transformers_table.py`` when it moves)."""
    pytest.importorskip("transformers")
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING, CONFIG_MAPPING_NAMES

    maps = {}
    for model_type in CONFIG_MAPPING_NAMES:
        try:
            cls = CONFIG_MAPPING[model_type]
        except Exception:  # an optional dependency missing here
            continue
        if getattr(cls, "attribute_map", None):
            maps[model_type] = dict(cls.attribute_map)
    assert maps == hf_table.table()["attribute_map"]


def _qwen3_moe_saved(tmp_path, experts: int = 8) -> tuple[dict, str]:
    """A qwen3_moe config.json as transformers 5 itself saves it."""
    transformers = pytest.importorskip("transformers")
    config = transformers.Qwen3MoeConfig(
        hidden_size=256,
        intermediate_size=640,
        moe_intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=8,
        num_key_value_heads=2,
        head_dim=32,
        vocab_size=1000,
        num_experts=experts,
        num_experts_per_tok=2,
    )
    config.save_pretrained(tmp_path)
    path = tmp_path / "config.json"
    return json.loads(path.read_text()), str(path)


@pytest.mark.parametrize("use_transformers", [True, False])
def test_a_qwen3_moe_config_saved_by_transformers_5_reads_its_experts(tmp_path, use_transformers):
    """Saved by Qwen3MoeConfig.save_pretrained the count is under ``num_local_experts``:
    read as 8 experts (not the class default 128), with or without transformers, and the
    same spec as the old spelling ``num_experts``."""
    raw, path = _qwen3_moe_saved(tmp_path)
    assert "num_experts" not in raw and raw["num_local_experts"] == 8  # what was saved
    spec = spec_from_config(raw, path=path, use_transformers=use_transformers)
    experts = {k.feed_forward.num_experts for k, _ in spec.kinds}
    assert experts == {8}
    assert not any("num_experts absent" in a for a in spec.assumptions)
    old = {("num_experts" if k == "num_local_experts" else k): v for k, v in raw.items()}
    same = spec_from_config(old, path=path, use_transformers=use_transformers)
    assert same.n_params == spec.n_params
    assert same.kinds == spec.kinds


def test_a_qwen3_moe_config_saved_by_transformers_5_counts_what_it_builds(tmp_path, capsys):
    """The spec's parameter count equals the class transformers builds from the saved
    config (on meta), and profile prices the same peak under either spelling."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    raw, path = _qwen3_moe_saved(tmp_path)
    spec = spec_from_config(raw, path=path)
    config = transformers.AutoConfig.from_pretrained(tmp_path)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config)
    assert spec.n_params == sum(p.numel() for p in model.parameters())

    old_dir = tmp_path / "old"
    old_dir.mkdir()
    old = {("num_experts" if k == "num_local_experts" else k): v for k, v in raw.items()}
    (old_dir / "config.json").write_text(json.dumps(old))
    totals = []
    for source in (path, str(old_dir / "config.json")):
        capsys.readouterr()
        assert main(["profile", source, "--seq", "256", "--json"]) == 0
        totals.append(json.loads(capsys.readouterr().out)["estimates"]["refined"]["total_bytes"])
    assert totals[0] == totals[1]
