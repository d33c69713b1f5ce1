"""torch measurement: reference models, the live-storage tracker, the dry run, the census.

Real modules, real steps on small shapes; every figure is checked against an independent
count (parameter counts from introspect.params, storage bytes from the tensors
themselves), never against a number copied from a run.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from specs import VARIANTS  # noqa: E402

from introspect.measure import torch_model, torch_step  # noqa: E402
from introspect.measure.fake import dry_run  # noqa: E402
from introspect.params import parameter_count  # noqa: E402
from introspect.setup import TrainingSetup  # noqa: E402
from introspect.spec import ModelSpec  # noqa: E402

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("name", list(VARIANTS))
def test_reference_parameter_count_is_exact(name):
    spec = VARIANTS[name]
    model = torch_model.build(spec)
    assert torch_model.parameter_count(model) == parameter_count(spec)


@pytest.mark.parametrize("attention", ["eager", "memory_efficient"])
@pytest.mark.parametrize("name", ["standard", "rmsnorm-gqa-gated"])
def test_reference_model_trains(name, attention):
    spec = VARIANTS[name]
    setup = TrainingSetup(seq_len=16, attention=attention)
    model = torch_step.build_reference(spec, setup, "cpu")
    opt = torch_step.make_optimizer(model, setup)
    x, y = torch_step.batch(spec.vocab_size, setup, "cpu")
    first = torch_step.train_step(model, opt, x, y)
    for _ in range(3):
        last = torch_step.train_step(model, opt, x, y)
    assert torch.isfinite(last) and last < first


def test_eager_and_memory_efficient_attention_agree():
    spec = VARIANTS["rmsnorm-gqa-gated"]
    x = torch.randint(0, spec.vocab_size, (2, 12))
    eager = torch_model.build(spec, "eager")
    fast = torch_model.build(spec, "memory_efficient")
    fast.load_state_dict(eager.state_dict())
    torch.testing.assert_close(eager(x), fast(x), rtol=1e-4, atol=1e-4)


@pytest.fixture(scope="module")
def measured():
    spec = VARIANTS["standard"]
    setup = TrainingSetup(seq_len=32, framework="torch", device="cpu")
    return spec, setup, torch_step.measure_reference(spec, setup, "cpu")


def test_tracker_peak_holds_the_training_state(measured):
    spec, setup, m = measured
    n = parameter_count(spec)
    # Weights, gradients and Adam's m and v all exist during optimizer.step(): 16N bytes
    # at least, whatever else is alive.
    assert m.peak_bytes >= 16 * n
    assert m.categories["parameters"] == 4 * n
    assert m.categories["optimizer_state"] >= 8 * n
    # Adam's state beyond m and v is one step counter per parameter tensor.
    n_tensors = len(list(torch_model.build(spec).parameters()))
    assert m.categories["optimizer_state"] - 8 * n <= 8 * n_tensors


def test_tracker_categories_sum_to_the_peak(measured):
    _, _, m = measured
    assert m.category_total() == m.peak_bytes
    assert all(v >= 0 for v in m.categories.values())
    assert m.peak_phase in ("forward", "backward", "optimizer")
    assert m.step_seconds > 0 and m.tokens_per_second > 0


def test_tracker_peak_is_below_a_generous_bound(measured):
    spec, setup, m = measured
    # 16N plus every tensor of the forward pass counted twice over (the seed's
    # activations at s = 8) bounds a correct tracker from above.
    from introspect.simplified import estimate

    bound = 16 * parameter_count(spec) + 2 * estimate(spec, setup).sum("activations") + 10**6
    assert m.peak_bytes <= bound


def test_dry_run_equals_the_real_cpu_step(measured):
    spec, setup, real = measured
    fake = dry_run(spec, setup)
    assert fake.device == "fake" and fake.step_seconds is None
    assert fake.peak_bytes == real.peak_bytes
    assert fake.categories == real.categories
    assert fake.peak_phase == real.peak_phase


@pytest.mark.parametrize("attention", ["eager", "memory_efficient"])
def test_dry_run_equals_real_for_llama_style(attention):
    spec = VARIANTS["rmsnorm-gqa-gated"]
    setup = TrainingSetup(seq_len=24, attention=attention, framework="torch", device="cpu")
    real = torch_step.measure_reference(spec, setup, "cpu")
    fake = dry_run(spec, setup)
    assert (fake.peak_bytes, fake.categories) == (real.peak_bytes, real.categories)


def test_dry_run_builds_a_model_larger_than_this_machine():
    # 2 layers of a 7B-wide model with a 32k vocabulary: 4N alone is ~2.7 GB, never
    # allocated; the tracker still sees the full 16N.
    spec = ModelSpec(
        hidden_size=4096,
        num_hidden_layers=2,
        num_attention_heads=32,
        vocab_size=32000,
        norm="rmsnorm",
        ffn="gated",
        hidden_act="silu",
        intermediate_size=11008,
    )
    m = dry_run(spec, TrainingSetup(seq_len=64, framework="torch", device="cpu"))
    n = parameter_count(spec)
    assert m.n_params == n
    assert m.categories["parameters"] == 4 * n
    assert m.peak_bytes >= 16 * n


def census_of(spec, setup):
    model = torch_step.build_reference(spec, setup, "cpu")
    return torch_step.run_census(model, setup, spec)


# T = 16 equals the head width (Q, K are T×T-shaped too); T = 64 equals d (the context
# is (B·T, d) = T×T-shaped); T = 24 is neither.
@pytest.mark.parametrize("T", [16, 64, 24])
def test_census_eager_attention_keeps_one_quadratic_tensor_per_layer(T):
    spec = VARIANTS["standard"]
    B = 2
    c = census_of(spec, TrainingSetup(batch_size=B, seq_len=T))
    # Softmax saves its output and probs·V saves that same storage: one B·h·T×T FP32
    # tensor per layer, where the seed counts two (scores and probabilities).
    assert c.quadratic_per_layer == {i: 1 for i in range(spec.num_hidden_layers)}
    expected = spec.num_hidden_layers * B * spec.num_attention_heads * T * T * 4
    assert c.terms["activations/layer/attention/quadratic/probabilities"] == expected


def test_census_memory_efficient_attention_keeps_no_quadratic_tensor():
    c = census_of(VARIANTS["standard"], TrainingSetup(seq_len=16, attention="memory_efficient"))
    assert c.quadratic_per_layer == {}
    assert not any("quadratic" in k for k in c.terms)


def test_census_covers_the_seed_terms_and_logits_are_exact():
    spec = VARIANTS["standard"]
    B, T = 1, 16
    c = census_of(spec, TrainingSetup(batch_size=B, seq_len=T))
    terms = c.seed_terms()
    for seed in (
        "activations/embedding",
        "activations/layer/layernorm",
        "activations/layer/attention/linear",
        "activations/layer/attention/quadratic",
        "activations/layer/feed_forward",
        "activations/logits",
    ):
        assert terms.get(seed, 0) > 0, seed
    # The loss's log-softmax over B·T·V in FP32 (plus nll_loss's scalar total weight).
    assert (
        B * T * spec.vocab_size * 4
        <= terms["activations/logits"]
        <= (B * T * spec.vocab_size * 4 + 16)
    )
    # The embedding output is the first norm's input: B·T·d FP32.
    assert terms["activations/embedding"] == B * T * spec.hidden_size * 4
    # Each saved storage is counted once, and the per-module view folds layers together
    # without losing a byte.
    assert c.total == sum(r[4] for r in c.rows)
    by_module = c.by_module()
    assert sum(sum(t.values()) for t in by_module.values()) == c.total
    assert "layers.N.self_attn" in by_module and "layers.0.self_attn" not in by_module


def test_census_counts_every_storage_once_and_no_parameters():
    spec = VARIANTS["tied-biases"]
    setup = TrainingSetup(seq_len=8)
    model = torch_step.build_reference(spec, setup, "cpu")
    c = torch_step.run_census(model, setup, spec)
    param_bytes = sum(p.numel() * 4 for p in model.parameters())
    # Far below the weights: parameters are not activations.
    assert c.total < param_bytes
    # A tied lm_head reads the embedding weight: still not counted as an activation.
    assert not any(r[2] == (spec.vocab_size, spec.hidden_size) for r in c.rows)


def test_transformers_llama_step_and_census():
    pytest.importorskip("transformers")
    from introspect.measure.implementations import transformers_llama

    spec = VARIANTS["rmsnorm-gqa-gated"]
    setup = TrainingSetup(seq_len=16, framework="torch", device="cpu")
    model = transformers_llama(spec)
    assert sum(p.numel() for p in model.parameters()) == parameter_count(spec)
    m = torch_step.measure_step(
        model,
        setup,
        vocab=spec.vocab_size,
        forward=torch_step.hf_forward,
        implementation="transformers",
    )
    assert m.peak_bytes >= 16 * parameter_count(spec)
    assert m.category_total() == m.peak_bytes
    c = torch_step.run_census(model, setup, spec, forward=torch_step.hf_forward)
    assert c.quadratic_per_layer == {i: 1 for i in range(spec.num_hidden_layers)}


def test_transformers_refuses_a_non_llama_shape():
    from introspect.errors import IntrospectError
    from introspect.measure.implementations import llama_config

    with pytest.raises(IntrospectError, match="not a Llama"):
        llama_config(VARIANTS["standard"])
