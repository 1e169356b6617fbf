"""End to end: emulator ← proxy ← official SDKs, scraped by a real Prometheus loading deploy/'s rules.

Every PromQL expression of the dashboard, and every operand of every alert expression, must return
data (a finite value, not only the NaN of 0/0) for a small agent workload: this catches metric or
label names that the proxy does not export, vector-matching errors, and alert rules that fail to
evaluate. Needs the `prometheus` binary and a `cachewarden proxy` command; skipped otherwise.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import httpx
import pytest
import yaml
from cachewarden.proxy.testing import free_port

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
DASHBOARD = DEPLOY / "grafana" / "dashboards" / "cachewarden.json"
ALERTS = DEPLOY / "prometheus" / "alerts.yml"
OPENAI_MODEL = "gpt-4.1"
ANTHROPIC_MODEL = "claude-sonnet-5"
# Counters a healthy workload in observe mode never increments: the proxy exports them at 0 from
# start-up (DESIGN.md), so their panels must read 0 rather than "No data".
RARE = ("cachewarden_analysis_errors_total", "cachewarden_canonicalized_requests_total")
GRAFANA_VALUES = {
    "datasource": "prometheus",
    "model": ".*",
    "provider": ".*",
    "__rate_interval": "1m",
    "__interval": "15s",
    "__range": "5m",
}
METRIC_NAME = re.compile(r"\bcachewarden_[a-zA-Z0-9_]+")


# -- PromQL helpers (also used on the alert rules) ---------------------------------------------------


def substitute(expr: str) -> str:
    """A dashboard expression with Grafana's variables replaced as Grafana would for "All"."""

    def value(match: re.Match[str]) -> str:
        return GRAFANA_VALUES[match.group(1) or match.group(2)]

    out = re.sub(r"\$\{(\w+)\}|\$(\w+)", value, expr)
    assert "$" not in out, out
    return out


_BINARY_WORDS = ("and", "or", "unless")
_COMPARISONS = ("==", "!=", ">=", "<=", ">", "<")
_MODIFIER = re.compile(r"^\s*(?:bool\b|(?:on|ignoring|group_left|group_right)\s*(?:\([^)]*\))?)\s*")


def top_level_operands(expr: str) -> list[str]:
    """Operands of an expression split at its top-level comparison and set operators.

    `A < 0.5 * B and on (x) C > 100` gives [A, 0.5 * B, C, 100]; parentheses, selectors, ranges and
    strings are not split, and `bool` / `on (…)` / `ignoring (…)` / `group_*` modifiers are dropped.
    """
    expr = re.sub(r"#[^\n]*", "", expr)
    parts: list[str] = []
    depth = 0
    quote: str | None = None
    start = i = 0
    while i < len(expr):
        ch = expr[i]
        if quote:
            if ch == "\\":
                i += 2
                continue
            if ch == quote:
                quote = None
        elif ch in "\"'`":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif depth == 0:
            op = next((c for c in _COMPARISONS if expr.startswith(c, i)), None)
            if op is None:
                for word in _BINARY_WORDS:
                    end = i + len(word)
                    before = expr[i - 1] if i else " "
                    after = expr[end] if end < len(expr) else " "
                    if (
                        expr.startswith(word, i)
                        and not (before.isalnum() or before in "_:")
                        and not (after.isalnum() or after in "_:")
                    ):
                        op = word
                        break
            if op is not None:
                parts.append(expr[start:i])
                i += len(op)
                start = i
                continue
        i += 1
    parts.append(expr[start:])
    operands = []
    for part in parts:
        text = part.strip()
        while True:
            stripped = _MODIFIER.sub("", text, count=1)
            if stripped == text:
                break
            text = stripped
        operands.append(text.strip())
    return operands


def without_offsets(expr: str) -> str:
    """The test has seconds of history, not hours: look at now instead of `offset 10m`."""
    return re.sub(r"\s+offset\s+-?\d+[smhdwy]", "", expr)


def test_top_level_operands() -> None:
    expr = (
        '(sum by (a) (rate(x{k="c"}[10m])) / sum by (a) (rate(x[10m])))\n'
        "< 0.5 * (sum by (a) (rate(x[1h] offset 10m)))\n"
        "and on (a)\n"
        "sum by (a) (increase(x[10m])) > 20000"
    )
    assert top_level_operands(expr) == [
        '(sum by (a) (rate(x{k="c"}[10m])) / sum by (a) (rate(x[10m])))',
        "0.5 * (sum by (a) (rate(x[1h] offset 10m)))",
        "sum by (a) (increase(x[10m]))",
        "20000",
    ]
    assert top_level_operands('a{s!="x", t=~"a|b"} >= bool 2 or ignoring (s) group_left b') == [
        'a{s!="x", t=~"a|b"}',
        "2",
        "b",
    ]
    assert top_level_operands("sum(rate(x[5m])) * 3600\n> 5") == ["sum(rate(x[5m])) * 3600", "5"]
    assert top_level_operands("sum by (s) (x unless x offset 10m) > 0") == [
        "sum by (s) (x unless x offset 10m)",
        "0",
    ]
    assert without_offsets("rate(x[1h] offset 10m)") == "rate(x[1h])"
    assert (
        substitute('rate(x{m=~"$model", p=~"${provider}"}[$__rate_interval])')
        == 'rate(x{m=~".*", p=~".*"}[1m])'
    )


def dashboard_queries() -> list[tuple[str, str]]:
    def walk(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        for panel in panels:
            yield panel
            yield from walk(panel.get("panels", []))

    data = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    out = []
    for panel in walk(data["panels"]):
        for target in panel.get("targets", []):
            out.append(
                (f"dashboard panel {panel['id']} {panel['title']!r} {target['refId']}", target["expr"])
            )
    return out


def alert_queries() -> list[tuple[str, str, bool]]:
    """(where, query, must_return_data): each whole alert expression, then each operand with a metric."""
    out = []
    rules = yaml.safe_load(ALERTS.read_text(encoding="utf-8"))
    for group in rules["groups"]:
        for rule in group["rules"]:
            name = rule.get("alert") or rule["record"]
            out.append((f"alert {name} (whole expression)", rule["expr"], "alert" not in rule))
            for n, operand in enumerate(top_level_operands(rule["expr"])):
                if METRIC_NAME.search(operand):
                    # `x unless x offset 10m` (series born in the window) is empty by design once
                    # the offset is gone: it only has to evaluate.
                    born = "unless" in operand and without_offsets(operand) != operand
                    out.append((f"alert {name} operand {n}", without_offsets(operand), not born))
    return out


# -- processes -------------------------------------------------------------------------------------


def cachewarden_command() -> list[str]:
    script = Path(sys.executable).with_name("cachewarden")
    found = str(script) if script.exists() else shutil.which("cachewarden")
    return [found] if found else [sys.executable, "-m", "cachewarden.proxy.cli"]


@dataclass
class Services:
    tmp: Path
    procs: list[tuple[str, subprocess.Popen[bytes], Path]] = field(default_factory=list)
    logs: list[IO[bytes]] = field(default_factory=list)

    def start(self, name: str, argv: list[str]) -> None:
        log_path = self.tmp / f"{name}.log"
        log = open(log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.logs.append(log)
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env)
        self.procs.append((name, proc, log_path))

    def logs_tail(self, lines: int = 15) -> str:
        out = []
        for name, proc, path in self.procs:
            text = path.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:]
            out.append(f"--- {name} (exit {proc.poll()}) ---\n" + "\n".join(text))
        return "\n".join(out)

    def wait_http(self, name: str, url: str, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        proc = next(p for n, p, _ in self.procs if n == name)
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                pytest.fail(f"{name} exited with {proc.returncode}\n{self.logs_tail()}")
            try:
                if httpx.get(url, timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        pytest.fail(f"{name} not ready at {url} after {timeout}s\n{self.logs_tail()}")

    def stop(self) -> None:
        for _, proc, _ in reversed(self.procs):
            if proc.poll() is None:
                proc.terminate()
        for _, proc, _ in reversed(self.procs):
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
        for log in self.logs:
            log.close()


@pytest.fixture
def services(tmp_path: Path) -> Iterator[Services]:
    running = Services(tmp_path)
    try:
        yield running
    finally:
        running.stop()


def requirements() -> tuple[str, list[str]]:
    prometheus = shutil.which("prometheus")
    if prometheus is None:
        pytest.skip("prometheus not installed (apt-get install -y prometheus); .ci/run installs it")
    command = cachewarden_command()
    probe = subprocess.run([*command, "proxy", "--help"], capture_output=True, timeout=60, check=False)
    if probe.returncode != 0:
        pytest.skip("`cachewarden proxy` is not available yet")
    return prometheus, command


# -- workload ----------------------------------------------------------------------------------------


def system_prompt(version: str) -> str:
    """A long, stable system prompt (well over the 1,024-token minimum of both providers)."""
    rules = "\n".join(
        f"{n}. When the user asks about topic {n}, answer in at most {n % 5 + 2} sentences, cite the "
        f"internal handbook section {n}.{n % 7}, and never invent order numbers or tracking codes."
        for n in range(1, 61)
    )
    return f"You are the support agent of Example Corp (policy {version}).\n\nRules:\n{rules}"


@dataclass
class Workload:
    """Counts the requests sent, and spreads them over several scrapes (so that rates are not 0)."""

    pace: float = 0.25
    requests: int = 0

    def sent(self) -> None:
        self.requests += 1
        time.sleep(self.pace)


def drive_openai(base_url: str, workload: Workload) -> None:
    import openai

    with openai.OpenAI(
        api_key="sk-e2e-openai", base_url=base_url + "/v1", max_retries=0, timeout=30
    ) as client:
        for version in ("v1", "v2 (2026-11-29 10:42)"):
            messages: list[dict[str, str]] = [{"role": "system", "content": system_prompt(version)}]
            for turn in range(4):
                messages.append({"role": "user", "content": f"Question {turn}: where is my order {turn}?"})
                if turn == 2:
                    stream = client.chat.completions.create(
                        model=OPENAI_MODEL,
                        messages=messages,  # type: ignore[arg-type]
                        stream=True,
                        stream_options={"include_usage": True},
                    )
                    answer = "".join(
                        chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices
                    )
                else:
                    completion = client.chat.completions.create(
                        model=OPENAI_MODEL,
                        messages=messages,  # type: ignore[arg-type]
                    )
                    answer = completion.choices[0].message.content or ""
                workload.sent()
                messages.append({"role": "assistant", "content": answer})
        client.responses.create(
            model=OPENAI_MODEL, instructions=system_prompt("v1"), input="One more question."
        )
        workload.sent()
        # An upstream failure, for requests_total{status="500"} (the emulator's fault injection).
        with pytest.raises(openai.InternalServerError):
            client.chat.completions.create(
                model=OPENAI_MODEL,
                messages=[{"role": "user", "content": "hello"}],
                extra_headers={"x-emulator-fault": "status=500"},
            )
        workload.sent()


def drive_anthropic(base_url: str, workload: Workload) -> None:
    import anthropic

    with anthropic.Anthropic(api_key="sk-ant-e2e", base_url=base_url, max_retries=0, timeout=30) as client:
        for version in ("v1", "v2 (2026-11-29 10:42)"):
            system = [
                {"type": "text", "text": system_prompt(version), "cache_control": {"type": "ephemeral"}}
            ]
            messages: list[dict[str, Any]] = []
            for turn in range(4):
                messages.append({"role": "user", "content": f"Question {turn}: where is my parcel {turn}?"})
                if turn == 2:
                    with client.messages.stream(
                        model=ANTHROPIC_MODEL,
                        max_tokens=200,
                        system=system,  # type: ignore[arg-type]
                        messages=messages,  # type: ignore[arg-type]
                    ) as stream:
                        answer = "".join(stream.text_stream)
                else:
                    message = client.messages.create(
                        model=ANTHROPIC_MODEL,
                        max_tokens=200,
                        system=system,  # type: ignore[arg-type]
                        messages=messages,  # type: ignore[arg-type]
                    )
                    answer = "".join(block.text for block in message.content if block.type == "text")
                workload.sent()
                messages.append({"role": "assistant", "content": answer or "ok"})
        with pytest.raises(anthropic.InternalServerError):
            client.messages.create(
                model=ANTHROPIC_MODEL,
                max_tokens=10,
                messages=[{"role": "user", "content": "hello"}],
                extra_headers={"x-emulator-fault": "status=500"},
            )
        workload.sent()


# -- Prometheus queries ------------------------------------------------------------------------------


class Prom:
    def __init__(self, base_url: str) -> None:
        self.client = httpx.Client(base_url=base_url, timeout=10)

    def close(self) -> None:
        self.client.close()

    def api(self, path: str, **params: Any) -> Any:
        response = self.client.get(path, params=params)
        body = response.json()
        assert body.get("status") == "success", f"{path} {params}: {body}"
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        data = self.api("/api/v1/query", query=expr)
        result: list[dict[str, Any]] = data["result"] if data["resultType"] == "vector" else [data["result"]]
        return result

    def wait_for(self, check: Callable[[], bool], timeout: float = 30) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if check():
                return True
            time.sleep(0.5)
        return False


def prometheus_config(tmp: Path, proxy_port: int) -> Path:
    """deploy/prometheus/prometheus.yml, scraping the test's proxy and evaluating the rules every second."""
    config = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text(encoding="utf-8"))
    config["global"]["scrape_interval"] = "1s"
    config["global"]["evaluation_interval"] = "1s"
    config["rule_files"] = [str((DEPLOY / "prometheus" / f).resolve()) for f in config["rule_files"]]
    (job,) = config["scrape_configs"]
    job["static_configs"] = [{"targets": [f"127.0.0.1:{proxy_port}"]}]
    path = tmp / "prometheus.yml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


@pytest.mark.slow
def test_dashboard_and_alerts_return_data(services: Services, tmp_path: Path) -> None:
    pytest.importorskip("openai")
    pytest.importorskip("anthropic")
    prometheus, cachewarden = requirements()
    emulator_port, proxy_port, prom_port = free_port(), free_port(), free_port()
    emulator_url = f"http://127.0.0.1:{emulator_port}"
    proxy_url = f"http://127.0.0.1:{proxy_port}"
    prom_url = f"http://127.0.0.1:{prom_port}"

    services.start("emulator", [*cachewarden, "emulate", "--host", "127.0.0.1", "--port", str(emulator_port)])
    services.start(
        "proxy",
        [
            *cachewarden,
            "proxy",
            "--host",
            "127.0.0.1",
            "--port",
            str(proxy_port),
            "--openai-upstream",
            emulator_url,
            "--anthropic-upstream",
            emulator_url,
            "--log-level",
            "warning",
        ],
    )
    (tmp_path / "tsdb").mkdir()
    services.start(
        "prometheus",
        [
            prometheus,
            f"--config.file={prometheus_config(tmp_path, proxy_port)}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{prom_port}",
            "--log.level=warn",
        ],
    )
    services.wait_http("emulator", emulator_url + "/healthz")
    services.wait_http("proxy", proxy_url + "/readyz")
    services.wait_http("prometheus", prom_url + "/-/ready")

    prom = Prom(prom_url)
    try:
        # Counters must be scraped before and during the workload, or every rate() is 0.
        assert prom.wait_for(lambda: bool(prom.query('up{job="cachewarden"} == 1'))), services.logs_tail()
        check_fresh(prom)
        workload = Workload()
        drive_openai(proxy_url, workload)
        drive_anthropic(proxy_url, workload)
        check_prometheus(prom, workload, services)
    finally:
        prom.close()


def check_fresh(prom: Prom) -> None:
    """Before any request: the counters with bounded label sets are there, at 0."""
    for name in (*RARE, "cachewarden_upstream_errors_total", "cachewarden_usage_reports_total"):
        result = prom.query(f"sum({name})")
        assert [float(r["value"][1]) for r in result] == [0.0], (name, result)
    stages = prom.query("sum by (stage) (cachewarden_analysis_errors_total)")
    assert {r["metric"]["stage"] for r in stages} == {"request", "response", "rewrite"}, stages


def check_prometheus(prom: Prom, workload: Workload, services: Services | None, settle: float = 3) -> None:
    """``settle``: seconds for a few more scrapes after the last change, and a rule evaluation."""

    def scraped_all() -> bool:
        result = prom.query("sum(cachewarden_requests_total)")
        return bool(result) and float(result[0]["value"][1]) >= workload.requests

    assert prom.wait_for(scraped_all, timeout=max(30, 2 * settle)), (
        f"Prometheus never saw {workload.requests} requests: {prom.query('cachewarden_requests_total')}\n"
        + (services.logs_tail() if services else "")
    )
    time.sleep(settle)

    # the target is healthy and the variables' label_values find both providers and models
    (target,) = prom.api("/api/v1/targets")["activeTargets"]
    assert target["health"] == "up", target
    providers = set(prom.api("/api/v1/label/provider/values", **{"match[]": "cachewarden_requests_total"}))
    models = set(prom.api("/api/v1/label/model/values", **{"match[]": "cachewarden_requests_total"}))
    assert {"openai-chat", "openai-responses", "anthropic"} <= providers, providers
    assert {OPENAI_MODEL, ANTHROPIC_MODEL} <= models, models

    # caching kicked in: the providers (the emulator) reported cache reads for both models
    cached = prom.query('sum by (model) (cachewarden_input_tokens_total{source="reported", kind="cached"})')
    cached_by_model = {r["metric"]["model"]: float(r["value"][1]) for r in cached}
    assert cached_by_model.get(OPENAI_MODEL, 0) > 0 and cached_by_model.get(ANTHROPIC_MODEL, 0) > 0, cached

    # every alert rule evaluated without error
    rules = [r for g in prom.api("/api/v1/rules")["groups"] for r in g["rules"]]
    assert {r["name"] for r in rules} >= {"CachewardenCacheHitRateDropped", "CachewardenUpstreamErrorRate"}
    broken = {r["name"]: r.get("lastError") for r in rules if r["health"] != "ok"}
    assert not broken, broken

    exported = {m for m in prom.api("/api/v1/label/__name__/values") if m.startswith("cachewarden_")}
    failures = []
    queries = [(where, substitute(expr), True) for where, expr in dashboard_queries()] + alert_queries()
    for where, expr, must_return_data in queries:
        try:
            result = prom.query(expr)
        except AssertionError as exc:
            failures.append(f"{where}: query failed: {exc}")
            continue
        values = [float(r["value"][1]) for r in result]
        if any(math.isfinite(v) for v in values) or not must_return_data:
            continue
        if values:
            failures.append(f"{where}: only NaN / Inf (no change in the window?)\n    {expr}")
            continue
        names = set(METRIC_NAME.findall(expr))
        missing = sorted(n for n in names if n not in exported)
        hint = f" (no series of {', '.join(missing)} in the proxy's /metrics)" if missing else ""
        failures.append(f"{where}: no data{hint}\n    {expr}")
    assert not failures, f"{len(failures)} of {len(queries)} queries failed:\n" + "\n".join(failures)
