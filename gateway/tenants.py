"""Tenants: who shares the gateway, with what weight, limits and objectives.

``DLFP_TENANTS_FILE`` names a TOML file, read once at start, of ``[[tenant]]`` tables::

    [[tenant]]
    name = "search"
    keys = ["sk-search-1"]        # or keys_file = "/run/secrets/search-keys"
    weight = 3                    # its share of the slots when they are contended
    max_concurrent = 16           # slots it may hold; its other requests queue
    max_queued = 64               # requests it may have queued; past it, 429
    requests_per_minute = 600
    tokens_per_minute = 200000    # prompt plus completion, charged as they happen
    priority = 0                  # the priority of its requests that name none
    ttft_slo_ms = 5000            # its objectives (the gateway's where unset)
    itl_slo_ms = 300

With no file, each key of ``DLFP_API_KEYS`` is a tenant of its own (``key-1``,
``key-2``, ... in order), of weight 1 and no limits; with no keys at all there is one
tenant, ``default``. A key of ``DLFP_PRIORITY_API_KEYS`` may ask for priorities below 0
whichever tenant it belongs to. Keys are kept as digests (``auth.key_digest``), never
as given. Plain pydantic: no FastAPI import.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Collection, Iterable, Iterator
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gateway.auth import key_digest
from gateway.tenant_limits import TenantLimits

DEFAULT_TENANT = "default"
"""The one tenant of a gateway with no API keys."""
TENANT_NAME = r"[a-z0-9][a-z0-9._-]{0,62}"
"""A tenant's name: it labels metrics and log lines."""


class TenantError(ValueError):
    """The tenants file cannot be used; the message names the line."""


class Tenant(BaseModel):
    """A named tenant: its key digests and its limits."""

    model_config = ConfigDict(frozen=True)

    name: str
    key_digests: frozenset[str]
    limits: TenantLimits
    may_raise_priority: bool = False
    """Whether one of its keys may ask for priorities below 0 (``DLFP_PRIORITY_API_KEYS``;
    the right is the key's, not the tenant's)."""


class _FileTenant(TenantLimits):
    name: str = Field(pattern=f"^{TENANT_NAME}$")
    keys: list[str] = Field(default_factory=list)
    keys_file: str | None = None


class Tenants:
    """Every tenant, found by the digest of a request's API key."""

    def __init__(
        self,
        tenants: Iterable[Tenant],
        default: str | None = None,
        keys: Collection[str] = (),
    ) -> None:
        self._by_name = {tenant.name: tenant for tenant in tenants}
        self.keys = frozenset(keys)
        """Every API key a tenant holds: the keys /v1 accepts."""
        self._by_digest = {d: t for t in self._by_name.values() for d in t.key_digests}
        self._default = default

    @property
    def names(self) -> list[str]:
        return list(self._by_name)

    def __iter__(self) -> Iterator[Tenant]:
        return iter(self._by_name.values())

    def get(self, name: str) -> Tenant | None:
        return self._by_name.get(name)

    def limits_of(self, name: str) -> TenantLimits | None:
        tenant = self._by_name.get(name)
        return None if tenant is None else tenant.limits

    def of_key(self, token: str | None) -> Tenant | None:
        """The tenant of a bearer token; the default tenant (no keys configured) for any
        request; None for an unknown key."""
        if token is not None:
            found = self._by_digest.get(key_digest(token))
            if found is not None:
                return found
        return None if self._default is None else self._by_name[self._default]

    def with_limits(self, name: str, limits: TenantLimits) -> Tenant:
        """Replace one tenant's limits (until restart); returns it as it now stands."""
        tenant = self._by_name[name].model_copy(update={"limits": limits})
        self._by_name[name] = tenant
        for digest in tenant.key_digests:
            self._by_digest[digest] = tenant
        return tenant


def tenant_salt(tenant: str, cache_salt: str | None) -> str:
    """The prefix cache's salt for a request: its tenant's name, so no tenant's prompts hit
    another's cache (nor reveal what another sent by its time to first token), and within
    it the client's own ``cache_salt`` (a name holds no ``:``, so the two cannot collide)."""
    return tenant if cache_salt is None else f"{tenant}:{cache_salt}"


def tenants_from_keys(api_keys: Collection[str], priority_keys: Collection[str]) -> Tenants:
    """No tenants file: a tenant per key (``key-1``, ... in the order given), or one
    ``default`` tenant with no keys."""
    api_keys = list(dict.fromkeys(api_keys))  # a key listed twice is one tenant
    if not api_keys:
        tenant = Tenant(name=DEFAULT_TENANT, key_digests=frozenset(), limits=TenantLimits())
        return Tenants([tenant], default=DEFAULT_TENANT)
    return Tenants(
        (
            Tenant(
                name=f"key-{i}",
                key_digests=frozenset({key_digest(key)}),
                limits=TenantLimits(),
                may_raise_priority=key in priority_keys,
            )
            for i, key in enumerate(api_keys, start=1)
        ),
        keys=api_keys,
    )


def build_tenants(
    api_keys: Collection[str], priority_keys: Collection[str], path: Path | None
) -> Tenants:
    """The tenants of ``path``; a key of ``api_keys`` that no tenant there holds is a
    tenant of its own (``key-1``, ...). Without a file, ``tenants_from_keys``."""
    if path is None:
        return tenants_from_keys(api_keys, priority_keys)
    from_file = load_tenants(path, priority_keys)
    held = {digest for tenant in from_file for digest in tenant.key_digests}
    own = [key for key in api_keys if key_digest(key) not in held]
    extra = list(tenants_from_keys(own, priority_keys)) if own else []
    clash = sorted({t.name for t in extra} & set(from_file.names))
    if clash:
        raise TenantError(f"{path}: tenant name {clash[0]!r} is taken by a key of DLFP_API_KEYS")
    return Tenants([*from_file, *extra], keys=from_file.keys | set(api_keys))


def load_tenants(path: Path, priority_keys: Collection[str] = ()) -> Tenants:
    """The tenants of a TOML file; ``TenantError`` names the line of what is wrong."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise TenantError(f"{path}: cannot read the tenants file: {exc}") from None
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise TenantError(f"{path}: {exc}") from None
    unknown = sorted(set(document) - {"tenant"})
    if unknown:
        raise TenantError(f"{path}: unknown table or key {unknown[0]!r}; expected [[tenant]]")
    entries = document.get("tenant", [])
    if not isinstance(entries, list) or not entries:
        raise TenantError(f"{path}: no [[tenant]] table")
    tables = _Tables(path, text)
    tenants: list[Tenant] = []
    all_keys: set[str] = set()
    seen_keys: dict[str, str] = {}
    for index, entry in enumerate(entries):
        tenant, keys = _tenant(entry, index, tables, priority_keys)
        if any(t.name == tenant.name for t in tenants):
            where = tables.where(index, "name")
            raise TenantError(f"{where}: tenant {tenant.name!r} is named twice")
        for digest in tenant.key_digests:
            if digest in seen_keys:
                raise TenantError(
                    f"{tables.where(index, 'keys')}: a key of tenant {tenant.name!r} is also "
                    f"tenant {seen_keys[digest]!r}'s"
                )
            seen_keys[digest] = tenant.name
        tenants.append(tenant)
        all_keys |= keys
    return Tenants(tenants, keys=all_keys)


class _Tables:
    """Where each ``[[tenant]]`` table, and each of its fields, is in the file."""

    def __init__(self, path: Path, text: str) -> None:
        self.path = path
        self._lines = text.splitlines()
        self._starts = [
            number
            for number, line in enumerate(self._lines, start=1)
            if re.match(r"\s*\[\[\s*tenant\s*\]\]", line)
        ]

    def where(self, index: int, field: str | None = None) -> str:
        """``path:line`` of table ``index``'s ``field`` (its header without one)."""
        if index >= len(self._starts):
            return str(self.path)
        start = self._starts[index]
        end = self._starts[index + 1] if index + 1 < len(self._starts) else len(self._lines) + 1
        if field is not None:
            for number in range(start + 1, end):
                if re.match(rf"\s*{re.escape(field)}\s*=", self._lines[number - 1]):
                    return f"{self.path}:{number}"
        return f"{self.path}:{start}"


def _tenant(
    entry: Any, index: int, tables: _Tables, priority_keys: Collection[str]
) -> tuple[Tenant, set[str]]:
    if not isinstance(entry, dict):
        raise TenantError(f"{tables.where(index)}: a tenant must be a table")
    try:
        parsed = _FileTenant.model_validate(entry)
    except ValidationError as exc:
        error = exc.errors()[0]
        field = str(error["loc"][0]) if error["loc"] else None
        where = tables.where(index, field)
        raise TenantError(f"{where}: {field or 'tenant'}: {error['msg']}") from None
    keys = list(parsed.keys)
    if parsed.keys_file is not None:
        where = tables.where(index, "keys_file")
        keys += _read_keys(tables.path.parent / parsed.keys_file, where)
    if not keys:
        raise TenantError(
            f"{tables.where(index)}: tenant {parsed.name!r} has no keys (keys or keys_file)"
        )
    limits = TenantLimits.model_validate(parsed.model_dump(include=set(TenantLimits.model_fields)))
    tenant = Tenant(
        name=parsed.name,
        key_digests=frozenset(key_digest(key) for key in keys),
        limits=limits,
        may_raise_priority=any(key in priority_keys for key in keys),
    )
    return tenant, set(keys)


def _read_keys(path: Path, where: str) -> list[str]:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise TenantError(f"{where}: keys_file: {exc}") from None
    return [entry.strip() for entry in re.split(r"[,\r\n]", text) if entry.strip()]
