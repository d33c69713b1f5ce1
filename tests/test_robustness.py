"""What the bad-input corpus cannot show by refusals alone: --force accepts what the
bounds refuse, a valid config.json still wins over unusable tensor shapes, the Hub's
deadline and the environment variable are honoured, an unusable cached config.json is
fetched again, a process memory limit is read, and one output contract holds across
commands (schema_version, total_bytes, table rows with errors, numeric CSV)."""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from corpus.cases import CONFIG, HUB_ID, changed, header, st
from hubserver import HubServer

from introspect import bounds
from introspect.cli import main
from introspect.errors import IntrospectError
from introspect.spec import ModelSpec

BUNDLED = "Qwen/Qwen2.5-0.5B"


def _json(capsys, *argv) -> dict:
    assert main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


# ---- bounds ---------------------------------------------------------------------------


def test_force_accepts_what_the_bounds_refuse(tmp_path, capsys):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**CONFIG, "num_hidden_layers": 10**30}))
    assert main(["profile", str(path)]) == 2
    assert "--force" in capsys.readouterr().err
    out = _json(capsys, "profile", str(path), "--force")
    assert out["spec"]["num_hidden_layers"] == 10**30
    assert out["estimates"]["refined"]["total_bytes"] > 10**30


def test_bounds_messages_and_contradictions():
    assert bounds.fmt_big(123) == "123"
    assert bounds.fmt_big(10**30) == "1.00e30"
    assert bounds.fmt_big(10**20000).startswith("about 1e")
    spec = ModelSpec(hidden_size=64, num_hidden_layers=10**7, num_attention_heads=4, vocab_size=9)
    with pytest.raises(IntrospectError, match="x.json: num_hidden_layers = 10,000,000"):
        bounds.check_spec(spec, "x.json")
    assert bounds.check_spec(spec, "x.json", force=True) is spec
    bounds.contradictions(precision="mixed", weights_dtype=None, zero_stage=0, devices=1)
    bounds.contradictions(precision="fp32", weights_dtype="bf16", zero_stage=3, devices=8)
    with pytest.raises(IntrospectError, match="--zero 1"):
        bounds.contradictions(precision="fp32", weights_dtype=None, zero_stage=1, devices=1)
    # DeepSpeed's stages run on one device (introspect/refined/deepspeed.py).
    bounds.contradictions(precision="mixed", weights_dtype=None, zero_stage=2, devices=1)


# ---- readers --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, shape", [("k_proj", [0, 32]), ("input_layernorm", []), ("q_proj", [32, 0])]
)
def test_a_valid_config_beside_unusable_shapes_still_gives_the_spec(tmp_path, capsys, name, shape):
    (tmp_path / "model.safetensors").write_bytes(st(header(changed(name, shape))))
    (tmp_path / "config.json").write_text(json.dumps(CONFIG))
    out = _json(capsys, "profile", str(tmp_path))
    assert out["spec"]["num_key_value_heads"] == CONFIG["num_key_value_heads"]
    assert any("not cross-checked" in n and name in n for n in out["source"]["notes"])


def test_huge_layer_counts_are_fast_enough_to_answer(tmp_path, capsys):
    """10^5 layers through the whole profile path (the timing is benchmarks/bounded_work.py)."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**CONFIG, "num_hidden_layers": 10**5}))
    out = _json(capsys, "profile", str(path))
    assert out["spec"]["num_hidden_layers"] == 10**5


# ---- the Hub: deadline, environment, a cached file that is not JSON -------------------


def _cli(home: Path, server: HubServer, *argv: str, **env: str) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "INTROSPECT_"))}
    base |= {
        "HF_HOME": str(home),
        "HF_ENDPOINT": server.url,
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "HF_HUB_DISABLE_XET": "1",
    }
    return subprocess.run(
        [sys.executable, "-m", "introspect", *argv],
        env=base | env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_silent_hub_gives_up_at_the_environments_deadline(tmp_path):
    with HubServer() as server:
        server.add(HUB_ID, {"config.json": json.dumps(CONFIG).encode()}, fault="silent")
        start = time.monotonic()
        done = _cli(tmp_path / "home", server, "profile", HUB_ID, INTROSPECT_TIMEOUT="2")
        waited = time.monotonic() - start
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "after 2 s" in done.stderr
    assert waited < 60  # a hang check: the server would hold it for 120 s


def test_progress_line_when_a_read_is_slow(tmp_path):
    with HubServer() as server:
        server.add(HUB_ID, {"config.json": json.dumps(CONFIG).encode()}, fault="trickle")
        done = _cli(
            tmp_path / "home", server, "profile", HUB_ID, "--timeout", "3", INTROSPECT_PROGRESS="1"
        )
    lines = done.stderr.splitlines()
    assert done.returncode == 2 and len(lines) == 2
    assert lines[0].startswith("introspect: waiting for config.json of org/tiny")
    assert "gave up" in lines[1]


def test_an_html_config_in_the_cache_is_fetched_again(tmp_path):
    home = tmp_path / "home"
    html = b"<!DOCTYPE html><html>proxy</html>"
    with HubServer() as server:
        server.add(HUB_ID, {"config.json": html})
        first = _cli(home, server, "profile", HUB_ID)
        assert first.returncode == 2 and "HTML page" in first.stderr
        server.add(HUB_ID, {"config.json": json.dumps(CONFIG).encode()})  # the Hub is fixed
        again = _cli(home, server, "profile", HUB_ID, "--json")
    assert again.returncode == 0, again.stderr
    notes = json.loads(again.stdout)["source"]["notes"]
    assert any("was unusable (an HTML page, not JSON); fetched it again" in n for n in notes)


def test_process_memory_limit_is_read_before_a_real_step(tmp_path):
    """Under ``ulimit -v`` (RLIMIT_AS) a step the machine could hold but the process
    cannot is refused in one line, before torch is imported."""
    code = (
        "import resource, sys\n"
        "resource.setrlimit(resource.RLIMIT_AS, (3 * 2**30, resource.RLIM_INFINITY))\n"
        "from introspect.commands.measure import process_limit_bytes\n"
        "limit = process_limit_bytes()\n"
        "assert limit is not None and limit < 3 * 2**30, limit\n"
        "from introspect.cli import main\n"
        "rc = main(['measure', '1B', '--framework', 'torch', '--device', 'cpu', '--seq', '2048'])\n"
        "assert 'torch' not in sys.modules\n"
        "sys.exit(rc)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and "available" in done.stderr


# ---- one output contract --------------------------------------------------------------


def test_schema_version_in_every_json_output(capsys):
    outs = [
        _json(
            capsys,
            "estimate",
            "--layers",
            "2",
            "--d-emb",
            "64",
            "--heads",
            "4",
            "--vocab",
            "100",
            "--seq",
            "8",
        ),
        _json(capsys, "sizes"),
        _json(capsys, "profile", BUNDLED),
        _json(capsys, "profile", "--list"),
        _json(capsys, "table", BUNDLED),
        _json(capsys, "table", "--seed-example"),
        _json(capsys, "table", "--reported", "qwen-7b"),
    ]
    assert all(next(iter(o)) == "schema_version" and o["schema_version"] >= 2 for o in outs)


def test_total_bytes_is_the_refined_peak_in_profile_and_table(capsys):
    profile = _json(capsys, "profile", BUNDLED, "--seq", "512")["estimates"]["refined"]
    row = _json(capsys, "table", BUNDLED, "--seq", "512", "--act-dtype", "fp32")["rows"][0]
    assert row["refined"]["total_bytes"] == profile["total_bytes"]
    assert row["refined"]["total_bytes"] == row["refined"]["execution_total_bytes"]
    assert row["refined"]["architecture_total_bytes"] == profile["architecture_total_bytes"]


def test_table_reports_a_bad_source_as_a_row_and_exits_non_zero(tmp_path, capsys):
    bad = tmp_path / "config.json"
    bad.write_text("{")
    assert main(["table", BUNDLED, str(bad), "--json"]) == 2
    captured = capsys.readouterr()
    rows = json.loads(captured.out)["rows"]
    assert rows[0]["source"] == BUNDLED and "error" not in rows[0]
    assert rows[1]["source"] == str(bad) and "not valid JSON" in rows[1]["error"]
    assert captured.err.count("\n") == 1 and str(bad) in captured.err
    assert main(["table", BUNDLED, str(bad)]) == 2
    text = capsys.readouterr().out
    assert "error:" in text and "Qwen/Qwen2.5-0.5B" in text


@pytest.mark.parametrize("units", ["gb", "bytes"])
def test_csv_numeric_columns_are_numbers_and_phase_has_its_own(capsys, units):
    assert main(["table", BUNDLED, "--csv", "--units", units]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    unit = "GB" if units == "gb" else "bytes"
    for r in rows:
        int(r["exact params"])
        for column in ("16N", "seed total", "refined total", "exec. peak"):
            value = r[f"{column} {unit}"]
            float(value) if units == "gb" else int(value)
        assert r["peak phase"] in ("forward_end", "backward", "optimizer_step")


def test_table_header_lists_every_setting(capsys):
    assert main(["table", BUNDLED, "--devices", "4", "--zero", "2", "--framework", "torch"]) == 0
    head = capsys.readouterr().out.splitlines()[0]
    for word in (
        "B=1",
        "T=2048",
        "precision fp32",
        "optimizer adam",
        "4 devices",
        "DeepSpeed ZeRO-2",
        "torch on cuda",
        "loop labels",
        "cross-entropy",
        "checkpointing",
    ):
        assert word in head, word


def test_argparse_errors_are_one_line_with_a_pointer_to_help(capsys):
    with pytest.raises(SystemExit) as e:
        main(["profile", BUNDLED, "--seq", "x"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "(see 'introspect profile --help')" in err
