"""An optional latency model: time to first token grows with the prompt tokens that were not cached.

Off by default (tests and benchmarks of the proxy's own overhead want an instant upstream). Enable
with ``cachewarden emulate --latency`` or ``CACHEWARDEN_EMULATOR_LATENCY=1``; tune with a spec
``ttft=0.2,input=0.00002,cached=0.000002,output=0.01`` (seconds: base, per uncached / written input
token, per cached input token, per output token).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, fields, replace

from .cache import ReferenceUsage

ENV = "CACHEWARDEN_EMULATOR_LATENCY"


@dataclass(frozen=True, slots=True)
class LatencyModel:
    ttft: float = 0.15  # base time to first token
    input: float = 0.00002  # per prefilled (uncached or written) input token: 100k tokens -> 2 s
    cached: float = 0.000002  # per cached input token: a tenth of prefill
    output: float = 0.01  # per output token

    def first_token(self, usage: ReferenceUsage) -> float:
        return self.ttft + self.input * (usage.uncached + usage.writes) + self.cached * usage.cached

    def per_token(self) -> float:
        return self.output


def parse_latency(spec: str) -> LatencyModel:
    """``"1"`` / ``"on"`` / ``""`` → defaults; ``"ttft=0.1,output=0.02"`` → those fields changed."""
    model = LatencyModel()
    if spec.strip().lower() in ("", "1", "on", "true", "yes", "default"):
        return model
    names = {f.name for f in fields(LatencyModel)}
    changes: dict[str, float] = {}
    for part in spec.split(","):
        key, sep, value = part.partition("=")
        key = key.strip()
        if not sep or key not in names:
            raise ValueError(
                f"latency spec: expected {'/'.join(sorted(names))}=SECONDS, got {part.strip()!r}"
            )
        try:
            changes[key] = float(value)
        except ValueError:
            raise ValueError(f"latency spec: {key} must be a number, got {value.strip()!r}") from None
    return replace(model, **changes)


def latency_from_env() -> LatencyModel | None:
    spec = os.environ.get(ENV)
    if spec is None or spec.strip().lower() in ("0", "off", "false", "no"):
        return None
    return parse_latency(spec)
