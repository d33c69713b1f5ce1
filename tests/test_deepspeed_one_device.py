"""DeepSpeed named apart from FSDP2, and DeepSpeed ZeRO on one device
(introspect/refined/deepspeed.py, from deepspeed/runtime/zero/stage_1_and_2.py and
engine.py). DeepSpeed is not installed here: these check the closed form's mechanism —
each term against the source's allocation, computed from the model's own N."""

from __future__ import annotations

import math

import pytest
from specs import QWEN25_05B

from introspect import refined
from introspect.cli import main
from introspect.errors import IntrospectError
from introspect.refined import deepspeed, execution
from introspect.setup import TrainingSetup
from introspect.terms import ZERO_REDUCE_BUCKET

SPEC = QWEN25_05B
N = SPEC.n_params


def _moment(setup: TrainingSetup, phase: str) -> dict[str, int]:
    found = [t for p, t in execution.moments(SPEC, setup) if p == phase]
    assert found, phase
    return found[-1]


def _zero2(**kw) -> TrainingSetup:
    return TrainingSetup(
        **{"seq_len": 256, "sharding": "zero", "zero_stage": 2, "devices": 1, **kw}
    )


def test_one_device_zero2_answers_with_its_buffers(capsys):
    code = main(
        ["profile", "Qwen/Qwen2.5-0.5B", "--zero", "2", "--devices", "1"] + ["--precision", "mixed"]
    )
    out = capsys.readouterr().out
    assert code in (0, None)
    assert "1 device, DeepSpeed ZeRO-2" in out
    assert "nothing is partitioned" in out
    assert "master_grads" in out  # the step's conversion into the FP32 partition


def test_one_device_zero2_terms_follow_stage_1_and_2():
    """One rank, mixed: the FP32 partition (4N) and Adam (8N) beside the BF16 weights
    (2N); in backward one reduce bucket (min(5e8, N) BF16 values); at the step's
    conversion the BF16 gradients, their flat copy and its FP32 conversion (2N + 2N +
    4N); the update itself on the FP32 gradient alone (4N), FusedAdam in place."""
    s = _zero2(precision="mixed")
    state = execution.state_terms(SPEC, s)
    assert state["weights"] == 2 * N
    assert state["optimizer/master_weights"] == 4 * N
    assert state["optimizer/adam_m"] + state["optimizer/adam_v"] == 8 * N
    buckets = {t.get(ZERO_REDUCE_BUCKET) for p, t in execution.moments(SPEC, s) if p == "backward"}
    assert 2 * min(500_000_000, N) in buckets
    flat = _moment(s, "master_grads")
    assert flat["grads"] == 2 * N
    assert flat[deepspeed.FLAT_GRADS] == 2 * N
    assert flat[deepspeed.FP32_GRADS] == 4 * N
    step = _moment(s, "optimizer_step")
    assert step["grads"] == 4 * N
    assert step["optimizer/temporaries"] == 0  # FusedAdam (engine.py)
    assert s.resolved_optimizer_impl == "fused"
    assert refined.estimate(SPEC, s).peak_phase in ("master_grads", "backward", "forward")


def test_one_device_is_the_d_device_rule_at_d_equal_1():
    """The same per-rank rule at D = 1 and D = 4: every DeepSpeed term is ceil(N/D)·bytes."""
    for D in (1, 4):
        s = _zero2(precision="mixed", devices=D)
        n = math.ceil(N / D)
        flat = _moment(s, "master_grads")
        assert flat["optimizer/master_weights"] == 4 * n
        assert flat[deepspeed.FLAT_GRADS] == 2 * n
        assert flat[deepspeed.FP32_GRADS] == 4 * n


def test_fp32_zero2_keeps_a_cloned_fp32_partition_stage3_does_not():
    """stage_1_and_2.py clones the partition whatever its dtype; stage3.py reuses an
    FP32 partition. Under FP32 weights the step's .to(fp32) copies nothing."""
    s2 = _zero2(precision="fp32")
    assert execution.state_terms(SPEC, s2)["optimizer/master_weights"] == 4 * N
    assert _moment(s2, "master_grads")[deepspeed.FP32_GRADS] == 0
    s3 = s2.replace(zero_stage=3)
    assert "optimizer/master_weights" not in execution.state_terms(SPEC, s3)
    plain = TrainingSetup(seq_len=256, precision="fp32")
    assert "optimizer/master_weights" not in execution.state_terms(SPEC, plain)


def test_an_asked_optimizer_impl_is_kept_under_deepspeed():
    s = _zero2(precision="mixed", optimizer_impl="foreach")
    assert _moment(s, "optimizer_step")["optimizer/temporaries"] == 4 * N


def test_zero1_on_one_device_is_still_refused(capsys):
    assert main(["profile", "Qwen/Qwen2.5-0.5B", "--zero", "1", "--devices", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--zero 1" in err[0] and "--zero 2 or 3" in err[0]


@pytest.mark.parametrize(
    "flags, named, not_named",
    [
        (("--fsdp", "--devices", "8"), "8 devices, FSDP2 fully_shard", "ZeRO"),
        (("--fsdp", "--devices", "8", "--no-reshard"), "reshard_after_forward=False", "ZeRO"),
        (("--zero", "3", "--devices", "8"), "8 devices, DeepSpeed ZeRO-3", "FSDP"),
        (("--zero", "1", "--devices", "2"), "ZeroRedundancyOptimizer", "DeepSpeed"),
        ((), "1 device, no sharding", "ZeRO"),
    ],
)
def test_the_setup_line_names_the_library(flags, named, not_named, capsys):
    assert main(["profile", "Qwen/Qwen2.5-0.5B", "--precision", "mixed", *flags]) in (0, None)
    head = next(line for line in capsys.readouterr().out.splitlines() if "training memory" in line)
    assert named in head and not_named not in head


def test_fsdp_terms_never_say_zero_and_deepspeed_terms_never_say_fsdp():
    from introspect.refined import causes

    cases = {
        "FSDP2": TrainingSetup(sharding="fsdp", zero_stage=3, devices=8, precision="mixed"),
        "DeepSpeed": TrainingSetup(sharding="zero", zero_stage=3, devices=8, precision="mixed"),
    }
    for lib, s in cases.items():
        other = "ZeRO" if lib == "FSDP2" else "FSDP"
        for _, terms in execution.moments(SPEC, s):
            for name, why in causes.causes(SPEC, s, terms).items():
                assert other not in why, (lib, name, why)


def test_deepspeed_rules_compose():
    with pytest.raises((IntrospectError, ValueError), match="sharded"):
        TrainingSetup(optimizer="adafactor", sharding="zero", zero_stage=2, devices=1)


def test_one_device_zero3_terms_follow_stage3():
    """stage3.py, one rank, mixed fp16: the IPG bucket (one buffer of reduce_bucket_size
    = 5e8 fp16 values) and the contiguous gradient partition (2N) are allocated with the
    optimizer and held at every moment, the forward's end included; the step releases
    the gathered weights (none on one rank), then converts the partition's flat copy
    (2N) to FP32 (4N) beside it, and updates on the FP32 gradient."""
    s = TrainingSetup(
        seq_len=256, sharding="zero", zero_stage=3, devices=1, precision="mixed",
        activation_dtype="fp16",
    )  # fmt: skip
    assert deepspeed.stage3_applies(s)
    end = _moment(s, "forward_end")
    assert end[ZERO_REDUCE_BUCKET] == 2 * 500_000_000
    assert end["grads"] == 2 * N
    backward = [t for p, t in execution.moments(SPEC, s) if p == "backward"]
    assert {t["grads"] for t in backward} == {2 * N}
    convert = _moment(s, "master_grads")
    assert convert["grads"] == 2 * N and "weights/gathered" not in convert
    assert convert[deepspeed.FLAT_GRADS] == 2 * N and convert[deepspeed.FP32_GRADS] == 4 * N
    step = _moment(s, "optimizer_step")
    assert step[deepspeed.FP32_GRADS] == 4 * N and deepspeed.FLAT_GRADS not in step
    # one rank gathers nothing: each parameter is a view of its partition
    # (partition_parameters.py _no_gather_coalesced); two ranks gather
    assert end["weights/gathered"] == 0 and end.get("comm/all_gather", 0) == 0
    two = _moment(s.replace(devices=2), "forward_end")
    assert two["weights/gathered"] > 0 and two["comm/all_gather"] > 0
    # LoRA under ZeRO-3 keeps the earlier bucket terms (not this module's)
    assert not deepspeed.stage3_applies(s.replace(finetune="lora", lora_rank=8))
