"""Every counter with a bounded, known label set is exported at 0 from start-up (DESIGN.md), so a
dashboard panel or an alert operand over it reads 0 instead of "No data" on a fresh proxy."""

from __future__ import annotations

import re
from pathlib import Path

import cachewarden.proxy.engine.index.resilient as resilient
from cachewarden.proxy.engine.prompt import PROVIDERS
from cachewarden.proxy.explain.attribution import FIXES
from cachewarden.proxy.server import metrics as metrics_mod
from cachewarden.proxy.server.metrics import Metrics
from cachewarden.proxy.server.transforms.canonicalize import SAFE_TRANSFORMS, UNSAFE_TRANSFORMS
from prometheus_client.parser import text_string_to_metric_families


def samples(m: Metrics) -> dict[str, list[dict[str, str]]]:
    out: dict[str, list[dict[str, str]]] = {}
    for family in text_string_to_metric_families(m.exposition().decode()):
        for sample in family.samples:
            if sample.name.endswith("_total"):
                assert sample.value == 0, sample
                out.setdefault(sample.name, []).append(dict(sample.labels))
    return out


def values(rows: list[dict[str, str]], label: str, **where: str) -> set[str]:
    return {r[label] for r in rows if all(r.get(k) == v for k, v in where.items())}


def test_fresh_metrics_hold_every_known_label_value_at_0() -> None:
    s = samples(Metrics())
    for provider in PROVIDERS:
        base = {"provider": provider, "model": "none"}
        assert values(s["cachewarden_analysis_errors_total"], "stage", **base) == {
            "request",
            "response",
            "rewrite",
        }
        assert values(s["cachewarden_canonicalized_requests_total"], "transform", **base) == {
            *SAFE_TRANSFORMS,
            *UNSAFE_TRANSFORMS,
        }
        assert values(s["cachewarden_cache_miss_tokens_total"], "reason", **base) == set(FIXES)
        assert values(s["cachewarden_missed_savings_usd_total"], "reason", **base) == set(FIXES)
        assert values(s["cachewarden_upstream_errors_total"], "kind", provider=provider) == {
            "timeout",
            "transport",
            "stream",
        }
        assert values(s["cachewarden_usage_reports_total"], "state", provider=provider) == {
            "reported",
            "missing",
            "unparsed",
        }
        assert values(s["cachewarden_cost_usd_total"], "kind", source="reported", **base) == {
            "cached",
            "cache_write",
            "uncached",
            "output",
        }
        assert len(values(s["cachewarden_input_tokens_total"], "kind", **base)) == 3
    assert values(s["cachewarden_index_backend_errors_total"], "stage") == set(metrics_mod.INDEX_STAGES)
    assert s["cachewarden_savings_usd_total"] and s["cachewarden_analysis_dropped_total"]


def test_a_new_model_gets_its_zero_series_on_first_sight() -> None:
    m = Metrics()
    assert m.labels("anthropic", "claude-sonnet-5") == ("anthropic", "claude-sonnet-5")
    s = samples(m)
    assert values(s["cachewarden_analysis_errors_total"], "stage", model="claude-sonnet-5") == {
        "request",
        "response",
        "rewrite",
    }
    # The unbounded model label stays bounded: a rejected name is seeded once, as "other".
    m.labels("anthropic", "a prompt text, not a model")
    assert "a prompt text, not a model" not in m.exposition().decode()


def test_tenant_labels_seed_the_other_tenant() -> None:
    s = samples(Metrics(tenant_labels=["team-a"]))
    rows = s["cachewarden_analysis_errors_total"]
    assert {r["tenant"] for r in rows} == {"other"}


def test_every_index_stage_is_one_the_resilient_index_reports() -> None:
    # If resilient.py grows a stage, the zero series must follow (it is named where a failure is
    # counted: its _call sites, and the joint calls' _failed sites).
    text = Path(resilient.__file__).read_text(encoding="utf-8")
    named = re.findall(r'(?:self\._call|\._failed)\("(\w+)"', text)
    assert set(named) == set(metrics_mod.INDEX_STAGES)
