"""``introspect measure``'s meter against torch's own ``MemTracker`` around the same step.

Each family's small config is built as ``introspect measure --impl transformers`` builds it
(:func:`introspect.measure.hf_models.build`) and stepped once by
:func:`introspect.measure.torch_step.measure_step` — our live-storage tracker inside,
``torch.distributed._tools.mem_tracker.MemTracker`` entered around the same step
(``witness``): one step, two meters, the same operations. The peak, the phase and the
categories must be identical to the byte.

Issue 25 read 5.065 GB (``measure``) against 5.140 GB (MemTracker) on GPT-2 at T=1024: the
meters were not on the same step. ``measure`` builds with ``use_cache=False`` (as the HF
Trainer does, ``transformers/trainer.py``: ``model.config.use_cache = args.use_cache``,
default False); the hand-written step MemTracker was wrapped around kept GPT2Config's
default ``use_cache=True``. Then ``DynamicLayer.update`` (``transformers/cache_utils.py``)
returns ``torch.cat([self.keys, key_states])`` — a copy of K and of V — and the attention
saves the copies, while Q, a view of ``c_attn``'s fused output
(``models/gpt2/modeling_gpt2.py``: ``self.c_attn(hidden_states).split(...)``), keeps that
whole B·T·3d storage alive: 2·B·T·d·4 bytes per layer more, 75,497,472 at T=1024, L=12,
d=768 — the whole gap. Llama's copies replace a rotary K and a V that nothing else keeps:
no gap. :func:`test_the_kv_cache_is_the_issue_gap` checks both meters on both builds.

Run as a script for the issue's row (``PY tests/test_memtracker.py CONFIG T``): the
``measure`` peak, MemTracker's and the closed form.
"""

from __future__ import annotations

import sys

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import hf_steps  # noqa: E402

from introspect.measure import hf_models, torch_step  # noqa: E402
from introspect.setup import TrainingSetup  # noqa: E402

pytestmark = pytest.mark.slow

_SMALL = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, vocab_size=512)
#: tests/hf_steps.py's families and three more shapes: fused projections (Phi-3), soft
#: capping and sandwich norms (Gemma 2), experts (Mixtral).
CONFIGS = dict(
    hf_steps.CONFIGS,
    phi3=dict(_SMALL, model_type="phi3", intermediate_size=128, pad_token_id=0),
    gemma2=dict(
        _SMALL, model_type="gemma2", num_key_value_heads=2, head_dim=16,
        intermediate_size=160, sliding_window=4096,
    ),
    mixtral=dict(
        _SMALL, model_type="mixtral", intermediate_size=128, num_key_value_heads=2,
        num_local_experts=4, num_experts_per_tok=2,
    ),
)  # fmt: skip


def both_meters(raw: dict, setup: TrainingSetup, *, use_cache: bool = False):
    """One step of the family's class as ``measure`` builds it, read by our meter and by
    MemTracker around it: (Measurement, MemTracker's peak, its kinds in our categories,
    its phase). ``use_cache`` sets the config's flag after ``build`` (which clears it)."""
    from introspect.measure.live_tracker import categories, optimizer_state_bytes
    from introspect.measure.tracker import peak, witness

    dtype = torch_step.check_setup(setup)
    model = hf_models.build(raw, raw["model_type"], attention=setup.attention, dtype=dtype)
    model.config.get_text_config().use_cache = use_cache
    seen = []

    def make(model, optimizer, master):
        seen.append((witness(model, optimizer, master), optimizer))
        return seen[-1][0]

    m = torch_step.measure_step(
        model, setup, vocab=model.config.get_text_config().vocab_size,
        forward=torch_step.hf_forward, implementation="transformers", loop=setup.loop,
        witness=make,
    )  # fmt: skip
    tracker, optimizer = seen[0]
    total, kinds = peak(tracker)
    return m, total, categories(kinds, optimizer_state_bytes(optimizer)), tracker.peak_phase


def _setup(**kw) -> TrainingSetup:
    fields = dict(batch_size=2, seq_len=32, framework="torch", device="cpu",
                  implementation="transformers", loop="labels")  # fmt: skip
    return TrainingSetup(**(fields | kw))


ROWS = [(family, {}) for family in CONFIGS] + [
    ("gpt2", dict(loop="logits", attention="memory_efficient")),
    ("llama", dict(precision="bf16")),
    ("qwen2", dict(precision="mixed")),
    ("phi3", dict(precision="amp", activation_checkpointing=True)),
]


@pytest.mark.parametrize(
    "family,kw", ROWS, ids=[f"{f}-{'-'.join(map(str, k.values()))}" for f, k in ROWS]
)
def test_measure_and_memtracker_read_the_same_step_to_the_byte(family, kw):
    setup = _setup(**kw)
    m, total, theirs, phase = both_meters(CONFIGS[family], setup)
    assert m.peak_bytes == total
    assert m.peak_phase == phase
    assert m.categories["activations"] + m.categories["temporary"] > 0
    if setup.precision == "mixed":
        # measure files the FP32 master copy (MemTracker's Other) as optimizer state.
        assert sum(m.categories.values()) == sum(theirs.values())
    else:
        assert m.categories == theirs


def test_the_kv_cache_is_the_issue_gap():
    """GPT-2 with the config's default ``use_cache=True`` keeps the cache's copies of K and
    V beside c_attn's fused output: 2·L·B·T·d·4 more, by both meters; Llama: nothing."""
    # the peak in backward, the cache alive; eager attention, where the gap was seen
    setup = _setup(batch_size=1, seq_len=256, attention="eager")
    for family, expected in (("gpt2", 2 * 2 * 1 * 256 * 64 * 4), ("llama", 0)):
        off = both_meters(CONFIGS[family], setup, use_cache=False)
        on = both_meters(CONFIGS[family], setup, use_cache=True)
        assert off[0].peak_bytes == off[1] and on[0].peak_bytes == on[1]
        assert on[0].peak_phase == "backward"
        assert on[1] - off[1] == expected, family


def _issue_row(config_path: str, seq_len: int) -> None:
    """The issue's row: GPT-2 FP32 eager at T, B=1: measure's peak, MemTracker's around
    the same step, and the closed form (``refined.estimate``) for the same setup."""
    import json

    from introspect.adapters.hf_config import spec_from_config

    from introspect import refined

    raw = json.loads(open(config_path).read())
    setup = _setup(batch_size=1, seq_len=seq_len, attention="eager")
    spec = spec_from_config(dict(raw), source=config_path)
    m, total, _, phase = both_meters(raw, setup)
    estimate = refined.estimate(spec, setup)
    print(f"{config_path} T={seq_len} B=1 fp32 eager, labels loop (bytes, GB)")
    print(f"measure     {m.peak_bytes:>14,}  {m.peak_bytes / 1e9:.3f}  {m.peak_phase}")
    print(f"MemTracker  {total:>14,}  {total / 1e9:.3f}  {phase}")
    print(f"closed form {estimate.total:>14,}  {estimate.total / 1e9:.3f}  {estimate.peak_phase}")
    print(f"closed form / measure = {estimate.total / m.peak_bytes:.4f}")


if __name__ == "__main__":
    _issue_row(sys.argv[1], int(sys.argv[2]))
