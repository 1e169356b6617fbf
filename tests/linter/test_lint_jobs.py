"""How many worker processes a run uses by default: the idle CPUs, for a large walk."""

from __future__ import annotations

import os

import pytest
from cachewarden.linter import cli


@pytest.fixture
def two_cpus(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: {0, 1}, raising=False)


@pytest.mark.usefixtures("two_cpus")
def test_idle_cpus_get_a_worker_each_for_a_large_walk(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cli, "_load", lambda: 0.2)
    assert cli._jobs(None, 2000, fix=False) == 2
    assert cli._jobs(None, cli.PARALLEL_MIN_FILES - 1, fix=False) == 1  # forks would cost more
    assert cli._jobs(None, 2000, fix=True) == 1  # fixes rewrite files in place


@pytest.mark.usefixtures("two_cpus")
def test_busy_cpus_leave_one_process(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cli, "_load", lambda: 1.6)
    assert cli._jobs(None, 2000, fix=False) == 1
    monkeypatch.setattr(cli, "_load", lambda: 3.5)
    assert cli._jobs(None, 2000, fix=False) == 1
    assert cli._jobs(0, 2000, fix=False) == 2  # asked for one per CPU: given, whatever the load
    assert cli._jobs(1, 2000, fix=False) == 1
