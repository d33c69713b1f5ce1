"""LoRA on the output head and the input embedding (``--lora-targets ... lm_head
embed_tokens``): peft's ``lora.Linear`` on lm_head and ``lora.Embedding`` on
embed_tokens (``peft/tuners/lora/layer.py``), real peft steps on CPU against the closed
form (introspect/refined/lora.py: head_shapes, final_terms, embedding_terms)."""

from __future__ import annotations

import warnings

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("peft")

from test_lora import LLAMA, setup  # noqa: E402

from introspect import refined  # noqa: E402
from introspect.errors import IntrospectError  # noqa: E402
from introspect.params import parameters_by_component  # noqa: E402
from introspect.refined import lora  # noqa: E402

BF16 = dict(precision="bf16", weights_dtype="bf16", activation_dtype="bf16")
TIED = LLAMA.replace(tie_word_embeddings=True, num_parameters=None)
TIED = TIED.replace(num_parameters=sum(parameters_by_component(TIED).values()))


def _trained(spec, s) -> dict[str, tuple[int, ...]]:
    from introspect.measure import peft_step

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # peft: ensure_weight_tying is not set
        model = peft_step.build(spec, s)
    return {n: tuple(p.shape) for n, p in model.named_parameters() if p.requires_grad}


@pytest.mark.parametrize("spec", [LLAMA, TIED], ids=["untied", "tied"])
def test_head_adapters_are_peft_s(spec):
    """peft's adapters on lm_head (lora_A (r, d), lora_B (V, r)) and embed_tokens
    (lora_embedding_A (r, V), lora_embedding_B (d, r)); a tied head gets its own (peft
    ties adapters only with ensure_weight_tying=True)."""
    s = setup(lora_targets=("q_proj", "lm_head", "embed_tokens"))
    trained = _trained(spec, s)
    r, V, d = s.lora_rank, spec.vocab_size, spec.hidden_size
    heads = {n: shape for n, shape in trained.items() if "layers" not in n}
    assert sorted(heads.values()) == sorted([(r, d), (V, r), (r, V), (d, r)])
    assert lora.adapter_parameters(spec, s) == sum(
        torch.Size(shape).numel() for shape in trained.values()
    )
    assert lora.largest_trainable(spec, s) == V * r


@pytest.mark.slow
@pytest.mark.parametrize("precision", [{}, BF16], ids=["fp32", "bf16"])
@pytest.mark.parametrize(
    "heads", [("lm_head",), ("embed_tokens",), ("lm_head", "embed_tokens")], ids=str
)
def test_lora_on_head_and_embedding_step_peak(heads, precision):
    """Real peft steps: the closed form within 0.5% of the measured peak with the head
    or embedding adapted; without its new terms it would miss the adapters' saved
    input and lora_A output, and layer 0's kept input (an adapted embedding's output
    needs a gradient)."""
    from introspect.measure import peft_step

    s = setup(**precision, lora_targets=("q_proj", "v_proj", *heads))
    base = s.replace(lora_targets=("q_proj", "v_proj"))
    measured, measured_base = peft_step.measure(LLAMA, s), peft_step.measure(LLAMA, base)
    est, est_base = refined.estimate(LLAMA, s), refined.estimate(LLAMA, base)
    assert est.total == pytest.approx(measured.peak_bytes, rel=5e-3)
    grew = measured.peak_bytes - measured_base.peak_bytes
    assert grew > 0
    assert est.total - est_base.total == pytest.approx(grew, rel=0.05)


@pytest.mark.slow
def test_lora_head_with_dropout_keeps_the_dropped_input():
    from introspect.measure import peft_step

    s = setup(**BF16, lora_targets=("q_proj", "lm_head"), lora_dropout=0.1)
    measured = peft_step.measure(LLAMA, s).peak_bytes
    assert refined.estimate(LLAMA, s).total == pytest.approx(measured, rel=5e-3)


def test_head_alone_and_mlx_are_refused():
    with pytest.raises(IntrospectError, match="block linear"):
        lora.targets(LLAMA, setup(lora_targets=("lm_head",)))
    with pytest.raises(IntrospectError, match="MLX"):
        setup(lora_targets=("q_proj", "lm_head")).replace(framework="mlx")


@pytest.mark.slow
@pytest.mark.parametrize("family", ["llama", "qwen2"])  # qwen2: tied embeddings
@pytest.mark.parametrize(
    "kw",
    [
        dict(lora_targets=("q_proj", "v_proj", "lm_head", "embed_tokens")),
        dict(lora_targets=("q_proj", "lm_head", "embed_tokens"), precision="bf16")
        | dict(adapter_dtype="bf16"),
    ],
    ids=["fp32", "bf16-adapters"],
)
def test_head_adapters_real_equals_dry_run(family, kw):
    """transformers' own classes under peft: the CPU step and the FakeTensorMode dry run
    are byte-identical with the head and embedding adapted (and BF16 adapters), and the
    closed form is within 0.5%."""
    from hf_steps import CONFIGS, spec_for

    from introspect.measure import hf_models
    from introspect.setup import TrainingSetup

    raw = CONFIGS[family]
    spec = spec_for(raw)
    s = TrainingSetup(
        batch_size=1, seq_len=32, finetune="lora", lora_rank=8, framework="torch", **kw
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        real, _ = hf_models.measure(raw, "test", spec, s, device="cpu", census=False)
        fake, _ = hf_models.measure(raw, "test", spec, s, device="fake", census=False)
    assert real.peak_bytes == fake.peak_bytes
    assert real.categories == fake.categories
    assert refined.estimate(spec, s).total == pytest.approx(real.peak_bytes, rel=5e-3)
