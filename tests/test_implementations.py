"""The implementation that runs the step, chosen once (introspect/refined/implementations.py):
which one each setup and stack gets, and that the saved set and the timeline answer
through it (transformers' model around the reference model's layers where hf_saved does
not model a layer kind)."""

from __future__ import annotations

from specs import STACK_ATTENTION, STACK_DENSE
from specs import stack as _spec

from introspect.layers import Attention, FeedForward, LayerKind
from introspect.refined import execution, hf_saved, reference, saved
from introspect.refined.implementations import (
    REFERENCE,
    TRANSFORMERS,
    TRANSFORMERS_AROUND_REFERENCE,
    implementation_of,
)
from introspect.setup import TrainingSetup

ATT, DENSE = STACK_ATTENTION, STACK_DENSE
#: gpt-oss's sinks: a kind hf_saved does not model (the reference model's layer).
SINKS = LayerKind(
    attention=Attention(**ATT, sinks=True), feed_forward=FeedForward(intermediate_size=96)
)
HF = TrainingSetup(seq_len=64, batch_size=2, attention="eager")
AMP = HF.replace(precision="amp")


def test_the_setup_and_the_stack_choose_the_implementation():
    dense, mixed = _spec((DENSE, 4)), _spec((DENSE, 2), (SINKS, 2))
    assert implementation_of(dense, HF) is TRANSFORMERS
    assert implementation_of(dense, HF.replace(implementation="reference")) is REFERENCE
    assert implementation_of(dense, TrainingSetup(seq_len=64, framework="mlx")) is REFERENCE
    # One kind hf_saved does not model turns the whole stack to the reference layers;
    # asked of the modelled kind alone (as the timeline asks), transformers' own.
    assert implementation_of(mixed, HF) is TRANSFORMERS_AROUND_REFERENCE
    assert implementation_of(mixed.for_kind(DENSE), HF) is TRANSFORMERS
    assert implementation_of(mixed.for_kind(SINKS), HF) is TRANSFORMERS_AROUND_REFERENCE


def test_around_reference_keeps_transformers_model_and_the_reference_layers():
    spec = _spec((SINKS, 4))
    assert saved.embedding(spec, HF) == hf_saved.embedding(spec, HF)
    assert saved.final(spec, HF) == hf_saved.final(spec, HF)
    assert saved.logits_saved(spec, HF) == hf_saved.logits_saved(spec, HF)
    assert saved.per_layer(spec, HF, SINKS) == reference.per_layer(spec, HF, SINKS)
    assert execution.loss_forward(spec, HF) is not None  # transformers' loss in forward
    assert execution.logits_grad_bytes(spec, HF) == HF.activation_bytes
    ref = HF.replace(implementation="reference")
    assert execution.loss_forward(spec, ref) is None
    assert execution.logits_grad_bytes(spec, ref) == 4


def test_autocast_adds_weight_copies_and_an_fp32_stream_only_around_reference_layers():
    spec = _spec((SINKS, 4))
    plain = reference.per_layer(spec, AMP, SINKS)
    amp = saved.per_layer(spec, AMP, SINKS)
    assert amp["autocast_weights"] == reference.autocast_weight_bytes(spec, SINKS) > 0
    s = AMP.activation_bytes
    assert amp["feed_forward/down"] == plain["feed_forward/down"] // s * 4
    assert "autocast_weights" not in saved.per_layer(
        spec, AMP.replace(implementation="reference"), SINKS
    )


def test_transformers_layers_answer_the_attention_backward():
    spec = _spec((DENSE, 4))
    sdpa = HF.replace(attention="memory_efficient")
    full = saved.per_layer(spec, sdpa)
    side = {k: v for k, v in full.items() if saved.is_attention_side(k)}
    current = TRANSFORMERS.at_attention_backward(spec, sdpa, full, dict(side))
    # SDPA's backward reads its output, the context o_proj kept; the reference's does not.
    assert current["attention/linear/context"] == full["attention/linear/context"]
    assert "attention/linear/context" not in REFERENCE.at_attention_backward(
        spec, sdpa, full, dict(side)
    )
    eager = saved.per_layer(spec, HF)
    side = {k: v for k, v in eager.items() if saved.is_attention_side(k)}
    assert "attention/linear/v" in side
    assert "attention/linear/v" not in TRANSFORMERS.at_attention_backward(spec, HF, eager, side)
