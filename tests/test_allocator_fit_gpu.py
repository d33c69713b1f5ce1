"""``fit --gpu`` naming a Mac with torch (given or the default framework) is refused in
one line that says to use ``--framework mlx`` (introspect/commands/_gpu.py check_fit)."""

from __future__ import annotations

import pytest

from introspect.cli import main


@pytest.mark.parametrize("framework", [(), ("--framework", "torch")])
@pytest.mark.parametrize("gpu", ["m2-8gb", "mac-16gb"])
def test_fit_refuses_a_mac_gpu_with_torch(capsys, gpu, framework):
    assert main(["fit", "Qwen/Qwen2.5-0.5B", "--gpu", gpu, "--seq", "256", *framework]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert f"--gpu {gpu} with --framework torch" in err and "--framework mlx" in err


def test_fit_takes_a_mac_gpu_with_mlx(capsys):
    argv = ["fit", "Qwen/Qwen2.5-0.5B", "--gpu", "m2-8gb", "--seq", "256", "--framework", "mlx"]
    code = main(argv)
    assert code in (0, None), capsys.readouterr().err
