"""``token-rate``: a tenant over its ``tokens_per_minute`` is told when to come back, and
coming back then works.

The first ``--tenant`` gets ``tokens_per_minute`` = ``--tokens-per-minute`` (2000) through
``PATCH /admin/tenants/{name}``, then sends one request after the other (each asking
``--rate-max-tokens``; one at a time, so no tokens are still being charged when the
refusal comes) until a 429 names ``tokens_per_minute``. It sleeps the ``Retry-After`` of
that refusal and sends the same request once more. The aim: the retry is served. The
earlier limit is put back at the end, however the scenario ends.
"""

from __future__ import annotations

import asyncio
from typing import Any

from bench.tenants.admin import patched
from bench.tenants.base import Outcome, Run, TenantRecord
from bench.tenants.client import REFUSAL_PAUSE_S, stream_chat
from bench.tenants.report import tenant_reports
from bench.tenants.window import measured

LIMIT = "tokens_per_minute"
PROMPT_WORDS = 40


def names_limit(record: TenantRecord) -> bool:
    """Whether a refusal is the token rate's: a 429 whose code or message names it."""
    return record.status == 429 and LIMIT in f"{record.code} {record.message}"


def judge_token_rate(
    probes: list[TenantRecord], refusal: TenantRecord | None, retry: TenantRecord | None
) -> tuple[bool, str, dict[str, Any]]:
    """Whether a 429 naming the limit came with a Retry-After, and the retry after it was
    served; the verdict's line and its figures."""
    served = [r for r in probes if r.is_complete]
    figures: dict[str, Any] = {
        "num_before_refusal": len(served),
        "tokens_before_refusal": sum(
            (r.prompt_tokens or 0) + (r.completion_tokens or 0) for r in served
        ),
        "refusal": None if refusal is None else {"code": refusal.code, "message": refusal.message},
        "retry_after_s": None if refusal is None else refusal.retry_after_s,
        "retry_status": None if retry is None else retry.status,
        "retry_outcome": None if retry is None else retry.outcome,
    }
    if refusal is None:
        return False, f"no 429 naming {LIMIT} in {len(probes)} requests", figures
    if refusal.retry_after_s is None:
        return (
            False,
            f"429 {refusal.code} after {len(served)} requests, without Retry-After",
            figures,
        )
    line = (
        f"429 {refusal.code} after {len(served)} requests ({figures['tokens_before_refusal']} "
        f"tokens), Retry-After {refusal.retry_after_s:g} s; the retry then: "
        f"{'-' if retry is None else retry.refusal if retry.outcome != 'ok' else '200, served'}"
    )
    return retry is not None and retry.is_complete, line, figures


async def _probe(run: Run, tenant: str) -> tuple[list[TenantRecord], TenantRecord | None, str]:
    """Requests until one is refused for the limit (or one cannot fit at all); the served
    ones, the refusal and the prompt it carried."""
    options = run.options
    probes: list[TenantRecord] = []
    prompt = run.prompt(PROMPT_WORDS)
    for _ in range(options.max_rate_requests):
        prompt = run.prompt(PROMPT_WORDS)
        record = await stream_chat(run, tenant, "probe", options.rate_max_tokens, prompt)
        if names_limit(record):
            return probes, record, prompt
        probes.append(record)
        if record.status == 400:
            break  # its prompt and max_tokens exceed the limit: no minute would hold it
        if not record.is_complete:
            await asyncio.sleep(REFUSAL_PAUSE_S)
    return probes, None, prompt


async def token_rate(run: Run) -> Outcome:
    options = run.options
    tenant = options.tenants[0].name
    outcome = Outcome(
        "token-rate",
        (tenant,),
        aim=f"after a 429 naming {LIMIT}, a retry after its Retry-After is served",
    )
    outcome.figures = {"tenant": tenant, LIMIT: options.tokens_per_minute}
    retry = None
    changes = {tenant: {LIMIT: options.tokens_per_minute}}
    async with patched(run, changes), measured(run, outcome):
        probes, refusal, prompt = await _probe(run, tenant)
        if refusal is not None and refusal.retry_after_s is not None:
            await asyncio.sleep(refusal.retry_after_s)
            retry = await stream_chat(run, tenant, "retry", options.rate_max_tokens, prompt)
    outcome.records = list(run.records)
    outcome.reports = tenant_reports(outcome)
    outcome.met, outcome.verdict, figures = judge_token_rate(probes, refusal, retry)
    outcome.figures |= figures
    return outcome
