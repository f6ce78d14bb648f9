"""Every scenario of ``bench abuse`` by name, in the order ``bench abuse`` runs them."""

from __future__ import annotations

from bench.abuse.base import Scenario
from bench.abuse.burst import burst
from bench.abuse.cold import cold_burst, slow_readers
from bench.abuse.hostile import distinct_schemas, idle_sockets, list_bodies, space_free_prompts
from bench.abuse.limits import (
    deep_schema,
    pre_admission,
    reply_too_big,
    stalled_readers,
    surrogate_stop,
)

SCENARIOS: dict[str, Scenario] = {
    "burst": burst,
    "surrogate-stop": surrogate_stop,
    "stalled-readers": stalled_readers,
    "reply-too-big": reply_too_big,
    "deep-schema": deep_schema,
    "pre-admission": pre_admission,
    "list-bodies": list_bodies,
    "idle-sockets": idle_sockets,
    "space-free-prompts": space_free_prompts,
    "distinct-schemas": distinct_schemas,
    "cold-burst": cold_burst,
    "slow-readers": slow_readers,
}
