"""The term registry (introspect/terms.py) against what the estimators emit, and
`introspect explain`.

The estimators are run for real over a spread of models (the bundled ones and small
configs of the other families: Gated DeltaNet, soft-capping, LayerNorm, learned
positions, dropout, shared experts) × setups (precisions, attention kernels,
checkpointing, losses, optimizers, LoRA/QLoRA, DDP/ZeRO/FSDP, offload, tensor and
pipeline parallel, MLX), every moment of each step collected — not only the peak one."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest
from introspect.adapters import bundled
from introspect.adapters.hf_config import spec_from_config
from small_configs import FAMILIES as SMALL

from introspect import refined, simplified, terms
from introspect.cli import main
from introspect.errors import IntrospectError
from introspect.refined import architecture, execution, memo, model_parallel
from introspect.setup import TrainingSetup

ROOT = Path(__file__).resolve().parents[1]


BUNDLED = (
    "Qwen/Qwen2.5-0.5B", "Qwen/Qwen-7B", "Qwen/Qwen3-0.6B", "meta-llama/Llama-3.2-1B",
    "mistralai/Mixtral-8x7B-v0.1", "google/gemma-2b", "Qwen/Qwen3-30B-A3B",
    "openai/gpt-oss-20b", "meta-llama/Llama-4-Scout-17B-16E", "google/gemma-3-1b-pt",
    "google/gemma-3-4b-pt", "deepseek-ai/DeepSeek-V3",
)  # fmt: skip
#: Families the bundled models lack, and the config keys that switch features on.
FAMILIES = {
    "qwen3_next, hybrid": {},
    "gemma2": {"final_logit_softcapping": 30.0, "attn_logit_softcapping": 50.0},
    "phi, q/k layernorm": {"attention_dropout": 0.1, "resid_pdrop": 0.1, "embd_pdrop": 0.1},
    "gpt2": {"resid_pdrop": 0.1, "embd_pdrop": 0.1, "attn_pdrop": 0.1},
    "qwen2_moe, shared expert": {},
    "llama, head_dim 48": {"attention_dropout": 0.1},
    "cohere2, NoPE on layer 2": {},  # Cohere2LayerNorm's two x - mean
}


@cache
def specs() -> dict:
    out = {name: bundled.lookup(name).spec() for name in BUNDLED}
    configs = SMALL
    for name, keys in FAMILIES.items():
        out[name] = spec_from_config({**configs[name], **keys})
    from test_ssm import GRANITE  # Mamba-2 mixers (the torch setups; the rest refuse)

    out["granitemoehybrid, mamba2"] = spec_from_config(dict(GRANITE))
    from test_hybrids import NEMOTRON_MOE  # NemotronHTopkRouter's FP32 group routing

    out["nemotron_h, routed experts"] = spec_from_config(dict(NEMOTRON_MOE))
    from test_mamba1 import FALCON_MAMBA, JAMBA  # Mamba-1 mixers, the dt/B/C norms

    out["falcon_mamba, mamba1"] = spec_from_config(dict(FALCON_MAMBA))
    out["jamba, mamba1 + experts"] = spec_from_config(dict(JAMBA))
    from test_recurrent_gemma import RECURRENT_GEMMA  # the RG-LRU block, local attention

    out["recurrent_gemma, rglru"] = spec_from_config(dict(RECURRENT_GEMMA))

    from test_mamba2_stack import MAMBA2  # the pure Mamba-2 stack, an FP32 residual

    out["mamba2, pure stack"] = spec_from_config(dict(MAMBA2))
    from test_zamba2 import ZAMBA2  # a shared transformer block, per use

    out["zamba2, shared block"] = spec_from_config(dict(ZAMBA2))
    from test_every_type_long_misc import XGLM  # XGLM's clamped scores

    out["xglm, clamped scores"] = spec_from_config(dict(XGLM))
    from test_every_type_long_misc import GPT_NEOX_JAPANESE  # zeros + masked scores held

    out["gpt_neox_japanese, attention forward"] = spec_from_config(dict(GPT_NEOX_JAPANESE))
    from test_gemma4_rows import GEMMA4  # Gemma 4's V norm, pow rstd, weight casts

    out["gemma4_unified_text"] = spec_from_config(dict(GEMMA4))
    from test_gemma4_rows import GEMMA4_PLE  # Gemma 4's per-layer inputs

    out["gemma4_text, per-layer inputs"] = spec_from_config(dict(GEMMA4_PLE))
    from test_falcon_h1 import FALCON_H1  # attention and a Mamba-2 mixer in parallel

    out["falcon_h1, attention ∥ mamba2"] = spec_from_config(dict(FALCON_H1))
    from test_every_type_gpt import GRANITE_SWA  # the LSE sink scale (a walker type)

    out["granite_swa, lse sink"] = spec_from_config(dict(GRANITE_SWA))
    from test_every_type_bf16 import CASES  # BitNet's sub norms, ERNIE's rotary tables

    out["bitnet, sub norms"] = spec_from_config(dict(CASES["bitnet, in-branch sub norms"]))
    ernie = CASES["ernie4_5, rotary tables repeated per layer"]
    out["ernie4_5, rotary tables per layer"] = spec_from_config(dict(ernie))
    from test_attention_dropout_rows import FALCON  # returns its probabilities

    out["falcon, returned probabilities"] = spec_from_config(dict(FALCON))
    from test_walked_extras import MODERNBERT  # the embedding norm, the head transform

    modernbert = spec_from_config(dict(MODERNBERT))
    out["modernbert-decoder, outside norms"] = modernbert
    out["modernbert-decoder, outside norms as RMSNorm"] = modernbert.replace(norm="rmsnorm")
    return out


_T = dict(seq_len=256, batch_size=2, attention="eager")  # the cases name eager
SDPA = dict(attention="memory_efficient")
CKPT = dict(activation_checkpointing=True)
SETUPS = {
    "fp32 eager adam": dict(),
    "bf16 sdpa ckpt": dict(precision="bf16", **SDPA, **CKPT),
    "amp eager logits loop": dict(precision="amp", loop="logits"),
    "amp sdpa ckpt": dict(precision="amp", **SDPA, **CKPT),
    "amp eager ckpt": dict(precision="amp", **CKPT),  # attention dropout's recomputation
    "mixed sgd-momentum fused CE": dict(
        precision="mixed", optimizer="sgd_momentum", cross_entropy="fused"
    ),
    "mixed chunked CE single-tensor": dict(
        precision="mixed", cross_entropy="fused", optimizer_impl="single_tensor"
    ),
    "bf16 torchtune CE": dict(precision="bf16", cross_entropy="torchtune"),
    "amp trl CE on cpu": dict(precision="amp", cross_entropy="trl", device="cpu"),
    "bf16 trl CE on cuda": dict(precision="bf16", cross_entropy="trl", device="cuda"),
    "mixed liger CE": dict(precision="mixed", cross_entropy="liger", device="cpu"),
    "packed sequences sdpa": dict(packed_sequences=True, implementation="transformers", **SDPA),
    "packed sequences sdpa ckpt": dict(packed_sequences=True, implementation="transformers")
    | dict(**SDPA, **CKPT),
    "dpo trainer": dict(trainer="dpo", cross_entropy="trl", implementation="transformers"),
    "dpo lora trl CE": dict(trainer="dpo", cross_entropy="trl", finetune="lora", device="cpu")
    | dict(implementation="transformers"),
    "fp32 bf16 weights adam8bit": dict(weights_dtype="bf16", optimizer="adam8bit"),
    "sgd, none": dict(optimizer="sgd"),
    "frozen": dict(optimizer="none"),
    "adafactor": dict(optimizer="adafactor"),
    "lora on head and embedding": dict(
        finetune="lora", lora_targets=("q_proj", "v_proj", "lm_head", "embed_tokens")
    ),
    "bf16 paged adamw 8bit": dict(precision="bf16", optimizer="paged_adamw_8bit"),
    "lora paged adamw 32bit": dict(finetune="lora", optimizer="paged_adamw_32bit"),
    "reference model": dict(implementation="reference"),
    "reference sdpa ckpt": dict(implementation="reference", **SDPA, **CKPT),
    "lora": dict(finetune="lora"),
    "lora amp dropout embeddings": dict(
        finetune="lora", precision="amp", lora_dropout=0.1, train_embeddings=True
    ),
    "qlora bf16 ckpt": dict(finetune="qlora", precision="bf16", **CKPT),
    "lora q,v": dict(finetune="lora", lora_targets=("q_proj", "v_proj")),
    "ddp": dict(sharding="ddp", devices=2),
    "ddp bucket view": dict(sharding="ddp", devices=2, gradient_as_bucket_view=True),
    "zero-1": dict(sharding="zero", zero_stage=1, devices=2),
    "zero-2": dict(sharding="zero", zero_stage=2, devices=2),
    "zero-3": dict(sharding="zero", zero_stage=3, devices=4),
    "fsdp mixed": dict(sharding="fsdp", zero_stage=3, devices=4, precision="mixed"),
    "fsdp no reshard": dict(sharding="fsdp", zero_stage=3, devices=2, reshard_after_forward=False),
    "offload optimizer": dict(offload="optimizer", precision="mixed"),
    "offload parameters": dict(offload="parameters"),
    "optimizer in backward": dict(optimizer_in_backward=True),
    "tp 2 pp 2": dict(tensor_parallel=2, pipeline_parallel=2),
    "mlx": dict(framework="mlx"),
    "mlx compiled bf16 ckpt": dict(framework="mlx_compiled", precision="bf16", **CKPT),
    "mlx lora bf16 weights": dict(framework="mlx", finetune="lora", weights_dtype="bf16"),
    "mlx sgd": dict(framework="mlx", optimizer="sgd"),
    "mlx dora dropout accum": dict(
        framework="mlx", implementation="mlx_lm", finetune="dora", lora_dropout=0.1, grad_accum=2
    ),
    "frozen tower": dict(freeze_tower=True),
    "image batch's pixel input": dict(image_input_bytes=9_633_792),
    "grad accum logits loop": dict(grad_accum=4, loop="logits"),
    "grad accum lora embeddings": dict(grad_accum=2, finetune="lora", train_embeddings=True),
    "offload activations amp": dict(offload_activations=True, precision="amp"),
    "hf trainer adam8bit": dict(trainer="hf", optimizer="adam8bit"),
    "hf trainer adamw accum": dict(trainer="hf", optimizer="adamw", grad_accum=2),
}  # fmt: skip


def emitted(spec, setup: TrainingSetup) -> set[str]:
    """Every term name the estimates of ``spec`` and ``setup`` write: the seed's, the
    architecture layer's and every moment of the execution layer (torch's or MLX's),
    as :func:`introspect.refined.execution_estimate` builds them."""
    names = set(simplified.estimate(spec, setup).terms) | set(architecture.estimate(spec, setup))
    with memo.scope():
        mlx = setup.framework in ("mlx", "mlx_compiled") and refined._mlx().applies(setup, spec)
        if mlx:
            moments = refined._mlx().moments(spec, setup)
        else:
            moments = execution.moments(spec, setup, range(spec.num_hidden_layers))
        for _, moment in moments:
            names |= set(moment)
            parallel = model_parallel.model_parallel(spec, setup, moment)
            names |= set(parallel) | set(execution.framework_extra(spec, setup, parallel)[0])
    names |= set(refined.execution_estimate(spec, setup).terms)
    return names


@cache
def spread() -> dict[str, set[str]]:
    """``{term: the cases that emit it}`` over :func:`specs` × :data:`SETUPS`."""
    out: dict[str, set[str]] = {}
    for spec_name, spec in specs().items():
        for setup_name, fields in SETUPS.items():
            try:
                setup = TrainingSetup(**{**_T, **fields})
                names = emitted(spec, setup)
            except IntrospectError:  # a setup the model refuses (LoRA targets it lacks)
                continue
            for name in names:
                out.setdefault(name, set()).add(f"{spec_name} / {setup_name}")
    return out


def test_every_emitted_term_is_registered():
    found = spread()
    assert len(found) > 100  # the spread reaches the estimators' far corners
    unregistered = sorted(n for n in found if terms.lookup(n) is None)
    assert unregistered == [], "not in introspect/terms.py: " + ", ".join(
        f"{n} ({sorted(found[n])[0]})" for n in unregistered
    )


def test_every_registered_term_is_emitted_somewhere():
    """A record no estimate emits over the spread is stale (or the spread misses it)."""
    found = spread()
    stale = [t.name for t in terms.TERMS if not any(t.matches(n) for n in found)]
    assert stale == []


def test_the_registry_catches_an_unregistered_name():
    assert terms.lookup("activations/layer/attention/quadratic/probs") is not None
    assert terms.lookup("activations/layer/attention/quadratic/made_up") is None
    pattern = terms.lookup("activations/layer/lora/q_proj/a_output")
    assert pattern is not None and pattern.is_pattern
    assert terms.lookup("activations/layer/lora/q_proj/extra/a_output") is None


def test_each_name_is_declared_once_with_a_known_category():
    names = [t.name for t in terms.TERMS]
    assert len(names) == len(set(names))
    assert {t.category for t in terms.TERMS} <= set(terms.CATEGORIES)
    assert all(t.equation and t.source and t.computed_by for t in terms.TERMS)


#: Calls that run or replay a real or dry-run step (or count what autograd saves in one).
STEP_CALLS = ("census", "measure", "dry_run", "replay", "run(", "step(", "measure_many")


def test_the_names_the_estimators_import_are_registered():
    constants = {k: v for k, v in vars(terms).items() if k.isupper() and isinstance(v, str)}
    assert len(constants) >= 10 and "FSDP_ALL_GATHER" in constants
    assert [v for v in constants.values() if terms.lookup(v) is None] == []


@cache
def _test_sources() -> dict[str, str]:
    """``{tests/test_x.py::test_name: its source}`` of every test function in tests/."""
    out = {}
    for path in sorted((ROOT / "tests").glob("test_*.py")):
        text = path.read_text(encoding="utf-8")
        for node in ast.parse(text).body:
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test_"):
                out[f"tests/{path.name}::{node.name}"] = ast.get_source_segment(text, node)
    return out


#: Registered terms no test checks against a real or dry-run step (each record says
#: why). The list may only shrink: a new term needs a test.
UNCHECKED = {"comm/all_gather", "comm/reduce_bucket"}
UNCHECKED |= {"grads/deepspeed_flat_partition", "grads/deepspeed_fp32_partition"}


def test_every_registered_term_names_a_test_that_exists():
    known = _test_sources()
    assert len(known) > 200
    missing = {t.name: [i for i in t.tests if i not in known] for t in terms.TERMS}
    assert {k: v for k, v in missing.items() if v} == {}
    untested = {t.name for t in terms.TERMS if not t.tests}
    assert untested == UNCHECKED
    assert all(terms.lookup(n).unchecked for n in UNCHECKED)
    # and each test named runs (or replays, or takes the census of) a step
    named = {i for t in terms.TERMS for i in t.tests}
    no_step = sorted(i for i in named if not any(c in known[i] for c in STEP_CALLS))
    assert no_step == []


# ---- introspect explain ----------------------------------------------------------------
@pytest.mark.parametrize(
    "name",
    [
        "activations/layer/attention/quadratic",
        "activations/layer/attention/quadratic/probs",
        "comm/fsdp_all_gather",
    ],
)
def test_explain_prints_equation_source_and_tests(name, capsys):
    assert main(["explain", name]) == 0
    out = capsys.readouterr().out
    record = terms.lookup(name)
    fields = dict(line.split(":", 1) for line in out.splitlines() if line[:1] != " ")
    assert fields["term"].strip() == name
    assert fields["equation"].strip() == record.equation
    assert fields["source"].strip() == record.source
    assert fields["category"].strip() == record.category
    shown = [line.strip() for line in out.split("tests:", 1)[1].splitlines()]
    assert shown == list(record.tests) and set(shown) <= set(_test_sources())


def test_explain_names_the_pattern_an_instance_belongs_to(capsys):
    assert main(["explain", "activations/layer/lora/o_proj/a_output", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["name"] == "activations/layer/lora/{target}/a_output"
    assert out["asked"] == "activations/layer/lora/o_proj/a_output"
    assert out["tests"] and out["equation"]


def test_explain_list_names_every_term(capsys):
    assert main(["explain", "--list"]) == 0
    listed = {line.split()[0] for line in capsys.readouterr().out.splitlines() if line[:2] == "  "}
    assert listed == set(terms.names())
    assert main(["explain", "--list", "--json"]) == 0
    assert len(json.loads(capsys.readouterr().out)) == len(terms.TERMS)


def test_an_unknown_term_is_one_line_with_close_matches(capsys):
    assert main(["explain", "activations/layer/attention/quadratc/probs"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1
    assert "activations/layer/attention/quadratic/probs" in lines[0]
    assert main(["explain"]) == 2
    assert "TERM" in capsys.readouterr().err


def test_explain_starts_without_an_estimator_or_torch():
    code = (
        "import sys, contextlib, io\nfrom introspect.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    rc = main(['explain', 'weights'])\n"
        "print(rc, sorted(m for m in sys.modules if m.split('.')[0] in "
        "('torch', 'mlx', 'numpy', 'transformers') or m.startswith('introspect.refined')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    ).stdout
    assert out.split(maxsplit=1) == ["0", "[]\n"]
