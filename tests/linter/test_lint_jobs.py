"""How many worker processes a run uses by default: the idle CPUs, for a large walk."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from cachewarden.linter import cli, idle_cpus
from cachewarden.linter.idle_cpus import CpuSample, cpu_sample


@pytest.fixture
def two_cpus(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: {0, 1}, raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 2)


def _stat(path: Path, busy: int, idle: int) -> str:
    # user nice system idle iowait irq softirq steal: busy split over user and system
    path.write_text(f"cpu  {busy - busy // 3} 0 {busy // 3} {idle} 0 0 0 0 0 0\ncpu0 1 2 3 4\n")
    return str(path)


def _window(tmp_path: Path, busy: int, idle: int, own_seconds: float = 0.0) -> float:
    """Idle CPUs over a window in which the machine's counters moved by ``busy`` / ``idle``
    ticks and this process used ``own_seconds`` of CPU (windows of hundreds of ticks: the test's
    own CPU between the two samples, a tick or so, must not move the result)."""
    stat = tmp_path / "stat"
    _stat(stat, 1000, 5000)
    started = cpu_sample(str(stat))
    assert started is not None
    started = CpuSample(
        started.at - 1.0, started.busy_ticks, started.idle_ticks, started.own_seconds - own_seconds
    )
    _stat(stat, 1000 + busy, 5000 + idle)
    return idle_cpus.idle_cpus(started, 2, str(stat))


@pytest.mark.usefixtures("two_cpus")
def test_idle_cpus_come_from_the_kernels_idle_time_not_the_load_average(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A load average of ~1 on an idle machine (a task counted runnable that uses no CPU) made the
    # default one process; the idle time says both cores are free.
    monkeypatch.setattr(os, "getloadavg", lambda: (1.0, 1.0, 1.0))
    assert _window(tmp_path, busy=0, idle=400) == pytest.approx(2.0, abs=0.05)
    assert _window(tmp_path, busy=200, idle=200) == pytest.approx(1.0, abs=0.05)
    assert _window(tmp_path, busy=400, idle=0) == pytest.approx(0.0, abs=0.05)


@pytest.mark.usefixtures("two_cpus")
def test_the_linters_own_cpu_is_not_counted_busy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    hz = os.sysconf("SC_CLK_TCK")
    # 200 busy ticks in the window, all of them this process walking the tree: both cores free.
    assert _window(tmp_path, busy=200, idle=200, own_seconds=200 / hz) == pytest.approx(2.0, abs=0.05)
    # 400 busy ticks, half of them ours: one core is someone else's.
    assert _window(tmp_path, busy=400, idle=0, own_seconds=200 / hz) == pytest.approx(1.0, abs=0.05)


@pytest.mark.usefixtures("two_cpus")
def test_without_proc_stat_the_load_average_decides(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "getloadavg", lambda: (1.6, 1.0, 1.0))
    assert cpu_sample(str(tmp_path / "absent")) is None
    assert idle_cpus.idle_cpus(None, 2) == pytest.approx(0.4, abs=0.05)
    (tmp_path / "garbled").write_text("intr 1 2 3\n")
    assert cpu_sample(str(tmp_path / "garbled")) is None


@pytest.mark.usefixtures("two_cpus")
def test_idle_cpus_get_a_worker_each_for_a_large_walk(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cli, "idle_cpus", lambda _started, _cpus: 1.8)
    assert cli._jobs(None, 2000, fix=False) == 2
    assert cli._jobs(None, cli.PARALLEL_MIN_FILES - 1, fix=False) == 1  # forks would cost more
    assert cli._jobs(None, 2000, fix=True) == 1  # fixes rewrite files in place


@pytest.mark.usefixtures("two_cpus")
def test_busy_cpus_leave_one_process(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cli, "idle_cpus", lambda _started, _cpus: 0.4)
    assert cli._jobs(None, 2000, fix=False) == 1
    monkeypatch.setattr(cli, "idle_cpus", lambda _started, _cpus: 0.0)
    assert cli._jobs(None, 2000, fix=False) == 1
    assert cli._jobs(0, 2000, fix=False) == 2  # asked for one per CPU: given, whatever the load
    assert cli._jobs(1, 2000, fix=False) == 1


def test_a_real_sample_reads_this_machine() -> None:
    if not os.path.exists("/proc/stat"):
        pytest.skip("no /proc/stat on this system")
    started = cpu_sample()  # the kernel's own file parses: not the load-average fallback
    assert started is not None and started.busy_ticks + started.idle_ticks > 0
