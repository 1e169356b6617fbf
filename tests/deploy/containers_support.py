"""Helpers of the container tests (tests/deploy): a container engine CLI and the built image."""

from __future__ import annotations

import subprocess
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Engine:
    """A container engine CLI (podman or docker) with the environment every call needs."""

    command: str
    env: dict[str, str]
    containers: list[str] = field(default_factory=list)

    @property
    def podman(self) -> bool:
        return Path(self.command).name == "podman"

    def run(self, *args: str, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [self.command, *args], capture_output=True, text=True, timeout=timeout, env=self.env, check=False
        )
        if check and done.returncode != 0:
            command = " ".join((self.command, *args))
            raise AssertionError(f"{command} → {done.returncode}\n{done.stderr[-3000:]}")
        return done

    def start(self, image: str, *args: str, name_prefix: str = "cw-test") -> str:
        """``run -d``; the container is removed at the end of the session whatever happens."""
        name = f"{name_prefix}-{uuid.uuid4().hex[:8]}"
        self.containers.append(name)
        self.run("run", "-d", "--name", name, *_split(image, args))
        return name

    def inspect(self, name: str, template: str) -> str:
        return self.run("inspect", "--format", template, name).stdout.strip()

    def wait_healthy(self, name: str, timeout: float = 60) -> float:
        """Seconds until the image's HEALTHCHECK reports healthy. podman schedules health checks
        with systemd timers, which a machine without systemd lacks: run the check ourselves then."""
        started = time.monotonic()
        while time.monotonic() - started < timeout:
            if self.podman:
                self.run("healthcheck", "run", name, check=False)
            state = self.inspect(name, "{{.State.Status}} {{.State.Health.Status}}")
            if state.endswith(" healthy"):
                return time.monotonic() - started
            if state.startswith(("exited", "stopped")):
                break
            time.sleep(0.2)
        logs = self.run("logs", name, check=False)
        raise AssertionError(f"{name} not healthy ({state}) after {timeout}s:\n{logs.stdout}{logs.stderr}")

    def cleanup(self) -> None:
        for name in self.containers:
            self.run("rm", "-f", name, check=False, timeout=60)


def _split(image: str, args: tuple[str, ...]) -> list[str]:
    """Options before the image, the command's arguments after ``--`` (if any)."""
    if "--" in args:
        i = args.index("--")
        return [*args[:i], image, *args[i + 1 :]]
    return [*args, image]


@dataclass(frozen=True)
class Image:
    name: str
    size_bytes: int
    build_seconds: float
