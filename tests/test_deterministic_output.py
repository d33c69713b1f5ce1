"""The same question gets the same printed answer: no command's output may depend on
Python's per-process string hashing (a set's iteration order)."""

import os
import subprocess
import sys

import pytest

CASES = [
    ["profile", "Qwen/Qwen2.5-0.5B", "--framework", "mlx"],
    ["profile", "Qwen/Qwen3-30B-A3B", "--framework", "mlx"],
    ["profile", "meta-llama/Llama-3.2-1B", "--lora-rank", "16"],
]


def _run(argv: list[str], seed: str) -> str:
    env = {**os.environ, "PYTHONHASHSEED": seed, "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "introspect", *argv],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.parametrize("argv", CASES, ids=lambda a: "-".join(a[1:3]))
def test_output_does_not_depend_on_the_hash_seed(argv):
    assert _run(argv, "1") == _run(argv, "2") == _run(argv, "3")
