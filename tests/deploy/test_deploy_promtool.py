"""promtool on deploy/prometheus: the scrape config, the alert rules, and the rules' unit tests.

Skipped when promtool is missing (Debian / Ubuntu: `apt-get install -y prometheus`; .ci/run installs it).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

PROMETHEUS_DIR = Path(__file__).resolve().parents[2] / "deploy" / "prometheus"
PROMTOOL = shutil.which("promtool")

pytestmark = pytest.mark.skipif(
    PROMTOOL is None, reason="promtool not installed (apt-get install -y prometheus); .ci/run installs it"
)


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    assert PROMTOOL is not None
    return subprocess.run(
        [PROMTOOL, *args], cwd=PROMETHEUS_DIR, capture_output=True, text=True, timeout=120, check=False
    )


def test_check_config() -> None:
    proc = promtool("check", "config", str(PROMETHEUS_DIR / "prometheus.yml"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # the config pulls in the alert rules
    assert "1 rule files found" in proc.stdout + proc.stderr


def test_check_rules() -> None:
    proc = promtool("check", "rules", str(PROMETHEUS_DIR / "alerts.yml"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "4 rules found" in proc.stdout + proc.stderr


def test_rule_unit_tests() -> None:
    proc = promtool("test", "rules", str(PROMETHEUS_DIR / "alerts_test.yml"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout + proc.stderr
