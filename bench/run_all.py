"""Run every benchmark script in bench/ one after another and print their reports.

Each script measures against a baseline run in the same process (raw tiktoken, a 10-prompt index,
a bare pass-through proxy ...), so the ratios hold on any machine; absolute times are for scale.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> int:
    failed = []
    for script in sorted(HERE.glob("bench_*.py")):
        print(f"== {script.name}", flush=True)
        started = time.perf_counter()
        result = subprocess.run([sys.executable, str(script)], check=False)
        print(f"   ({time.perf_counter() - started:.1f} s, exit {result.returncode})\n", flush=True)
        if result.returncode:
            failed.append(script.name)
    if failed:
        print("failed: " + ", ".join(failed))
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
