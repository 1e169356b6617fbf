"""Constants and helpers of the linter tests (imported by name: pytest puts this folder on sys.path)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

LONG = (
    "You are the support assistant for ACME Corporation. Answer questions about orders, refunds,\n"
    "shipping and warranties. Be concise, cite the policy section you rely on, and never invent\n"
    "order numbers or tracking codes. Escalate to a human agent when the customer asks for one.\n"
)

Run = Callable[..., tuple[int, str, str]]


def as_json(out: str) -> Any:
    return json.loads(out)
