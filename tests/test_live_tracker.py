"""The live-storage tracker against torch's MemTracker, to the byte, on the same steps.

Each case builds the same model twice (same seed, same shapes), creates the optimizer's
state, and tracks one training step with each tracker: the peak, every kind alive at the
peak and the phase it fell in must be identical. Real CPU steps and FakeTensorMode steps.
"""

from __future__ import annotations

import contextlib

import pytest

torch = pytest.importorskip("torch")

from specs import VARIANTS  # noqa: E402

from introspect.measure import torch_step  # noqa: E402
from introspect.measure.live_tracker import KINDS, LiveStorageTracker  # noqa: E402
from introspect.measure.optimizer_state import prime_optimizer  # noqa: E402
from introspect.setup import TrainingSetup  # noqa: E402

pytestmark = pytest.mark.slow


def _step(spec, setup, *, fake: bool, tracker: str, warm_up: bool):
    """One tracked step; returns (peak, kinds at peak, phase, optimizer-state bytes)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from introspect.measure.tracker import PhaseMemTracker

    mode = FakeTensorMode(allow_non_fake_inputs=True) if fake else contextlib.nullcontext()
    with mode:
        model = torch_step.build_reference(spec, setup, "cpu")
        opt = torch_step.make_optimizer(model, setup)
        x, y = torch_step.batch(spec.vocab_size, setup, "cpu")
        if warm_up:
            torch_step.train_step(model, opt, x, y)
        else:
            assert prime_optimizer(model, opt)
        if tracker == "memtracker":
            t = PhaseMemTracker()
            t.track_external(model, opt)
        else:
            t = LiveStorageTracker(model, opt)
        with t:
            torch_step.train_step(model, opt, x, y)
    if tracker == "memtracker":
        (snap,) = t.get_tracker_snapshot("peak").values()
        kinds = {getattr(k, "value", k): v for k, v in snap.items()}
        return kinds.pop("Total"), kinds, t.peak_phase
    kinds = t.peak_kinds
    assert sum(kinds.values()) == t.peak_bytes
    return t.peak_bytes, kinds, t.peak_phase


CASES = [
    ("standard", "adam", False, False),
    ("standard", "adam", True, False),
    ("rmsnorm-gqa-gated", "adamw", False, False),
    ("rmsnorm-gqa-gated", "adamw", True, True),
    ("standard", "sgd_momentum", False, True),
    ("rmsnorm-gqa-gated", "sgd", True, False),
]


@pytest.mark.parametrize(
    "name,optimizer,fake,warm_up",
    CASES,
    ids=[f"{n}-{o}-{'fake' if f else 'cpu'}-{'warm' if w else 'primed'}" for n, o, f, w in CASES],
)
def test_same_peak_kinds_and_phase_as_memtracker(name, optimizer, fake, warm_up):
    spec = VARIANTS[name]
    setup = TrainingSetup(seq_len=24, batch_size=2, framework="torch", optimizer=optimizer)
    theirs = _step(spec, setup, fake=fake, tracker="memtracker", warm_up=warm_up)
    ours = _step(spec, setup, fake=fake, tracker="live", warm_up=warm_up)
    peak, kinds, phase = ours
    assert peak == theirs[0]
    assert kinds == {k: theirs[1].get(k, 0) for k in KINDS}
    assert phase == theirs[2]
    assert kinds["Parameter"] > 0 and kinds["Activation"] + kinds["Temp"] > 0


def test_peak_and_marks_follow_the_live_storages():
    """Outside any model: the peak is the largest live sum, freed storages leave it."""
    model = torch.nn.Linear(8, 8, bias=False)  # 256 bytes of parameters
    tracker = LiveStorageTracker(model, None)
    with tracker:
        a = torch.ones(1000)  # 4000 bytes
        b = a.view(10, 100)  # a view: no new storage
        del a, b
        c = torch.ones(500)  # 2000 bytes, after 4000 were freed
    assert tracker.peak_bytes == 256 + 4000
    assert tracker.peak_kinds["Activation"] == 4000
    assert tracker.peak_phase == "forward"
    assert tracker.marks == {"forward": 256, "end": 256 + c.nbytes}


class _Block(torch.nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.up = torch.nn.Linear(width, 4 * width)
        self.down = torch.nn.Linear(4 * width, width)

    def forward(self, x):
        return x + self.down(torch.nn.functional.gelu(self.up(x)))


class _Checkpointed(torch.nn.Module):
    """Blocks recomputed in backward (torch.utils.checkpoint, non-reentrant)."""

    def __init__(self, width: int = 32, blocks: int = 3) -> None:
        super().__init__()
        self.blocks = torch.nn.ModuleList(_Block(width) for _ in range(blocks))

    def forward(self, x):
        from torch.utils.checkpoint import checkpoint

        for block in self.blocks:
            x = checkpoint(block, x, use_reentrant=False)
        return x.square().mean()


def test_recomputation_in_backward_counts_as_activations_as_memtracker():
    from introspect.measure.tracker import PhaseMemTracker

    def tracked(kind):
        torch.manual_seed(0)
        model = _Checkpointed()
        opt = torch.optim.Adam(model.parameters())
        assert prime_optimizer(model, opt)
        x = torch.randn(16, 32)
        if kind == "memtracker":
            t = PhaseMemTracker()
            t.track_external(model, opt)
        else:
            t = LiveStorageTracker(model, opt)
        with t:
            opt.zero_grad(set_to_none=True)
            model(x).backward()
            opt.step()
        if kind == "memtracker":
            (snap,) = t.get_tracker_snapshot("peak").values()
            kinds = {getattr(k, "value", k): v for k, v in snap.items()}
            return kinds.pop("Total"), kinds, t.peak_phase
        return t.peak_bytes, t.peak_kinds, t.peak_phase

    theirs, ours = tracked("memtracker"), tracked("live")
    assert ours[0] == theirs[0]
    assert ours[1] == {k: theirs[1].get(k, 0) for k in KINDS}
    assert ours[2] == theirs[2]


def test_a_dry_run_does_not_import_memtracker():
    """torch.distributed._tools (MemTracker's package) imports torch._dynamo and FSDP,
    seconds on a real CPU step's path. (A dry run still loads them: FakeTensorMode imports
    torch._dynamo, which imports FSDP.)"""
    import json
    import subprocess
    import sys

    code = (
        "import json, sys\n"
        "from introspect.measure.fake import dry_run\n"
        "from introspect.setup import TrainingSetup\n"
        "from introspect.spec import ModelSpec\n"
        "spec = ModelSpec(hidden_size=32, num_hidden_layers=2, num_attention_heads=4,"
        " vocab_size=64)\n"
        "m = dry_run(spec, TrainingSetup(seq_len=8, framework='torch'))\n"
        "print(json.dumps([m.peak_bytes, sorted(sys.modules)]))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=300
    ).stdout
    peak, modules = json.loads(out)
    assert peak > 0
    assert not [m for m in modules if m.startswith("torch.distributed._tools")]
