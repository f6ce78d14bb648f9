"""A small Chrome DevTools Protocol client: real headless Chromium for browser tests.

``launch_chromium()`` starts the browser with a throwaway profile, opens one page
and yields a ``Chromium`` that navigates, evaluates JavaScript, takes screenshots
and collects every console error and uncaught exception the page produces.
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import json
import os
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from websockets.sync.client import ClientConnection, connect

CHROMIUM = "/usr/bin/chromium"
# Quiet and offline: nothing but the pages the test opens goes over the network.
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-quic",
    "--disable-extensions",
    "--disable-dev-shm-usage",
    "--hide-scrollbars",
    "--mute-audio",
    "--remote-debugging-port=0",
)


class CDPError(RuntimeError):
    pass


class Chromium:
    """One page of a running Chromium, driven over a flattened CDP session."""

    def __init__(self, ws: ClientConnection) -> None:
        self._ws = ws
        self._ids = itertools.count(1)
        self._responses: dict[int, dict[str, Any]] = {}
        self._session_id: str | None = None
        self._num_loads = 0
        self.errors: list[str] = []
        """Console errors, uncaught exceptions and error log entries, in order."""

    def attach(self, width: int, height: int) -> None:
        target = self.call("Target.createTarget", {"url": "about:blank"}, on_page=False)
        session = self.call(
            "Target.attachToTarget",
            {"targetId": target["targetId"], "flatten": True},
            on_page=False,
        )
        self._session_id = session["sessionId"]
        for domain in ("Page", "Runtime", "Log"):
            self.call(f"{domain}.enable")
        self.call(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
        )

    def call(
        self,
        method: str,
        params: dict[str, Any] | None = None,
        on_page: bool = True,
        timeout_s: float = 30.0,
    ) -> dict[str, Any]:
        message_id = next(self._ids)
        message: dict[str, Any] = {"id": message_id, "method": method, "params": params or {}}
        if on_page:
            message["sessionId"] = self._session_id
        self._ws.send(json.dumps(message))
        self._pump(lambda: message_id in self._responses, timeout_s, method)
        response = self._responses.pop(message_id)
        if "error" in response:
            raise CDPError(f"{method}: {response['error']}")
        result: dict[str, Any] = response.get("result", {})
        return result

    def navigate(self, url: str, timeout_s: float = 30.0) -> None:
        """Open ``url`` and wait for its load event."""
        num_loads = self._num_loads
        result = self.call("Page.navigate", {"url": url})
        if result.get("errorText"):
            raise CDPError(f"navigate {url}: {result['errorText']}")
        self._pump(lambda: self._num_loads > num_loads, timeout_s, f"load of {url}")

    def evaluate(self, expression: str, timeout_s: float = 30.0) -> Any:
        """The value of a JavaScript expression in the page (promises are awaited)."""
        result = self.call(
            "Runtime.evaluate",
            {"expression": expression, "returnByValue": True, "awaitPromise": True},
            timeout_s=timeout_s,
        )
        if "exceptionDetails" in result:
            raise CDPError(f"{expression!r} threw: {_exception_text(result['exceptionDetails'])}")
        return result["result"].get("value")

    def wait_for(self, expression: str, timeout_s: float = 30.0, interval_s: float = 0.25) -> Any:
        """Polls until ``expression`` is truthy in the page; returns its value."""
        deadline = time.monotonic() + timeout_s
        while True:
            # NOTE: a renderer sharing 2 busy cores with the engine once took over 30 s to
            # answer one evaluation; each may take what is left of the wait, and 30 s more.
            value = self.evaluate(expression, timeout_s=max(0.0, deadline - time.monotonic()) + 30)
            if value or time.monotonic() > deadline:
                if not value:
                    raise TimeoutError(f"{expression!r} still falsy after {timeout_s} s")
                return value
            self._pump(lambda: False, interval_s, "")

    def screenshot(self, path: Path) -> Path:
        """A PNG of the whole page, not just the viewport."""
        size = self.call("Page.getLayoutMetrics")["cssContentSize"]
        clip = {"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1}
        shot = self.call(
            "Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True, "clip": clip}
        )
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(shot["data"]))
        return path

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.call("Browser.close", on_page=False, timeout_s=5.0)

    def _pump(self, is_done: Callable[[], bool], timeout_s: float, what: str) -> None:
        """Reads messages (recording events) until ``is_done()`` or the timeout."""
        deadline = time.monotonic() + timeout_s
        while not is_done():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                if what:
                    raise TimeoutError(f"no answer to {what} after {timeout_s} s")
                return
            try:
                raw = self._ws.recv(timeout=remaining)
            except TimeoutError:
                continue
            self._dispatch(json.loads(raw))

    def _dispatch(self, message: dict[str, Any]) -> None:
        if "id" in message:
            self._responses[message["id"]] = message
            return
        if message.get("sessionId") != self._session_id:
            return
        method, params = message.get("method"), message.get("params", {})
        if method == "Page.loadEventFired":
            self._num_loads += 1
        elif method == "Runtime.exceptionThrown":
            self.errors.append(f"exception: {_exception_text(params['exceptionDetails'])}")
        elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            args = params.get("args", [])
            text = " ".join(str(a.get("value", a.get("description", ""))) for a in args)
            self.errors.append(f"console.{params['type']}: {text}")
        elif method == "Log.entryAdded" and params["entry"].get("level") == "error":
            entry = params["entry"]
            self.errors.append(
                f"log ({entry.get('source')}): {entry.get('text')} {entry.get('url', '')}"
            )


def _exception_text(details: dict[str, Any]) -> str:
    exception = details.get("exception") or {}
    return str(exception.get("description") or details.get("text", "unknown error"))


def _devtools_url(
    process: subprocess.Popen[bytes], profile: Path, stderr: Path, timeout_s: float
) -> str:
    """Chromium writes its port and browser path to DevToolsActivePort once it listens."""
    port_file = profile / "DevToolsActivePort"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(
                f"chromium exited with {process.returncode}:\n{stderr.read_text()[-3000:]}"
            )
        lines = port_file.read_text().split() if port_file.exists() else []
        if len(lines) >= 2:
            return f"ws://127.0.0.1:{lines[0]}{lines[1]}"
        time.sleep(0.1)
    raise TimeoutError(
        f"chromium did not open DevTools in {timeout_s} s:\n{stderr.read_text()[-3000:]}"
    )


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.terminate()
    try:
        process.wait(10)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)  # the group we started: its renderers too
        process.wait()


@contextlib.contextmanager
def launch_chromium(
    binary: str = CHROMIUM, width: int = 1400, height: int = 1000, start_timeout_s: float = 60.0
) -> Iterator[Chromium]:
    """Headless Chromium with a fresh profile; yields its one page, closes it on exit."""
    with tempfile.TemporaryDirectory(prefix="chromium-", ignore_cleanup_errors=True) as tmp:
        profile = Path(tmp) / "profile"
        stderr_path = Path(tmp) / "stderr.log"
        with stderr_path.open("wb") as stderr:
            process = subprocess.Popen(
                [binary, *FLAGS, f"--user-data-dir={profile}", f"--window-size={width},{height}"],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=stderr,
                start_new_session=True,
            )
        try:
            url = _devtools_url(process, profile, stderr_path, start_timeout_s)
            # No keep-alive pings: a local pipe to the browser needs none, and on two busy
            # cores a late pong closed the connection (1011 keepalive ping timeout).
            with connect(
                url, max_size=None, compression=None, proxy=None, ping_interval=None
            ) as ws:
                browser = Chromium(ws)
                browser.attach(width, height)
                try:
                    yield browser
                finally:
                    browser.close()
        finally:
            _stop(process)
