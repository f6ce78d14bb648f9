"""A completion request's whole life, owned here and nowhere else.

``Lifecycle.run(input)`` takes a schema-valid OpenAI body through:

1. the cheap checks: readiness and draining, the right to a priority below 0, the
   model, the concurrency and queue-full refusals (a reservation then counts the
   request until admission takes it), a prompt too long by its size alone;
2. templating and tokenizing, off the event loop (a body may be 1 MiB), a prompt
   whose prefix proves it too long refused after that prefix;
3. admission, whose SLO check needs the token count, raced against the client leaving;
4. submission under the gateway's own unique id (``X-Request-Id`` is only echoed
   and logged: two clients may send the same one);
5. a ``MeasuredStream``, whose one ``aclose()`` aborts the engine request if it is
   unfinished, frees the slot and records the outcome.

One ``RequestMeter`` (``request_meter.py``) per request writes its metrics and its log
line, from the queue to the end, whatever part of the lifecycle it reaches.

A non-streamed reply is collected while watching for the client leaving and for the
drain deadline, then built and serialized in a worker thread; a stream that fails, or
is cut at the drain deadline, ends with an OpenAI error event and ``[DONE]``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
import uuid
from asyncio import FIRST_COMPLETED
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from dataclasses import replace
from typing import Any

from fastapi import Request
from fastapi.encoders import jsonable_encoder
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel

from engine_worker.client.tokenizer_guard import held_if
from engine_worker.contract.api import (
    ChoiceDelta,
    EngineDeadError,
    InvalidRequestError,
    SamplingOptions,
)
from gateway.admission import AdmissionRejected, ClientDisconnected, Reservation, Ticket
from gateway.auth import bearer_token, client_id, key_matches
from gateway.errors import APIError
from gateway.measured_stream import MeasuredStream
from gateway.objectives import resolve
from gateway.openai_format import Formatter
from gateway.openai_request import EndpointInput
from gateway.protocol import MAX_PRIORITY, ChatCompletion, Completion, Usage
from gateway.request_meter import RequestMeter
from gateway.sse import DONE, event, sse_response
from gateway.state import GatewayState
from gateway.tenant_meter import TenantMeter
from gateway.tenants import Tenant, tenant_salt


class Lifecycle:
    """One request's lifecycle; FastAPI builds one per request (``deps.LifecycleDep``)."""

    def __init__(self, gateway: GatewayState, request: Request) -> None:
        self.gateway = gateway
        self.request = request

    async def run(self, given: EndpointInput) -> Response | BaseModel:
        gateway = self.gateway
        tenant = self._tenant()
        charge = gateway.rates.charge_tokens if tenant.limits.tokens_per_minute else None
        own = TenantMeter(tenant.name, gateway.tenant_metrics, charge)
        meter = RequestMeter(gateway.metrics, given.endpoint, self.request.state.arrival_s, own)
        try:
            stream, fmt = await self._start(given, meter, tenant)
        except BaseException as exc:
            meter.refused(exc)
            raise
        if fmt.stream:
            return self._stream_response(stream, fmt)
        return await self._reply(stream, fmt)

    # --- before the engine ---

    def _tenant(self) -> Tenant:
        """Whose the request is: the tenant of its API key (``tenants``)."""
        tenant = self.gateway.tenants.of_key(bearer_token(self.request))
        if tenant is None:  # the access check lets no such request through
            raise APIError(401, "a valid API key is required", code="invalid_api_key")
        return tenant

    async def _start(
        self, given: EndpointInput, meter: RequestMeter, tenant: Tenant
    ) -> tuple[MeasuredStream, Formatter]:
        gateway, engine = self.gateway, self.gateway.engine
        gateway.serving.check_serving()
        priority = self._priority(given.body, tenant)
        given.check(engine)
        settings = gateway.settings
        given.check_limits(settings.max_tools, settings.max_schema_depth, settings.max_schema_bytes)
        client = client_id(self.request, settings.api_key_set())
        reservation = gateway.admission.reserve(client)
        try:
            given.check_size(engine)
            prompt_ids, options = await self._prepare(given, client)
            options = self._objectives(given.body, options, tenant, meter)
            charge = len(prompt_ids) + options.n * options.max_tokens
            await gateway.rates.admit(tenant.name, tenant.limits, charge)
            stack = AsyncExitStack()
            ticket = await self._admit(
                len(prompt_ids), priority, stack, reservation, options, meter, client, tenant
            )
        finally:
            reservation.release()
        completion_id = f"{given.id_prefix}-{uuid.uuid4().hex}"
        stream = MeasuredStream(engine, gateway.watch, meter, completion_id, ticket, stack)
        salt = tenant_salt(tenant.name, given.body.cache_salt)
        await stream.submit(prompt_ids, options, priority, salt)
        return stream, given.formatter(completion_id, engine.info.model_name)

    def _objectives(
        self, body: Any, options: SamplingOptions, tenant: Tenant, meter: RequestMeter
    ) -> SamplingOptions:
        """The request's objectives (``objectives.resolve``): its meter judges it by them,
        and the options carry its own or its tenant's to admission and the engine."""
        config = self.gateway.dlfp.config
        objectives = resolve(
            body.ttft_slo_ms, body.itl_slo_ms, tenant.limits, config.ttft_slo_ms, config.itl_slo_ms
        )
        meter.objectives = objectives
        return replace(
            options, ttft_slo_ms=objectives.own_ttft_slo_ms, itl_slo_ms=objectives.own_itl_slo_ms
        )

    def _priority(self, body: Any, tenant: Tenant) -> int:
        """X-Priority, else the body's ``priority``, else the tenant's; lower is served
        first (within the tenant). Below 0 needs a key listed in ``DLFP_PRIORITY_API_KEYS``,
        or a tenant whose own priority is at most the one asked for."""
        value = body.priority if "priority" in body.model_fields_set else tenant.limits.priority
        header = self.request.headers.get("x-priority")
        if header is not None:
            try:
                value = int(header)
            except ValueError:
                raise APIError(400, "X-Priority must be an integer", param="X-Priority") from None
            if not -MAX_PRIORITY <= value <= MAX_PRIORITY:
                raise APIError(
                    400,
                    f"X-Priority must lie within [-{MAX_PRIORITY}, {MAX_PRIORITY}]",
                    param="X-Priority",
                )
        keys = self.gateway.settings.priority_key_set()
        own_key = key_matches(bearer_token(self.request), keys)
        allowed = own_key or value >= min(0, tenant.limits.priority)
        if not allowed:
            raise APIError(
                403,
                "a priority below 0 needs an API key listed in DLFP_PRIORITY_API_KEYS "
                "(or a tenant whose priority is at most the one asked for)",
                param="priority",
                code="forbidden",
            )
        return value

    def _check_reply_size(self, options: SamplingOptions) -> None:
        """A non-streamed reply is built whole, and every stream waits meanwhile."""
        limit = self.gateway.settings.max_reply_tokens
        size = options.n * options.max_tokens * (1 + (options.logprobs or 0))
        if size > limit:
            raise APIError(
                400,
                f"a non-streamed reply of n x max_tokens x (1 + top_logprobs) = {size} exceeds "
                f"the limit of {limit}; stream it, or ask for fewer tokens",
                param="max_tokens",
            )

    async def _prepare(
        self, given: EndpointInput, client: str
    ) -> tuple[list[int], SamplingOptions]:
        """The prompt's token ids and the sampling options, within the pre-admission
        deadline (from arrival), unless the client leaves first.

        NOTE: a worker thread cannot be stopped. When the client leaves or the deadline
        passes, the request gives up its places at once; work still waiting for its
        turn is cancelled, and work already running runs on to its end holding the
        client's pre-admission turn: the client cannot start more work than its turns
        while that work still runs."""
        limits = self.gateway.admission.limits
        deadline_s = self.request.state.arrival_s + limits.pre_admission_timeout_s
        turn = asyncio.Event()
        work = asyncio.ensure_future(self._prepared(given, client, turn))
        left = asyncio.ensure_future(_until_disconnected(self.request))
        try:
            timeout_s = max(0.0, deadline_s - time.perf_counter())
            await asyncio.wait({work, left}, timeout=timeout_s, return_when=FIRST_COMPLETED)
        finally:
            left.cancel()
            if not work.done():  # given up here, or this handler cancelled
                if turn.is_set():
                    work.add_done_callback(_discard_result)
                else:
                    work.cancel()
        if work.done():
            return work.result()
        if left.done() and not left.cancelled():
            raise ClientDisconnected()
        raise AdmissionRejected(
            "pre_admission_timeout",
            f"templating, tokenizing and vetting took over {limits.pre_admission_timeout_s} s",
            self.gateway.admission.retry_after_s(),
        )

    async def _prepared(
        self, given: EndpointInput, client: str, turn: asyncio.Event
    ) -> tuple[list[int], SamplingOptions]:
        """Templated, tokenized and vetted in one of the client's turns (``turn`` set
        once it is taken)."""
        gateway, engine = self.gateway, self.gateway.engine
        async with gateway.client_shares.worker(client):
            turn.set()
            prompt_ids = await asyncio.to_thread(given.prompt_ids, engine)
            options = given.options(len(prompt_ids), engine, gateway.settings.max_tokens_limit)
            if not given.body.stream:
                self._check_reply_size(options)
            await self._check_grammar(given, options)
        return prompt_ids, options

    async def _check_grammar(self, given: EndpointInput, options: SamplingOptions) -> None:
        """Compile the grammar apart first: vLLM's compile has no time-out, on one worker."""
        check = self.gateway.engine.check_grammar
        try:
            if options.structural_tag is not None:  # it wins over json_schema in the engine
                await check("structural_tag", options.structural_tag)
            elif options.json_schema is not None:
                await check("json_schema", json.dumps(options.json_schema))
        except InvalidRequestError as exc:
            fmt = given.body.response_format
            own = fmt.json_schema.schema_ if fmt is not None and fmt.json_schema else None
            is_own = options.structural_tag is None and options.json_schema == own
            raise InvalidRequestError(str(exc), "response_format" if is_own else "tools") from exc

    async def _admit(
        self,
        num_prompt_tokens: int,
        priority: int,
        stack: AsyncExitStack,
        reservation: Reservation,
        options: SamplingOptions,
        meter: RequestMeter,
        client: str,
        tenant: Tenant,
    ) -> Ticket:
        """Wait for a slot, unless the client leaves first (then the slot is never taken).

        An ``n``-choice request takes ``n`` slots. A structured output's first token
        waits for its grammar to compile too, so it is no sample of prefill time."""
        gateway = self.gateway
        structured = options.json_schema is not None or options.structural_tag is not None
        slot = gateway.admission.slot(
            prefill_tokens=num_prompt_tokens,
            priority=priority,
            ttft_slo_s=(options.ttft_slo_ms or gateway.dlfp.config.ttft_slo_ms) / 1000,
            reservation=reservation,
            num_slots=options.n,
            measured=not (structured or options.json_object),
            client=client,
            max_tokens=options.max_tokens,
            tenant=tenant.name,
        )
        acquire = asyncio.ensure_future(stack.enter_async_context(slot))
        left = asyncio.ensure_future(_until_disconnected(self.request))
        try:
            with meter.queued():
                await asyncio.wait({acquire, left}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            left.cancel()
        if not acquire.done():
            acquire.cancel()
            with contextlib.suppress(asyncio.CancelledError, AdmissionRejected):
                await acquire
            await stack.aclose()
            raise ClientDisconnected()
        ticket = acquire.result()
        meter.admitted(ticket.queue_s, min(options.n, gateway.admission.limits.max_concurrent))
        stack.callback(meter.tenant.released)
        return ticket

    # --- after submission ---

    async def _reply(self, stream: MeasuredStream, fmt: Formatter) -> Response:
        """Collect the whole reply, unless the client leaves or the drain deadline passes;
        then build it and its body in a worker thread (``_reply_response``)."""
        collect = asyncio.ensure_future(_collect(stream, fmt.n))
        left = asyncio.ensure_future(_until_disconnected(self.request))
        cut = asyncio.ensure_future(self.gateway.serving.streams_cut.wait())
        try:
            done, _ = await asyncio.wait({collect, left, cut}, return_when=asyncio.FIRST_COMPLETED)
            if collect in done:
                deltas = collect.result()
                total = Usage.of(stream.num_prompt_tokens, stream.num_generated)
                lock = self.gateway.engine.tokenizer_lock
                response = await asyncio.to_thread(_reply_response, fmt, deltas, total, lock)
                await fmt.finish()
                return response
            if left in done:
                raise ClientDisconnected()
            stream.end_as("server_error")
            raise APIError(
                503, "the gateway stopped before the reply was complete", code="engine_unavailable"
            )
        except EngineDeadError as exc:
            raise APIError(503, f"the engine failed: {exc}", code="engine_error") from exc
        finally:
            for task in (collect, left, cut):
                task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await collect
            await stream.aclose()

    def _stream_response(self, stream: MeasuredStream, fmt: Formatter) -> Response:
        def on_cut() -> list[bytes]:
            stream.end_as("server_error")
            error = APIError(503, "the gateway is shutting down", code="engine_unavailable")
            return [*(event(body) for body in fmt.error_events(error)), DONE]

        def on_stalled() -> None:
            stream.end_as("client_stalled")

        return sse_response(
            _events(stream, fmt, self.gateway.engine.tokenizer_lock),
            self.gateway.keepalive_s,
            on_close=stream.aclose,
            cut=self.gateway.serving.streams_cut,
            on_cut=on_cut,
            write_timeout_s=self.gateway.settings.stream_write_timeout_s,
            on_stalled=on_stalled,
        )


def _reply_response(
    fmt: Formatter,
    deltas: list[list[ChoiceDelta]],
    total: Usage,
    tokenizer_lock: threading.Lock,
) -> Response:
    """The reply and its JSON body, byte for byte what FastAPI writes for the reply model
    returned from its route; slow for a big reply (a model per token and alternative),
    so run in a worker thread, and the route returns the body as it is."""
    # NOTE: vLLM's parsers read the tokenizer: the vocabulary when built (a parser is
    # built for each choice, here), and some decode or encode when parsing. So a reply
    # read by parsers is built under the engine's tokenizer lock
    # (engine_worker/client/tokenizer_guard.py; held while the reply is built, not while it
    # is serialized).
    with tokenizer_lock if fmt.has_parsers else contextlib.nullcontext():
        reply = fmt.reply(deltas, total)
    if isinstance(reply, ChatCompletion | Completion):
        # Their routes declare them as ``response_model``: FastAPI then dumps the model
        # with pydantic, by alias, unset and default fields included.
        return Response(reply.model_dump_json(by_alias=True), media_type="application/json")
    # /v1/responses declares none: FastAPI encodes the model and json.dumps the result.
    return JSONResponse(jsonable_encoder(reply))


async def _collect(stream: MeasuredStream, n: int) -> list[list[ChoiceDelta]]:
    by_choice: list[list[ChoiceDelta]] = [[] for _ in range(n)]
    async for chunk in stream.chunks():
        for delta in chunk.choices:
            by_choice[delta.index].append(delta)
    return by_choice


async def _events(
    stream: MeasuredStream, fmt: Formatter, tokenizer_lock: threading.Lock
) -> AsyncIterator[bytes]:
    """One event per engine delta that carries tokens or a finish reason. Parsers run
    under the tokenizer lock (``engine_worker/client/tokenizer_guard.py``), never across a write."""
    try:
        for chunk in fmt.preamble():
            yield event(chunk)
        async for output in stream.chunks():
            for delta in output.choices:
                if delta.token_ids or delta.finish_reason is not None:
                    async with held_if(fmt.has_parsers, tokenizer_lock):
                        bodies = list(fmt.stream_events(delta))
                    for body in bodies:
                        yield event(body)
        async with held_if(fmt.has_parsers, tokenizer_lock):
            bodies = list(fmt.closing(stream.num_prompt_tokens, stream.num_generated))
        await fmt.finish()
        for body in bodies:
            yield event(body)
    except Exception as exc:  # any engine failure: the client must see the stream end
        status = 503 if isinstance(exc, EngineDeadError) else 500
        error = APIError(status, f"the engine failed during the stream: {exc}", code="engine_error")
        for body in fmt.error_events(error):
            yield event(body)
    finally:
        await stream.aclose()
    yield DONE


def _discard_result(work: asyncio.Future[tuple[list[int], SamplingOptions]]) -> None:
    """Work no request waits for any more: its outcome, an error included, is dropped."""
    if not work.cancelled():
        work.exception()


async def _until_disconnected(request: Request) -> None:
    # NOTE: the body has been read by now, so the next ASGI message is the
    # disconnect; servers repeat it to later listeners such as StreamingResponse.
    while (await request.receive())["type"] != "http.disconnect":
        pass
