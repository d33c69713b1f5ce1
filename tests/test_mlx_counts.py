"""The MLX closed form's counts as data: one JSON file per structure, shipped with the
package, read into records, and byte for byte what ``benchmarks/mlx_derive.py`` writes."""

from __future__ import annotations

import fnmatch
import importlib.util
import json
import re
from pathlib import Path

import pytest

from introspect.refined import mlx, mlx_counts

ROOT = Path(__file__).resolve().parents[1]
FILES = sorted(mlx_counts.DATA.glob("*.json"))


def _wanted_keys() -> list[str]:
    """Every key the closed form can ask for (mlx_derive.py's ``wanted``)."""
    keys = []
    for structure in mlx.STRUCTURES:
        for dtype in ("fp32", "bf16"):
            if dtype == "bf16" and structure in mlx.MOE_STRUCTURES:
                continue  # MLX's CPU GatherMM runs FP32 only
            keys += [mlx.key(structure, dtype, c) for c in (False, True)]
            if structure in mlx.LORA_STRUCTURES:
                keys += [mlx.key(structure, dtype, c, lora=True) for c in (False, True)]
            for names, structures in mlx.NAMED_KEYS.items():  # --lora-keys NAMES
                if structure in structures:
                    keys += [mlx.key(structure, dtype, c, True, names) for c in (False, True)]
    return keys


def test_one_file_per_structure_with_every_key():
    assert sorted(p.stem for p in FILES) == sorted(mlx.STRUCTURES)
    assert sorted(mlx_counts.all_counts()) == sorted(_wanted_keys())
    for key in _wanted_keys():
        candidates = mlx_counts.candidates(key)
        assert candidates and all(isinstance(c, mlx_counts.Candidate) for c in candidates)
        assert all(isinstance(depth, int) for c in candidates for depth in c.at)
    with pytest.raises(KeyError):
        mlx_counts.candidates("llama/fp8/eager")
    with pytest.raises(KeyError):
        mlx_counts.candidates("no-such-structure/fp32/eager")


def test_files_are_readable_and_say_how_they_were_made():
    for path in FILES:
        text = path.read_text(encoding="utf-8")
        longest = max(map(len, text.splitlines()))
        assert longest <= 200, f"{path.name}: a line of {longest} characters"
        doc = json.loads(text)
        assert doc["command"].startswith("python benchmarks/mlx_derive.py")
        assert "do not edit by hand" in doc["about"][0]
        assert doc["derivation"]["depths"]


def test_package_data_ships_every_file():
    """pyproject lists the counts folder as a package and its package-data matches every
    counts file (a wheel without them fails on the first MLX estimate)."""
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    package = "introspect.refined.data.mlx_counts"
    assert f'"{package}",' in text
    line = re.search(rf'^"{re.escape(package)}" = (\[.*\])$', text, re.M)
    patterns = json.loads(line.group(1))
    folder = ROOT / "introspect" / "refined" / "data" / "mlx_counts"
    for path in FILES:
        rel = path.relative_to(folder).as_posix()
        assert any(fnmatch.fnmatch(rel, p) for p in patterns), rel


def test_reading_a_depth_between_leaves_the_loaded_counts_as_they_are():
    """The closed form joins a dense candidate's shallow and between counts into its
    line's depths; the loaded (and cached) record keeps only its own."""
    (c, *_) = mlx_counts.candidates("gemma2/fp32/eager")
    before = {depth: dict(counts) for depth, counts in c.at.items()}
    mlx.counts_at(c, 3)
    mlx.counts_at(c, 7)
    assert c.at == before and set(c.at) == set(mlx.DEPTHS)


def test_the_generator_writes_the_files_as_they_are(tmp_path):
    """benchmarks/mlx_derive.py's writer, given the counts read back, makes the same
    bytes: the files are its output, not hand-edited."""
    spec = importlib.util.spec_from_file_location(
        "mlx_derive", ROOT / "benchmarks" / "mlx_derive.py"
    )
    derive = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(derive)
    rows = {k: [derive.row_of(c) for c in cs] for k, cs in mlx_counts.all_counts().items()}
    derive.write(rows, tmp_path)
    for path in FILES:
        assert (tmp_path / path.name).read_bytes() == path.read_bytes(), path.name
