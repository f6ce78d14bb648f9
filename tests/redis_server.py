"""A real Redis server for the response store's tests: Debian's ``redis-server`` on a free
loopback port, with a password, no persistence, in a folder of its own."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import redis

PASSWORD = "store-test-password"


class RedisServer:
    def __init__(self, executable: str, directory: Path, port: int) -> None:
        self.executable = executable
        self.directory = directory
        self.port = port
        self.url = f"redis://:{PASSWORD}@127.0.0.1:{port}/0"
        self._process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        options = ["--port", str(self.port), "--bind", "127.0.0.1", "--requirepass", PASSWORD]
        options += ["--save", "", "--appendonly", "no", "--dir", str(self.directory)]
        self._process = subprocess.Popen(
            [self.executable, *options],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        client = redis.Redis.from_url(self.url)
        deadline = time.monotonic() + 20
        while True:
            try:
                client.ping()
                break
            except redis.exceptions.ConnectionError:
                if time.monotonic() > deadline or self._process.poll() is not None:
                    raise
                time.sleep(0.05)
        client.close()

    def stop(self) -> None:
        if self._process is not None:
            self._process.terminate()
            self._process.wait(10)
            self._process = None

    def flush(self) -> None:
        client = redis.Redis.from_url(self.url)
        client.flushall()
        client.close()


@contextmanager
def running_redis(executable: str, directory: Path) -> Iterator[RedisServer]:
    from tests.conftest import free_port

    server = RedisServer(executable, directory, free_port())
    server.start()
    try:
        yield server
    finally:
        server.stop()
