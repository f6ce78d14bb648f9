"""/metrics on the real engine: histogram counts per stream, exposition validity."""

from __future__ import annotations

import subprocess

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import Server
from tests.debian_tools import DebianPrograms
from tests.engine_helpers import metric_sum, metrics, stream_chat

pytestmark = pytest.mark.engine


def test_one_ttft_and_n_minus_1_itl_samples_per_stream(gateway_server: Server) -> None:
    before = metrics(gateway_server)
    n = 17
    result = stream_chat(gateway_server, "Describe the station in the rain.", n)
    assert result["completion_tokens"] == n
    after = metrics(gateway_server)
    assert after["dlfp_ttft_seconds_count"] - before["dlfp_ttft_seconds_count"] == 1
    assert after["dlfp_itl_seconds_count"] - before["dlfp_itl_seconds_count"] == n - 1
    assert after["dlfp_e2e_seconds_count"] - before["dlfp_e2e_seconds_count"] == 1
    assert after["dlfp_generation_tokens_total"] - before["dlfp_generation_tokens_total"] == n
    key = 'dlfp_requests_total{endpoint="chat",outcome="ok"}'
    assert after[key] - before.get(key, 0.0) == 1
    assert after["dlfp_active_requests"] == 0 and after["dlfp_queued_requests"] == 0
    # vLLM's own metrics sit beside ours, under vLLM's names.
    assert metric_sum(after, "vllm:generation_tokens_total") > 0


def test_exposition_parses_and_passes_promtool(
    gateway_server: Server, debian_programs: DebianPrograms
) -> None:
    promtool = debian_programs.path("promtool")
    text = httpx.get(gateway_server.base_url + "/metrics", timeout=30).text
    names = {family.name for family in text_string_to_metric_families(text)}
    for expected in (
        "dlfp_ttft_seconds",
        "dlfp_itl_seconds",
        "dlfp_requests",
        "dlfp_controller_cap_tokens",
    ):
        assert expected in names
    # promtool's linter rejects the colons in vLLM's names: check our own family only.
    ours = (
        "\n".join(
            line
            for line in text.splitlines()
            if "dlfp_" in line.split(" ")[0] or (line.startswith("# ") and " dlfp_" in line)
        )
        + "\n"
    )
    done = subprocess.run(
        [promtool, "check", "metrics"], input=ours, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr
