"""Static checks of deploy/: every file parses; the dashboard, alert rules, provisioning, Dockerfile,
compose file, Kubernetes manifest and pre-commit example agree with DESIGN.md and with each other.

Docker and Kubernetes are not available here, so the container files are checked structurally.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from cachewarden.proxy.cli.proxy import check_shared_index
from cachewarden.proxy.engine.errors import ConfigError
from cachewarden.proxy.server.config import load_settings

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
DASHBOARD = DEPLOY / "grafana" / "dashboards" / "cachewarden.json"
ALERTS = DEPLOY / "prometheus" / "alerts.yml"
ALERTS_TEST = DEPLOY / "prometheus" / "alerts_test.yml"

# DESIGN.md § Metrics: name -> labels beyond `provider` and `model`.
METRICS: dict[str, tuple[str, ...]] = {
    "cachewarden_requests_total": ("status",),
    "cachewarden_input_tokens_total": ("source", "kind"),
    "cachewarden_cache_miss_tokens_total": ("reason",),
    "cachewarden_missed_savings_usd_total": ("reason",),
    "cachewarden_cost_usd_total": ("source", "kind"),
    "cachewarden_savings_usd_total": (),
    "cachewarden_prediction_error_tokens": (),
    "cachewarden_findings_total": ("code", "reason"),
    "cachewarden_canonicalized_requests_total": ("transform",),
    "cachewarden_overhead_seconds": (),
    "cachewarden_upstream_seconds": ("phase",),
    "cachewarden_analysis_errors_total": ("stage",),
    "cachewarden_stable_prefix_share": (),
    "cachewarden_index_entries": (),
    "cachewarden_index_tokens": (),
}
HISTOGRAMS = {
    "cachewarden_prediction_error_tokens",
    "cachewarden_overhead_seconds",
    "cachewarden_upstream_seconds",
    "cachewarden_stable_prefix_share",
}
# Labels every series has, or that Prometheus / histograms add.
COMMON_LABELS = {"provider", "model", "instance", "job"}
ALLOWED_NAMES = set(METRICS) | {f"{h}_{suffix}" for h in HISTOGRAMS for suffix in ("bucket", "sum", "count")}
METRIC_NAME = re.compile(r"\bcachewarden_[a-zA-Z0-9_]+")
GRAFANA_VARIABLES = {"datasource", "model", "provider", "__rate_interval", "__interval", "__range"}
EXPECTED_ALERTS = {
    "CachewardenCacheHitRateDropped",
    "CachewardenMissedSavingsOverBudget",
    "CachewardenAnalysisErrors",
    "CachewardenUpstreamErrorRate",
}


def base_metric(name: str) -> str:
    """The DESIGN.md metric a series name belongs to (histogram suffixes removed)."""
    for suffix in ("_bucket", "_sum", "_count"):
        if name.endswith(suffix) and name[: -len(suffix)] in HISTOGRAMS:
            return name[: -len(suffix)]
    return name


def metric_names(expr: str) -> set[str]:
    return set(METRIC_NAME.findall(expr))


def labels_used(expr: str) -> set[str]:
    """Label names in `by (…)` / `without (…)` / `on (…)` / `ignoring (…)` clauses and in matchers."""
    found: set[str] = set()
    for clause in re.findall(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)", expr):
        found |= {part.strip() for part in clause.split(",") if part.strip()}
    for selector in re.findall(r"\{([^}]*)\}", expr):
        found |= set(re.findall(r"([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)", selector))
    return found


def load_yaml_docs(path: Path) -> list[Any]:
    return [doc for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")) if doc is not None]


def load_yaml(path: Path) -> Any:
    docs = load_yaml_docs(path)
    assert len(docs) == 1, f"{path}: expected one YAML document"
    return docs[0]


def dashboard() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    return data


def all_panels(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for panel in panels:
        yield panel
        yield from all_panels(panel.get("panels", []))


def dashboard_exprs() -> list[tuple[str, str]]:
    """(where, expr) for every panel target."""
    out = []
    for panel in all_panels(dashboard()["panels"]):
        for target in panel.get("targets", []):
            where = f"panel {panel['id']}{target.get('refId')} {panel['title']!r}"
            out.append((where, target["expr"]))
    return out


def alert_rules() -> list[dict[str, Any]]:
    return [rule for group in load_yaml(ALERTS)["groups"] for rule in group["rules"]]


# -- every file parses -----------------------------------------------------------------------------

DATA_FILES = sorted(p for p in DEPLOY.rglob("*") if p.is_file() and p.suffix in {".yml", ".yaml", ".json"})


def test_deploy_has_the_files() -> None:
    names = {p.relative_to(DEPLOY).as_posix() for p in DEPLOY.rglob("*") if p.is_file()}
    assert {
        "Dockerfile",
        "docker-compose.yml",
        "grafana/dashboards/cachewarden.json",
        "grafana/provisioning/datasources/prometheus.yaml",
        "grafana/provisioning/dashboards/cachewarden.yaml",
        "prometheus/prometheus.yml",
        "prometheus/alerts.yml",
        "prometheus/alerts_test.yml",
        "kubernetes/sidecar.yaml",
        "pre-commit-config.example.yaml",
    } <= names


@pytest.mark.parametrize("path", DATA_FILES, ids=lambda p: p.relative_to(DEPLOY).as_posix())
def test_file_parses(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".json":
        assert isinstance(json.loads(text), dict)
    else:
        docs = load_yaml_docs(path)
        assert docs, f"{path}: empty"
        assert all(isinstance(doc, dict) for doc in docs)


# -- dashboard ---------------------------------------------------------------------------------------


def test_dashboard_is_provisionable() -> None:
    d = dashboard()
    assert d["uid"] == "cachewarden"
    assert d["title"]
    assert d["schemaVersion"] >= 38
    assert "__inputs" not in d and "__requires" not in d
    assert d.get("id") is None


def test_dashboard_variables() -> None:
    variables = {v["name"]: v for v in dashboard()["templating"]["list"]}
    ds = variables["datasource"]
    assert ds["type"] == "datasource" and ds["query"] == "prometheus"
    for name in ("provider", "model"):
        var = variables[name]
        assert var["type"] == "query"
        assert var["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        query = var["query"]["query"] if isinstance(var["query"], dict) else var["query"]
        assert query == var["definition"]
        assert re.fullmatch(rf"label_values\((cachewarden_\w+)(\{{.*\}})?, {name}\)", query), query
        assert metric_names(query) <= ALLOWED_NAMES
        assert var["includeAll"] and var["multi"] and var["allValue"] == ".*"
    # model narrows to the chosen providers
    assert '$provider"' in variables["model"]["definition"]


def test_dashboard_panels_use_the_datasource_variable() -> None:
    for panel in all_panels(dashboard()["panels"]):
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
        assert panel["targets"], f"panel {panel['title']!r} has no targets"
        for target in panel["targets"]:
            assert target["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
            assert target["expr"].strip()


def test_dashboard_panel_ids_unique() -> None:
    ids = [panel["id"] for panel in all_panels(dashboard()["panels"])]
    assert all(isinstance(i, int) for i in ids)
    assert len(ids) == len(set(ids)), sorted(i for i in ids if ids.count(i) > 1)


def test_dashboard_panels_do_not_overlap() -> None:
    boxes = []
    for panel in all_panels(dashboard()["panels"]):
        g = panel["gridPos"]
        assert g["x"] >= 0 and g["x"] + g["w"] <= 24 and g["h"] > 0, panel["title"]
        boxes.append((panel["title"], g["x"], g["y"], g["x"] + g["w"], g["y"] + g["h"]))
    for i, (a, ax0, ay0, ax1, ay1) in enumerate(boxes):
        for b, bx0, by0, bx1, by1 in boxes[i + 1 :]:
            assert ax1 <= bx0 or bx1 <= ax0 or ay1 <= by0 or by1 <= ay0, f"{a!r} overlaps {b!r}"


@pytest.mark.parametrize(
    ("where", "expr"), [pytest.param(w, e, id=w.split(" '")[0]) for w, e in dashboard_exprs()]
)
def test_dashboard_expr_uses_design_metrics_and_labels(where: str, expr: str) -> None:
    names = metric_names(expr)
    assert names, f"{where}: no cachewarden metric in {expr!r}"
    assert names <= ALLOWED_NAMES, f"{where}: not in DESIGN.md: {sorted(names - ALLOWED_NAMES)}"
    allowed = set(COMMON_LABELS)
    for name in names:
        allowed |= set(METRICS[base_metric(name)])
        if name.endswith("_bucket"):
            allowed.add("le")
    assert labels_used(expr) <= allowed, f"{where}: unknown labels {sorted(labels_used(expr) - allowed)}"
    variables = set(re.findall(r"\$\{?(\w+)", expr))
    assert variables <= GRAFANA_VARIABLES, (
        f"{where}: unknown variables {sorted(variables - GRAFANA_VARIABLES)}"
    )


def test_dashboard_selectors_follow_the_variables() -> None:
    """Every selector filters by $provider and $model (the index gauges are per replica)."""
    for where, expr in dashboard_exprs():
        for name, selector in re.findall(r"\b(cachewarden_\w+)(\{[^}]*\})?", expr):
            if name in {"cachewarden_index_entries", "cachewarden_index_tokens"}:
                continue
            assert 'provider=~"$provider"' in selector and 'model=~"$model"' in selector, f"{where}: {name}"


def test_no_sum_of_the_prediction_error_histogram() -> None:
    """prometheus_client exports no `_sum` for a histogram with negative buckets (OpenMetrics rule)."""
    for where, expr in [*dashboard_exprs(), *((r["alert"], r["expr"]) for r in alert_rules())]:
        assert "cachewarden_prediction_error_tokens_sum" not in expr, where


def test_dashboard_covers_every_metric() -> None:
    used = {base_metric(n) for _, expr in dashboard_exprs() for n in metric_names(expr)}
    assert used == set(METRICS)


def test_dashboard_shows_the_required_views() -> None:
    exprs = [expr for _, expr in dashboard_exprs()]
    joined = "\n".join(exprs)
    # hit rate predicted vs reported by model: cached / total input tokens by (model, source)
    assert any(
        "sum by (model, source)" in e and 'kind="cached"' in e and "/" in e and "input_tokens" in e
        for e in exprs
    )
    assert re.search(
        r"topk\(\d+, sum by \(reason, model\) \(increase\(cachewarden_cache_miss_tokens_total", joined
    )
    for q in ("0.5", "0.99"):
        assert f"histogram_quantile({q}, sum by (le) (rate(cachewarden_overhead_seconds_bucket" in joined
        assert (
            f"histogram_quantile({q}, sum by (le, phase) (rate(cachewarden_upstream_seconds_bucket" in joined
        )
    assert "histogram_quantile(0.5, sum by (le) (rate(cachewarden_prediction_error_tokens_bucket" in joined
    assert "sum by (status) (rate(cachewarden_requests_total" in joined
    assert "sum by (reason) (rate(cachewarden_missed_savings_usd_total" in joined
    assert "sum by (code, reason)" in joined


# -- Grafana provisioning, Prometheus config, compose: they must point at each other -----------------


def compose() -> dict[str, Any]:
    data: dict[str, Any] = load_yaml(DEPLOY / "docker-compose.yml")
    return data


def mounts(service: dict[str, Any]) -> dict[str, str]:
    """Bind mounts of a compose service: container path -> host path (relative to deploy/)."""
    out = {}
    for volume in service.get("volumes", []):
        source, target = volume.split(":")[:2]
        if source.startswith("."):
            out[target] = source
    return out


def test_grafana_provisioning() -> None:
    ds = load_yaml(DEPLOY / "grafana/provisioning/datasources/prometheus.yaml")
    assert ds["apiVersion"] == 1
    (prom,) = ds["datasources"]
    assert prom["type"] == "prometheus" and prom["isDefault"] is True
    assert prom["url"] == "http://prometheus:9090"
    # $__rate_interval needs the scrape interval
    scrape = load_yaml(DEPLOY / "prometheus/prometheus.yml")["global"]["scrape_interval"]
    assert prom["jsonData"]["timeInterval"] == scrape

    providers = load_yaml(DEPLOY / "grafana/provisioning/dashboards/cachewarden.yaml")
    assert providers["apiVersion"] == 1
    (provider,) = providers["providers"]
    assert provider["type"] == "file"
    grafana = mounts(compose()["services"]["grafana"])
    assert grafana[provider["options"]["path"]] == "./grafana/dashboards"
    assert grafana["/etc/grafana/provisioning"] == "./grafana/provisioning"


def test_prometheus_config() -> None:
    config = load_yaml(DEPLOY / "prometheus/prometheus.yml")
    assert config["rule_files"] == ["alerts.yml"]
    (job,) = config["scrape_configs"]
    assert job["metrics_path"] == "/metrics"
    targets = [t for sc in job["static_configs"] for t in sc["targets"]]
    assert targets == ["proxy:8787"]
    assert "proxy" in compose()["services"]


def test_compose() -> None:
    services = compose()["services"]
    assert {"proxy", "prometheus", "grafana"} <= set(services)
    proxy = services["proxy"]
    assert proxy["build"]["context"] == ".."
    assert (DEPLOY / proxy["build"]["context"] / proxy["build"]["dockerfile"]).resolve() == (
        DEPLOY / "Dockerfile"
    )
    # The host port is PROXY_PORT (default 8787), on loopback only.
    assert "127.0.0.1:${PROXY_PORT:-8787}:8787" in proxy["ports"]
    assert all(str(p).startswith("127.0.0.1:") for s in services.values() for p in s.get("ports", []))
    assert proxy["environment"]["CACHEWARDEN_OPENAI_UPSTREAM"]
    assert proxy["environment"]["CACHEWARDEN_ANTHROPIC_UPSTREAM"]
    prometheus = services["prometheus"]
    assert mounts(prometheus)["/etc/prometheus"] == "./prometheus"
    assert "--config.file=/etc/prometheus/prometheus.yml" in prometheus["command"]
    for name, service in services.items():
        for source in mounts(service).values():
            assert (DEPLOY / source).exists(), f"{name}: {source} does not exist"
    for name in ("prometheus", "grafana"):
        assert ":" in services[name]["image"] and not services[name]["image"].endswith(":latest")


# -- alert rules ---------------------------------------------------------------------------------------


def test_alerts_present_and_annotated() -> None:
    rules = alert_rules()
    assert {r["alert"] for r in rules if "alert" in r} == EXPECTED_ALERTS
    for rule in rules:
        name = rule.get("alert", rule.get("record"))
        assert re.fullmatch(r"\d+[smh]", rule["for"]), name
        assert rule["labels"]["severity"] in {"critical", "warning", "info"}, name
        assert rule["annotations"]["summary"] and rule["annotations"]["description"], name
        names = metric_names(rule["expr"])
        assert names and names <= ALLOWED_NAMES, f"{name}: {sorted(names - ALLOWED_NAMES)}"
        allowed = set(COMMON_LABELS)
        for metric in names:
            allowed |= set(METRICS[base_metric(metric)])
        assert labels_used(rule["expr"]) <= allowed, f"{name}: {sorted(labels_used(rule['expr']) - allowed)}"


def test_alert_thresholds() -> None:
    rules = {r["alert"]: r["expr"] for r in alert_rules()}
    assert re.search(
        r"rate\(cachewarden_missed_savings_usd_total\[\w+\]\)\) \* 3600\s*> \d",
        rules["CachewardenMissedSavingsOverBudget"],
    )
    assert "[1h] offset 10m" in rules["CachewardenCacheHitRateDropped"]
    assert "0.5 *" in rules["CachewardenCacheHitRateDropped"]
    assert re.search(r"status=~\"5\.\.", rules["CachewardenUpstreamErrorRate"])
    assert "> 0.05" in rules["CachewardenUpstreamErrorRate"]


def test_every_alert_has_firing_and_quiet_unit_tests() -> None:
    suite = load_yaml(ALERTS_TEST)
    assert suite["rule_files"] == ["alerts.yml"]
    firing: set[str] = set()
    quiet: set[str] = set()
    for case in suite["tests"]:
        assert case["input_series"], case["name"]
        for check in case.get("alert_rule_test", []):
            (firing if check["exp_alerts"] else quiet).add(check["alertname"])
    assert firing == EXPECTED_ALERTS
    assert quiet == EXPECTED_ALERTS


# -- Dockerfile ----------------------------------------------------------------------------------------


def dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with line continuations joined and comments dropped."""
    lines: list[str] = []
    current = ""
    for raw in (DEPLOY / "Dockerfile").read_text(encoding="utf-8").splitlines():
        stripped = raw.strip()
        if stripped.startswith("#") or (not stripped and not current):
            continue
        if stripped.endswith("\\"):
            current += stripped[:-1] + " "
            continue
        lines.append(current + stripped)
        current = ""
    assert not current, "Dockerfile ends with a line continuation"
    out = []
    for line in lines:
        instruction, _, args = line.partition(" ")
        out.append((instruction.upper(), args.strip()))
    return out


def final_stage() -> list[tuple[str, str]]:
    instructions = dockerfile_instructions()
    last_from = max(i for i, (ins, _) in enumerate(instructions) if ins == "FROM")
    return instructions[last_from:]


def build_args() -> dict[str, str]:
    """The defaults of the Dockerfile's ARGs (what a user's plain `docker build` gets)."""
    args = [a for ins, a in dockerfile_instructions() if ins == "ARG"]
    return dict(a.partition("=")[::2] for a in args)


def expand(text: str) -> str:
    return re.sub(r"\$\{(\w+)\}", lambda m: build_args()[m.group(1)], text)


def test_dockerfile_base_and_install() -> None:
    # Users pull the official image; the offline build passes its own BASE_IMAGE (tests/deploy).
    assert build_args()["BASE_IMAGE"] == "python:3.11-slim"
    assert build_args()["PIP_INDEX"] == ""
    froms = [args for ins, args in dockerfile_instructions() if ins == "FROM"]
    assert all(expand(f).split()[0] == "python:3.11-slim" for f in froms)
    runs = " ".join(args for ins, args in dockerfile_instructions() if ins == "RUN")
    assert "'.[proxy,redis,otel]'" in runs and "'cachewarden[proxy,redis,otel]'" in runs


def test_dockerfile_copies_exist_and_are_not_ignored() -> None:
    ignore = (DEPLOY / "Dockerfile.dockerignore").read_text(encoding="utf-8").splitlines()
    for ins, args in dockerfile_instructions():
        if ins != "COPY" or args.startswith("--from"):
            continue
        *sources, _dest = shlex.split(expand(args))
        for source in sources:
            assert (REPO / source).exists(), source
            assert f"!{source}" in ignore or f"!{source}/**" in ignore, (
                f"{source} is excluded from the context"
            )


def test_dockerfile_runs_as_non_root() -> None:
    users = [args for ins, args in final_stage() if ins == "USER"]
    assert users, "no USER in the final stage"
    user = users[-1].split(":")[0]
    assert user not in {"root", "0"}
    # numeric, so that Kubernetes' runAsNonRoot can verify it
    assert user.isdigit()


def test_dockerfile_healthcheck_expose_entrypoint() -> None:
    stage = final_stage()
    (healthcheck,) = [args for ins, args in stage if ins == "HEALTHCHECK"]
    assert "/healthz" in healthcheck and "urllib" in healthcheck and "curl" not in healthcheck
    command = json.loads(healthcheck[healthcheck.index("CMD") + 3 :].strip())
    assert command[:2] == ["python", "-c"]
    compile(command[2], "<healthcheck>", "exec")
    assert ("EXPOSE", "8787") in stage
    (entrypoint,) = [args for ins, args in stage if ins == "ENTRYPOINT"]
    assert json.loads(entrypoint) == ["cachewarden", "proxy", "--host", "0.0.0.0"]


# -- Kubernetes sidecar --------------------------------------------------------------------------------


def manifests() -> dict[str, dict[str, Any]]:
    docs = load_yaml_docs(DEPLOY / "kubernetes" / "sidecar.yaml")
    return {doc["kind"]: doc for doc in docs}


def test_kubernetes_kinds() -> None:
    kinds = set(manifests())
    assert {"Deployment", "ConfigMap"} <= kinds
    assert not kinds & {"ServiceMonitor", "PodMonitor"}


def containers() -> dict[str, dict[str, Any]]:
    spec = manifests()["Deployment"]["spec"]["template"]["spec"]
    return {c["name"]: c for c in spec["containers"]}


def proxy_container() -> dict[str, Any]:
    (proxy,) = [c for c in containers().values() if "cachewarden" in c["image"]]
    return proxy


def test_kubernetes_app_points_at_the_sidecar() -> None:
    (app,) = [c for c in containers().values() if "cachewarden" not in c["image"]]
    env = {e["name"]: e.get("value") for e in app["env"]}
    assert env["OPENAI_BASE_URL"] == "http://localhost:8787/v1"
    assert env["ANTHROPIC_BASE_URL"] == "http://localhost:8787"


def test_kubernetes_scrape_annotations() -> None:
    template = manifests()["Deployment"]["spec"]["template"]
    annotations = template["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true"
    assert annotations["prometheus.io/port"] == "8787"
    assert annotations["prometheus.io/path"] == "/metrics"
    selector = manifests()["Deployment"]["spec"]["selector"]["matchLabels"]
    assert selector.items() <= template["metadata"]["labels"].items()


def test_kubernetes_proxy_probes_and_resources() -> None:
    proxy = proxy_container()
    ports = {p["name"]: p["containerPort"] for p in proxy["ports"]}
    for probe, path in (("readinessProbe", "/readyz"), ("livenessProbe", "/healthz")):
        get = proxy[probe]["httpGet"]
        assert get["path"] == path
        assert ports.get(get["port"], get["port"]) == 8787
    for kind in ("requests", "limits"):
        assert {"cpu", "memory"} <= set(proxy["resources"][kind])


def test_kubernetes_security_context() -> None:
    pod = manifests()["Deployment"]["spec"]["template"]["spec"]
    for container in containers().values():
        context = {**pod.get("securityContext", {}), **container.get("securityContext", {})}
        assert context.get("runAsNonRoot") is True, container["name"]
        assert container["securityContext"].get("readOnlyRootFilesystem") is True, container["name"]
        assert container["securityContext"].get("allowPrivilegeEscalation") is False, container["name"]
    # a read-only root filesystem needs a writable /tmp
    tmp = [m for m in proxy_container()["volumeMounts"] if m["mountPath"] == "/tmp"]
    assert tmp and {v["name"]: v for v in pod["volumes"]}[tmp[0]["name"]].get("emptyDir") is not None


def test_kubernetes_configmap_is_a_valid_proxy_config(tmp_path: Path) -> None:
    proxy = proxy_container()
    args = proxy["args"]
    config_path = Path(args[args.index("--config") + 1])
    (mount,) = [m for m in proxy["volumeMounts"] if config_path.is_relative_to(m["mountPath"])]
    pod = manifests()["Deployment"]["spec"]["template"]["spec"]
    volume = {v["name"]: v for v in pod["volumes"]}[mount["name"]]
    configmap = manifests()["ConfigMap"]
    assert volume["configMap"]["name"] == configmap["metadata"]["name"]
    text = configmap["data"][config_path.name]
    local = tmp_path / config_path.name
    local.write_text(text, encoding="utf-8")
    # The real settings loader, with the flags the container passes after the image's entrypoint.
    argv = ["--host", "0.0.0.0", *[str(local) if a == str(config_path) else a for a in args]]
    settings = load_settings(argv, env={})
    assert settings.port == 8787 and settings.host == "0.0.0.0"
    assert settings.mode == "observe"


# -- pre-commit example --------------------------------------------------------------------------------


def test_precommit_example_uses_the_hook() -> None:
    config = load_yaml(DEPLOY / "pre-commit-config.example.yaml")
    hook_ids = {hook["id"] for hook in load_yaml_docs(REPO / ".pre-commit-hooks.yaml")[0]}
    used = {hook["id"] for repo in config["repos"] for hook in repo["hooks"]}
    assert "cachewarden-lint" in used
    assert used <= hook_ids
    for repo in config["repos"]:
        assert repo["rev"]


def test_precommit_example_validates(tmp_path: Path) -> None:
    pytest.importorskip("pre_commit")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pre_commit",
            "validate-config",
            str(DEPLOY / "pre-commit-config.example.yaml"),
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={"PRE_COMMIT_HOME": str(tmp_path / "pc"), "PATH": "/usr/bin:/bin"},
        timeout=60,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


# -- the shared index: salt and secret from one Secret ---------------------------------------------


def _refused(argv: list[str], env: dict[str, str]) -> str | None:
    """The one-line refusal of `cachewarden proxy` for this configuration, or None if it starts."""
    try:
        check_shared_index(load_settings(argv, env=env))
    except ConfigError as exc:
        return str(exc)
    return None


def test_compose_replicas_share_salt_and_secret_from_one_secret(tmp_path: Path) -> None:
    data = load_yaml(DEPLOY / "docker-compose.replicas.yml")
    services = data["services"]
    proxies = {name: s for name, s in services.items() if name.startswith("proxy")}
    assert len(proxies) >= 2
    secret_file = tmp_path / "cachewarden-secrets.yaml"
    # What the file's comment tells the user to write.
    secret_file.write_text("key_salt: 0123abcd\nindex_secret: 4567ef01\n", encoding="utf-8")
    for name, service in proxies.items():
        env = dict(service["environment"])
        assert env["CACHEWARDEN_INDEX"].startswith("redis://"), name
        assert service["secrets"] == ["cachewarden"] and "cachewarden" in data["secrets"]
        assert env["CACHEWARDEN_CONFIG"] == "/run/secrets/cachewarden"
        assert not {"CACHEWARDEN_KEY_SALT", "CACHEWARDEN_INDEX_SECRET"} & set(env)
        assert _refused(service["command"], {**env, "CACHEWARDEN_CONFIG": str(secret_file)}) is None
        # As the issue found it: the index alone, each replica with its own random salt.
        assert "--key-salt" in (
            _refused(service["command"], {"CACHEWARDEN_INDEX": env["CACHEWARDEN_INDEX"]}) or ""
        )
    assert data["secrets"]["cachewarden"]["file"].endswith("cachewarden-secrets.yaml}")


def test_kubernetes_salt_and_secret_come_from_a_secret(tmp_path: Path) -> None:
    env = {e["name"]: e for e in proxy_container()["env"]}
    refs = {}
    for name, key in (("CACHEWARDEN_KEY_SALT", "key-salt"), ("CACHEWARDEN_INDEX_SECRET", "index-secret")):
        ref = env[name]["valueFrom"]["secretKeyRef"]
        assert ref["key"] == key and not ref.get("optional", False), name
        refs[name] = "from-the-secret"
    # The ConfigMap with its shared index switched on, and the Secret's values: the proxy starts.
    text = manifests()["ConfigMap"]["data"]["cachewarden.yaml"].replace("# index:", "index:")
    assert "index: redis://" in text
    config = tmp_path / "cachewarden.yaml"
    config.write_text(text, encoding="utf-8")
    assert _refused(["--config", str(config)], refs) is None
    assert "--index-secret" in (_refused(["--config", str(config)], {"CACHEWARDEN_KEY_SALT": "s"}) or "")
