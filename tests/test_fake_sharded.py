"""The sharded step as a one-process dry run (introspect.measure.fake_sharded) against
the real D-process gloo step (introspect.measure.distributed), rank for rank."""

from __future__ import annotations

import math

import pytest

from introspect.errors import IntrospectError
from introspect.setup import TrainingSetup

#: A tiny Qwen2 (GQA, untied head): the config's own transformers class in both runs.
CONFIG = dict(
    model_type="qwen2", hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
    num_key_value_heads=2, intermediate_size=128, vocab_size=512,
)  # fmt: skip
HF = dict(device="cpu", implementation="transformers", loop="labels", seq_len=32)


def _spec():
    from introspect.adapters.hf_config import spec_from_config

    return spec_from_config(CONFIG, source="tiny qwen2")


SETUPS = {
    "ddp": TrainingSetup(**HF, devices=2, sharding="ddp"),
    "ddp bucket-view": TrainingSetup(**HF, devices=2, sharding="ddp", gradient_as_bucket_view=True),
    "zero1": TrainingSetup(**HF, devices=2, sharding="zero", zero_stage=1),
    "fsdp": TrainingSetup(**HF, devices=2, sharding="fsdp"),
    "fsdp no-reshard": TrainingSetup(**HF, devices=2, sharding="fsdp", reshard_after_forward=False),
    "fsdp lora": TrainingSetup(**HF, devices=2, sharding="fsdp", finetune="lora", lora_rank=8),
    "ddp lora": TrainingSetup(**HF, devices=2, sharding="ddp", finetune="lora", lora_rank=8),
    "zero1 lora": TrainingSetup(
        **HF, devices=2, sharding="zero", zero_stage=1, finetune="lora", lora_rank=8
    ),
    "fsdp qlora": TrainingSetup(**HF, devices=2, sharding="fsdp", finetune="qlora", lora_rank=8),
    "ddp qlora": TrainingSetup(**HF, devices=2, sharding="ddp", finetune="qlora", lora_rank=8),
}
#: Set apart: its real peak falls inside gloo's reduce-scatter (see below).
MIXED = TrainingSetup(**HF, devices=2, sharding="fsdp", precision="mixed")


@pytest.fixture(scope="module")
def real():
    """Every setup's real 2-process gloo step, in one group of two processes."""
    from introspect.measure.distributed import measure_many

    spec = _spec()
    jobs = [(spec, s) for s in (*SETUPS.values(), MIXED)]
    results = measure_many(jobs, timeout=300, configs=[CONFIG] * len(jobs))
    return dict(zip((*SETUPS, "mixed"), results, strict=True))


@pytest.mark.parametrize("name", list(SETUPS))
def test_the_dry_run_is_the_real_step_to_the_byte_on_every_rank(real, name):
    from introspect.measure.fake_sharded import dry_run

    setup = SETUPS[name]
    fake = dry_run(CONFIG, "tiny qwen2", _spec(), setup, ranks=(0, 1))
    for measured, dry in zip(real[name].ranks, fake.ranks, strict=True):
        assert dry.rank == measured.rank
        if setup.resolved_sharding != "fsdp" or dry.peak_phase == measured.peak_phase:
            assert dry.peak_phase == measured.peak_phase
        else:  # gloo's late-freed copy (below) lifted another phase past the dry run's peak
            lift = measured.phase_peaks[measured.peak_phase] - dry.peak_bytes
            assert 0 <= lift <= _root_reduce_scatter_bytes()
        if setup.resolved_sharding == "fsdp":
            # gloo's worker thread frees its reduce-scatter copy when it gets to it (see
            # below): on a loaded machine the real peak may differ by a few small tensors.
            assert abs(dry.peak_bytes - measured.peak_bytes) <= _root_reduce_scatter_bytes()
        else:
            assert dry.peak_bytes == measured.peak_bytes
            assert dry.categories == measured.categories
        assert dry.partition == measured.partition
        assert sum(dry.categories.values()) == dry.peak_bytes
        if setup.resolved_sharding != "fsdp":
            assert dry.phase_peaks == measured.phase_peaks
            continue
        # gloo's reduce-scatter copy (see below) is freed by its worker thread, at times
        # into the next phase: a phase's own peak may hold one more root-sized copy.
        assert dry.phase_peaks["forward"] == measured.phase_peaks["forward"]
        for phase in ("backward", "optimizer"):
            gap = measured.phase_peaks[phase] - dry.phase_peaks[phase]
            assert 0 <= gap <= _root_reduce_scatter_bytes()


def _root_reduce_scatter_bytes() -> int:
    """FP32 bytes of the root unit's parameters (all but the decoder layers'): the
    largest reduce-scatter input, whose gloo copy is the largest."""
    import torch

    from introspect.measure import hf_models

    with torch.device("meta"):
        model = hf_models.build(CONFIG, "t", attention="eager", dtype=torch.float32)
    in_layers = {id(p) for p in model.model.layers.parameters()}
    return sum(4 * p.numel() for p in model.parameters() if id(p) not in in_layers)


def test_mixed_differs_only_by_the_gloo_reduce_scatter_copy(real):
    """gloo's CPU reduce-scatter (``c10d._reduce_scatter_base_``) copies its input while
    it runs (the refined estimate's ``comm/gloo_copy``); torch's fake group, like NCCL,
    reduces in place. Under MixedPrecisionPolicy the real peak falls inside the root's
    reduce-scatter, so the dry run's peak is lower by at most that copy: the reduce-
    scatter input alive at the real peak (``comm``)."""
    from introspect.measure.fake_sharded import dry_run

    fake = dry_run(CONFIG, "tiny qwen2", _spec(), MIXED, ranks=(0, 1))
    for measured, dry in zip(real["mixed"].ranks, fake.ranks, strict=True):
        assert dry.phase_peaks["forward"] == measured.phase_peaks["forward"]
        copy = measured.categories["comm"]
        assert dry.peak_bytes <= measured.peak_bytes <= dry.peak_bytes + copy
        for phase in ("backward", "optimizer"):  # freed by gloo's thread, at times late
            gap = measured.phase_peaks[phase] - dry.phase_peaks[phase]
            assert 0 <= gap <= _root_reduce_scatter_bytes()


def test_only_zero1_runs_every_rank_by_default():
    from introspect.measure.fake_sharded import ranks_to_run

    assert ranks_to_run(SETUPS["fsdp"]) == (0,)
    assert ranks_to_run(SETUPS["ddp"]) == (0,)
    assert ranks_to_run(TrainingSetup(**HF, devices=5, sharding="zero", zero_stage=1)) == (
        0, 1, 2, 3, 4,
    )  # fmt: skip


def test_fsdp_at_eight_ranks_holds_the_padded_eighth_of_every_parameter():
    """At D=8 rank 0's sharded parameters are FSDP2's padded dim-0 chunks
    (``ceil(dim0 / 8)`` rows of each parameter, ``FSDPParam._init_sharded_param``) plus
    the buffers, counted from the class built on meta — not from the dry run."""
    import torch

    from introspect.measure import hf_models
    from introspect.measure.fake_sharded import dry_run

    D = 8
    config = dict(CONFIG, num_hidden_layers=3)
    setup = TrainingSetup(**HF, devices=D, sharding="fsdp")
    with torch.device("meta"):
        model = hf_models.build(config, "t", attention="eager", dtype=torch.float32)
    shards = sum(
        math.ceil(p.shape[0] / D) * (p.numel() // p.shape[0]) * p.element_size()
        for p in model.parameters()
    )
    buffers = sum(b.numel() * b.element_size() for b in model.buffers())
    from introspect.adapters.hf_config import spec_from_config

    m = dry_run(config, "t", spec_from_config(config, source="t"), setup)
    rank = m.largest
    assert [r.rank for r in m.ranks] == [0]
    assert rank.categories["parameters"] == shards + buffers
    # Adam's m and v over the shards (plus a step counter per parameter).
    assert 2 * shards <= rank.categories["optimizer_state"] <= 2 * shards + 8 * 64
    assert sum(rank.categories.values()) == rank.peak_bytes


def test_a_setup_torch_does_not_shard_is_one_line():
    from introspect.measure.fake_sharded import dry_run

    qlora = TrainingSetup(
        **HF, devices=2, sharding="zero", zero_stage=1, finetune="qlora", lora_rank=8
    )
    with pytest.raises(IntrospectError, match="ZeroRedundancyOptimizer"):
        dry_run(CONFIG, "t", _spec(), qlora)

    with pytest.raises(IntrospectError, match="--zero 2"):
        dry_run(CONFIG, "t", _spec(), TrainingSetup(**HF, devices=2, sharding="zero", zero_stage=2))
    with pytest.raises(IntrospectError, match="--precision mixed"):
        mixed = TrainingSetup(**HF, devices=2, sharding="ddp", precision="mixed")
        dry_run(CONFIG, "t", _spec(), mixed)


def test_the_command_prints_the_rank_its_phase_and_the_tracker_kinds(capsys):
    from introspect.cli import main

    argv = ["measure", "--layers", "2", "--d-emb", "64", "--heads", "4", "--vocab", "128",
            "--seq", "8", "--device", "fake", "--fsdp", "--devices", "16"]  # fmt: skip
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "rank 0 (ranks symmetric)" in out
    assert "Unsharded Param" in out and "torch 2." in out
