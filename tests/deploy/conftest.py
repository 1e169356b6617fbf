"""The container engine for the tests that build and run deploy/'s image: podman (or docker).

The image is built once per test session (``make image OFFLINE=1``: a local Debian base image,
made once per machine and reused, and wheels built on the host), so these tests need no registry
and no package index inside a container. Skipped, with the reason, where no engine is installed.
podman runs with runc (crun fails on some kernels' cgroup set-ups) and with ulimits the kernel
lets a container set, from a containers.conf of the session's own.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from containers_support import Engine, Image

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    found = shutil.which("podman") or shutil.which("docker")
    if found is None:
        pytest.skip("no container engine (podman or docker) is installed; .ci/run installs podman")
    env = dict(os.environ)
    if Path(found).name == "podman":
        conf = tmp_path_factory.mktemp("podman") / "containers.conf"
        runtime = 'runtime = "runc"\n' if shutil.which("runc") else ""
        # podman's default RLIMIT_NPROC / NOFILE exceed what some kernels allow a container.
        conf.write_text(
            f'[containers]\ndefault_ulimits = ["nofile=16384:16384", "nproc=4096:4096"]\n[engine]\n{runtime}',
            encoding="utf-8",
        )
        env["CONTAINERS_CONF"] = str(conf)
    running = Engine(found, env)
    try:
        yield running
    finally:
        running.cleanup()


@pytest.fixture(scope="session")
def image(engine: Engine) -> Image:
    """deploy/Dockerfile built from this checkout, offline, once per session."""
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    if engine.podman and shutil.which("debootstrap") is None:
        pytest.skip("debootstrap is not installed (the local base image needs it); .ci/run installs it")
    name = "localhost/cachewarden:test"
    started = time.monotonic()
    make = ["make", "-C", str(REPO), "image", "OFFLINE=1", f"IMAGE={name}", f"ENGINE={engine.command}"]
    done = subprocess.run(make, capture_output=True, text=True, timeout=1200, env=engine.env, check=False)
    assert done.returncode == 0, f"make image failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    size = int(engine.inspect(name, "{{.Size}}"))
    return Image(name, size, time.monotonic() - started)
