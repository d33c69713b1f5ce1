"""--plot on profile, fit, table and measure: the files are read back (PNG header and
size, SVG parsed)."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from introspect.cli import main

pytest.importorskip("matplotlib")


def check(path):
    data = path.read_bytes()
    if path.suffix == ".png":
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000
    else:
        root = ET.fromstring(data)
        assert root.tag.endswith("svg")
        assert len(list(root.iter())) > 50


@pytest.mark.parametrize("suffix", [".png", ".svg"])
def test_profile_plot(tmp_path, capsys, suffix):
    out = tmp_path / f"profile{suffix}"
    assert main(["profile", "Qwen/Qwen2.5-0.5B", "--plot", str(out)]) == 0
    check(out)


def test_fit_plot(tmp_path, capsys):
    out = tmp_path / "fit.png"
    argv = ["fit", "Qwen/Qwen2.5-0.5B", "--budget", "24GB", "--plot", str(out)]
    assert main(argv) == 0
    check(out)


def test_table_plot(tmp_path, capsys):
    out = tmp_path / "table.svg"
    assert main(["table", "Qwen/Qwen2.5-0.5B", "40M", "--plot", str(out)]) == 0
    check(out)


@pytest.mark.slow
def test_measure_plot(tmp_path, capsys):
    pytest.importorskip("torch")
    out = tmp_path / "measure.svg"
    argv = ["measure", "--layers", "2", "--d-emb", "64", "--heads", "4", "--vocab", "512"]
    argv += ["--framework", "torch", "--seq", "64", "--no-census", "--plot", str(out)]
    assert main(argv) == 0
    check(out)


def test_bad_plot_name_is_one_line(tmp_path, capsys):
    assert main(["profile", "40M", "--plot", str(tmp_path / "x.jpg")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and ".png or .svg" in err


def test_quadratic_takeover_is_the_crossing():
    from introspect import fit
    from introspect.measure.shapes import nominal_spec
    from introspect.refined.execution import saved_terms
    from introspect.setup import TrainingSetup

    spec, setup = nominal_spec("100M"), TrainingSetup(attention="eager")
    T = fit.quadratic_takeover(spec, setup)

    def quad_minus_rest(t):
        saved = saved_terms(spec, setup.replace(seq_len=t))
        quad = sum(v for k, v in saved.items() if "/quadratic/" in k)
        return quad - (sum(saved.values()) - quad)

    assert quad_minus_rest(T) >= 0 > quad_minus_rest(T - 1)
    assert fit.quadratic_takeover(spec, setup.replace(attention="memory_efficient")) is None
