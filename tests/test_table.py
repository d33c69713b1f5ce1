"""`introspect table`: the seed's real-world table for the bundled models, offline, in
every format; the seed's 7B example; Qwen's reported Qwen-7B beside the estimates."""

from __future__ import annotations

import csv
import io
import json

import pytest

from introspect import refined, simplified
from introspect.cli import main
from introspect.reported import QWEN_7B
from introspect.units import GB


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def run_json(capsys, *argv):
    assert main(["table", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_default_table_json_for_the_bundled_models(capsys):
    out = run_json(capsys)
    sources = [r["source"] for r in out["rows"]]
    assert "Qwen/Qwen2.5-0.5B" in sources and "meta-llama/Llama-3.1-8B" in sources
    assert not any(s.startswith("mistralai/") or s == "google/gemma-2b" for s in sources)
    assert out["setup"]["batch_size"] == 1 and out["setup"]["seq_len"] == 2048
    assert out["setup"]["activation_bytes"] == 2
    qwen = next(r for r in out["rows"] if r["source"] == "Qwen/Qwen2.5-0.5B")
    assert qwen["params"]["total"] == 494_032_768
    assert sum(qwen["params"]["by_component"].values()) == 494_032_768
    flags = {f["name"]: f for f in qwen["flags"]}
    assert {"rmsnorm", "gqa", "gated_ffn", "tied_embeddings"} <= set(flags)
    assert flags["gqa"]["short"] == "GQA 7"
    assert qwen["state_16n_bytes"] == 16 * 494_032_768
    for r in out["rows"]:
        assert (
            r["simplified"]["total_bytes"]
            == r["state_16n_bytes"] + r["simplified"]["activations_bytes"]
        )
        assert r["refined"]["peak_phase"] in refined.PHASES
    note = next(n for n in out["notes"] if "Qwen2.5-0.5B" in n)
    assert "7.84 GB" in note and "7.90 GB" in note and "494,032,768" in note


def test_todays_models_have_rows_naming_moe_sliding_windows_sinks_and_mla(capsys):
    out = run_json(capsys)
    rows = {r["source"]: r for r in out["rows"]}
    names = {s: {f["name"] for f in r["flags"]} for s, r in rows.items()}
    assert {"moe", "sliding_window", "sinks"} <= names["openai/gpt-oss-20b"]
    assert "moe" in names["Qwen/Qwen3-30B-A3B"]
    assert "sliding_window" not in names["Qwen/Qwen3-30B-A3B"]  # use_sliding_window false
    assert {"moe", "chunked_attention"} <= names["meta-llama/Llama-4-Scout-17B-16E"]
    assert {"moe", "mla", "unbuilt"} <= names["deepseek-ai/DeepSeek-V3"]
    assert {"sliding_window", "tower"} <= names["google/gemma-3-4b-pt"]
    oss = {f["name"]: f for f in rows["openai/gpt-oss-20b"]["flags"]}
    assert oss["sliding_window"]["short"] == "SWA 128 (12/24)"
    assert "4,187,440,704 of 20,914,757,184" in oss["moe"]["detail"]
    assert rows["Qwen/Qwen3-30B-A3B"]["params"]["total"] == 30_532_122_624


def test_text_markdown_and_csv(capsys):
    assert main(["table", "Qwen/Qwen2.5-0.5B", "meta-llama/Llama-2-7b-hf"]) == 0
    text = capsys.readouterr().out
    assert "GQA 7" in text and "7.90" in text and "the seed's 7.84 GB" in text
    assert main(["table", "Qwen/Qwen2.5-0.5B", "--markdown"]) == 0
    md = capsys.readouterr().out
    assert "| model" in md and "|---" in md.replace(" ", "").replace(":", "")
    assert main(["table", "Qwen/Qwen2.5-0.5B", "--csv"]) == 0
    rows = list(csv.reader(io.StringIO(capsys.readouterr().out)))
    assert rows[0][0] == "model" and rows[1][1] == "494032768"


def test_flags_change_the_setup(capsys):
    base = run_json(capsys, "Qwen/Qwen2.5-0.5B")["rows"][0]
    flash = run_json(
        capsys, "Qwen/Qwen2.5-0.5B", "--attention", "memory-efficient", "--seq", "4096"
    )
    row = flash["rows"][0]
    assert flash["setup"]["seq_len"] == 4096
    assert row["simplified"]["activations_bytes"] > base["simplified"]["activations_bytes"]
    assert row["refined"]["execution_total_bytes"] < row["simplified"]["total_bytes"]


def test_seed_example_architecture_equals_seed(capsys):
    out = run_json(capsys, "--seed-example", "--framework", "torch", "--device", "cpu")
    assert out["architecture_equals_simplified"] is True
    seed = out["estimates"]["simplified"]["total_bytes"]
    ref = out["estimates"]["refined"]
    assert ref["architecture_total_bytes"] == seed
    assert ref["execution_total_bytes"] < seed
    assert all(r["kind"] == "execution" and r["cause"] for r in out["divergences"]["rows"])
    assert main(["table", "--seed-example"]) == 0
    text = capsys.readouterr().out
    assert "equals the seed term by term" in text and "138.77 GB" in text


def resolve_spec(source):
    from introspect.adapters import resolve

    return resolve(source).spec


def test_reported_qwen_7b(capsys):
    out = run_json(capsys, "--reported", "qwen-7b")
    assert [r["seq_len"] for r in out["runs"]] == [256, 512, 1024]
    assert [r["reported_bytes"] for r in out["runs"]] == [139.2e9, 148.0e9, 162.0e9]
    assert out["params"]["total"] == 7_721_324_544
    assert "summed" in out["caveats"][0]
    for r in out["runs"]:
        setup = QWEN_7B.setup(r["seq_len"])
        assert setup.zero_stage == 3 and setup.devices == 2
        ratios = r["ratios"]
        assert (
            ratios["reported_over_seed_summed"] == r["reported_bytes"] / r["seed"]["summed_bytes"]
        )
        assert r["refined"]["summed_bytes"] == 2 * r["refined"]["per_device_bytes"]
        # DeepSpeed's Adam is its FusedAdam (in place, introspect/refined/deepspeed.py), so
        # the default already is the fused figure; torch's foreach Adam would add a copy of
        # each GPU's shard (4·N/2 bytes) to the optimizer step.
        fused = r["refined_fused_adam"]["per_device_bytes"]
        assert fused == r["refined"]["per_device_bytes"]
        spec7 = resolve_spec("Qwen/Qwen-7B")
        step = refined.estimate(spec7, setup).phases["optimizer_step"]
        step_foreach = refined.estimate(spec7, setup.replace(optimizer_impl="foreach")).phases
        assert step_foreach["optimizer_step"] >= step + 4 * 7_721_324_544 // 2 - 1
        assert ratios["reported_over_refined_per_device"] == pytest.approx(
            r["reported_bytes"] / r["refined"]["per_device_bytes"]
        )
    # The seed's summed figure: 16N plus one B=1 activation set per GPU.
    from introspect.adapters import resolve

    spec = resolve("Qwen/Qwen-7B").spec
    seed = simplified.estimate(spec, QWEN_7B.setup(256))
    assert out["runs"][0]["seed"]["summed_bytes"] == 16 * spec.n_params + 2 * seed.sum(
        "activations"
    )
    assert main(["table", "--reported", "qwen-7b"]) == 0
    text = capsys.readouterr().out
    assert "139.2" in text and "per GPU" in text and "read as the sum" in text
    assert 100 < out["runs"][0]["seed"]["summed_bytes"] / GB < 200


def test_bad_source_is_one_line_exit_2(capsys, tmp_path):
    missing = tmp_path / "nope" / "config.json"
    assert main(["table", str(missing)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "nope" in err
    assert main(["table", "--reported", "qwen-7b", "Qwen/Qwen2.5-0.5B"]) == 2
