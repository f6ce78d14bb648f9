"""The gateway's per-tenant series of ``/metrics``, by label, and their change over a run.

``bench.lib.scrape`` sums every series over its labels; a tenant's share needs them apart.
A histogram's change over a run is the change of each cumulative bucket, and its quantiles
interpolate linearly within the bucket that holds the rank, as Prometheus's
``histogram_quantile`` does.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping

REQUESTS = "dlfp_tenant_requests_total"
PROMPT_TOKENS = "dlfp_tenant_prompt_tokens_total"
COMPLETION_TOKENS = "dlfp_tenant_completion_tokens_total"
QUEUE_WAIT = "dlfp_tenant_queue_wait_seconds"
TTFT = "dlfp_tenant_ttft_seconds"
SLOTS_IN_USE = "dlfp_tenant_slots_in_use"
SLOT_SECONDS = "dlfp_tenant_slot_seconds_total"
PREFIX = "dlfp_tenant_"

Labels = tuple[tuple[str, str], ...]
Series = dict[tuple[str, Labels], float]
"""A sample's value by its name and its sorted label pairs."""

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse_series(text: str, prefix: str = PREFIX) -> Series:
    """Every sample whose name starts with ``prefix``, with its labels."""
    series: Series = {}
    for line in text.splitlines():
        if not line.startswith(prefix):
            continue
        match = _SAMPLE.match(line)
        if match is None:
            continue
        name, labels, value = match.groups()
        try:
            number = float(value)
        except ValueError:
            continue
        pairs = tuple(sorted(_LABEL.findall(labels or "")))
        series[(name, pairs)] = number
    return series


def by_tenant(series: Series, name: str, **match: str) -> dict[str, float]:
    """``name`` per ``tenant`` label, summed over its other labels; only the samples whose
    labels include ``match``."""
    values: dict[str, float] = {}
    for (sample, labels), value in series.items():
        found = dict(labels)
        if sample != name or "tenant" not in found:
            continue
        if any(found.get(k) != v for k, v in match.items()):
            continue
        if not math.isnan(value):
            values[found["tenant"]] = values.get(found["tenant"], 0.0) + value
    return values


def delta_by_tenant(before: Series, after: Series, name: str, **match: str) -> dict[str, float]:
    """The change of ``name`` per tenant; a tenant absent before counts from 0."""
    old = by_tenant(before, name, **match)
    return {t: v - old.get(t, 0.0) for t, v in by_tenant(after, name, **match).items()}


def label_values(series: Series, name: str, label: str) -> set[str]:
    return {dict(labels)[label] for (n, labels) in series if n == name and label in dict(labels)}


def bucket_delta(
    before: Series, after: Series, name: str, tenant: str
) -> list[tuple[float, float]]:
    """A tenant's ``name`` histogram buckets over a run: (upper bound, cumulative count
    added), by bound; empty where the histogram is absent."""

    def buckets(series: Series) -> dict[float, float]:
        found: dict[float, float] = {}
        for (sample, labels), value in series.items():
            pairs = dict(labels)
            if sample == f"{name}_bucket" and pairs.get("tenant") == tenant and "le" in pairs:
                found[float(pairs["le"])] = found.get(float(pairs["le"]), 0.0) + value
        return found

    old, new = buckets(before), buckets(after)
    return sorted((le, count - old.get(le, 0.0)) for le, count in new.items())


def histogram_quantile(buckets: list[tuple[float, float]], q: float) -> float | None:
    """The ``q`` quantile (0..1) of cumulative ``buckets``; None when they hold nothing.
    A rank in the ``+Inf`` bucket gives the largest finite bound."""
    if not buckets or buckets[-1][1] <= 0:
        return None
    total = buckets[-1][1]
    rank = q * total
    low_bound, low_count = 0.0, 0.0
    for bound, count in buckets:
        if count >= rank:
            if math.isinf(bound):
                return low_bound
            if count == low_count:
                return bound
            return low_bound + (bound - low_bound) * (rank - low_count) / (count - low_count)
        low_bound, low_count = bound, count
    return low_bound


def shares(values: Mapping[str, float], tenants: tuple[str, ...]) -> dict[str, float | None]:
    """Each of ``tenants``' part of their total (None for all when the total is not > 0)."""
    total = sum(max(0.0, values.get(t, 0.0)) for t in tenants)
    if total <= 0:
        return dict.fromkeys(tenants)
    return {t: max(0.0, values.get(t, 0.0)) / total for t in tenants}
