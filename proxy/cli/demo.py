"""``cachewarden demo``: the emulator and the proxy on loopback, an agent workload through both, the report.

Everything runs in this process and offline: the provider emulator and the proxy are served by
uvicorn in threads on free 127.0.0.1 ports, the official ``openai`` and ``anthropic`` SDKs send
the workload of ``demo_workload`` through the proxy, the proxy captures the traffic, and the
replay engine turns the capture into the same text report ``cachewarden replay`` prints. Both
servers are stopped on every path out (success, error, Ctrl-C).

Exit 0 on success, 1 on a failure (one line on stderr), 130 when interrupted during the run;
with ``--keep-running`` Ctrl-C is the normal way out and exits 0.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

import anthropic
import httpx
import openai
from cachewarden.proxy import testing
from cachewarden.proxy.emulator.app import create_app as create_emulator
from cachewarden.proxy.engine.engine import Engine
from cachewarden.proxy.engine.errors import CachewardenError
from cachewarden.proxy.engine.tokenizers import get_tokenizer
from cachewarden.proxy.replay.logs import read_lines
from cachewarden.proxy.replay.replayer import replay
from cachewarden.proxy.replay.report import Report
from cachewarden.proxy.replay.report_text import render_text
from cachewarden.proxy.server.config import Settings
from cachewarden.proxy.testing import Served
from starlette.applications import Starlette

from .demo_workload import PHASES, TOOLS, Phase, Step, Workload, build_workload, system_prompt
from .proxy import build

PROG = "cachewarden demo"
DEFAULT_TURNS = 4
CLIENT_TIMEOUT = 15.0  # seconds; the emulator answers in milliseconds, a hang must not stall the demo
CAPTURE_WAIT = 20.0  # seconds to wait for the proxy's analysis of the last responses


class DemoError(Exception):
    """An expected failure of the demo: printed as one line, exit 1."""


# -- serving ----------------------------------------------------------------------------------------------

START_TIMEOUT = 20.0  # seconds for a server to start
STOP_TIMEOUT = 10.0


@contextmanager
def serve(app: Starlette, name: str) -> Iterator[Served]:
    """Serve ``app`` on a free 127.0.0.1 port in a thread; stopped (and its port closed) on the way out."""
    try:
        # Daemon thread: should a server ever hang on shutdown, it must not keep the command from exiting.
        served = testing.serve(
            app,
            f"cachewarden-demo-{name}",
            timeout=START_TIMEOUT,
            access_log=False,
            timeout_graceful_shutdown=int(STOP_TIMEOUT / 2),
        )
    except OSError as exc:
        raise DemoError(f"cannot open a port on 127.0.0.1: {exc.strerror or exc}") from None
    except testing.ServeError as exc:
        within = "" if exc.timeout is None else f" within {START_TIMEOUT:.0f} s"
        raise DemoError(f"the {name} did not start{within}") from None
    try:
        yield served
    finally:
        served.stop(STOP_TIMEOUT)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description=(
            "Start a local OpenAI / Anthropic emulator and the cachewarden proxy, drive an agent workload "
            "through them with the official SDKs, and print the cache report. Offline, in a few seconds."
        ),
    )
    parser.add_argument(
        "--turns",
        type=_turns,
        default=DEFAULT_TURNS,
        metavar="N",
        help=f"requests per provider in each of the {len(PHASES)} scenario phases (default {DEFAULT_TURNS})",
    )
    parser.add_argument(
        "--keep-running",
        action="store_true",
        help="keep the proxy and emulator serving after the report, until Ctrl-C (to curl /metrics)",
    )
    return parser


def _turns(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {value!r}") from None
    if not 2 <= number <= 50:
        raise argparse.ArgumentTypeError("expected 2 to 50")
    return number


# -- sending --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Sent:
    """What the provider reported for one request (through the proxy)."""

    input_tokens: int
    cached_tokens: int

    @property
    def share(self) -> float:
        return self.cached_tokens / self.input_tokens if self.input_tokens else 0.0


class Clients:
    """The two official SDK clients, pointed at the proxy; no retries, so a failure shows at once."""

    def __init__(self, proxy_url: str) -> None:
        self.openai = openai.OpenAI(
            api_key="sk-demo-openai", base_url=proxy_url + "/v1", max_retries=0, timeout=CLIENT_TIMEOUT
        )
        self.anthropic = anthropic.Anthropic(
            api_key="sk-ant-demo", base_url=proxy_url, max_retries=0, timeout=CLIENT_TIMEOUT
        )
        # Another service with its own key: another tenant, so its cache and scope are its own.
        self.responses = openai.OpenAI(
            api_key="sk-demo-second-service",
            base_url=proxy_url + "/v1",
            max_retries=0,
            timeout=CLIENT_TIMEOUT,
        )

    def close(self) -> None:
        self.openai.close()
        self.anthropic.close()
        self.responses.close()

    def send(self, step: Step) -> Sent:
        kwargs: dict[str, Any] = dict(step.kwargs)
        if step.provider == "anthropic":
            message = self.anthropic.messages.create(**kwargs)
            u = message.usage
            read = u.cache_read_input_tokens or 0
            total = u.input_tokens + (u.cache_creation_input_tokens or 0) + read
            return Sent(total, read)
        if step.provider == "openai-responses":
            response = self.responses.responses.create(**kwargs)
            if response.usage is None:
                raise DemoError("the Responses API answer carried no usage")
            details = response.usage.input_tokens_details
            return Sent(response.usage.input_tokens, details.cached_tokens if details else 0)
        completion = self.openai.chat.completions.create(**kwargs)
        if completion.usage is None:
            raise DemoError("the Chat Completions answer carried no usage")
        cached = completion.usage.prompt_tokens_details
        return Sent(completion.usage.prompt_tokens, (cached.cached_tokens or 0) if cached else 0)


def _groups(steps: Sequence[Step]) -> Iterator[list[Step]]:
    """Consecutive steps of one provider (one output line each)."""
    group: list[Step] = []
    for step in steps:
        if group and group[-1].provider != step.provider:
            yield group
            group = []
        group.append(step)
    if group:
        yield group


def _models(steps: Sequence[Step]) -> str:
    return " → ".join(dict.fromkeys(s.model for s in steps))


def run_workload(workload: Workload, clients: Clients, out: TextIO) -> int:
    """Send every request, printing each reported cached share as it arrives; returns the count."""
    sent = 0
    label_width = max(len(f"{s.provider} {s.model}") for s in workload.steps) + 4
    for phase in workload.phases:
        out.write(f"\nphase {phase.number}/{len(workload.phases)}  {_phase_title(phase)}\n")
        for group in _groups(workload.by_phase(phase)):
            label = f"{group[0].provider} {_models(group)}"
            out.write(f"  {label.ljust(label_width)} cached per request:")
            out.flush()
            try:
                for step in group:
                    result = clients.send(step)
                    sent += 1
                    out.write(f" {result.share:4.0%}")
                    out.flush()
            finally:
                # Also on a failure: the error line on stderr must not land at the end of this one.
                out.write("\n")
                out.flush()
    return sent


def _phase_title(phase: Phase) -> str:
    return phase.title if phase.key == "healthy" else f"{phase.title}  [buster: {phase.key}]"


# -- the report ---------------------------------------------------------------------------------------------


def wait_for_capture(path: Path, expected: int, timeout: float = CAPTURE_WAIT) -> None:
    """The proxy analyses (and captures) a request after its client got the answer: wait for the last."""
    deadline = time.monotonic() + timeout
    lines = 0
    while time.monotonic() < deadline:
        lines = _line_count(path)
        if lines >= expected:
            return
        time.sleep(0.05)
    raise DemoError(f"the proxy captured {lines} of {expected} requests within {timeout:.0f} s")


def _line_count(path: Path) -> int:
    try:
        with path.open("rb") as stream:
            return sum(1 for line in stream if line.endswith(b"\n"))
    except FileNotFoundError:
        return 0


def replay_report(path: Path) -> str:
    """The text report ``cachewarden replay`` prints for the capture file."""
    report = Report()
    with path.open("rb") as stream:
        for row in replay(read_lines(stream), engine=Engine(), on_problem=report.problem):
            report.add(row)
    if not report.requests:
        raise DemoError("the capture file holds no replayable request")
    return render_text(report, "captured traffic")


def live_metrics(proxy_url: str) -> str:
    """One line from the proxy's own /metrics: what it predicted and was told while the traffic ran."""
    samples = testing.scrape(proxy_url, timeout=CLIENT_TIMEOUT)
    requests = testing.metric_sum(samples, "cachewarden_requests_total")
    cached = {
        source: testing.metric_sum(samples, "cachewarden_input_tokens_total", kind="cached", source=source)
        for source in ("predicted", "reported")
    }
    return (
        f"{requests:,.0f} requests; cached input tokens {cached['predicted']:,.0f} predicted, "
        f"{cached['reported']:,.0f} reported"
    )


# -- the command ---------------------------------------------------------------------------------------


def _header(emulator: Served, proxy: Served, workload: Workload, turns: int) -> str:
    system_tokens = len(get_tokenizer("o200k_base").encode(system_prompt()))
    providers = len({s.provider for s in workload.steps})
    return "\n".join(
        [
            "cachewarden demo — an agent workload through the proxy to a local provider emulator (offline)",
            f"  emulator  {emulator.url}  OpenAI + Anthropic APIs with a provider-faithful prompt cache",
            f"  proxy     {proxy.url}  cachewarden proxy, observe mode, capturing traffic for replay",
            "  clients   the official openai and anthropic SDKs, base_url pointed at the proxy",
            f"  workload  travel-desk agent: {system_tokens:,}-token system prompt, {len(TOOLS)} tools, "
            f"{len(workload.phases)} phases x {turns} requests per conversation, "
            f"{len(workload.steps)} requests over {providers} APIs",
            "",
        ]
    )


def _footer(proxy: Served, live: str, keep_running: bool) -> str:
    lines = [
        "",
        f"metrics: {proxy.url}/metrics"
        + ("" if keep_running else "  (this demo's proxy; --keep-running keeps it serving)"),
        f"  live: {live}",
        "run the proxy for real:",
        "  cachewarden proxy --port 8787",
        "  OPENAI_BASE_URL=http://127.0.0.1:8787/v1 ANTHROPIC_BASE_URL=http://127.0.0.1:8787 your-agent",
        "  cachewarden replay CAPTURE.jsonl     # after `cachewarden proxy --capture CAPTURE.jsonl`",
    ]
    if keep_running:
        lines += ["", f"serving until Ctrl-C: curl -s {proxy.url}/metrics | grep cachewarden_"]
    return "\n".join(lines) + "\n"


def run(turns: int, keep_running: bool, out: TextIO) -> None:
    with ExitStack() as stack:
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="cachewarden-demo-")))
        capture = workdir / "capture.jsonl"
        emulator = stack.enter_context(serve(create_emulator(), "emulator"))
        settings = Settings(
            openai_upstream=emulator.url,
            anthropic_upstream=emulator.url,
            capture=str(capture),
            upstream_timeout=CLIENT_TIMEOUT,
            # Ctrl-C must end the demo within its servers' stop bound: the proxy's analysis workers
            # hold nothing worth the production drain (30 s), which the process' exit would wait for.
            graceful_timeout=STOP_TIMEOUT / 2,
            log_level="critical",
        )
        proxy = stack.enter_context(serve(build(settings), "proxy"))
        workload = build_workload(turns, start=datetime.now(UTC))
        out.write(_header(emulator, proxy, workload, turns))
        clients = Clients(proxy.url)
        stack.callback(clients.close)
        sent = run_workload(workload, clients, out)
        wait_for_capture(capture, sent)
        out.write("\n" + replay_report(capture))
        out.write(_footer(proxy, live_metrics(proxy.url), keep_running))
        out.flush()
        if keep_running:
            try:
                while emulator.alive and proxy.alive:
                    time.sleep(0.25)
            except KeyboardInterrupt:
                out.write("\nstopped\n")
                return
            raise DemoError("a demo server stopped unexpectedly")


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        run(args.turns, args.keep_running, sys.stdout)
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    except DemoError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 1
    except (openai.APIError, anthropic.APIError) as exc:
        print(f"{PROG}: error: a request through the proxy failed: {_one_line(exc)}", file=sys.stderr)
        return 1
    except (CachewardenError, OSError, httpx.HTTPError) as exc:
        print(f"{PROG}: error: {_one_line(exc)}", file=sys.stderr)
        return 1
    except Exception as exc:  # a bug still ends in one line; the servers are already stopped
        print(f"{PROG}: error: internal error ({type(exc).__name__}: {_one_line(exc)})", file=sys.stderr)
        return 1
    return 0


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text[:300]


if __name__ == "__main__":
    raise SystemExit(main())
