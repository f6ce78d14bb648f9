"""Fuzzing a running gateway's OpenAPI schema with schemathesis: no 500, and every JSON
reply matches the schema. Used on the fake engine (quick tier), where a 500 is the
gateway's own, and once on the real engine."""

from __future__ import annotations

from typing import Any

import httpx

BOUNDED_TOKENS = {"anyOf": [{"type": "integer", "minimum": 1, "maximum": 8}, {"type": "null"}]}


def fuzz_for_500(base_url: str, model_names: list[str], max_examples: int) -> list[str]:
    """The failures of ``max_examples`` generated requests per /v1 operation."""
    import schemathesis
    from hypothesis import HealthCheck, given, settings
    from schemathesis.checks import response_schema_conformance

    raw = httpx.get(base_url + "/openapi.json", timeout=30).json()
    # Bound generation so a fuzz run stays short on the CPU.
    schemas = raw["components"]["schemas"]
    for name in ("ChatCompletionRequest", "CompletionRequest", "ResponsesRequest"):
        if name not in schemas:
            continue
        props = schemas[name]["properties"]
        for key in ("max_tokens", "max_completion_tokens", "max_output_tokens"):
            if key in props:
                props[key] = BOUNDED_TOKENS
        props["model"] = {"type": "string", "enum": [*model_names, "no-such-model"]}
        if "n" in props:
            props["n"] = {"type": "integer", "minimum": 1, "maximum": 2}
    schema = schemathesis.openapi.from_dict(raw)
    failures: list[str] = []

    def check_case(case: Any) -> None:
        response = case.call(base_url=base_url, timeout=120)
        label = f"{case.operation.method.upper()} {case.operation.path}"
        if response.status_code >= 500:
            failures.append(f"{label} -> {response.status_code}: {response.text[:200]}")
        content_type = (response.headers.get("content-type") or [""])[0]
        if content_type.startswith("application/json"):
            try:
                case.validate_response(response, checks=[response_schema_conformance])
            except Exception as exc:  # schemathesis raises its own failure group
                failures.append(f"{label}: schema violation {str(exc)[:300]}")

    for result in schema.get_all_operations():
        operation = result.ok()
        if operation.path.startswith("/admin"):
            continue
        fuzz = settings(
            max_examples=max_examples, deadline=None, suppress_health_check=list(HealthCheck)
        )(given(case=operation.as_strategy())(check_case))
        fuzz()
    return failures
