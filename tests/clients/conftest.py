"""Fixtures of the client-library suite (``support``): a fresh emulator and proxy per test."""

from __future__ import annotations

import gc
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import Rig, rig

# Nothing here may reach the internet: litellm would fetch its model price map, the Agents SDK
# would export traces to OpenAI. These turn both off before the libraries are imported.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("OPENAI_AGENTS_DISABLE_TRACING", "1")
os.environ.setdefault("LITELLM_TELEMETRY", "False")


@pytest.fixture
def live(tmp_path: Path) -> Iterator[Rig]:
    with rig(tmp_path) as running:
        yield running
    # Some libraries drop HTTP clients without closing them (pooled sockets to the emulator and the
    # proxy): collect them now, inside this test where their ResourceWarnings are ignored, rather
    # than at some later test or at the end of the session, where they would fail the run.
    gc.collect()


# The libraries' own warnings (deprecations, pydantic notices about their types) are theirs to fix,
# not what this suite tests; everywhere else the project turns warnings into errors.
_LIBRARY_WARNINGS = (
    "ignore::DeprecationWarning",
    "ignore::PendingDeprecationWarning",
    "ignore::UserWarning",
    "ignore::FutureWarning",
    "ignore::ResourceWarning",
    "ignore::pytest.PytestUnraisableExceptionWarning",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            for spec in _LIBRARY_WARNINGS:
                item.add_marker(pytest.mark.filterwarnings(spec))
