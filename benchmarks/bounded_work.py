"""Work bounded by the input's size, not its values: `introspect profile` on Qwen2.5-0.5B's
config with num_hidden_layers raised to 10², 10⁴, 10⁵, 10⁶ (with --force beyond the
sanity bound) and 10³⁰ (refused at once by the bound; with --force, still closed form).

Run:  .venv/bin/python benchmarks/bounded_work.py

Each row is one `introspect profile CONFIG --json` in a fresh interpreter: wall time, the
exit code, and the refined peak. Before the execution layer became closed form in L, 10⁵
layers took 17 s and 640 MB and 10³⁰ never finished (issue 13).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "adapters" / "data" / "Qwen__Qwen2.5-0.5B" / "config.json"


def run(layers: int, force: bool, folder: Path) -> tuple[float, int, str]:
    config = json.loads(CONFIG.read_text())
    config["num_hidden_layers"] = layers
    path = folder / f"L{len(str(layers)) - 1}.json"
    path.write_text(json.dumps(config))
    argv = [sys.executable, "-m", "introspect", "profile", str(path), "--json"]
    argv += ["--force"] if force else []
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    wall = time.perf_counter() - start
    if done.returncode:
        return wall, done.returncode, done.stderr.strip()
    refined = json.loads(done.stdout)["estimates"]["refined"]
    return wall, 0, f"peak {refined['total_bytes'] / 1e9:.4g} GB at {refined['peak_phase']}"


def main() -> None:
    rows = [(10**2, False), (10**4, False), (10**5, False), (10**6, False), (10**30, False)]
    rows += [(10**7, True), (10**30, True)]
    with tempfile.TemporaryDirectory() as tmp:
        print(f"{'layers':>8}  {'force':5}  {'wall s':>7}  rc  result")
        for layers, force in rows:
            wall, rc, text = run(layers, force, Path(tmp))
            label = f"1e{len(str(layers)) - 1}"
            print(f"{label:>8}  {'yes' if force else 'no':5}  {wall:7.3f}  {rc:2d}  {text[:110]}")


if __name__ == "__main__":
    main()
