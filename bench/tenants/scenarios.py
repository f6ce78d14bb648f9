"""Every scenario of ``bench tenants`` by name, in the order ``bench tenants`` runs them."""

from __future__ import annotations

from bench.tenants.base import Scenario
from bench.tenants.token_rate import token_rate
from bench.tenants.trickle import trickle
from bench.tenants.weights import weights

SCENARIOS: dict[str, Scenario] = {
    "trickle": trickle,
    "weights": weights,
    "token-rate": token_rate,
}
