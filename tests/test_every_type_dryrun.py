"""Issue 22: the dry run for every type. XLM's length check answered (a real class under
the patch steps, and lands on a real CPU step's peak), the types no dry run can answer
refused in one line, the benchmark's rows written as each type ends (a run cut off keeps
them), and a wrapper's nested text_config/vision_config shrunk under their own keys."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import every_type  # noqa: E402

pytest.importorskip("transformers")

#: XLM as XLMConfig reads it (emb_dim, n_heads, n_layers: ``configuration_xlm.py``),
#: small enough for a real CPU step; causal as a decoder-only LM.
SMALL_XLM = {
    "model_type": "xlm",
    "emb_dim": 64,
    "n_heads": 4,
    "n_layers": 2,
    "vocab_size": 512,
    "max_position_embeddings": 128,
    "causal": True,
    "pad_index": 2,
    "bos_index": 0,
    "eos_index": 1,
}


def _setup(seq_len: int = 32):
    from introspect.setup import TrainingSetup

    return TrainingSetup(
        batch_size=1, seq_len=seq_len, device="cpu", implementation="transformers",
        optimizer="adamw", precision="fp32", attention="eager",
    )  # fmt: skip


def test_xlm_dry_run_answers_its_length_check_and_matches_a_real_step():
    """XLMModel.forward's ``assert lengths.max().item() <= slen`` reads a value; the dry
    run answers that one read (introspect.measure.fake.checked_lengths) and holds what
    the real CPU step holds, byte for byte."""
    import torch
    from introspect.adapters.hf_config import spec_from_config
    from torch._subclasses.fake_tensor import FakeTensor

    from introspect.measure import runner

    spec = spec_from_config(SMALL_XLM, source="xlm")
    peaks, notes = {}, {}
    for device in ("fake", "cpu"):
        m, _ = runner.measure(
            spec, _setup(), device=device, impl="transformers", census=False,
            config=(SMALL_XLM, "xlm"),
        )  # fmt: skip
        peaks[device], notes[device] = m.peak_bytes, m.notes
    assert peaks["fake"] == peaks["cpu"]
    assert any("XLM's length check" in n for n in notes["fake"])
    assert not any("XLM's length check" in n for n in notes["cpu"])
    assert "item" not in FakeTensor.__dict__ and FakeTensor.item is torch.Tensor.item


def test_checked_lengths_leaves_other_reads_to_torch():
    """Outside XLMModel's forward a fake tensor's value is still unreadable."""
    import torch
    from torch._subclasses.fake_tensor import DataDependentOutputException

    from introspect.measure.fake import checked_lengths, fake_mode

    with fake_mode():
        model = torch.nn.Linear(2, 2)
        with checked_lengths(model), pytest.raises(DataDependentOutputException):
            torch.ones(3, dtype=torch.long).sum().item()


@pytest.mark.parametrize("model_type", ["gemma4_unified_assistant"])
def test_a_type_no_dry_run_answers_is_one_line(model_type, tmp_path):
    """`introspect measure --device fake` refuses it in one line naming the source file
    and line of what reads the data, exit 2, before anything is built."""
    from transformers import AutoConfig

    from introspect.measure.fake import DRY_RUN_CANNOT

    raw = {**AutoConfig.for_model(model_type).to_dict(), "model_type": model_type}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(raw), encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, "-m", "introspect", "measure", str(path), "--impl", "transformers",
         "--device", "fake", "--seq", "32"],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300,
    )  # fmt: skip
    assert out.returncode == 2, out.stderr[-2000:]
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in out.stderr
    assert "the dry run cannot answer this step" in lines[0]
    assert DRY_RUN_CANNOT[model_type][:60] in lines[0]
    assert ".py l. " in lines[0]


def test_a_cannot_cell_is_counted_apart_from_the_failures():
    rows = [{"model_type": "blt", "setups": {n: {"cannot": "why"} for n in every_type.SETUPS}}]
    fp32 = every_type.summary(rows)[1]
    assert fp32.endswith("no dry run can answer 1; dry-run failures 0")
    text = every_type.render(rows, 1.0, "cmd")
    assert "| cannot | cannot | cannot |" in text and "the dry run cannot: why" in text


def test_a_write_cut_off_keeps_the_rows_written_before(tmp_path, monkeypatch):
    """Each write replaces the JSON whole (a sibling file renamed over it): a write
    stopped before the rename leaves the earlier rows, readable, for --resume."""
    monkeypatch.setattr(every_type, "OUT", tmp_path / "every-type")
    first = [{"model_type": "gpt2", "note": "refused: x"}]
    every_type.write(first, 1.0, None)
    saved = tmp_path / "every-type.json"
    assert json.loads(saved.read_text()) == first

    def cut(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr(every_type.os, "replace", cut)
    with pytest.raises(KeyboardInterrupt):
        every_type.write([*first, {"model_type": "llama", "note": "refused: y"}], 2.0, None)
    assert json.loads(saved.read_text()) == first


def test_a_run_killed_after_one_type_keeps_that_row(tmp_path):
    """A real run of every_type.py, killed as soon as it prints its first type: the
    results JSON already holds that row, so --resume would start at the next type."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "benchmarks" / "every_type.py"), "--only", "gpt_neo",
         "--results", str(tmp_path)],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env, cwd=tmp_path,
    )  # fmt: skip
    try:
        first = proc.stdout.readline()
    finally:
        proc.kill()
        proc.wait(timeout=60)
    assert first.startswith("gpt_neo ")
    rows = json.loads((tmp_path / "every-type-gpt_neo.json").read_text())
    assert [r["model_type"] for r in rows] == ["gpt_neo"]
    assert set(rows[0]["setups"]) == set(every_type.SETUPS)


@pytest.mark.parametrize("model_type", ["qwen2_5_vl", "qwen3_vl", "mistral3"])
def test_a_wrappers_nested_configs_are_shrunk_under_their_own_keys(model_type):
    """The text_config and vision_config are cut (widths, layers, vocab) under their own
    model_type's names; the tower's listed layers keep one period (Qwen2.5-VL's
    full-attention blocks, Qwen3-VL's deepstack taps), its output width follows the cut
    text width, and the image token ids move inside the cut vocabulary; the class
    builds and introspect counts it exactly."""
    import torch
    from introspect.adapters.hf_config import spec_from_config
    from transformers import AutoConfig

    from introspect.measure.hf_models import build_config, model_class

    raw = {**AutoConfig.for_model(model_type).to_dict(), "model_type": model_type}
    small = every_type.shrink(raw)
    text, vision = small["text_config"], small["vision_config"]
    assert text["model_type"] == raw["text_config"]["model_type"]
    assert text["hidden_size"] == 64 and text["vocab_size"] == 512
    assert text["num_hidden_layers"] < raw["text_config"]["num_hidden_layers"]
    assert vision["hidden_size"] == 64
    depth = "depth" if "depth" in vision else "num_hidden_layers"
    assert vision[depth] < raw["vision_config"][depth]
    if "out_hidden_size" in vision:
        assert vision["out_hidden_size"] == text["hidden_size"]
    if model_type == "qwen2_5_vl":
        assert vision["depth"] == 8 and vision["fullatt_block_indexes"] == [7]
    if model_type == "qwen3_vl":
        assert vision["deepstack_visual_indexes"] == [8] and vision["depth"] == 9
    ids = [v for k, v in small.items() if k.endswith(("_token_id", "_token_index"))]
    assert ids and all(isinstance(i, int) and i < 512 for i in ids)
    assert len(set(ids)) == len(ids)
    spec = spec_from_config(small, source=model_type)
    with torch.device("meta"):
        model = model_class(model_type, small, model_type).from_config(
            build_config(small, model_type)
        )
    assert sum(p.numel() for p in model.parameters()) == spec.n_params
