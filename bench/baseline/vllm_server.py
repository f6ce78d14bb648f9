"""The baseline: vLLM's own OpenAI server, started as a subprocess with the gateway's settings.

Its defaults mirror the gateway's on CPU (context 4,096, batch budget 2,048 tokens,
64 sequences, 2 GiB of KV cache, eager mode), so the harness measures the same
engine behind a different front end::

    dlfp-gateway bench vllm-server --model DIR --served-model-name smollm2-135m-instruct
    dlfp-gateway bench --base-url http://127.0.0.1:8001 --arm vllm ...
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx

from engine_worker.contract.device_defaults import defaults_for


@dataclass(frozen=True)
class VllmServerConfig:
    model: str
    served_model_name: str
    host: str = "127.0.0.1"
    port: int = 8001
    max_model_len: int = 4096
    max_num_batched_tokens: int = defaults_for("cpu").max_num_batched_tokens
    max_num_seqs: int = 64
    dtype: str = "auto"
    kv_cache_gib: int = 2
    """``VLLM_CPU_KVCACHE_SPACE`` (whole GiB; vLLM reads it as an integer)."""
    enforce_eager: bool = True
    extra_args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def command(self) -> list[str]:
        cmd = [
            sys.executable,
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            self.model,
            "--served-model-name",
            self.served_model_name,
            "--host",
            self.host,
            "--port",
            str(self.port),
            "--max-model-len",
            str(self.max_model_len),
            "--max-num-batched-tokens",
            str(self.max_num_batched_tokens),
            "--max-num-seqs",
            str(self.max_num_seqs),
            "--dtype",
            self.dtype,
        ]
        if self.enforce_eager:
            cmd.append("--enforce-eager")
        return cmd + list(self.extra_args)

    def environment(self) -> dict[str, str]:
        return {
            **os.environ,
            "VLLM_CPU_KVCACHE_SPACE": str(self.kv_cache_gib),
            "HF_HUB_OFFLINE": "1",
            "PYTHONUNBUFFERED": "1",
            **self.env,
        }


class VllmServer:
    """``with VllmServer(config, log_path) as server:`` starts, waits for /health, stops."""

    def __init__(self, config: VllmServerConfig, log_path: Path) -> None:
        self.config, self.log_path = config, log_path
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, health_timeout_s: float = 600.0) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("wb") as log:
            # Its own session, so that stop() can signal the engine-core child too.
            self.process = subprocess.Popen(
                self.config.command(),
                env=self.config.environment(),
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.wait_healthy(health_timeout_s)

    def wait_healthy(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        with httpx.Client(timeout=5.0) as client:
            while time.monotonic() < deadline:
                if self.process is not None and self.process.poll() is not None:
                    tail = self.log_path.read_text(errors="replace")[-3000:]
                    raise RuntimeError(
                        f"vLLM server exited with {self.process.returncode}:\n{tail}"
                    )
                try:
                    if client.get(self.config.base_url + "/health").status_code == 200:
                        return
                except httpx.TransportError:
                    pass
                time.sleep(1.0)
        self.stop()
        raise RuntimeError(f"vLLM server not healthy after {timeout_s:.0f} s (log {self.log_path})")

    def stop(self, timeout_s: float = 60.0) -> int | None:
        process = self.process
        if process is None or process.poll() is not None:
            return None if process is None else process.returncode
        os.killpg(process.pid, signal.SIGTERM)  # the group this server leads, nothing else
        try:
            return process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            return process.wait()

    def __enter__(self) -> VllmServer:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def config_from(args: argparse.Namespace) -> VllmServerConfig:
    return VllmServerConfig(
        model=args.model,
        served_model_name=args.served_model_name or Path(args.model).name,
        host=args.host,
        port=args.port,
        max_model_len=args.max_model_len,
        max_num_batched_tokens=args.max_num_batched_tokens,
        max_num_seqs=args.max_num_seqs,
        dtype=args.dtype,
        kv_cache_gib=args.kv_cache_gib,
        extra_args=tuple(args.vllm_arg or ()),
    )


def main(args: argparse.Namespace) -> int:
    config = config_from(args)
    if args.print_command:
        print(" ".join(config.command()))
        return 0
    # A script's background job inherits SIGINT ignored, which would leave Ctrl-C and
    # `kill -INT` without effect: restore the default, and stop on SIGTERM as well.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    server = VllmServer(config, args.log)
    print(f"starting: {' '.join(config.command())}\nlog: {args.log}", file=sys.stderr)
    server.start(args.health_timeout_s)
    print(
        f"vLLM serves {config.served_model_name} at {config.base_url}; Ctrl-C stops it", flush=True
    )
    try:
        while server.process is not None and server.process.poll() is None:
            time.sleep(1.0)
    except KeyboardInterrupt:
        pass
    finally:
        code = server.stop()
    return 0 if code in (None, 0, -signal.SIGTERM) else 1


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "vllm-server",
        help="serve the baseline vLLM OpenAI server until Ctrl-C",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_arguments(p)
    p.set_defaults(handler=main)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", required=True, help="local Hugging Face model directory")
    p.add_argument("--served-model-name", help="default: the directory's name")
    d = VllmServerConfig  # the defaults, once: the dataclass's
    p.add_argument("--host", default=d.host)
    p.add_argument("--port", type=int, default=d.port)
    p.add_argument("--max-model-len", type=int, default=d.max_model_len)
    p.add_argument("--max-num-batched-tokens", type=int, default=d.max_num_batched_tokens)
    p.add_argument("--max-num-seqs", type=int, default=d.max_num_seqs)
    p.add_argument("--dtype", default=d.dtype)
    p.add_argument(
        "--kv-cache-gib", type=int, default=d.kv_cache_gib, help="VLLM_CPU_KVCACHE_SPACE"
    )
    p.add_argument(
        "--vllm-arg",
        action="append",
        metavar="ARG",
        help="extra api_server argument, repeatable (e.g. --vllm-arg=--seed=0)",
    )
    p.add_argument("--log", type=Path, default=Path("bench/results/vllm-server.log"))
    p.add_argument("--health-timeout-s", type=float, default=600.0)
    p.add_argument("--print-command", action="store_true", help="print the command and exit")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        prog="python -m bench.baseline.vllm_server",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_arguments(parser)
    sys.exit(main(parser.parse_args()))
