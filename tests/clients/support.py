"""The client-library suite's rig: the emulator, the proxy in front of it (capturing), and the checks.

Each library runs one short conversation twice, once straight at the emulator and once through the
proxy, with its own API keys each time (the emulator's cache is per key, so both runs start cold).
``run_both`` then requires what a user of that library is promised:

- the same result through the proxy as direct (texts, tool calls, parsed objects);
- usage reported for every request that asks for it (all but Chat streams without
  ``stream_options.include_usage``), and no response whose usage could not be read;
- live predicted cached tokens == reported, request by request (the prediction-error histogram has
  every observation at 0) and in total; no ``unexplained`` miss; no analysis error;
- a replay of the capture predicting exactly what the live proxy predicted, with the same miss
  reasons and tokens lost.
"""

from __future__ import annotations

import json
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from cachewarden.proxy.cli.proxy import build
from cachewarden.proxy.emulator.app import create_app as create_emulator
from cachewarden.proxy.replay.replayer import replay
from cachewarden.proxy.server.config import Settings
from cachewarden.proxy.testing import Samples, scrape, serving

T = TypeVar("T")

# Long enough for every model's minimum cacheable prefix (1024 tokens, 2048 for some Claude models).
POLICY = "\n".join(
    f"Policy {i}: for a question about topic {i}, check clause {i * 3 % 17} and answer in {20 + i} words."
    for i in range(160)
)
OPENAI_MODEL = "gpt-4.1"
CLAUDE_MODEL = "claude-sonnet-5"
CITY_QUESTION = "Call get_weather for Paris, please."
FOLLOW_UP = "Thanks. What does policy 7 say?"


# More worker processes than this machine has cores, so that the order in a worker, not luck, keeps
# the analysis right (each tenant on one of them, in arrival order; analysis_workers.py).
ANALYSIS_WORKERS = 4


def weather(city: str) -> str:
    """The one tool every conversation offers: the weather in a city."""
    return f"Sunny and 21 degrees in {city}."


@dataclass(frozen=True)
class Endpoint:
    """Where one run sends its requests, and its keys."""

    url: str
    name: str  # "direct" or "proxied"
    library: str

    @property
    def openai_base_url(self) -> str:
        return self.url + "/v1"

    @property
    def anthropic_base_url(self) -> str:
        return self.url

    @property
    def openai_key(self) -> str:
        return f"sk-{self.library}-{self.name}"

    @property
    def anthropic_key(self) -> str:
        return f"sk-ant-{self.library}-{self.name}"


@dataclass(frozen=True)
class Rig:
    emulator_url: str
    proxy_url: str
    capture: Path

    def endpoint(self, library: str, proxied: bool) -> Endpoint:
        if proxied:
            return Endpoint(self.proxy_url, "proxied", library)
        return Endpoint(self.emulator_url, "direct", library)


@contextmanager
def rig(tmp: Path) -> Iterator[Rig]:
    capture = tmp / "capture.jsonl"
    with serving(create_emulator(), "emulator", timeout=15) as emulator:
        # Several analysis worker processes: each tenant's requests are still analysed in the order
        # they were sent (a fast response cannot let the next request overtake its predecessor), a
        # chained Responses turn waits for the turn it chains to without holding its worker, and the
        # capture the workers share holds each tenant's requests in order.
        settings = Settings(
            openai_upstream=emulator.url,
            anthropic_upstream=emulator.url,
            capture=str(capture),
            analysis_workers=ANALYSIS_WORKERS,
            analysis_processes=True,
        )
        with serving(build(settings), "proxy", timeout=60) as proxy:
            yield Rig(emulator.url, proxy.url, capture)


def run_both(rig: Rig, library: str, conversation: Callable[[Endpoint], T]) -> T:
    """The conversation direct and through the proxy: equal results, then every check above."""
    direct = conversation(rig.endpoint(library, proxied=False))
    proxied = conversation(rig.endpoint(library, proxied=True))
    assert proxied == direct, f"the proxy changed what the library got: {direct!r} != {proxied!r}"
    check(rig)
    return proxied


# -- checks ----------------------------------------------------------------------------------------------


def _total(samples: Samples, name: str, **labels: str) -> float:
    return sum(
        v
        for (n, ls), v in samples.items()
        if n == name and all(dict(ls).get(k) == want for k, want in labels.items())
    )


def _records(capture: Path) -> list[dict[str, Any]]:
    if not capture.exists():
        return []
    return [json.loads(line) for line in capture.read_text().splitlines() if line.strip()]


def _settled(rig: Rig) -> tuple[Samples, list[dict[str, Any]]]:
    """Metrics and capture once every response hook has run (they run after the client got its
    response): the capture has a line for each response whose usage the proxy tracked, and each
    of them is counted in ``requests_total``, which a worker process's analysis reaches only once the
    forwarder applied its metric updates (after the worker wrote the capture line)."""
    deadline = time.monotonic() + 30
    while True:
        samples = scrape(rig.proxy_url)
        records = _records(rig.capture)
        tracked = _total(samples, "cachewarden_usage_reports_total")
        counted = _total(samples, "cachewarden_requests_total")
        if tracked and len(records) == tracked and counted >= tracked:
            return samples, records
        if time.monotonic() > deadline:
            raise AssertionError(f"{len(records)} captured of {tracked} tracked responses")
        time.sleep(0.05)


def _asks_for_usage(record: dict[str, Any]) -> bool:
    body = record["request"]
    if record["provider"] != "openai-chat" or not body.get("stream"):
        return True
    options = body.get("stream_options")
    return isinstance(options, dict) and options.get("include_usage") is True


def _predicted(samples: Samples, source: str) -> dict[str, float]:
    out: dict[str, float] = defaultdict(float)
    for (name, labels), value in samples.items():
        d = dict(labels)
        if name == "cachewarden_input_tokens_total" and d.get("source") == source:
            out[d["kind"]] += value
    return dict(out)


def check(rig: Rig) -> None:
    samples, records = _settled(rig)
    assert records, "no request reached the proxy's analysis"
    assert all(r["status"] == "200" for r in records), [r["status"] for r in records]
    # Usage reported for every request that asks for it, whatever the compression.
    missing = [r["request"].get("model") for r in records if _asks_for_usage(r) and r["usage"] is None]
    assert not missing, f"usage not read for {len(missing)} requests"
    assert _total(samples, "cachewarden_usage_reports_total", state="unparsed") == 0
    # Predicted cached == reported, per request: every observed error is exactly 0.
    observed = _total(samples, "cachewarden_prediction_error_tokens_count")
    assert observed == sum(1 for r in records if r["usage"] is not None)
    buckets: dict[float, float] = defaultdict(float)
    for (name, labels), value in samples.items():
        if name == "cachewarden_prediction_error_tokens_bucket":
            buckets[float(dict(labels)["le"])] += value
    assert buckets[0.0] == observed and buckets[max(le for le in buckets if le < 0)] == 0
    predicted, reported = _predicted(samples, "predicted"), _predicted(samples, "reported")
    if all(r["usage"] is not None for r in records):
        assert predicted == reported, (predicted, reported)
    assert reported.get("cached", 0) > 0, "the conversation should read from the cache"
    assert _total(samples, "cachewarden_cache_miss_tokens_total", reason="unexplained") == 0
    assert _total(samples, "cachewarden_analysis_errors_total") == 0
    # The capture replayed offline predicts what the proxy predicted live.
    problems: list[Any] = []
    rows = list(replay(rig.capture.read_text().splitlines(), on_problem=problems.append))
    assert not problems and len(rows) == len(records)
    replayed = {
        "cached": sum(r.predicted.cached for r in rows),
        "cache_write": sum(r.predicted.cache_write for r in rows),
        "uncached": sum(r.predicted.uncached for r in rows),
    }
    assert replayed == {k: predicted.get(k, 0) for k in replayed}, (replayed, predicted)
    # ... and explains the same misses with the same reasons and costs.
    live_reasons: dict[str, float] = defaultdict(float)
    for (name, labels), value in samples.items():
        if name == "cachewarden_cache_miss_tokens_total" and value:
            live_reasons[dict(labels)["reason"]] += value
    replay_reasons: dict[str, float] = defaultdict(float)
    for row in rows:
        for reason in row.reasons:
            if reason.tokens_lost:
                replay_reasons[reason.code] += reason.tokens_lost
    assert dict(replay_reasons) == dict(live_reasons), (replay_reasons, live_reasons)
