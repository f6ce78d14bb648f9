"""The benchmark scripts' shell: every bench/run_*.sh parses, bench/lib.sh starts a
server, waits for it, reports a server that dies, stops it when the script exits, and
records the CPU without overwriting the record of another, and bench/run_study.sh follows
a study's plan.

The server here is Python's static file server (a stand-in for the gateway, which the
scripts start in the same way): GET /ready answers once a file named `ready` exists.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = sorted((ROOT / "bench").glob("run_*.sh"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _bash(script: str, tmp_path: Path, port: int) -> subprocess.CompletedProcess[str]:
    """Run SCRIPT in bash with bench/lib.sh sourced, OUT=tmp_path and PORT=port."""
    preamble = (
        f"set -euo pipefail\nOUT={tmp_path}\nPORT={port}\nREADY_TIMEOUT_S=20\n"
        f"mkdir -p $OUT/logs\nsource {ROOT / 'bench' / 'lib.sh'}\n"
    )
    return subprocess.run(
        ["bash", "-c", preamble + script],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.parametrize("script", SCRIPTS, ids=[s.name for s in SCRIPTS])
def test_script_parses(script: Path) -> None:
    result = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "source bench/lib.sh" in script.read_text(), f"{script.name} does not use lib.sh"


def test_start_waits_until_ready_and_exit_stops_the_server(tmp_path: Path) -> None:
    port = _free_port()
    site = tmp_path / "site"
    site.mkdir()
    # The server comes up at once but answers /ready only after a second, as a gateway does
    # while its engine starts.
    script = f"""
    (sleep 1; touch {site}/ready) &
    start_server web /ready {sys.executable} -m http.server {port} --bind 127.0.0.1 -d {site}
    echo "pid=$SERVER_PID"
    curl -sf http://127.0.0.1:{port}/ready > /dev/null && echo answered
    """
    result = _bash(script, tmp_path, port)
    assert result.returncode == 0, result.stderr
    assert "answered" in result.stdout
    assert "starting web" in result.stderr
    pid = int(result.stdout.split("pid=")[1].split()[0])
    assert not _alive(pid), "the EXIT trap left the server running"
    assert (tmp_path / "logs" / "web.log").exists()


def test_stop_server_stops_and_is_idempotent(tmp_path: Path) -> None:
    port = _free_port()
    site = tmp_path / "site"
    site.mkdir()
    (site / "ready").touch()
    script = f"""
    start_server web /ready {sys.executable} -m http.server {port} --bind 127.0.0.1 -d {site}
    pid=$SERVER_PID
    stop_server
    stop_server
    kill -0 $pid 2> /dev/null && echo still-running || echo stopped
    [[ -z $SERVER_PID ]] && echo cleared
    """
    result = _bash(script, tmp_path, port)
    assert result.returncode == 0, result.stderr
    assert "stopped" in result.stdout
    assert "cleared" in result.stdout


def test_a_server_that_dies_fails_the_script_with_its_log(tmp_path: Path) -> None:
    port = _free_port()
    script = """
    start_server broken /ready bash -c 'echo "engine failed: out of memory"; exit 3'
    echo "not reached"
    """
    result = _bash(script, tmp_path, port)
    assert result.returncode == 1
    assert "not reached" not in result.stdout
    assert "engine failed: out of memory" in result.stderr


def test_a_server_that_never_answers_times_out(tmp_path: Path) -> None:
    port = _free_port()
    script = "READY_TIMEOUT_S=2\nstart_server mute /ready sleep 30\necho 'not reached'\n"
    result = _bash(script, tmp_path, port)
    assert result.returncode == 1
    assert "mute did not come up" in result.stderr
    assert "not reached" not in result.stdout


def test_record_cpu_never_overwrites_another_cpus_lscpu(tmp_path: Path) -> None:
    # A fake lscpu on PATH prints whatever $CPU holds: a results folder begun on one CPU and
    # resumed on another.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "lscpu"
    fake.write_text('#!/bin/sh\necho "Model name: $CPU"\n')
    fake.chmod(0o755)
    out = tmp_path / "results"
    script = f"""
    export PATH={bin_dir}:$PATH
    CPU='EPYC family 25' record_cpu {out}
    CPU='EPYC family 25' record_cpu {out}
    CPU='EPYC family 23' record_cpu {out}
    """
    result = _bash(script, tmp_path, _free_port())
    assert result.returncode == 0, result.stderr
    logs = out / "logs"
    assert (logs / "lscpu.txt").read_text() == "Model name: EPYC family 25\n"
    dated = sorted(logs.glob("lscpu-*.txt"))
    assert len(dated) == 1, "the same CPU again must not add a file"
    assert dated[0].read_text() == "Model name: EPYC family 23\n"


def test_run_study_follows_the_plan_and_stops_at_a_failing_step(tmp_path: Path) -> None:
    # Two command parts and no server (a real study's parts start the gateway, as above).
    script = ROOT / "bench" / "run_study.sh"
    marker = "import pathlib, sys; pathlib.Path(sys.argv[1]).write_text(sys.argv[2])"
    study = tmp_path / "study.toml"
    study.write_text(
        'about = "?"\n'
        '[[parts]]\nname = "first"\nserver = "none"\n'
        f"run = {json.dumps(['python', '-c', marker, '{out}/first', '{admin_token}'])}\n"
        '[[parts]]\nname = "fails"\nserver = "none"\n'
        'run = ["python", "-c", "raise SystemExit(3)"]\n'
        '[[parts]]\nname = "never"\nserver = "none"\n'
        f"run = {json.dumps(['python', '-c', marker, '{out}/never', 'x'])}\n"
    )
    out = tmp_path / "out dir"
    env = os.environ | {"OUT": str(out), "PY": sys.executable, "TOKENIZER": "/nonexistent"}

    def run(parts: str) -> subprocess.CompletedProcess[str]:
        cmd = ["bash", str(script), str(study)]
        return subprocess.run(cmd, env=env | {"PARTS": parts}, capture_output=True, text=True)

    result = run("first fails never")
    assert result.returncode == 3, result.stderr
    assert (out / "first").read_text() == "bench-admin-token"
    assert not (out / "never").exists(), "a failing step stops the study"
    assert (out / "logs" / "lscpu.txt").exists()
    assert run("never").returncode == 0 and (out / "never").exists()
    result = run("nope")
    assert result.returncode == 2 and "--part one of first, fails, never" in result.stderr


def test_a_gateway_run_records_its_machine_and_commit_and_packs_its_log(tmp_path: Path) -> None:
    """``begin_gateway_run`` records the CPU and the commit, unpacks a resumed run's gateway
    log and starts the gateway (here a stand-in); ``end_gateway_run`` packs the log."""
    script = f"""
    cd {ROOT}
    echo earlier > $OUT/logs/gateway.log && gzip $OUT/logs/gateway.log
    start_gateway() {{ echo "started $1"; echo later >> $OUT/logs/gateway.log; }}
    begin_gateway_run
    echo "offline=$HF_HUB_OFFLINE"
    end_gateway_run
    """
    result = _bash(script, tmp_path, _free_port())
    assert result.returncode == 0, result.stderr
    assert "started gateway" in result.stdout and "offline=1" in result.stdout
    logs = tmp_path / "logs"
    assert (logs / "lscpu.txt").exists()
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True)
    assert (logs / "commit.txt").read_text().split() == [head.stdout.decode().strip()]
    assert not (logs / "gateway.log").exists()
    unpacked = subprocess.run(["gunzip", "-c", str(logs / "gateway.log.gz")], capture_output=True)
    assert unpacked.stdout.decode().split() == ["earlier", "later"]


def test_an_episodes_run_takes_its_siblings_sizing_unless_it_has_its_own(tmp_path: Path) -> None:
    """``begin_episodes_run SIBLING`` sets the episodes' defaults, copies SIBLING's sizing
    and conditions into a new folder (a resumed one keeps its own) and begins the run."""
    sibling = tmp_path / "sibling"
    sibling.mkdir()
    (sibling / "sizing.json").write_text("sibling")
    (sibling / "conditions.json").write_text("sibling")
    out = tmp_path / "out"
    out.mkdir()
    (out / "sizing.json").write_text("own")
    script = f"""
    OUT={out}
    begin_gateway_run() {{ echo "began $OUT"; }}
    begin_episodes_run {sibling}
    echo "py=$PY token=$TOKEN tok=$TOK"
    """
    result = _bash(script, tmp_path, _free_port())
    assert result.returncode == 0, result.stderr
    assert f"began {out}" in result.stdout
    assert "py=.venv/bin/python token=bench-admin tok=" in result.stdout
    assert "smollm2-135m-instruct-v3" in result.stdout
    assert (out / "sizing.json").read_text() == "own"
    assert (out / "conditions.json").read_text() == "sibling"
