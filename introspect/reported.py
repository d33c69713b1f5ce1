"""Published measurements of real training runs, as data with their source.

The seed compares its scale with one: Qwen's own profiling of full-parameter fine-tuning
of its original Qwen-7B. The figures and the setup below are copied from Qwen's README
("Profiling of Memory and Speed"); nothing here is computed.
"""

from __future__ import annotations

from introspect._record import record
from introspect.setup import TrainingSetup


@record
class ReportedRun:
    """One published training-memory figure: sequence length and peak, in decimal GB as
    the source prints it."""

    seq_len: int
    peak_gb: float


@record
class Reported:
    """A published set of runs of one model under one setup."""

    name: str
    hub_id: str
    source: str
    url: str
    hardware: str
    devices: int
    setup_text: str
    runs: tuple[ReportedRun, ...]
    #: What the source leaves open, in words (printed with the comparison).
    caveats: tuple[str, ...]
    #: The TrainingSetup fields that reproduce the published setup (seq_len per run).
    setup_fields: tuple[tuple[str, object], ...]

    def setup(self, seq_len: int) -> TrainingSetup:
        """The TrainingSetup of the run at ``seq_len`` tokens."""
        return TrainingSetup(seq_len=seq_len, **dict(self.setup_fields))


QWEN_7B = Reported(
    name="qwen-7b",
    hub_id="Qwen/Qwen-7B",
    source="Qwen README, 'Profiling of Memory and Speed', full-parameter fine-tuning",
    url="https://github.com/QwenLM/Qwen#profiling-of-memory-and-speed",
    hardware="2 × A100-SXM4-80G",
    devices=2,
    setup_text="DeepSpeed ZeRO-3, BF16, gradient checkpointing, FlashAttention 2, "
    "batch size 1 (gradient accumulation 8)",
    runs=(ReportedRun(256, 139.2), ReportedRun(512, 148.0), ReportedRun(1024, 162.0)),
    caveats=(
        "Qwen's README does not say whether these figures are per GPU or summed over the "
        "two GPUs; 139.2 GB exceeds one 80 GB card, so they read as the sum.",
    ),
    setup_fields=(
        ("batch_size", 1),
        ("activation_dtype", "bf16"),
        ("weights_dtype", "bf16"),
        ("precision", "mixed"),
        ("optimizer", "adamw"),
        ("attention", "memory_efficient"),
        ("activation_checkpointing", True),
        ("devices", 2),
        ("zero_stage", 3),
        ("sharding", "zero"),  # DeepSpeed's ZeRO-3, not FSDP2
    ),
)

#: Every published set, by the name ``introspect table --reported`` takes.
REPORTED: dict[str, Reported] = {QWEN_7B.name: QWEN_7B}
