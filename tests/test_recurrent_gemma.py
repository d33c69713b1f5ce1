"""RecurrentGemma's RG-LRU block as a layer kind (issue 22): the closed form
(:mod:`introspect.refined.rglru`) against a census and a live-storage trace of
transformers' real ``RecurrentGemmaRecurrentBlock`` (its torch path, ``use_cache=False``
as training runs it), the exact parameter count against the meta-device build, the
recomputed graph a checkpointed layer leaves on its module against a real checkpointed
step, and the closed form of small stacks against the dry run of the real class —
``introspect measure --device fake`` — for FP32 eager, autocast with checkpointing and
BF16 SDPA, within ±3%. Bad sizes are one line naming the key; LoRA is refused in one."""

from __future__ import annotations

import contextlib
import json

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from hf_steps import mixer_saved_bytes  # noqa: E402
from mixer_stacks import SETUPS, count_is_the_meta_build, measured, one_line_error  # noqa: E402

from introspect.cli import main  # noqa: E402
from introspect.layers import Attention  # noqa: E402
from introspect.measure.live_tracker import LiveStorageTracker  # noqa: E402
from introspect.refined import rglru  # noqa: E402
from introspect.setup import TrainingSetup  # noqa: E402

HIDDEN = 64

#: A small stack: recurrent, recurrent, attention (the default cycle), an RG-LRU wider
#: than d (as RecurrentGemma's every-type shrink leaves it), a window shorter than T.
RECURRENT_GEMMA = {
    "model_type": "recurrent_gemma",
    "hidden_size": HIDDEN,
    "num_hidden_layers": 3,
    "num_attention_heads": 4,
    "num_key_value_heads": 1,
    "lru_width": 256,
    "intermediate_size": 192,
    "vocab_size": 256,
    "attention_window_size": 16,
}


def _config(width: int, heads: int = 4, **extra):
    return transformers.RecurrentGemmaConfig(
        hidden_size=HIDDEN,
        lru_width=width,
        num_attention_heads=heads,
        num_hidden_layers=3,
        intermediate_size=96,
        vocab_size=128,
        **extra,
    )


def _block(width: int, heads: int = 4):
    """The real block (weights drawn small so the recurrence stays finite) and its kind."""
    from transformers.models.recurrent_gemma.modeling_recurrent_gemma import (
        RecurrentGemmaRecurrentBlock,
    )

    torch.manual_seed(0)
    cfg = _config(width, heads)
    block = RecurrentGemmaRecurrentBlock(cfg, 0)
    for p in block.parameters():
        torch.nn.init.normal_(p, std=0.1)
    att = Attention(
        kind="rglru",
        num_attention_heads=heads,
        num_key_value_heads=heads,
        head_dim=width // heads,
        lru_width=width,
        lru_conv_width=cfg.conv1d_width,
    )
    return block, att


class _Training(torch.nn.Module):
    """The block as the decoder layer calls it in training: positions 0..T-1 (one row, as
    the model makes them), no cache."""

    def __init__(self, block) -> None:
        super().__init__()
        self.block = block

    def forward(self, x):
        pos = torch.arange(x.shape[1]).unsqueeze(0)
        return self.block(x, pos, None, use_cache=False)[0]


SHAPES = [(2, 7), (1, 16), (3, 5), (3, 9), (2, 1)]  # B or T of 1: the reshape is a view


@pytest.mark.parametrize("precision", ["fp32", "bf16", "amp"])
@pytest.mark.parametrize("B,T", SHAPES)
@pytest.mark.parametrize("width,heads", [(256, 4), (128, 2)])
def test_rglru_saved_set_equals_the_census(precision, B, T, width, heads):
    block, att = _block(width, heads)
    setup = TrainingSetup(batch_size=B, seq_len=T, precision=precision)
    closed = sum(rglru.saved(att, setup, HIDDEN).values())
    assert closed == mixer_saved_bytes(_Training(block), "rglru", precision, B, T, HIDDEN)


def _traced_step(block, precision: str, B: int, T: int, width: int) -> tuple[int, int]:
    """One forward and backward of the real block under the live-storage tracker: (the
    largest Activation + Temp while linear_out's gradients alone exist — the scan's
    backward —, the output's bytes)."""
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    block = block.to(dtype)
    x = torch.randn(B, T, HIDDEN, dtype=dtype, requires_grad=True) * 1.0  # not a leaf
    pos = torch.arange(T).unsqueeze(0)
    made = (width * HIDDEN + HIDDEN) * (2 if precision == "bf16" else 4)
    moments: list[int] = []

    class Tracker(LiveStorageTracker):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = super().__torch_dispatch__(func, types, args, kwargs)
            snap = next(iter(self._current.values()))
            if self._phase == "backward" and snap["Gradient"] == made:
                moments.append(snap["Activation"] + snap["Temp"])
            return out

    autocast = torch.autocast("cpu", dtype=torch.bfloat16)
    with Tracker(block, None, external=[x, pos]):
        with autocast if precision == "amp" else contextlib.nullcontext():
            out = block(x, pos, None, use_cache=False)[0]
        out.backward(torch.randn_like(out))  # the output's gradient: one more output
    return max(moments), out.untyped_storage().nbytes()


@pytest.mark.parametrize("precision", ["fp32", "bf16", "amp"])
@pytest.mark.parametrize("B,T", [(2, 7), (1, 16), (3, 5)])
@pytest.mark.parametrize("width", [256, 128])
def test_backward_moment_equals_a_live_storage_trace(precision, B, T, width):
    """Inside the scan's backward: the saved set, ``backward_transient``, the module's
    last state (``resident``'s share) and the output with its gradient are the traced
    live bytes, to the byte."""
    block, att = _block(width)
    setup = TrainingSetup(batch_size=B, seq_len=T, precision=precision)
    alive, out = _traced_step(block, precision, B, T, width)
    kept = sum(rglru.saved(att, setup, HIDDEN).values())
    extra = rglru.backward_transient(att, setup, HIDDEN)
    assert kept + extra + B * width * 4 + 2 * out == alive


def _checkpointed_step(layer, precision: str, B: int, T: int) -> int:
    """One forward (checkpointed, non-reentrant) and backward of the real decoder layer
    under the live-storage tracker: the Activation bytes still alive once the output is
    dropped (the input leaf's gradient is Temp; the input is Other)."""
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    layer = layer.to(dtype)
    x = torch.randn(B, T, HIDDEN, dtype=dtype, requires_grad=True) * 1.0
    pos = torch.arange(T).unsqueeze(0)
    tracker = LiveStorageTracker(layer, None, external=[x, pos])
    autocast = torch.autocast("cpu", dtype=torch.bfloat16)
    with tracker:
        with autocast if precision == "amp" else contextlib.nullcontext():
            out = torch.utils.checkpoint.checkpoint(layer, x, pos, None, False, use_reentrant=False)
        out.backward(torch.randn_like(out))
        del out
    return next(iter(tracker._current.values()))["Activation"]


@pytest.mark.parametrize("precision", ["fp32", "bf16", "amp"])
@pytest.mark.parametrize("B,T", [(1, 16), (2, 7)])
def test_a_checkpointed_layer_keeps_its_recomputed_graph(precision, B, T):
    """A checkpointed decoder layer (non-reentrant, as transformers checkpoints) after
    its backward: what is still alive beyond its parameters, their gradients and its
    input is the recomputed graph the module's last state holds (``retained``, which
    counts the input the norm saved) and that state itself."""
    from transformers.models.recurrent_gemma.modeling_recurrent_gemma import (
        RecurrentGemmaDecoderLayer,
    )

    torch.manual_seed(0)
    layer = RecurrentGemmaDecoderLayer(_config(256), 0)
    for p in layer.parameters():
        torch.nn.init.normal_(p, std=0.1)
    left = _checkpointed_step(layer, precision, B, T)
    att = Attention(
        kind="rglru",
        num_attention_heads=4,
        num_key_value_heads=4,
        head_dim=64,
        lru_width=256,
        lru_conv_width=4,
    )
    setup = TrainingSetup(batch_size=B, seq_len=T, precision=precision)
    stream = B * T * HIDDEN * (2 if precision == "bf16" else 4)  # x, Other: not counted
    kept = rglru.retained(att, setup, HIDDEN) - (0 if precision == "bf16" else stream)
    assert left == kept + B * 256 * 4


def _checkpointed_backward(layer, precision: str, B: int, T: int) -> int:
    """One checkpointed forward and backward of the real decoder layer under the
    live-storage tracker: Activation + Temp at the division of the last
    ``SqrtBoundDerivative.backward`` (``grad_output / torch.sqrt(clipped_x_times_4)``)."""
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    layer = layer.to(dtype)
    x = torch.randn(B, T, HIDDEN, dtype=dtype, requires_grad=True) * 1.0
    pos = torch.arange(T).unsqueeze(0)
    ops: list[tuple[str, int]] = []

    class Tracker(LiveStorageTracker):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = super().__torch_dispatch__(func, types, args, kwargs)
            if self._phase == "backward":
                snap = next(iter(self._current.values()))
                ops.append((str(func), snap["Activation"] + snap["Temp"]))
            return out

    autocast = torch.autocast("cpu", dtype=torch.bfloat16)
    with Tracker(layer, None, external=[x, pos]):
        with autocast if precision == "amp" else contextlib.nullcontext():
            out = torch.utils.checkpoint.checkpoint(layer, x, pos, None, False, use_reentrant=False)
        out.backward(torch.randn_like(out))  # the output and its gradient stay bound
    divisions = [
        alive
        for (before, _), (name, alive) in zip(ops, ops[1:], strict=False)
        if before.startswith("aten.sqrt") and name.startswith("aten.div")
    ]
    return divisions[-1]


@pytest.mark.parametrize("precision", ["fp32", "bf16", "amp"])
@pytest.mark.parametrize("B,T,width", [(2, 64, 256), (1, 32, 128), (3, 20, 256)])
def test_checkpointed_backward_moment_equals_a_live_storage_trace(precision, B, T, width):
    """Checkpointed, the block's backward peaks inside the square root's backward: the
    saved set, its norm's kept tensors, ``checkpointed_sqrt_transient``, the module's
    last state and three stream-sized tensors (the output, its gradient and the input's)
    are the traced live bytes, to the byte."""
    from transformers.models.recurrent_gemma.modeling_recurrent_gemma import (
        RecurrentGemmaDecoderLayer,
    )

    torch.manual_seed(0)
    layer = RecurrentGemmaDecoderLayer(_config(width), 0)
    for p in layer.parameters():
        torch.nn.init.normal_(p, std=0.1)
    alive = _checkpointed_backward(layer, precision, B, T)
    att = _block(width)[1]
    setup = TrainingSetup(
        batch_size=B, seq_len=T, precision=precision, activation_checkpointing=True
    )
    s, BT = setup.activation_bytes, B * T
    r = 2 if precision == "bf16" else 4  # the stream's bytes
    # temporal_pre_norm: rstd, x·rstd, 1 + weight; outside autocast its output as
    # linear_x keeps it; in BF16 the FP32 copy of its input
    norm = BT * 4 + BT * HIDDEN * 4 + HIDDEN * 4
    norm += 0 if precision == "amp" else BT * HIDDEN * s
    norm += BT * HIDDEN * 4 if precision == "bf16" else 0
    kept = sum(rglru.saved(att, setup, HIDDEN).values()) + norm
    extra = rglru.checkpointed_sqrt_transient(att, setup, HIDDEN)
    assert extra == rglru.backward_transient(att, setup, HIDDEN)  # the larger of the two
    assert kept + extra + B * width * 4 + 3 * BT * HIDDEN * r == alive


@pytest.mark.parametrize(
    "extra",
    [
        {},
        {"attention_bias": True, "tie_word_embeddings": False},
        {"lru_width": None, "block_types": ["attention", "recurrent"]},
        {"num_hidden_layers": 5, "conv1d_width": 2, "num_key_value_heads": 4},
    ],
)
def test_recurrent_gemma_count_is_the_meta_build(extra):
    config = {k: v for k, v in {**RECURRENT_GEMMA, **extra}.items() if v is not None}
    spec = count_is_the_meta_build(config)
    kinds = [r.kind.attention.kind for r in spec.runs for _ in range(r.count)]
    cycle = config.get("block_types", ["recurrent", "recurrent", "attention"])
    names = {"recurrent": "rglru", "attention": "sliding"}
    assert kinds == [names[cycle[i % len(cycle)]] for i in range(config["num_hidden_layers"])]


def test_the_default_config_count_is_the_meta_build():
    """RecurrentGemmaConfig's defaults written out, as a saved config.json spells them
    (the 2B: 26 layers, d = 2560, 10 heads, one K/V head)."""
    raw = transformers.AutoConfig.for_model("recurrent_gemma").to_dict()
    spec = count_is_the_meta_build({**raw, "model_type": "recurrent_gemma"})
    assert [r.kind.attention.kind for r in spec.runs][:2] == ["rglru", "sliding"]


@pytest.mark.parametrize("setup", list(SETUPS))
@pytest.mark.parametrize("B,T", [(1, 64), (2, 32), (2, 256)])  # 256: activations dominate
def test_recurrent_gemma_closed_form_is_within_3_percent_of_the_dry_run(
    tmp_path, capsys, setup, B, T
):
    row = measured(tmp_path, capsys, RECURRENT_GEMMA, SETUPS[setup], B, T)
    assert row["measured_over_refined"] == pytest.approx(1.0, abs=0.03)


@pytest.mark.parametrize(
    "change,key",
    [
        ({"lru_width": 250}, "lru_width"),  # 4 heads do not divide it
        ({"conv1d_width": 0}, "conv1d_width"),
        ({"lru_width": -8}, "lru_width"),
    ],
)
def test_bad_rglru_sizes_are_one_line_naming_file_and_key(tmp_path, capsys, change, key):
    path = tmp_path / "rg.json"
    path.write_text(json.dumps({**RECURRENT_GEMMA, **change}))
    assert main(["profile", str(path)]) == 2
    line = one_line_error(capsys)
    assert str(path) in line and key in line


def test_lora_on_the_rglru_stack_is_refused_in_one_line(tmp_path, capsys):
    path = tmp_path / "rg.json"
    path.write_text(json.dumps(RECURRENT_GEMMA))
    assert main(["profile", str(path), "--finetune", "lora"]) == 2
    line = one_line_error(capsys)
    assert "--finetune lora" in line and "RG-LRU" in line
