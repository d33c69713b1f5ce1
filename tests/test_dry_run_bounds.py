"""The dry runs of LongCat-Flash and BLT answer their step's upper bound
(introspect.measure.fake_bounds), carry the note that says so, and hold at least what a
real CPU step of the same class holds with its routing or patching forced to other cases
(and exactly what it holds in the bound's own case)."""

from __future__ import annotations

import types

import pytest

pytest.importorskip("transformers")

#: LongCat-Flash at a tiny shape: k = 4 of 8 real experts, 4 identity experts.
LONGCAT = dict(
    model_type="longcat_flash", hidden_size=128, num_layers=1, num_attention_heads=4,
    vocab_size=100, ffn_hidden_size=128, q_lora_rank=48, kv_lora_rank=32,
    qk_rope_head_dim=16, qk_nope_head_dim=16, v_head_dim=16, head_dim=16, moe_topk=4,
    n_routed_experts=8, zero_expert_num=4, expert_ffn_hidden_size=512,
)  # fmt: skip


def _blt(threshold: float) -> dict:
    return dict(
        model_type="blt", vocab_size=260, cross_attn_k=2, encoder_hash_byte_group_vocab=1000,
        patching_threshold=threshold, max_position_embeddings=1024,
        encoder_config=dict(hidden_size=64, num_attention_heads=4, num_hidden_layers=1,
                            hidden_size_global=128, intermediate_size=128),
        decoder_config=dict(hidden_size=64, num_attention_heads=4, num_hidden_layers=2,
                            hidden_size_global=128, intermediate_size=128),
        global_config=dict(hidden_size=128, num_attention_heads=4, num_hidden_layers=2,
                           intermediate_size=256),
        patcher_config=dict(hidden_size=64, num_attention_heads=4, num_hidden_layers=1,
                            intermediate_size=128),
    )  # fmt: skip


def _setup(seq_len: int):
    from introspect.setup import TrainingSetup

    return TrainingSetup(
        batch_size=1, seq_len=seq_len, device="cpu", implementation="transformers",
        optimizer="adamw", precision="fp32", attention="eager",
    )  # fmt: skip


def _dry_run(raw: dict, seq_len: int):
    from introspect.adapters.hf_config import spec_from_config

    from introspect.measure import hf_models

    spec = spec_from_config(raw, source=raw["model_type"])
    m, _ = hf_models.measure(raw, raw["model_type"], spec, _setup(seq_len), device="fake",
                             census=False)  # fmt: skip
    return m


def _real_longcat(routing, seq_len: int) -> int:
    """A real CPU step of LongCat-Flash whose router picks ``routing(N)`` ((N, k)
    indices); the experts' loop is the class's own."""
    import torch

    from introspect.measure import hf_models, torch_step

    model = hf_models.build(LONGCAT, "longcat", attention="eager", dtype=torch.float32)
    for m in model.modules():
        if type(m).__name__ == "LongcatFlashTopkRouter":
            m.get_topk_indices = types.MethodType(lambda self, s: routing(s.shape[0]), m)
    step = torch_step.measure_step(
        model, _setup(seq_len), vocab=model.config.vocab_size, device="cpu",
        forward=torch_step.hf_forward, implementation="transformers",
    )  # fmt: skip
    return step.peak_bytes


def test_bound_routing_routes_every_row_to_a_real_expert():
    from introspect.measure.fake_bounds import bound_routing

    plan = bound_routing(tokens=16, top_k=4, routed=8, total=12)
    assert sum(n for _, n in plan) == 16 * 4
    assert all(e < 8 and 1 <= n <= 16 for e, n in plan)
    assert [e for e, _ in plan] == sorted({e for e, _ in plan})  # the loop's order
    assert plan[-4:] == [(4, 1), (5, 1), (6, 1), (7, 1)]  # first in the backward: one row
    assert bound_routing(tokens=16, top_k=4, routed=2, total=6) == [(e, 16) for e in range(4)]


def test_longcat_dry_run_is_the_upper_bound_of_real_routings():
    """The dry run answers; it carries the note; it holds what a real step with its own
    routing holds, and no less than one with every token on the same k experts, spread
    evenly, or all on the identity experts."""
    import torch

    from introspect.measure.fake_bounds import UPPER_BOUND, bound_routing

    T, k, E = 64, 4, 8
    m = _dry_run(LONGCAT, T)
    assert any(n.startswith(UPPER_BOUND + "every top-k row routed to a real expert")
               for n in m.notes)  # fmt: skip

    def bound(N):
        out = torch.empty(N, k, dtype=torch.long)
        slot = [0] * N
        for e, n in bound_routing(N, k, E, E + 4):
            tokens = range(n) if n == N else [t for t in range(N) if slot[t] < k][-n:]
            for t in tokens:
                out[t, slot[t]] = e
                slot[t] += 1
        return out

    cases = {
        "bound": bound,
        "same k experts": lambda N: torch.arange(k).expand(N, k).clone(),
        "even": lambda N: (torch.arange(N)[:, None] + torch.arange(k)[None, :]) % E,
        "identity experts": lambda N: (E + torch.arange(k)).expand(N, k).clone(),
    }
    peaks = {name: _real_longcat(fn, T) for name, fn in cases.items()}
    assert peaks["bound"] == m.peak_bytes
    assert all(p <= m.peak_bytes for p in peaks.values()), peaks
    assert peaks["identity experts"] < m.peak_bytes


def test_longcat_answer_leaves_the_class_as_it_was():
    from transformers.models.longcat_flash import modeling_longcat_flash as mod

    own = mod.LongcatFlashExperts.__dict__["forward"]
    _dry_run(LONGCAT, 16)
    assert mod.LongcatFlashExperts.__dict__["forward"] is own


def test_blt_dry_run_is_every_byte_its_own_patch():
    """The dry run answers whatever the threshold, carries the note, equals a real step
    whose every entropy is over the threshold and holds more than one with no patch."""
    from introspect.adapters.hf_config import spec_from_config
    from transformers.models.blt import modeling_blt

    from introspect.measure import hf_models
    from introspect.measure.fake_bounds import UPPER_BOUND

    T = 256
    own = modeling_blt.process_patch_lengths
    m = _dry_run(_blt(1e9), T)
    assert modeling_blt.process_patch_lengths is own
    assert any(n.startswith(UPPER_BOUND + "every byte its own patch") for n in m.notes)
    real = {}
    for threshold in (-1.0, 1e9):  # every byte a patch; none but the two first
        raw = _blt(threshold)
        spec = spec_from_config(raw, source="blt")
        r, _ = hf_models.measure(raw, "blt", spec, _setup(T), device="cpu", census=False)
        real[threshold] = r.peak_bytes
        assert not any(n.startswith(UPPER_BOUND) for n in r.notes)
    assert real[-1.0] == m.peak_bytes
    assert real[1e9] < m.peak_bytes
