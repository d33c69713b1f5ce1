"""How fast an answer comes: whole-process wall time, CPU time and peak RSS, as ratios
measured in one run on this machine.

Run:  .venv/bin/python benchmarks/speed.py  [--runs 11] [--heavy-runs 3] [--quick]
                                            [--llm-analysis-python PATH]
      .venv/bin/python benchmarks/speed.py --closed-form   # that table alone, < 1 minute

Writes benchmarks/results/speed.md (``--closed-form``: speed-closed-form.md). Every figure
is one whole process (start, imports, work, exit), timed from outside; the median of the
runs is reported, and commands being compared run interleaved, round by round, so a busy
moment of the machine hits them alike. A closed-form command's ratio is paired: the median
over the rounds of its time over ``python -c pass``'s in the same round.
Peak RSS is the child's own ``ru_maxrss`` (``os.wait4``). Our package's bytecode is
compiled first (``compileall``), as an installed package's is.

Rows:

* closed-form commands against ``python -c pass`` (same interpreter);
* ``introspect profile <config.json>`` against the transformers meta-device route for the
  same config (``AutoConfig`` + ``AutoModelForCausalLM.from_config`` under
  ``torch.device("meta")``, then counting parameters), and against llm-analysis where it
  is installed (its own bundled Llama-2-7B config, offline);
* the dry run (``introspect measure … --device fake``) against an independent
  FakeTensorMode step tracked by torch's own MemTracker after a warm-up step, the route
  the dry run took before (same reference model, same peak to the byte);
* the dry run's scaling in L (Llama-2-7B's shape with ``num_hidden_layers`` changed) and
  in T, from the dry-run call's own time inside the process, and a Llama-2-70B shape.
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from introspect.adapters import bundled
from tabulate import tabulate

import introspect

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "speed.md"
RESULTS_CLOSED_FORM = ROOT / "benchmarks" / "results" / "speed-closed-form.md"
PY = sys.executable
BIN = Path(PY).parent / "introspect"
ENV = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="0")

#: Llama-2-70B's config.json differs from Llama-2-7B's in these fields (meta-llama/Llama-2-70b-hf).
LLAMA2_70B = dict(
    hidden_size=8192,
    intermediate_size=28672,
    num_attention_heads=64,
    num_hidden_layers=80,
    num_key_value_heads=8,
)

TRANSFORMERS_META = """\
import sys, torch
from transformers import AutoConfig, AutoModelForCausalLM
config = AutoConfig.from_pretrained(sys.argv[1])
with torch.device("meta"):
    model = AutoModelForCausalLM.from_config(config)
print(sum(p.numel() for p in model.parameters()))
"""

# The dry run's old route, written with torch's and transformers' own tools only: the
# published model's transformers class under FakeTensorMode, stepped as its users step it
# (``model(input_ids=x, labels=x).loss``), Adam's state from a warm-up step, MemTracker
# around the measured step.
MEMTRACKER_STEP = """\
import json, sys, time
import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.distributed._tools.mem_tracker import MemTracker
from transformers import AutoConfig, AutoModelForCausalLM
raw = json.load(open(sys.argv[1]))
T = int(sys.argv[2])
config = AutoConfig.for_model(raw.pop("model_type"), **raw)
config.use_cache = False
start, cpu = time.perf_counter(), time.process_time()
with FakeTensorMode(allow_non_fake_inputs=True):
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, attn_implementation="eager",
                                             dtype=torch.float32)
    model.train()
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    x = torch.randint(0, config.vocab_size, (1, T))
    def step():
        opt.zero_grad(set_to_none=True)
        model(input_ids=x, labels=x).loss.backward()
        opt.step()
    step()
    tracker = MemTracker()
    tracker.track_external(model, opt)
    with tracker:
        step()
peak = sum(s["Total"] for s in tracker.get_tracker_snapshot("peak").values())
print(json.dumps({"seconds": time.perf_counter() - start, "cpu": time.process_time() - cpu,
                  "peak": peak}))
"""

# The dry-run call alone, timed inside the process: what ``introspect measure --device
# fake`` runs for a published config (its transformers class, the labels loop). What is
# paid once per process whatever the model's size is paid before the clock starts, by the
# dry run of a one-layer, 64-wide model of the same type: imports (torch._dynamo, which
# FakeTensorMode imports on first use, about 1 s; transformers' modules for the model, its
# loss and masks) and the first dispatch of each operator. The first call's own time is
# printed too.
DRY_RUN_CALL = """\
import json, sys, time
from introspect.adapters import resolve
from introspect.adapters.hf_config import spec_from_config
from introspect.measure import hf_models
from introspect.setup import TrainingSetup
raw = json.load(open(sys.argv[1]))
spec = resolve(sys.argv[1]).spec
setup = TrainingSetup(seq_len=int(sys.argv[2]), framework="torch")
tiny = dict(raw, num_hidden_layers=1, hidden_size=64, intermediate_size=128,
            num_attention_heads=2, num_key_value_heads=2, vocab_size=256)
first = time.process_time()
hf_models.measure(tiny, "tiny", spec_from_config(tiny), TrainingSetup(seq_len=16),
                  device="fake", census=False)
first = time.process_time() - first
start, cpu = time.perf_counter(), time.process_time()
m, _ = hf_models.measure(raw, sys.argv[1], spec, setup, device="fake", census=False)
print(json.dumps({"seconds": time.perf_counter() - start, "cpu": time.process_time() - cpu,
                  "peak": m.peak_bytes, "first_call_cpu": first}))
"""


def run_once(cmd: list[str]) -> dict:
    """One whole process: wall and CPU seconds, peak RSS (bytes), exit code, stdout."""
    with tempfile.TemporaryFile() as out:
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.DEVNULL, env=ENV)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        text = out.read().decode()
    return {
        "wall": wall,
        "cpu": usage.ru_utime + usage.ru_stime,
        "rss": usage.ru_maxrss * 1024,
        "rc": proc.returncode,
        "out": text,
    }


def measure(commands: dict, runs: int) -> dict:
    """Median wall, CPU and RSS of each command, the commands interleaved round by round."""
    samples: dict[str, list[dict]] = {name: [] for name in commands}
    for _ in range(runs):
        for name, cmd in commands.items():
            samples[name].append(run_once(cmd))
    out = {}
    for name, rows in samples.items():
        failed = [r for r in rows if r["rc"] != 0]
        out[name] = {
            "wall": statistics.median(r["wall"] for r in rows),
            "cpu": statistics.median(r["cpu"] for r in rows),
            "rss": max(r["rss"] for r in rows),
            "ok": not failed,
            "out": rows[-1]["out"],
            "outs": [r["out"] for r in rows if r["rc"] == 0],
            "runs": runs,
            "samples": rows,
        }
    return out


def paired(r: dict, base: dict, key: str) -> float:
    """The median over rounds of ``r``'s ``key`` over ``base``'s in the same round."""
    rounds = zip(r["samples"], base["samples"], strict=True)
    return statistics.median(a[key] / b[key] for a, b in rounds)


def _config(folder: Path, name: str, **changes) -> str:
    config = dict(bundled.lookup("meta-llama/Llama-2-7b-hf").config(), **changes)
    path = folder / name
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(config), encoding="utf-8")
    return str(path / "config.json")


def _ms(s: float) -> str:
    return f"{s * 1e3:.0f} ms"


def _s(s: float) -> str:
    return f"{s:.2f} s"


def _mb(b: int) -> str:
    return f"{b / 1e6:.0f} MB"


def closed_form(runs: int, folder: Path) -> tuple[list[list], tuple[float, float]]:
    local = folder / "local-config"
    local.mkdir()
    shutil.copyfile(_config(folder, "llama2-7b"), local / "config.json")
    commands = {
        "python -c pass": [PY, "-c", "pass"],
        "python -S -c pass (no site, for scale)": [PY, "-S", "-c", "pass"],
        "introspect estimate (Qwen2.5-0.5B's shape)": [
            str(BIN), "estimate", "--layers", "24", "--d-emb", "896", "--heads", "14",
            "--vocab", "151936", "--seq", "2048",
        ],
        "introspect estimate (seed's 7B)": [
            str(BIN), "estimate", "--layers", "33", "--d-emb", "4096", "--heads", "32",
            "--vocab", "43520", "--params", "7e9", "--seq", "2048", "--act-dtype", "bf16",
        ],
        "introspect sizes": [str(BIN), "sizes"],
        "introspect profile Qwen/Qwen2.5-0.5B (bundled)": [
            str(BIN), "profile", "Qwen/Qwen2.5-0.5B",
        ],
        "introspect profile <local config.json>": [
            str(BIN), "profile", str(local / "config.json"),
        ],
        "introspect table": [str(BIN), "table"],
        "introspect table --json": [str(BIN), "table", "--json"],
        "introspect fit Qwen/Qwen2.5-7B --gpu h100-80gb --seq 4096": [
            str(BIN), "fit", "Qwen/Qwen2.5-7B", "--gpu", "h100-80gb", "--seq", "4096",
        ],
        "introspect fit … --lora-rank 16": [
            str(BIN), "fit", "Qwen/Qwen2.5-7B", "--gpu", "h100-80gb", "--seq", "4096",
            "--lora-rank", "16",
        ],
    }  # fmt: skip
    result = measure(commands, runs)
    base = result["python -c pass"]
    rows, worst, worst_cpu = [], 0.0, 0.0
    for name, r in result.items():
        ratio = paired(r, base, "wall")
        cpu_ratio = paired(r, base, "cpu")
        if name.startswith("introspect"):
            worst = max(worst, ratio)
            worst_cpu = max(worst_cpu, cpu_ratio)
        rows.append(
            [name, _ms(r["wall"]), f"{ratio:.2f}×", _ms(r["cpu"]), f"{cpu_ratio:.2f}×",
             _mb(r["rss"]), _ok(r)]
        )  # fmt: skip
    return rows, (worst, worst_cpu)


def _ok(r: dict) -> str:
    return "ok" if r["ok"] else "FAILED"


def against_others(
    runs: int, folder: Path, llm_analysis_python: str | None
) -> tuple[list[list], str | None]:
    qwen = folder / "qwen"
    qwen.mkdir()
    src = bundled.lookup("Qwen/Qwen2.5-0.5B")
    (qwen / "config.json").write_text(json.dumps(src.config()), encoding="utf-8")
    llama = Path(_config(folder, "llama2-7b"))
    commands: dict[str, list[str]] = {}
    for label, path in (("Qwen2.5-0.5B", qwen / "config.json"), ("Llama-2-7B", llama)):
        commands[f"introspect profile {label} config.json --json"] = [
            str(BIN), "profile", str(path), "--json",
        ]  # fmt: skip
        commands[f"transformers meta-device {label}"] = [
            PY, "-c", TRANSFORMERS_META, str(path.parent),
        ]  # fmt: skip
    note = None
    la = llm_analysis_python or PY
    probe = subprocess.run([la, "-c", "import llm_analysis"], capture_output=True, env=ENV)
    if probe.returncode == 0:
        commands["llm-analysis train (bundled Llama-2-7B config)"] = [
            la, "-m", "llm_analysis.analysis", "train",
            "--model_name", "NousResearch_Llama-2-7b-hf", "--gpu_name", "a100-sxm-80gb",
            "--dtype_name", "w16a16e16", "--batch_size_per_gpu", "1", "--seq_len", "2048",
            "--total_num_gpus", "8", "--ds_zero", "3", "--flash_attn", "False",
            "--log_level", "ERROR",
        ]  # fmt: skip
    else:
        note = (
            f"llm-analysis: not importable by {la}; install it in a separate venv "
            "(`pip install llm-analysis`; it brings its own huggingface_hub and transformers) "
            "and pass --llm-analysis-python"
        )
    result = measure(commands, runs)
    ours = {
        "Qwen2.5-0.5B": result["introspect profile Qwen2.5-0.5B config.json --json"],
        "Llama-2-7B": result["introspect profile Llama-2-7B config.json --json"],
    }
    rows = []
    for name, r in result.items():
        label = "Qwen2.5-0.5B" if "Qwen" in name else "Llama-2-7B"
        mine = ours[label]
        count = _count(name, r["out"])
        rows.append(
            [
                name,
                _s(r["wall"]),
                f"{r['wall'] / mine['wall']:.1f}×",
                _s(r["cpu"]),
                _mb(r["rss"]),
                f"{r['rss'] / mine['rss']:.1f}×",
                count,
                _ok(r),
            ]
        )
    return rows, note


def _count(name: str, out: str) -> str:
    """The parameter count each route reports (ours: exact, by structure)."""
    try:
        if name.startswith("introspect"):
            return f"{json.loads(out)['params']['total']:,}"
        if name.startswith("transformers"):
            return f"{int(out.strip().splitlines()[-1]):,}"
        if name.startswith("llm-analysis"):
            start = out.index("{")
            return f"{int(json.loads(out[start:])['num_params_total']):,}"
    except (ValueError, KeyError, IndexError):
        return "?"
    return ""


def _inner(r: dict, key: str) -> float:
    """The median over runs of a figure the process printed about itself (JSON)."""
    values = [json.loads(out)[key] for out in r["outs"]]
    return statistics.median(values) if values else float("nan")


def dry_runs(heavy_runs: int, folder: Path, quick: bool) -> dict:
    seven = _config(folder, "llama2-7b")
    fake = [str(BIN), "measure", seven, "--framework", "torch", "--device", "fake"]
    result = measure(
        {
            "introspect measure 7B --device fake --seq 2048": [*fake, "--seq", "2048"],
            "  … --no-census (the step alone)": [*fake, "--seq", "2048", "--no-census"],
            "  dry-run call": [PY, "-c", DRY_RUN_CALL, seven, "2048"],
        },
        heavy_runs,
    )
    # The old route takes several times longer; one run of it.
    old = measure({"old": [PY, "-c", MEMTRACKER_STEP, seven, "2048"]}, 1)["old"]
    call = result.pop("  dry-run call")
    base = result["  … --no-census (the step alone)"]
    rows = [
        [name, _s(r["wall"]), _s(r["cpu"]), "", _mb(r["rss"]), "", _ok(r)]
        for name, r in result.items()
    ]
    rows.append(
        ["  its dry-run call alone, in-process", "", "", _s(_inner(call, "cpu")), "", "",
         _ok(call)]
    )  # fmt: skip
    old_peak = json.loads(old["out"])["peak"] if old["ok"] else None
    our_peak = json.loads(call["out"])["peak"] if call["ok"] else None
    old_call = _inner(old, "cpu")
    rows.append(
        [
            "FakeTensorMode + warm-up + torch MemTracker (independent, 1 run)",
            f"{_s(old['wall'])} ({old['wall'] / base['wall']:.1f}×)",
            f"{_s(old['cpu'])} ({old['cpu'] / base['cpu']:.1f}×)",
            f"{_s(old_call)} ({old_call / _inner(call, 'cpu'):.1f}×)",
            _mb(old["rss"]),
            "identical" if old_peak == our_peak else f"{old_peak} vs {our_peak}",
            _ok(old),
        ]
    )
    cli = result["introspect measure 7B --device fake --seq 2048"]
    out: dict = {"versus": rows, "7b": cli, "rss": [r["rss"] for r in result.values()]}

    layers = (8, 16) if quick else (8, 16, 32, 80)
    paths = {L: _config(folder, f"L{L}", num_hidden_layers=L) for L in layers}
    by_l = measure({L: [PY, "-c", DRY_RUN_CALL, paths[L], "2048"] for L in layers}, heavy_runs)
    scaling, previous, per_layer, marginals = [], None, [], []
    for L in layers:
        r = by_l[L]
        cpu = _inner(r, "cpu")
        per_layer.append(cpu / L)
        out["rss"].append(r["rss"])
        marginal = ""
        if previous is not None:
            marginals.append((cpu - previous[1]) / (L - previous[0]))
            marginal = f"{marginals[-1]:.3f} s"
        scaling.append(
            [L, _s(cpu), f"{cpu / L:.3f} s", marginal, _s(_inner(r, "seconds")),
             _s(_inner(r, "first_call_cpu")), _s(r["wall"]), _mb(r["rss"]), _ok(r)]
        )  # fmt: skip
        previous = (L, cpu)
    out["layers"] = scaling
    out["per_layer"], out["marginals"] = per_layer, marginals

    seqs = (512, 1024) if quick else (512, 1024, 2048, 4096)
    by_t = measure({T: [PY, "-c", DRY_RUN_CALL, seven, str(T)] for T in seqs}, heavy_runs)
    out["seqs"] = [
        [T, _s(_inner(r, "cpu")), _s(_inner(r, "seconds")), _s(r["wall"]), _mb(r["rss"]), _ok(r)]
        for T, r in by_t.items()
    ]

    if not quick:
        big = _config(folder, "llama2-70b", **LLAMA2_70B)
        r = measure(
            {"70b": [str(BIN), "measure", big, "--framework", "torch", "--device", "fake",
                     "--seq", "2048"]},
            1,
        )["70b"]  # fmt: skip
        out["70b"] = [["Llama-2-70B shape, T=2048 (1 run)", _s(r["wall"]), _s(r["cpu"]),
                       _mb(r["rss"]), _ok(r)]]  # fmt: skip
        out["70b_run"] = r
        out["rss"].append(r["rss"])
    return out


def _targets(worst: float, worst_cpu: float, dry: dict) -> list[str]:
    def verdict(ok: bool) -> str:
        return "met" if ok else "NOT met"

    seven = dry["7b"]
    per_layer, marginals = dry["per_layer"], dry["marginals"]
    spread = max(per_layer) / min(per_layer) - 1
    marginal_spread = max(marginals) / min(marginals) - 1 if marginals else float("nan")
    rss = max(dry["rss"])
    out = [
        f"- closed form ≤ 3× `python -c pass`: wall {worst:.2f}×, CPU {worst_cpu:.2f}× — "
        f"{verdict(worst <= 3)} (wall), {verdict(worst_cpu <= 3)} (CPU).",
        f"- dry-run time per layer constant within 20% from L=8 to L=80: call CPU / L varies "
        f"by {spread:.0%} (the fixed part — embedding, loss, optimizer set-up — weighs most "
        f"at L=8), the marginal time per layer by {marginal_spread:.0%} — "
        f"{verdict(spread <= 0.2)} (per layer), {verdict(marginal_spread <= 0.2)} (marginal).",
        f"- 7B, T=2048 dry run ≤ 8 s: wall {seven['wall']:.2f} s, CPU {seven['cpu']:.2f} s — "
        f"{verdict(seven['wall'] <= 8)} (wall), {verdict(seven['cpu'] <= 8)} (CPU).",
    ]
    if "70b_run" in dry:
        big = dry["70b_run"]
        out.append(
            f"- 70B dry run ≤ 60 s: wall {big['wall']:.2f} s, CPU {big['cpu']:.2f} s — "
            f"{verdict(big['wall'] <= 60)}."
        )
    out.append(f"- peak RSS ≤ 0.5 GB: largest {_mb(rss)} — {verdict(rss <= 0.5e9)}.")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=11, help="runs of each fast command")
    parser.add_argument("--heavy-runs", type=int, default=3, help="runs of each heavy command")
    parser.add_argument("--quick", action="store_true", help="fewer rows (for a smoke test)")
    parser.add_argument(
        "--closed-form",
        action="store_true",
        help="the closed-form commands' table alone (under a minute); writes "
        "speed-closed-form.md unless --out says otherwise",
    )
    parser.add_argument("--llm-analysis-python", help="an interpreter with llm-analysis")
    parser.add_argument("--out", type=Path, default=None, help="where the table goes")
    args = parser.parse_args(argv)
    if args.out is None:
        args.out = RESULTS_CLOSED_FORM if args.closed_form else RESULTS

    for package in (Path(introspect.__file__).parent, Path(bundled.__file__).parent):
        compileall.compile_dir(package, quiet=1)
    load_before = os.getloadavg()
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="introspect-speed-") as tmp:
        folder = Path(tmp)
        cf_rows, (worst, worst_cpu) = closed_form(args.runs, folder)
        if not args.closed_form:
            others, others_note = against_others(args.heavy_runs, folder, args.llm_analysis_python)
            dry = dry_runs(args.heavy_runs, folder, args.quick)
    load_after = os.getloadavg()

    given = sys.argv[1:] if argv is None else argv
    command = " ".join(["python benchmarks/speed.py", *given])
    lines = [
        "# Speed: whole process, wall and CPU time, peak RSS",
        "",
        f"Command: `{command}` ({time.perf_counter() - started:.0f} s).",
        f"Machine: {platform.platform(terse=True)}, Python {platform.python_version()}, "
        f"{os.cpu_count()} CPUs, load average {load_before[0]:.1f} before and "
        f"{load_after[0]:.1f} after: shared with other jobs, so the walls are noisy; the "
        "ratios come from interleaved runs and the CPU column is less affected.",
        "",
        f"## Closed-form commands against `python -c pass` (median of {args.runs})",
        "",
        tabulate(
            cf_rows,
            headers=["command", "wall", "× python -c pass", "CPU", "CPU ×", "peak RSS", ""],
            tablefmt="github",
        ),
        "",
        f"Largest ratio: {worst:.2f}× in wall time, {worst_cpu:.2f}× in CPU time (target ≤ 3×). "
        "Each ratio is the median over the rounds of the command's time over `python -c "
        "pass`'s in the same round; the wall and CPU columns are medians. Our bytecode is "
        "compiled first (compileall), as an installed package's is. The base is the same "
        "venv's interpreter, whose `site` runs the editable install's import finder "
        "(pathlib, re, urllib.parse); `-S` skips `site` altogether and shows the bare start.",
        "",
    ]
    if args.closed_form:
        verdict = "met" if worst <= 3 else "NOT met"
        lines += [
            f"- closed form ≤ 3× `python -c pass`: wall {worst:.2f}×, CPU {worst_cpu:.2f}× — "
            f"{verdict} (wall).",
            "",
        ]
        return _write(args.out, "\n".join(lines))
    lines += [
        f"## The same config by other routes (median of {args.heavy_runs})",
        "",
        "Ratios are against `introspect profile` of the same config.json, which answers "
        "with the whole estimate; the other routes count parameters (transformers) or run "
        "their own estimate (llm-analysis, from its own bundled config, on 8 GPUs with "
        "ZeRO-3 so that its fit check passes).",
        "",
        tabulate(
            others,
            headers=["route", "wall", "× ours", "CPU", "peak RSS", "RSS × ours", "N", ""],
            tablefmt="github",
        ),
        "",
        *([others_note, ""] if others_note else []),
        f"## The dry run: Llama-2-7B, B=1, T=2048, FP32 Adam (median of {args.heavy_runs})",
        "",
        "Every route steps transformers' LlamaForCausalLM as its users do, "
        "`model(input_ids=x, labels=x).loss`, eager attention.",
        "",
        tabulate(
            dry["versus"],
            headers=["route", "wall", "CPU", "in-process CPU", "peak RSS", "peak", ""],
            tablefmt="github",
        ),
        "",
        "## Dry-run scaling in L (Llama-2-7B's shape, num_hidden_layers changed; T=2048)",
        "",
        "*call CPU* is the CPU time of the dry run's call inside the process "
        "(`hf_models.measure(..., device='fake')`, what `introspect measure --device fake` "
        "runs: transformers' model build, optimizer state, the tracked step; no census), "
        "after what a process pays once whatever the model (imports — torch._dynamo, "
        "transformers' modules — and each operator's first dispatch) was paid by a dry run "
        "of a one-layer, 64-wide model of the same type, before the clock: *first call* is "
        "that warm-up's own CPU time. The call CPU is less disturbed by the "
        "other jobs than wall time; *marginal* is its increase per added layer from the row "
        "above; *process wall* is the whole process, imports included.",
        "",
        tabulate(
            dry["layers"],
            headers=[
                "L",
                "call CPU",
                "call CPU / L",
                "marginal / layer",
                "call wall",
                "first call",
                "process wall",
                "peak RSS",
                "",
            ],
            tablefmt="github",
        ),
        "",
        "## Dry-run scaling in T (Llama-2-7B)",
        "",
        tabulate(
            dry["seqs"],
            headers=["T", "call CPU", "call wall", "process wall", "peak RSS", ""],
            tablefmt="github",
        ),
        "",
    ]
    if "70b" in dry:  # not with --quick
        lines += [
            "## Llama-2-70B shape (CLI, with census)",
            "",
            tabulate(dry["70b"], headers=["", "wall", "CPU", "peak RSS", ""], tablefmt="github"),
            "",
        ]
    lines += ["## Against the targets", "", *_targets(worst, worst_cpu, dry), ""]
    return _write(args.out, "\n".join(lines))


def _write(out: Path, text: str) -> int:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text, encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
