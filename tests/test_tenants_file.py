"""Who the tenants are (quick tier): the tenants file and its errors, naming the line; a
tenant per API key without one; ``DLFP_PRIORITY_API_KEYS`` as a shorthand."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.tenants import DEFAULT_TENANT, TenantError, load_tenants, tenants_from_keys

GOOD = """\
# two teams
[[tenant]]
name = "search"
keys = ["sk-search-1", "sk-search-2"]
weight = 3
max_concurrent = 16
tokens_per_minute = 200000
ttft_slo_ms = 5000

[[tenant]]
name = "batch"
keys_file = "batch-keys"
priority = 5
"""


def write(tmp_path: Path, text: str, keys: str = "sk-batch\n") -> Path:
    (tmp_path / "batch-keys").write_text(keys)
    path = tmp_path / "tenants.toml"
    path.write_text(text)
    return path


def test_a_file_names_each_tenant_its_keys_and_limits(tmp_path: Path) -> None:
    tenants = load_tenants(write(tmp_path, GOOD), priority_keys={"sk-search-2"})
    assert tenants.names == ["search", "batch"]
    search = tenants.of_key("sk-search-1")
    assert search is not None and search.name == "search"
    assert search.limits.weight == 3 and search.limits.max_concurrent == 16
    assert search.limits.tokens_per_minute == 200_000 and search.limits.ttft_slo_ms == 5000
    assert search.may_raise_priority  # one of its keys is a priority key
    batch = tenants.of_key("sk-batch")
    assert batch is not None and batch.limits.priority == 5 and batch.limits.weight == 1
    assert tenants.of_key("sk-unknown") is None and tenants.of_key(None) is None
    assert "sk-search-1" not in repr(search)  # kept as digests


@pytest.mark.parametrize(
    ("text", "line", "says"),
    [
        (GOOD.replace("weight = 3", "weight = 0"), 5, "weight"),
        (GOOD.replace('name = "batch"', 'name = "Batch Team"'), 11, "name"),
        (GOOD.replace("priority = 5", "prio = 5"), 13, "prio"),
        (GOOD.replace('keys_file = "batch-keys"', ""), 10, "no keys"),
        (GOOD.replace('name = "batch"', 'name = "search"'), 11, "named twice"),
        (
            GOOD.replace('keys_file = "batch-keys"', 'keys = ["sk-search-1"]'),
            12,
            "also tenant",
        ),
        (GOOD.replace("max_concurrent = 16", "max_concurrent = 16 16"), 6, "line 6"),
        (GOOD.replace('keys_file = "batch-keys"', 'keys_file = "missing"'), 12, "keys_file"),
    ],
)
def test_a_bad_file_is_an_error_naming_its_line(
    tmp_path: Path, text: str, line: int, says: str
) -> None:
    path = write(tmp_path, text)
    with pytest.raises(TenantError) as error:
        load_tenants(path)
    message = str(error.value)
    assert says in message
    assert f"{path}:{line}" in message or f"line {line}" in message


def test_without_a_file_each_key_is_a_tenant_and_no_keys_is_one(tmp_path: Path) -> None:
    tenants = tenants_from_keys(["sk-a", "sk-b"], priority_keys={"sk-b"})
    assert tenants.names == ["key-1", "key-2"]
    a, b = tenants.of_key("sk-a"), tenants.of_key("sk-b")
    assert a is not None and a.name == "key-1" and not a.may_raise_priority
    assert b is not None and b.name == "key-2" and b.may_raise_priority
    assert tenants.of_key("sk-c") is None
    alone = tenants_from_keys([], priority_keys=set())
    default = alone.of_key(None)
    assert alone.names == [DEFAULT_TENANT] and default is not None
    assert alone.of_key("anything") is default


def test_serve_with_a_bad_file_exits_2_naming_its_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from gateway.cli import main

    path = write(tmp_path, GOOD.replace("max_concurrent = 16", "max_concurrent = 0"))
    monkeypatch.chdir("/")  # no .env
    assert main(["serve", "--tenants-file", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"{path}:6: max_concurrent" in err
