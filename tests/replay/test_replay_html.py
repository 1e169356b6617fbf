"""The HTML report: one self-contained file, checked statically and rendered in headless Chromium.

The browser tests need Debian's ``chromium`` (``apt-get install chromium``) and skip without it. The
screenshot is kept in tests/artifacts/ (gitignored) for a person to look at.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest
from cachewarden.proxy.cli.replay import main
from replay_fixtures import SYSTEM, chat, write_log

T0 = 1_750_000_000  # June 2025: after OpenAI prompt caching began (CacheRules.since)
ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts"
PAYLOAD = '</pre></script><script>document.title="pwned"</script><img src=x onerror="alert(1)">'
CHROMIUM = next((p for p in (shutil.which("chromium"), shutil.which("chromium-browser")) if p), None)
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="chromium is not installed (apt-get install chromium)"
)


def report_log(tmp_path: Path) -> tuple[str, int]:
    """Six requests: a growing conversation, then a system prompt whose stamp changes (with a payload)."""
    stamped = [f"Current time: 2026-03-01 10:0{m}:15 {PAYLOAD}\n\n{SYSTEM}" for m in range(3)]
    objs = [{"request": chat(n), "timestamp": T0 + 10 * n} for n in (1, 3, 5)]
    objs += [
        {"request": chat(7 + 2 * k, system=s), "timestamp": T0 + 100 + 10 * k} for k, s in enumerate(stamped)
    ]
    # A gap past the TTL: the last request misses on expiry as well.
    objs.append({"request": chat(13, system=stamped[-1]), "timestamp": T0 + 5000})
    return write_log(tmp_path / "log.jsonl", objs), len(objs)


def render(tmp_path: Path) -> tuple[Path, int]:
    log, requests = report_log(tmp_path)
    target = tmp_path / "report.html"
    assert main([log, "--format", "html", "--output", str(target)]) == 0
    return target, requests


class Elements(HTMLParser):
    """Counts elements by tag and class, and collects ids and attributes of the body."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def count(self, tag: str, cls: str | None = None) -> int:
        return sum(
            1 for t, a in self.tags if t == tag and (cls is None or cls in (a.get("class") or "").split())
        )

    def ids(self) -> set[str]:
        return {a["id"] or "" for _, a in self.tags if "id" in a}

    def body(self) -> dict[str, str | None]:
        return next(a for t, a in self.tags if t == "body")


def parse(text: str) -> Elements:
    parser = Elements()
    parser.feed(text)
    return parser


def test_the_page_is_self_contained_and_escapes_prompt_text(tmp_path: Path) -> None:
    target, requests = render(tmp_path)
    text = target.read_text(encoding="utf-8")
    # Nothing to fetch: no URL, no external script, style, font or image.
    assert not re.search(r"https?://|<link|src=\"(?!x)|@import|url\(", text)
    assert "Content-Security-Policy" in text and "default-src 'none'" in text
    page = parse(text)
    assert page.count("script") == 1
    assert page.count("img") == 0
    assert "&lt;/script&gt;&lt;script&gt;document.title=&quot;pwned" in text
    assert page.count("g", "bar") == requests
    assert page.count("rect") >= 3 * requests
    assert page.count("g", "reason-bar") >= 2
    assert page.count("tr", "miss") >= 3


def test_html_goes_to_stdout_without_output(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log, _ = report_log(tmp_path)
    assert main([log, "--format", "html"]) == 0
    assert capsys.readouterr().out.startswith("<!DOCTYPE html>")


def chromium(tmp_path: Path, *args: str) -> str:
    assert CHROMIUM is not None
    command = [
        CHROMIUM,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={tmp_path / 'chromium-profile'}",
        *args,
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


@needs_chromium
def test_the_report_renders_in_chromium(tmp_path: Path) -> None:
    target, requests = render(tmp_path)
    dom = chromium(tmp_path, "--dump-dom", target.as_uri())
    page = parse(dom)
    # The page's own script ran to the end, and nothing threw.
    assert page.body().get("data-rendered") == "ok"
    assert "cw-js-error" not in page.ids()
    # The plots: one stacked bar per request, one bar per reason that cost something.
    assert {"tokens-plot", "reasons-plot", "misses-table", "reasons-table"} <= page.ids()
    assert page.count("g", "bar") == requests
    for kind in ("cached", "written", "uncached"):
        assert page.count("rect", kind) == requests
    codes = {a.get("data-code") for t, a in page.tags if t == "g" and "reason-bar" in (a.get("class") or "")}
    assert {"timestamp", "expired"} <= codes
    # The prompt's markup stayed text: one script element (ours), no image, the title untouched.
    assert page.count("script") == 1 and page.count("img") == 0
    assert "pwned" not in re.search(r"<title>(.*?)</title>", dom, re.S).group(1)  # type: ignore[union-attr]
    assert "&lt;script&gt;document.title" in dom

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTIFACTS / "replay-report.png"
    shot.unlink(missing_ok=True)
    chromium(
        tmp_path, f"--screenshot={shot}", "--window-size=1280,2000", "--hide-scrollbars", target.as_uri()
    )
    assert shot.stat().st_size > 10_000


@needs_chromium
def test_the_error_marker_would_catch_a_script_error(tmp_path: Path) -> None:
    """Control for the test above: a page that throws does show the marker in the dumped DOM."""
    target, _ = render(tmp_path)
    broken = tmp_path / "broken.html"
    html = target.read_text(encoding="utf-8")
    broken.write_text(html.replace("</body>", "<script>noSuchFunction();</script></body>"), encoding="utf-8")
    dom = chromium(tmp_path, "--dump-dom", broken.as_uri())
    assert "cw-js-error" in parse(dom).ids()
