"""How many CPUs are idle right now: the default number of lint workers.

The load average is the wrong measure for that. It counts runnable *and* uninterruptible tasks, and
on some virtual machines (this project's CI among them) it reads ~1 on two cores doing nothing,
which made the default one process on an idle machine. What a worker needs is a core that nobody
else is using, and the kernel says that directly: the idle (and I/O-wait) time in ``/proc/stat``,
sampled over a short window. The linter's own CPU time in the window is not someone else's, so it
is counted as idle: walking the tree must not talk the run out of its workers.

Where ``/proc/stat`` cannot be read (macOS, Windows), the load average is the fallback.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

# Long enough for the kernel's 10 ms ticks to say something on two CPUs (20+ ticks), short
# against the walk of the 200 files or more that may get workers (~0.4 s or more).
WINDOW_SECONDS = 0.1


@dataclass(frozen=True)
class CpuSample:
    at: float  # time.monotonic()
    busy_ticks: int
    idle_ticks: int
    own_seconds: float  # this process's user + system CPU


def cpu_sample(stat_path: str = "/proc/stat") -> CpuSample | None:
    """The machine's CPU counters now, or None where the system does not expose them."""
    try:
        with open(stat_path, encoding="ascii") as f:
            fields = f.readline().split()
    except OSError:
        return None
    if len(fields) < 5 or fields[0] != "cpu":
        return None
    try:
        ticks = [int(v) for v in fields[1:9]]  # user nice system idle iowait irq softirq steal
    except ValueError:
        return None
    idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)
    own = os.times()
    return CpuSample(time.monotonic(), sum(ticks) - idle, idle, own.user + own.system)


def idle_cpus(started: CpuSample | None, cpus: int, stat_path: str = "/proc/stat") -> float:
    """CPUs idle since ``started`` (at least WINDOW_SECONDS ago: the rest is waited for), not
    counting this process's own use as busy; from the load average where no sample exists."""
    if started is None:
        return _from_load(cpus)
    left = WINDOW_SECONDS - (time.monotonic() - started.at)
    if left > 0:
        time.sleep(left)
    now = cpu_sample(stat_path)
    if now is None:
        return _from_load(cpus)
    hz = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    own = (now.own_seconds - started.own_seconds) * hz
    busy = max(0.0, now.busy_ticks - started.busy_ticks - own)
    idle = now.idle_ticks - started.idle_ticks + min(own, now.busy_ticks - started.busy_ticks)
    total = busy + idle
    if total <= 0:
        return _from_load(cpus)
    machine = os.cpu_count() or cpus
    return min(float(cpus), machine * idle / total)


def _from_load(cpus: int) -> float:
    try:
        return max(0.0, cpus - os.getloadavg()[0])
    except (AttributeError, OSError):
        return float(cpus)
