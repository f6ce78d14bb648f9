"""Grammar vetting: compile a request's grammar before the engine does.

vLLM compiles a JSON schema or structural tag on one worker that every request
shares, with no time-out, and a compile cannot be interrupted there: one
pathological schema stalls every structured request behind it. ``GrammarVetter``
compiles the same grammar first, as vLLM's xgrammar backend would
(``vllm/v1/structured_output/backend_xgrammar.py``), in one worker process of its
own that can be killed. A grammar that fails, or takes longer than ``timeout_s``, is
refused with ``InvalidRequestError`` before it reaches the engine.

- The time-out counts from when the worker starts that compile, not from when the
  check was submitted: a schema queued behind a slow one is neither refused nor
  remembered as slow. A check still queued when its last caller leaves is dropped.
- Verdicts are remembered by the sha256 of (kind, spec) in a bounded LRU: a pass, a
  failure, and a time-out (as a failure). Concurrent checks of one spec share one
  compile; distinct specs compile one at a time, in arrival order.
- The worker starts on first use (``spawn``: the engine process runs threads) and
  after a time-out kill. If it cannot start at all (a tokenizer transformers cannot
  load), vetting is switched off and logged: refusing every structured request would
  be a larger outage than the stall it guards against.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import multiprocessing
import re
import signal
import time
from collections import OrderedDict
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any

from engine_worker.contract.api import GrammarKind, InvalidRequestError

logger = logging.getLogger("dlfp.grammar")

MAX_MESSAGE_CHARS = 300
# xgrammar's errors start with a time and a C++ source position, and often an assertion.
_XGRAMMAR_PREFIX = re.compile(r"^\[[\d:]+\] \S+:\d+: (Check failed: .*? is false: )?")
_NAMES: dict[str, str] = {"json_schema": "schema", "structural_tag": "structural tag"}


def short_message(exc: BaseException) -> str:
    """An exception's message on one line, without xgrammar's source prefix."""
    text = " ".join(_XGRAMMAR_PREFIX.sub("", str(exc).strip()).split())
    text = text or type(exc).__name__
    if len(text) > MAX_MESSAGE_CHARS:
        text = text[: MAX_MESSAGE_CHARS - 3] + "..."
    return text


def _vocab_size(model_dir: str) -> int | None:
    from transformers import AutoConfig

    try:
        config = AutoConfig.from_pretrained(model_dir).get_text_config()
    except Exception:  # no readable config: xgrammar takes the tokenizer's size
        return None
    size = getattr(config, "vocab_size", None)
    return size if isinstance(size, int) else None


def _compiler(model_dir: str, vocab_size: int | None) -> Any:
    import xgrammar as xgr
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    if vocab_size is None:
        vocab_size = _vocab_size(model_dir)
    info = xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=vocab_size)
    # vLLM's threads; no xgrammar cache: the vetter keeps verdicts, not grammars.
    return xgr.GrammarCompiler(info, max_threads=8, cache_enabled=False)


def _compile(compiler: Any, kind: str, spec: str, any_whitespace: bool) -> None:
    """The compile calls of vLLM's ``XgrammarBackend.compile_grammar``."""
    import xgrammar as xgr

    if kind == "json_schema":
        # NOTE: vLLM's disable_any_whitespace needs the compact separators as well.
        separators = None if any_whitespace else (",", ":")
        compiler.compile_json_schema(spec, any_whitespace=any_whitespace, separators=separators)
        return
    tag = json.loads(spec)
    if "structures" in tag:  # vLLM falls back to the deprecated form for these
        items = [
            xgr.StructuralTagItem(begin=s["begin"], schema=json.dumps(s["schema"]), end=s["end"])
            for s in tag["structures"]
        ]
        compiler.compile_structural_tag(items, tag["triggers"])
    else:
        compiler.compile_structural_tag(spec)


def serve(conn: Connection, model_dir: str, vocab_size: int | None, any_whitespace: bool) -> None:
    """The worker: load the tokenizer once, then answer ``(kind, spec)`` with
    ``("ok", "")`` or ``("error", message)`` until the pipe closes."""
    # NOTE: a terminal's Ctrl-C reaches the whole process group; the gateway stops this
    # worker by closing the pipe, so the signal would only print a KeyboardInterrupt.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        compiler = _compiler(model_dir, vocab_size)
    except Exception as exc:
        conn.send(("error", short_message(exc)))
        return
    try:
        conn.send(("ready", ""))
        while True:
            kind, spec = conn.recv()
            try:
                _compile(compiler, kind, spec, any_whitespace)
            except Exception as exc:
                conn.send(("error", short_message(exc)))
            else:
                conn.send(("ok", ""))
    except (EOFError, BrokenPipeError):  # the vetter closed the pipe
        return


@dataclass
class _Job:
    task: asyncio.Task[str | None]
    num_waiters: int = 0


class GrammarVetter:
    """Compiles grammars in one killable worker process; refuses the failing and slow.

    ``check`` raises ``InvalidRequestError`` (no ``param``: the caller knows which
    field the grammar came from)."""

    def __init__(
        self,
        model_dir: str,
        timeout_s: float = 10.0,
        vocab_size: int | None = None,
        any_whitespace: bool = False,
        max_cached: int = 4096,
        start_timeout_s: float = 120.0,
    ) -> None:
        self.model_dir = model_dir
        self.timeout_s = timeout_s
        self.vocab_size = vocab_size
        """The model config's vocabulary size (vLLM's); None = read it from the model dir."""
        self.any_whitespace = any_whitespace
        """False mirrors vLLM's ``disable_any_whitespace``."""
        self.max_cached = max_cached
        self.start_timeout_s = start_timeout_s
        self.num_compiles = 0
        """Compiles sent to the worker (a cached or shared verdict is not one)."""
        self.num_worker_starts = 0
        self.is_available = True
        """False once the worker failed to start: checks then pass unvetted."""
        self._verdicts: OrderedDict[str, str | None] = OrderedDict()
        self._jobs: dict[str, _Job] = {}
        self._lock = asyncio.Lock()
        self._proc: BaseProcess | None = None
        self._conn: Connection | None = None
        self._closed = False

    async def check(self, kind: GrammarKind, spec: str) -> None:
        """Pass, or raise ``InvalidRequestError`` for a grammar that fails or is slow."""
        if kind not in _NAMES:
            raise ValueError(f"unknown grammar kind {kind!r}")
        key = hashlib.sha256(f"{kind}\n{spec}".encode("utf-8", "surrogatepass")).hexdigest()
        if key in self._verdicts:
            self._verdicts.move_to_end(key)
            verdict = self._verdicts[key]
        else:
            job = self._jobs.get(key)
            if job is None:
                job = self._jobs[key] = _Job(asyncio.create_task(self._compile(key, kind, spec)))
            job.num_waiters += 1
            try:
                # Shielded: a caller that leaves must not cancel the compile others share.
                verdict = await asyncio.shield(job.task)
            finally:
                job.num_waiters -= 1
        if verdict is not None:
            raise InvalidRequestError(verdict)

    async def close(self) -> None:
        """Stop the worker; later checks raise RuntimeError."""
        self._closed = True
        with contextlib.suppress(ValueError, AttributeError):  # already stopped
            if self._proc is not None:
                self._proc.kill()  # wakes a compile in flight, which then gives up the lock
        async with self._lock:
            await asyncio.to_thread(self._stop_worker)

    async def _compile(self, key: str, kind: GrammarKind, spec: str) -> str | None:
        async with self._lock:
            try:
                if self._jobs[key].num_waiters == 0:
                    return None  # every caller left while it queued; nobody reads this
                conn = await self._worker()
                if conn is None:
                    return None  # vetting is off: pass, and remember nothing
                verdict = await self._run(conn, kind, spec)
                self._remember(key, verdict)
                return verdict
            finally:
                del self._jobs[key]

    def _remember(self, key: str, verdict: str | None) -> None:
        self._verdicts[key] = verdict
        self._verdicts.move_to_end(key)
        while len(self._verdicts) > self.max_cached:
            self._verdicts.popitem(last=False)

    async def _run(self, conn: Connection, kind: GrammarKind, spec: str) -> str | None:
        """None = compiled, else the refusal's message."""
        name = _NAMES[kind]
        self.num_compiles += 1
        started = time.monotonic()
        await asyncio.to_thread(conn.send, (kind, spec))
        is_done = await asyncio.to_thread(conn.poll, self.timeout_s)
        if self._closed:
            raise RuntimeError("the grammar checker is closed")
        if not is_done:
            await asyncio.to_thread(self._stop_worker)
            logger.warning(
                "grammar compile timed out",
                extra={"event": "grammar_timeout", "kind": kind, "timeout_s": self.timeout_s},
            )
            return f"the {name} took too long to compile (over {self.timeout_s:g} s); simplify it"
        try:
            status, message = conn.recv()
        except (EOFError, OSError):
            await asyncio.to_thread(self._stop_worker)
            logger.warning("grammar checker died", extra={"event": "grammar_worker_died"})
            return f"the {name} cannot be compiled: the compiler crashed on it"
        compile_s = round(time.monotonic() - started, 3)
        logger.debug(
            "grammar compiled",
            extra={"event": "grammar_compiled", "kind": kind, "compile_s": compile_s},
        )
        return None if status == "ok" else f"the {name} cannot be compiled: {message}"

    async def _worker(self) -> Connection | None:
        """The worker's pipe, (re)started as needed; None once vetting is off."""
        if self._closed:
            raise RuntimeError("the grammar checker is closed")
        if self._proc is not None and not self._proc.is_alive():
            await asyncio.to_thread(self._stop_worker)  # died between compiles
        if self._conn is None and self.is_available:
            try:
                self._conn = await asyncio.to_thread(self._start_worker)
            except Exception as exc:
                if self._closed:
                    raise RuntimeError("the grammar checker is closed") from exc
                self.is_available = False
                logger.error(
                    "grammar checks are off: %s",
                    exc,
                    extra={"event": "grammar_check_unavailable", "model": self.model_dir},
                )
        return self._conn

    def _start_worker(self) -> Connection:
        """Blocking: spawn the worker and wait until its tokenizer is loaded."""
        context = multiprocessing.get_context("spawn")
        conn, child = context.Pipe()
        args = (child, self.model_dir, self.vocab_size, self.any_whitespace)
        proc = context.Process(target=serve, args=args, name="GrammarVetter", daemon=True)
        proc.start()
        child.close()  # NOTE: the worker's death must read as EOF here
        self._proc = proc
        reply: tuple[str, str] = ("error", f"no answer within {self.start_timeout_s:g} s")
        try:
            if conn.poll(self.start_timeout_s):
                reply = conn.recv()
        except (EOFError, OSError):
            reply = ("error", f"the worker exited (code {proc.exitcode})")
        if reply[0] != "ready":
            self._conn = conn
            self._stop_worker()
            raise RuntimeError(f"the grammar checker could not start: {reply[1]}")
        self.num_worker_starts += 1
        return conn

    def _stop_worker(self) -> None:
        """Blocking, idempotent: kill the worker and close the pipe."""
        proc, self._proc = self._proc, None
        conn, self._conn = self._conn, None
        if proc is not None:
            proc.kill()
            proc.join(10)
        if conn is not None:
            conn.close()
