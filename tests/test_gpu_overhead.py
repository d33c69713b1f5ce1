"""What a CUDA GPU shows beyond the step's tensors: the published CUDA context by
generation and module loading, cuBLAS workspaces through the caching allocator, NCCL's
buffers per rank, the CLI's lines and its bad-input lines."""

from __future__ import annotations

import pytest

from introspect import cuda_context, cuda_libraries, overhead
from introspect.allocator.config import AllocatorConfig
from introspect.allocator.replay import replay
from introspect.devices import DEVICES, lookup
from introspect.errors import IntrospectError

MiB = 2**20


def test_every_measurement_names_its_source_and_run():
    for m in cuda_context.MEASUREMENTS:
        assert m.source.startswith("https://") and m.run and m.stack
        assert m.loading in ("lazy", "eager")
        assert 0 < m.context_bytes < m.shown_bytes + 1
    v100 = next(m for m in cuda_context.MEASUREMENTS if m.capability == (7, 0))
    assert v100.shown_bytes == 1343 * MiB and v100.context_bytes == 1341 * MiB


def test_every_cuda_device_has_a_capability():
    cuda = [d.name for d in DEVICES if d.kind == "cuda"]
    assert sorted(cuda) == sorted(cuda_context.COMPUTE_CAPABILITY)
    assert all(cap in cuda_context.GENERATION for cap in cuda_context.COMPUTE_CAPABILITY.values())


def test_context_is_the_generations_or_the_nearest_and_says_which():
    nbytes, line = overhead.cuda_context(lookup("rtx-3090"), {})
    assert nbytes == 256 * MiB and "for this compute capability: GeForce RTX 3090" in line
    nbytes, line = overhead.cuda_context(lookup("h100-80gb"), {})
    assert (
        nbytes == 426 * MiB and "no published figure for sm90; nearest: RTX 6000 Ada (sm89" in line
    )
    assert "unsloth-zoo/pull/1053" in line and "not modelled" in line
    # eager on a T4 (sm75): the V100's (sm70) is nearer than the RTX 3090's (sm86)
    nbytes, line = overhead.cuda_context(lookup("t4"), {"CUDA_MODULE_LOADING": "EAGER"})
    assert nbytes == 1341 * MiB and "eager" in line and "less its tensor's 2 MiB" in line
    nbytes, line = overhead.cuda_context(None, {})
    assert nbytes == 426 * MiB and line.startswith("GPU not named")


def test_module_loading_is_read_as_torch_and_cuda_read_it():
    assert overhead.module_loading({})[0] == "lazy"
    assert overhead.module_loading({"CUDA_MODULE_LOADING": "DEFAULT"})[0] == "lazy"
    assert overhead.module_loading({"CUDA_MODULE_LOADING": "eager"})[0] == "eager"
    with pytest.raises(IntrospectError, match="DEFAULT, LAZY or EAGER"):
        overhead.module_loading({"CUDA_MODULE_LOADING": "SOMETIMES"})


def test_cublas_workspaces_by_arch_and_environment():
    hopper = cuda_libraries.cublas_workspaces((9, 0), {})
    assert (hopper.cublas, hopper.cublaslt) == (32 * MiB, MiB)
    ampere = cuda_libraries.cublas_workspaces((8, 0), {})
    assert ampere.cublas == 8 * MiB + 128 * 1024 and ampere.per_step == 2 * (ampere.cublas + MiB)
    given = cuda_libraries.cublas_workspaces((8, 0), {"CUBLAS_WORKSPACE_CONFIG": ":4096:8"})
    assert given.cublas == 32 * MiB and "read CUBLAS_WORKSPACE_CONFIG" in given.notes[0]
    bad = cuda_libraries.cublas_workspaces((8, 0), {"CUBLAS_WORKSPACE_CONFIG": "4096"})
    assert bad.cublas == ampere.cublas and "uses its default" in bad.notes[0]
    # cuBLASLt's workspace is capped at cuBLAS's; unified, it has none of its own
    small = {"CUBLAS_WORKSPACE_CONFIG": ":16:8", "CUBLASLT_WORKSPACE_SIZE": "4096"}
    capped = cuda_libraries.cublas_workspaces((8, 0), small)
    assert capped.cublaslt == capped.cublas == 128 * 1024
    unified = cuda_libraries.cublas_workspaces((8, 0), {"TORCH_CUBLASLT_UNIFIED_WORKSPACE": "1"})
    assert unified.cublaslt == 0


def test_workspaces_are_the_allocators_blocks():
    """Two 8.125 MiB cuBLAS workspaces share one 20 MiB segment (the second is carved
    from the first's remainder); the two 1 MiB cuBLASLt ones one 2 MiB small segment."""
    ws = cuda_libraries.cublas_workspaces((8, 0), {})
    events = overhead._with_workspaces([], (ws.cublas, ws.cublaslt))
    replayed = replay(events, AllocatorConfig())
    assert replayed.allocated_peak == ws.per_step
    assert replayed.reserved_peak == 20 * MiB + 2 * MiB


def test_nccl_buffers_per_rank():
    assert cuda_libraries.nccl_buffers(1, {})[0] == 0
    per_channel = 4 * MiB + 512 * 1024 + 4800 * 1024
    nbytes, line = cuda_libraries.nccl_buffers(4, {})
    assert nbytes == 2 * per_channel and "2 assumed" in line and "derived" in line
    assert cuda_libraries.nccl_buffers(8, {"NCCL_MIN_NCHANNELS": "16"})[0] == 16 * per_channel
    assert cuda_libraries.nccl_buffers(8, {"NCCL_BUFFSIZE": str(MiB)})[0] == 2 * (
        per_channel - 3 * MiB
    )


def test_view_adds_up():
    from introspect.setup import TrainingSetup
    from introspect.spec import ModelSpec

    spec = ModelSpec(hidden_size=512, num_hidden_layers=4, num_attention_heads=8, vocab_size=8000)
    spec = spec.replace(num_parameters=None)
    setup = TrainingSetup(seq_len=512, devices=2, sharding="fsdp")
    view = overhead.device_view(spec, setup, lookup("h100-80gb"), environ={})
    assert view.workspaces == 2 * (32 * MiB + MiB)
    assert view.reserved == view.allocated + view.workspaces + view.reserve
    assert view.shown == view.reserved + view.context + view.nccl and view.nccl > 0
    assert view.to_json()["reserved_peak_bytes"] == view.reserved


def _clean(monkeypatch):
    for name in (
        "PYTORCH_CUDA_ALLOC_CONF",
        "PYTORCH_ALLOC_CONF",
        "CUDA_MODULE_LOADING",
        "CUBLAS_WORKSPACE_CONFIG",
        "CUBLASLT_WORKSPACE_SIZE",
        "TORCH_CUBLASLT_UNIFIED_WORKSPACE",
        "NCCL_MIN_NCHANNELS",
        "NCCL_BUFFSIZE",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def test_profile_prints_each_line_with_expandable_off_and_on(capsys, monkeypatch):
    from introspect.cli import main

    _clean(monkeypatch)
    argv = ["profile", "Qwen/Qwen2.5-7B", "--precision", "bf16", "--checkpointing"]
    assert main([*argv, "--seq", "4096"]) == 0
    out = capsys.readouterr().out
    for row in (
        "allocated peak (tensors)",
        "+ cuBLAS workspaces",
        "+ allocator reserve (fragmentation)",
        "= reserved peak",
        "+ CUDA context",
        "= what nvidia-smi shows",
        "expandable off *",
        "expandable on",
        "context: GPU not named",
    ):
        assert row in out
    assert "NCCL" not in out
    assert main([*argv, "--seq", "1024", "--devices", "4", "--fsdp"]) == 0
    out = capsys.readouterr().out
    assert "on a CUDA GPU per rank (GB)" in out and "+ NCCL buffers" in out


def test_fit_decides_on_what_the_gpu_shows(capsys, monkeypatch):
    from introspect.cli import main

    _clean(monkeypatch)
    monkeypatch.setenv("CUDA_MODULE_LOADING", "EAGER")
    assert main(["fit", "Qwen/Qwen2.5-0.5B", "--gpu", "rtx-3090", "--seq", "512"]) == 0
    out = capsys.readouterr().out
    assert "= what nvidia-smi will show" in out and "what fit decides on" in out
    assert "read CUDA_MODULE_LOADING='EAGER': eager" in out and "1687 MB" in out


@pytest.mark.parametrize(
    ("argv", "env", "words"),
    [
        (["--budget", "200MB"], {}, "not more than a CUDA context alone"),
        (["--gpu", "a10"], {}, "known: a100-40gb"),
        (["--gpu", "h200"], {"PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:19"}, ">= 20"),
        (["--gpu", "h200"], {"PYTORCH_CUDA_ALLOC_CONF": "max_split:40"}, "Unrecognized key"),
        (["--gpu", "h200"], {"CUDA_MODULE_LOADING": "SOMETIMES"}, "DEFAULT, LAZY or EAGER"),
    ],
)
def test_bad_input_is_one_line(capsys, monkeypatch, argv, env, words):
    from introspect.cli import main

    _clean(monkeypatch)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert main(["fit", "Qwen/Qwen2.5-0.5B", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert words in err and len(err.splitlines()) == 1


def test_floor_never_exceeds_what_the_device_shows():
    """fit skips pricing a combination whose floor is over the budget: sound only if the
    floor is at most the need."""
    from introspect.setup import TrainingSetup
    from introspect.spec import ModelSpec

    spec = ModelSpec(hidden_size=512, num_hidden_layers=4, num_attention_heads=8, vocab_size=8000)
    spec = spec.replace(num_parameters=None)
    for setup in (
        TrainingSetup(seq_len=512),
        TrainingSetup(seq_len=2048, activation_checkpointing=True, precision="bf16"),
        TrainingSetup(seq_len=1024, devices=4, sharding="fsdp"),
    ):
        for name in ("h100-80gb", "t4"):
            device = lookup(name)
            view = overhead.device_view(spec, setup, device, environ={})
            floor = overhead.device_floor(spec, setup, device, environ={})
            assert floor == view.shown - view.reserve <= view.shown


def test_a_budget_says_what_it_is_compared_with(capsys, monkeypatch):
    from introspect.cli import main

    _clean(monkeypatch)
    assert main(["fit", "Qwen/Qwen2.5-0.5B", "--budget", "24GB", "--seq", "512"]) == 0
    out = capsys.readouterr().out
    assert "compared with the allocated peak: a budget names no GPU" in out


def test_profile_gpu_prices_the_named_device(capsys, monkeypatch):
    """--gpu chooses the context and workspaces by the GPU's compute capability (the
    default is an H100's) and sets its memory beside what nvidia-smi shows."""
    import json

    from introspect.cli import main

    _clean(monkeypatch)
    argv = ["profile", "Qwen/Qwen2.5-0.5B", "--seq", "512"]
    assert main([*argv, "--gpu", "t4"]) == 0
    out = capsys.readouterr().out
    assert "on t4 (GB)" in out and "NVIDIA T4: sm75 (Turing)" in out
    assert "device: NVIDIA T4, 16 GB GDDR6 = 17,179,869,184 bytes" in out and "left" in out
    assert main([*argv, "--gpu", "t4", "--json"]) == 0
    t4 = json.loads(capsys.readouterr().out)["cuda_device"]
    assert t4["gpu"]["name"] == "t4"
    assert main([*argv, "--gpu", "h100", "--json"]) == 0
    h100 = json.loads(capsys.readouterr().out)["cuda_device"]
    # the same step, the same allocated peak; the T4's context is sm75's nearest, not sm90's
    for key in ("expandable_off", "expandable_on"):
        assert t4[key]["allocated_peak_bytes"] == h100[key]["allocated_peak_bytes"]
    assert t4["expandable_off"]["context_bytes"] != h100["expandable_off"]["context_bytes"]
    expected = overhead.cuda_context(lookup("t4"), {})[0]
    assert t4["expandable_off"]["context_bytes"] == expected
    assert main(argv) == 0  # not named: an H100, said so
    assert "GPU not named: taken as an H100" in capsys.readouterr().out


def test_profile_gpu_over_the_device_says_out_of_memory(capsys, monkeypatch):
    from introspect.cli import main

    _clean(monkeypatch)
    assert main(["profile", "Qwen/Qwen2.5-7B", "--seq", "2048", "--gpu", "l4"]) == 0
    assert "(out of memory)" in capsys.readouterr().out


def test_table_gpu_prices_each_row_on_the_named_device(capsys, monkeypatch):
    import json

    from introspect.cli import main

    _clean(monkeypatch)
    argv = ["table", "Qwen/Qwen2.5-0.5B", "Qwen/Qwen2.5-7B", "--seq", "512"]
    assert main([*argv, "--gpu", "t4"]) == 0
    out = capsys.readouterr().out
    assert "NVIDIA T4's: sm75" in out
    assert "over it (out of memory as set up): Qwen/Qwen2.5-7B" in out
    assert main([*argv, "--gpu", "t4", "--json"]) == 0
    t4 = json.loads(capsys.readouterr().out)
    assert t4["gpu"]["name"] == "t4"
    assert main([*argv, "--json"]) == 0
    h100 = json.loads(capsys.readouterr().out)
    assert "gpu" not in h100  # the JSON contract's keys stay when --gpu is not given
    for a, b in zip(t4["rows"], h100["rows"], strict=True):
        assert a["refined"]["total_bytes"] == b["refined"]["total_bytes"]
        assert a["refined"]["cuda_shown_bytes"] != b["refined"]["cuda_shown_bytes"]


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["profile", "Qwen/Qwen2.5-0.5B", "--gpu", "a10"], "known: a100-40gb"),
        (["profile", "Qwen/Qwen2.5-0.5B", "--gpu", "mac-8gb"], "a Mac; profile's --gpu"),
        (
            ["profile", "Qwen/Qwen2.5-0.5B", "--gpu", "h100", "--framework", "mlx"],
            "drop --gpu, or give --framework torch",
        ),
        (["table", "--gpu", "m2-16gb"], "a Mac; table's --gpu"),
        (["table", "--reported", "qwen-7b", "--gpu", "h100"], "--gpu would be ignored"),
        (["table", "--seed-example", "--gpu", "h100"], "drop --gpu"),
    ],
)
def test_gpu_bad_input_is_one_line(capsys, monkeypatch, argv, words):
    from introspect.cli import main

    _clean(monkeypatch)
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert words in err and len(err.splitlines()) == 1
