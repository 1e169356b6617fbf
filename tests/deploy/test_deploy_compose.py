"""deploy/docker-compose.yml up for real (podman-compose, or docker compose): the proxy and the
emulator from the image of this checkout, and Prometheus from an image made of Debian's package
(deploy/Dockerfile.prometheus: no registry is reachable). Prometheus, inside compose, must scrape
the proxy by its service name and load deploy/'s alert rules; then every dashboard query and
alert operand must return data for an SDK workload (Grafana itself cannot run here: its panels
are checked by running their queries against this Prometheus). Host ports are on 127.0.0.1."""

from __future__ import annotations

import glob
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from cachewarden.proxy.testing import free_port
from containers_support import Engine, Image
from test_deploy_e2e import Prom, Workload, check_fresh, check_prometheus, drive_anthropic, drive_openai
from test_deploy_image import wait_ready

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
COMPOSE = REPO / "deploy" / "docker-compose.yml"
PROMETHEUS_IMAGE = "localhost/cachewarden-prometheus:debian"
BASE_IMAGE = "localhost/cachewarden-base:bookworm"


@pytest.fixture(scope="session")
def prometheus_image(engine: Engine, image: Image, tmp_path_factory: pytest.TempPathFactory) -> str:
    """Built once per machine (reused when present) from Debian's prometheus package."""
    if engine.run("image", "exists", PROMETHEUS_IMAGE, check=False).returncode == 0:
        return PROMETHEUS_IMAGE
    context = tmp_path_factory.mktemp("prometheus-image")
    cached = sorted(glob.glob("/var/cache/apt/archives/prometheus_*.deb"))
    if cached:
        shutil.copy(cached[-1], context)
    elif shutil.which("apt-get"):
        got = subprocess.run(
            ["apt-get", "download", "prometheus"], cwd=context, capture_output=True, check=False
        )
        if got.returncode != 0:
            pytest.skip(f"cannot download Debian's prometheus package: {got.stderr.decode()[-300:]}")
    else:
        pytest.skip("no Debian prometheus package to make a Prometheus image from")
    dockerfile = str(REPO / "deploy" / "Dockerfile.prometheus")
    engine.run(
        "build", "-f", dockerfile, "--build-arg", f"BASE_IMAGE={BASE_IMAGE}", "-t", PROMETHEUS_IMAGE,
        str(context), timeout=600,
    )  # fmt: skip
    return PROMETHEUS_IMAGE


def compose_command(engine: Engine) -> list[str]:
    if engine.podman:
        found = shutil.which("podman-compose")
        if found is None:
            pytest.skip("podman-compose is not installed; .ci/run installs it")
        return [found]
    return [engine.command, "compose"]


@pytest.fixture
def stack(engine: Engine, image: Image, prometheus_image: str) -> Iterator[tuple[str, str]]:
    """The compose project up (proxy, emulator, Prometheus); yields the proxy and Prometheus URLs."""
    proxy_port, prom_port = free_port(), free_port()
    project = f"cwtest{uuid.uuid4().hex[:8]}"
    env = {
        **engine.env,
        "CACHEWARDEN_IMAGE": image.name,
        "PROMETHEUS_IMAGE": prometheus_image,
        "PROXY_PORT": str(proxy_port),
        "PROMETHEUS_PORT": str(prom_port),
        "CACHEWARDEN_OPENAI_UPSTREAM": "http://emulator:8788",
        "CACHEWARDEN_ANTHROPIC_UPSTREAM": "http://emulator:8788",
    }
    base = [*compose_command(engine), "-p", project, "-f", str(COMPOSE)]

    def compose(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*base, *args], env=env, capture_output=True, text=True, timeout=timeout, check=False
        )

    up = compose("up", "-d", "--no-build", "proxy", "emulator", "prometheus")
    try:
        assert up.returncode == 0, f"compose up failed:\n{up.stdout[-2000:]}\n{up.stderr[-2000:]}"
        yield f"http://127.0.0.1:{proxy_port}", f"http://127.0.0.1:{prom_port}"
    finally:
        logs = compose("logs", timeout=60)
        down = compose("down", "-v", timeout=300)
        if down.returncode != 0:
            print(logs.stdout[-3000:], down.stderr[-2000:])
        # podman-compose 1.0 leaves the project's network behind.
        engine.run("network", "rm", f"{project}_default", check=False)


def test_compose_prometheus_scrapes_the_proxy_and_loads_the_rules(stack: tuple[str, str]) -> None:
    pytest.importorskip("openai")
    pytest.importorskip("anthropic")
    proxy_url, prom_url = stack
    wait_ready(proxy_url + "/readyz", timeout=90)
    wait_ready(prom_url + "/-/ready", timeout=90)
    prom = Prom(prom_url)
    try:
        # deploy/prometheus/prometheus.yml as shipped: the target is the compose service `proxy:8787`.
        assert prom.wait_for(lambda: bool(prom.query('up{job="cachewarden"} == 1')), timeout=60), prom.api(
            "/api/v1/targets"
        )
        (target,) = prom.api("/api/v1/targets")["activeTargets"]
        assert target["labels"]["instance"] == "proxy:8787"
        groups = prom.api("/api/v1/rules")["groups"]
        assert {r["name"] for g in groups for r in g["rules"]} >= {
            "CachewardenCacheHitRateDropped",
            "CachewardenMissedSavingsOverBudget",
            "CachewardenAnalysisErrors",
            "CachewardenUpstreamErrorRate",
        }
        check_fresh(prom)
        # The shipped config scrapes every 15 s, and a series first seen already holds its first
        # increments: run the workload twice, a scrape apart, so that every rate() sees a change.
        workload = Workload()
        for round_ in range(2):
            if round_:
                time.sleep(16)
            drive_openai(proxy_url, workload)
            drive_anthropic(proxy_url, workload)
        check_prometheus(prom, workload, None, settle=35)
    finally:
        prom.close()
