"""benchmarks/every_type.py's shrink helper: the small faithful shape keeps each type's
layer pattern (one whole period of ``layer_types``) and builds a real class whose count
introspect reads exactly."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

from every_type import _period, earlier_runs, shrink  # noqa: E402

pytest.importorskip("transformers")


@pytest.mark.parametrize("model_type", ["gemma3_text", "qwen3_next", "gpt_oss", "cohere2"])
def test_shrink_keeps_the_layer_pattern(model_type):
    from transformers import AutoConfig

    raw = AutoConfig.for_model(model_type).to_dict()
    small = shrink(raw)
    kinds = small["layer_types"]
    assert len(kinds) == small["num_hidden_layers"] < raw["num_hidden_layers"]
    assert kinds == raw["layer_types"][: len(kinds)]
    assert set(kinds) == set(raw["layer_types"])
    assert len(kinds) >= _period(raw["layer_types"])
    assert small["hidden_size"] == 64 and small["vocab_size"] == 512


def test_shrink_keeps_every_kind_of_a_dense_prefix():
    raw = {
        "num_hidden_layers": 48,
        "hidden_size": 1024,
        "mlp_layer_types": ["dense"] + ["sparse"] * 47,
        "layer_types": ["full_attention"] * 48,
        "n_group": 8,
        "topk_group": 4,
        "num_experts": 64,
    }
    small = shrink(raw)
    assert small["num_hidden_layers"] == 4
    assert small["mlp_layer_types"] == ["dense", "sparse", "sparse", "sparse"]
    assert len(small["layer_types"]) == 4
    assert small["num_experts"] == 4 and small["n_group"] == 1 == small["topk_group"]
    assert shrink(raw, widths=False)["hidden_size"] == 1024


def test_shrunk_config_builds_and_counts_exactly():
    import torch
    from introspect.adapters.hf_config import spec_from_config
    from transformers import AutoConfig, AutoModelForCausalLM

    small = shrink({**AutoConfig.for_model("gemma3_text").to_dict(), "model_type": "gemma3_text"})
    config = AutoConfig.for_model(
        "gemma3_text", **{k: v for k, v in small.items() if k != "model_type"}
    )
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    built = sum(p.numel() for p in model.parameters())
    assert spec_from_config(small, source="gemma3_text").n_params == built


#: Types whose default config the shrink once cut into one their class refuses, and the
#: constraint now kept (``widths=False``: the fallback the benchmark takes for them).
SHRUNK = [
    ("ernie4_5_moe", True),  # top-k under its own key (moe_k): k above the cut experts
    ("kimi_linear", True),  # expert groups under num_expert_group
    ("marian", True),  # the decoder's own vocabulary, layers and heads
    ("dory", True),  # (attention, mlp) pairs; input + recurrent + output = layers
    ("gpt_neo", True),  # attention_types expands to num_layers entries
    ("laguna", True),  # num_attention_heads_per_layer: one per kept layer, scaled
    ("llama4_text", True),  # no_rope_layers, moe_layers; chunks within the positions
    ("gemma3n_text", True),  # per-layer widths; cache-sharing layers of every kind
    ("gemma4_text", True),  # per_layer_config keyed by kept layers
    ("dots3_note_text", False),  # per_layer_config of the sliding layers
    ("zamba", False),  # two hybrid layers to tie the shared block between
]


@pytest.mark.parametrize(("model_type", "widths"), SHRUNK)
def test_shrunk_config_is_one_the_class_builds(model_type, widths):
    import torch
    from introspect.adapters.hf_config import spec_from_config
    from transformers import AutoConfig, AutoModelForCausalLM

    raw = {**AutoConfig.for_model(model_type).to_dict(), "model_type": model_type}
    small = shrink(raw, widths=widths)
    layers = next(
        small[k] for k in ("num_hidden_layers", "num_layers", "decoder_layers") if k in small
    )
    assert layers < next(
        raw[k] for k in ("num_hidden_layers", "num_layers", "decoder_layers") if k in raw
    )
    config = AutoConfig.for_model(
        model_type, **{k: v for k, v in small.items() if k != "model_type"}
    )
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    built = sum(p.numel() for p in model.parameters())
    assert spec_from_config(small, source=model_type).n_params == built


def test_shrink_reads_the_configs_own_names_for_experts_and_groups():
    from transformers import AutoConfig

    ernie = shrink({**AutoConfig.for_model("ernie4_5_moe").to_dict(), "model_type": "ernie4_5_moe"})
    assert ernie["moe_num_experts"] == 4 and ernie["moe_k"] == 2
    kimi = shrink({**AutoConfig.for_model("kimi_linear").to_dict(), "model_type": "kimi_linear"})
    assert kimi["num_experts"] == 4 and kimi["num_experts_per_token"] == 2
    assert kimi["num_expert_group"] == 1 == kimi["topk_group"]


def test_shrink_cuts_per_layer_entries_with_the_layers():
    raw = {
        "num_hidden_layers": 12,
        "hidden_size": 1024,
        "num_attention_heads": 16,
        "layer_types": ["sliding_attention"] * 5 + ["full_attention"] + ["sliding_attention"] * 6,
        "no_rope_layers": [1, 1, 1, 0] * 3,
        "num_attention_heads_per_layer": [16] * 12,
        "per_layer_config": {"05": {"head_dim": 512}, "11": {"head_dim": 512}},
        "head_dim": 256,
    }
    small = shrink(raw)
    assert small["num_hidden_layers"] == 6
    assert small["no_rope_layers"] == [1, 1, 1, 0, 1, 1]
    assert small["num_attention_heads_per_layer"] == [4] * 6
    assert small["per_layer_config"] == {"05": {"head_dim": 32}}  # as head_dim 256 -> 16


def _dry_run(model_type: str, widths: bool = True) -> int:
    from introspect.adapters.hf_config import spec_from_config
    from transformers import AutoConfig

    from introspect.measure import runner
    from introspect.setup import TrainingSetup

    raw = {**AutoConfig.for_model(model_type).to_dict(), "model_type": model_type}
    small = shrink(raw, widths=widths)
    spec = spec_from_config(small, source=model_type)
    setup = TrainingSetup(
        batch_size=1, seq_len=16, device="cpu", implementation="transformers",
        optimizer="adamw", precision="fp32", attention="eager",
    )  # fmt: skip
    m, _ = runner.measure(
        spec, setup, device="fake", impl="transformers", census=False, config=(small, model_type)
    )
    return m.peak_bytes


@pytest.mark.parametrize(
    "model_type",
    [
        "modernbert-decoder",  # trunc_normal_ init: rejection sampling reads values
        "hy_v4",  # a block cast .to(float32) inside __init__: fake parameters swapped
        "ernie4_5_moe",  # top-k within the cut expert count
    ],
)
def test_dry_run_of_the_real_class_builds_and_steps(model_type):
    assert _dry_run(model_type) > 0


def test_fake_trunc_normal_keeps_the_parameter_and_real_init_is_untouched():
    import torch
    from torch._subclasses.fake_tensor import FakeTensor

    from introspect.measure.fake import class_init, fake_mode

    with fake_mode(), class_init():
        w = torch.nn.init.trunc_normal_(torch.empty(8, 4), std=0.02)
        assert isinstance(w, FakeTensor) and w.shape == (8, 4)
    real = torch.nn.init.trunc_normal_(torch.empty(64), a=-0.01, b=0.01)
    assert real.abs().max() <= 0.01


def test_summary_counts_refusals_and_the_class_failures_apart():
    from every_type import summary

    done = {"dry_run": 1, "answer": "dry_run"}
    rows = [
        {"setups": {"fp32 eager": done, "amp ckpt": {}, "bf16 sdpa": done}},
        {
            "setups": {
                "fp32 eager": {"class_fails": "E"},
                "amp ckpt": {"refused": "x"},
                "bf16 sdpa": done,
            }
        },
    ]
    fp32, amp = summary(rows)[1:3]
    assert "answered by the dry run 1; class refuses this setup 0; class fails at its " in fp32
    assert fp32.endswith("default config 1; no dry run can answer 0; dry-run failures 0")
    assert amp.endswith(
        "refuses this setup 1; class fails at its default config 0; no dry run can answer 0; "
        "dry-run failures 1"
    )


def test_a_vision_language_wrapper_is_counted_against_the_wrapper():
    """Qwen3.5's causal-LM class drops the tower; introspect reads a config with a
    vision_config as the image-text wrapper, so the reference builds that class too."""
    from every_type import count_row

    row = count_row("qwen3_5")
    assert row.get("wrapper") is True
    assert row["introspect"] == row["built"]


def test_jetmoe_dry_run_answers_its_router_counts_as_a_real_step_holds_them():
    """JetMoE's router reads its per-expert counts with .tolist(); the dry run answers
    them evenly (introspect.measure.fake.even_expert_counts) and lands on a real CPU
    step's peak to within a chunk's transients."""
    from introspect.adapters.hf_config import spec_from_config
    from transformers import AutoConfig

    from introspect.measure import runner
    from introspect.setup import TrainingSetup

    raw = {**AutoConfig.for_model("jetmoe").to_dict(), "model_type": "jetmoe"}
    small = shrink(raw)
    spec = spec_from_config(small, source="jetmoe")
    setup = TrainingSetup(
        batch_size=1, seq_len=32, device="cpu", implementation="transformers",
        optimizer="adamw", precision="fp32", attention="eager",
    )  # fmt: skip
    peaks = {}
    for device in ("fake", "cpu"):
        m, _ = runner.measure(
            spec, setup, device=device, impl="transformers", census=False,
            config=(small, "jetmoe"),
        )  # fmt: skip
        peaks[device] = m.peak_bytes
    assert abs(peaks["fake"] - peaks["cpu"]) <= 1e-3 * peaks["cpu"]
    import torch
    from torch._subclasses.fake_tensor import FakeTensor

    assert "tolist" in FakeTensor.__dict__ and torch.Tensor.tolist is not FakeTensor.tolist


def test_reclassify_marks_the_classs_own_refusal_and_keeps_other_failures():
    from every_type import reclassify

    rows = [
        {
            "model_type": "mamba",  # MambaForCausalLM: _supports_sdpa False
            "setups": {"bf16 sdpa": {"note": "dry run failed"}, "fp32 eager": {"note": "x"}},
        }
    ]
    assert reclassify(rows) == 1
    assert "no SDPA path" in rows[0]["setups"]["bf16 sdpa"]["refused"]
    assert rows[0]["setups"]["fp32 eager"] == {"note": "x"}


def test_the_header_folds_every_rerun_into_one_count():
    """A results header keeps the first run as it ran and folds each rerun into one
    count and its seconds, so reruns do not grow it without end."""
    first = "`every_type.py` (900 s), then `every_type.py --redo a,b` (20 s)"
    once = earlier_runs(first)
    assert once == (
        "every_type.py` (900 s), then 1 rerun of some rows "
        "(`--redo`, `--recount`; 20 s in all), then `"
    )
    again = earlier_runs("`" + once + "every_type.py --redo c` (5 s)")
    assert "then 2 reruns of some rows (`--redo`, `--recount`; 25 s in all), then `" in again
    assert earlier_runs("`every_type.py` (900 s)") == "every_type.py` (900 s), then `"
    assert earlier_runs("no run recorded") == ""
