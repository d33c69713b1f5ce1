"""A sharded step (DDP, ZeRO-1, FSDP2) as a dry run: one process, any world size D.

The real sharded step (:mod:`introspect.measure.distributed`) runs D gloo processes on
this machine; here each rank's step runs alone in this process, on torch's fake process
group and fake tensors, as torchtitan's memory estimator does
(``scripts/estimate/estimation.py``: ``FakeStore`` + ``init_process_group("fake")`` +
``FakeTensorMode`` + ``fully_shard`` + ``FSDPMemTracker``):

    dist.init_process_group("fake", store=FakeStore(), rank=r, world_size=D)
    with FakeTensorMode():          # introspect.measure.fake.fake_mode
        distributed_worker._one_job(spec, setup, r, config)   # the real rank's code

``torch/testing/_internal/distributed/fake_pg.py``: the fake group's collectives
communicate nothing and complete at once; under FakeTensorMode no tensor holds data, so
every storage is created and freed exactly as in the real rank while nothing is
allocated. The rank's code is the real worker's own (:func:`_one_job`: the same model,
the same wrapping — ``fully_shard`` per decoder layer then the root, or DDP with its
bucket-recording comm hook, or ZeroRedundancyOptimizer — the same two warm-up steps and
the same FSDPMemTracker/MemTracker peak), with three dry-run-only differences, none of
which allocates inside the measured step:

* FSDP2's default device mesh is built before FakeTensorMode (``init_device_mesh("cpu",
  (D,))``, passed as ``mesh=``): ``DeviceMesh.__init__`` reads its rank tensor
  (``tolist``), which a fake tensor cannot answer.
* DDP is built with ``init_sync=False``: its construction checks every rank's parameter
  shapes and broadcasts rank 0's values (``torch/nn/parallel/distributed.py``,
  ``_verify_param_shape_across_processes``, ``_sync_module_states``), reading data.
* DDP's bucket rebuild (``Reducer::rebuild_buckets``, at the second forward) is
  declined: it broadcasts rank 0's bucket order through an int tensor it fills through
  its data pointer. The rebuild re-orders the same parameters into buckets of the same
  total size (``Reducer::initialize_buckets``: one flat buffer per bucket, no padding),
  allocated before the measured step, so the tracked step holds the same bytes; and the
  second warm-up step, there for the rebuild, is skipped (one warm-up makes Adam's state).

``tests/test_fake_sharded.py`` holds the dry run to a real 2-process gloo step, rank for
rank, to the byte (peak, phase, categories) for DDP, ZeRO-1 and FSDP2 (FP32, resharding
on and off). One difference is the backend's: gloo's CPU reduce-scatter
(``c10d._reduce_scatter_base_``) copies its input while it runs (the refined estimate's
``comm/gloo_copy``), while the fake group, like NCCL, reduces in place; where the real
peak falls inside a reduce-scatter (FSDP2 under MixedPrecisionPolicy: the root's, at the
end of backward) the dry run's peak is lower by at most that input.

LoRA and QLoRA: peft's ``get_peft_model`` (and, for QLoRA, bitsandbytes' NF4
``Linear4bit``: :func:`introspect.measure.peft_step.wrap`) before DDP or ``fully_shard``,
in the worker, so the real step runs it too. For QLoRA under FSDP2 this follows
bitsandbytes' own FSDP support rather than transformers' ``bnb_4bit_quant_storage``
(which gives FSDP1's flat parameters one float dtype): FSDP2 shards each uint8
``Params4bit`` like any parameter (it all-gathers mixed dtypes, and its
MixedPrecisionPolicy casts floating-point parameters only, ``FSDPParam.init_dtype_attrs``)
and ``Linear4bit.forward`` puts the module's quant state back on the gathered weight
(``bitsandbytes/nn/modules.py`` ``fix_4bit_weight_quant_state_from_module``: "the quant
state got lost when the parameter got converted. This happens for example for fsdp"),
re-making a ``Params4bit`` over it — inside the dry run through
:func:`introspect.measure.fake.module_surgery`. The quant state (absmax, codes) stays whole
on every rank, outside every tracker: the worker adds its bytes as ``other``. ZeRO-1 with
QLoRA is refused: ZeroRedundancyOptimizer takes one dense type.

Ranks: DDP's and FSDP2's ranks hold the same bytes (every rank a full replica, or FSDP2's
dim-0 shards padded to one size, ``FSDPParam._init_sharded_param``), so rank 0 alone is
run; ZeroRedundancyOptimizer's partition is greedy by size and differs per rank, so
every rank is run.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from introspect.errors import IntrospectError
from introspect.measure.distributed import RankPeak, ShardedMeasurement
from introspect.setup import TrainingSetup
from introspect.spec import ModelSpec

#: The strategies the dry run runs (as the real sharded step).
DRY_RUN_SHARDING = ("ddp", "zero", "fsdp")


@dataclass(frozen=True)
class DryRunSharded(ShardedMeasurement):
    """Every dry-run rank's peak (``ranks``: the ranks that ran), and what ran."""

    #: Whether the ranks hold the same bytes, so rank 0 stands for all of them.
    symmetric: bool = True
    versions: dict[str, str] = field(default_factory=dict)
    implementation: str = "reference"

    def to_json(self) -> dict[str, Any]:
        out = super().to_json()
        out |= {
            "symmetric": self.symmetric,
            "ranks_run": [r.rank for r in self.ranks],
            "versions": self.versions,
            "implementation": self.implementation,
            "dry_run": True,
        }
        return out


def check(setup: TrainingSetup) -> None:
    """One line for a setup the dry run does not run (the real step's rules, any D)."""
    how = setup.resolved_sharding
    if how not in DRY_RUN_SHARDING:
        raise IntrospectError(
            "a sharded dry run needs --ddp, --zero 1 or --fsdp with --devices D (got no sharding)"
        )
    if how == "zero" and setup.zero_stage != 1:
        raise IntrospectError(
            f"--zero {setup.zero_stage}: torch runs ZeRO-1 (ZeroRedundancyOptimizer); "
            "use --zero 1, or --fsdp for stage 3"
        )
    if setup.precision == "mixed" and how != "fsdp":
        raise IntrospectError(
            "--precision mixed is FSDP2's MixedPrecisionPolicy here; add --fsdp or use fp32"
        )
    if setup.precision not in ("fp32", "mixed"):
        raise IntrospectError(
            f"--precision {setup.precision}: a sharded step runs fp32, or mixed with --fsdp"
        )
    if setup.optimizer not in ("adam", "adamw"):
        raise IntrospectError("a sharded step runs --optimizer adam or adamw")
    if setup.offload != "none":
        raise IntrospectError(
            f"--offload {setup.offload}: FSDP2's CPUOffloadPolicy splits host from device "
            "memory, and the dry run's mesh is the CPU (FSDP2 on a fake CUDA device needs "
            "CUDA streams): the shards, their copies to the device and the step would share "
            "one memory; estimate offload with `introspect profile`"
        )
    if setup.finetune == "qlora" and how == "zero":
        raise IntrospectError(
            "--finetune qlora --zero 1: torch's ZeroRedundancyOptimizer takes parameters of "
            "one dense type, and QLoRA's NF4 base is uint8 beside FP32 adapters; use --ddp "
            "or --fsdp"
        )
    if setup.finetune == "lora" and setup.base_quant not in ("auto", "fp32"):
        raise IntrospectError(
            f"--base-quant {setup.base_quant}: a sharded step keeps LoRA's base in FP32 "
            "(under --precision mixed FSDP2 casts it to BF16 per unit, as accelerate's FSDP "
            "mixed precision does); drop --base-quant"
        )
    if setup.activation_checkpointing or setup.cross_entropy != "standard":
        raise IntrospectError(
            "a sharded step runs without --checkpointing and with the standard cross-entropy"
        )


def ranks_to_run(setup: TrainingSetup) -> tuple[int, ...]:
    """Rank 0 where the ranks are symmetric (DDP, FSDP2), else every rank (ZeRO-1)."""
    return tuple(range(setup.devices)) if setup.resolved_sharding == "zero" else (0,)


def dry_run(
    raw_config: dict[str, Any] | None,
    where: str,
    spec: ModelSpec,
    setup: TrainingSetup,
    *,
    ranks: tuple[int, ...] | None = None,
) -> DryRunSharded:
    """Dry-run ``ranks`` (default :func:`ranks_to_run`) of the sharded step of
    ``raw_config``'s transformers class (``where`` names its source), or of our reference
    model when ``raw_config`` is None, at world size ``setup.devices``."""
    import torch

    from introspect.measure.record import versions

    check(setup)
    D = setup.devices
    chosen = ranks_to_run(setup) if ranks is None else ranks
    if any(not 0 <= r < D for r in chosen):
        raise IntrospectError(f"ranks {chosen}: each must be in 0..{D - 1}")
    peaks = tuple(_one_rank(raw_config, where, spec, setup, r) for r in chosen)
    notes = [
        "dry run: one process, torch's fake process group (FakeStore) and FakeTensorMode; "
        "each rank runs the real worker's step (introspect.measure.distributed_worker)",
        "peaks from live tensor storages (torch FSDPMemTracker/MemTracker), exact bytes",
        "collectives in place (the fake group, as NCCL): gloo's CPU reduce-scatter also "
        "copies its input while it runs (not reproduced)",
    ]
    if setup.resolved_sharding == "zero":
        notes.append(f"ZeRO-1: every rank run ({D}): ZeroRedundancyOptimizer's partition differs")
    else:
        notes.append(
            f"rank 0 of {D} run: the ranks are symmetric ("
            + ("full replicas" if setup.resolved_sharding == "ddp" else "equal padded shards")
            + ")"
        )
    if setup.resolved_sharding in ("ddp", "zero"):
        notes.append("DDP's gradient buckets counted from its comm hook's bucket buffers")
    if setup.finetune != "full":
        from introspect.refined.lora import targets

        base = (
            "the frozen base NF4 (bitsandbytes Linear4bit, uint8 storage sharded as any "
            "parameter; its quant state whole on every rank, added as other)"
            if setup.finetune == "qlora"
            else "the frozen base in FP32"
            + (" (BF16 per unit under MixedPrecisionPolicy)" if setup.precision == "mixed" else "")
        )
        notes.append(
            f"peft LoRA r={setup.lora_rank} on {', '.join(targets(spec, setup))} before "
            f"the sharding wrapper; {base}"
        )
    return DryRunSharded(
        peaks,
        setup.resolved_sharding,
        D,
        tuple(notes),
        symmetric=setup.resolved_sharding != "zero",
        versions=versions("torch", "transformers") | {"torch": torch.__version__},
        implementation="reference" if raw_config is None else "transformers",
    )


def _one_rank(
    raw_config: dict[str, Any] | None,
    where: str,
    spec: ModelSpec,
    setup: TrainingSetup,
    rank: int,
) -> RankPeak:
    import logging

    from introspect.measure.distributed_worker import _one_job
    from introspect.measure.fake import fake_mode, module_surgery
    from introspect.measure.hf_models import unpacked_rows

    log = logging.getLogger("torch._subclasses.fake_tensor")
    level = log.level
    log.setLevel(logging.CRITICAL)
    fsdp = setup.resolved_sharding == "fsdp"
    try:
        with fake_group(rank, setup.devices) as mesh:
            kwargs = {"mesh": mesh} if fsdp else {"init_sync": False}
            # module_surgery: bitsandbytes re-makes a 4-bit Params4bit over the gathered
            # weight in every forward (Linear4bit: fix_4bit_weight_quant_state_from_module).
            with fake_mode(), unpacked_rows("fake"), module_surgery():
                result = _one_job(
                    spec,
                    setup,
                    rank,
                    raw_config,
                    wrap_kwargs=kwargs,
                    wrapped=None if fsdp else _decline_rebuild,
                    warmups=1,  # the second is for DDP's bucket rebuild, declined here
                )
    except IntrospectError:
        raise
    except (RuntimeError, OverflowError, ValueError, TypeError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise IntrospectError(
            f"{where}: the {setup.resolved_sharding} dry run at D={setup.devices} failed in "
            f"torch ({first[:200]}); use a smaller --seq or --batch, or --debug for where"
        ) from e
    finally:
        log.setLevel(level)
    return RankPeak(rank=rank, **result)


@contextmanager
def fake_group(rank: int, world_size: int) -> Iterator[Any]:
    """torch's fake process group as ``rank`` of ``world_size``, with its 1-D CPU device
    mesh (built here, outside FakeTensorMode), destroyed on exit."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.testing._internal.distributed.fake_pg import FakeStore

    if dist.is_initialized():
        raise IntrospectError(
            "a sharded dry run needs this process's default process group, which is in use"
        )
    dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=world_size)
    try:
        yield init_device_mesh("cpu", (world_size,))
    finally:
        dist.destroy_process_group()


class _NoRebuild:
    """DDP's C++ reducer, every call passed through except ``_rebuild_buckets``, declined
    (see the module docstring: it would read rank 0's bucket order from tensor data)."""

    def __init__(self, reducer: Any) -> None:
        object.__setattr__(self, "_reducer", reducer)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._reducer, name)

    def _rebuild_buckets(self) -> bool:
        return False


def _decline_rebuild(model: Any) -> None:
    model.reducer = _NoRebuild(model.reducer)
