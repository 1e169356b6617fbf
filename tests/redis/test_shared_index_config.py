"""A shared index without a common key salt (or tenant header) and index secret can only predict
wrong, silently: `cachewarden proxy` refuses it at start with exit 2 and one line naming the flag."""

from __future__ import annotations

import pytest
from cachewarden.proxy.cli import proxy as proxy_cmd
from cachewarden.proxy.engine.errors import ConfigError
from cachewarden.proxy.server.config import load_settings

URL = "redis://:hunter2@127.0.0.1:1/0"  # never connected: the check comes first


@pytest.mark.parametrize(
    ("env", "missing", "present"),
    [
        ({}, ["--key-salt (or --tenant-header)", "--index-secret"], []),
        ({"CACHEWARDEN_KEY_SALT": "s"}, ["--index-secret"], ["--key-salt"]),
        ({"CACHEWARDEN_TENANT_HEADER": "x-tenant"}, ["--index-secret"], ["--key-salt"]),
        ({"CACHEWARDEN_INDEX_SECRET": "k"}, ["--key-salt (or --tenant-header)"], ["--index-secret"]),
    ],
)
def test_shared_index_without_salt_or_secret_exits_2(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    env: dict[str, str],
    missing: list[str],
    present: list[str],
) -> None:
    # As a user following the compose example would start it: the index from the environment only.
    for name in ("CACHEWARDEN_KEY_SALT", "CACHEWARDEN_INDEX_SECRET", "CACHEWARDEN_TENANT_HEADER"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("CACHEWARDEN_INDEX", URL)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert proxy_cmd.main([]) == 2
    err = capsys.readouterr().err
    assert err.startswith("cachewarden proxy: error: a shared --index needs ") and err.count("\n") == 1
    for flag in missing:
        assert flag in err
    for flag in present:
        assert flag not in err
    assert "hunter2" not in err  # the URL may carry Redis' password


@pytest.mark.parametrize(
    "argv",
    [
        ["--index", URL, "--key-salt", "s", "--index-secret", "k"],
        ["--index", URL, "--tenant-header", "x-tenant", "--index-secret", "k"],
        ["--index", "memory://"],
        [],
    ],
)
def test_complete_or_local_configurations_pass(argv: list[str]) -> None:
    proxy_cmd.check_shared_index(load_settings(argv, env={}))


def test_refusal_is_the_project_config_error() -> None:
    with pytest.raises(ConfigError, match="--index-secret"):
        proxy_cmd.check_shared_index(load_settings(["--index", URL, "--key-salt", "s"], env={}))
