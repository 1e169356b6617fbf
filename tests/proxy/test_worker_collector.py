"""An analysis worker's garbage collector (analysis_worker.tune_gc) and the premise it rests on.

A worker runs young collections rarely and freezes its start-up heap, because an analysis leaves
no cyclic garbage: everything a request makes is freed by reference counting or kept (the index,
the conversation's run), and what the index evicts too (a dead run lets go of its nodes). The
first test, in a process of its own (other tests' leftovers would be collected in its window),
with an index small enough to evict on every turn, fails if an analysis starts leaving cycles
behind (they would then wait for the rarer collections); the second checks the worker process
tunes its collector as it says.
"""

from __future__ import annotations

import gc
import json
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from cachewarden.proxy.cli.proxy import worker_analyzers
from cachewarden.proxy.engine.usage import Usage
from cachewarden.proxy.server.analysis_worker import Worker, request_state, response_state
from cachewarden.proxy.server.config import Settings
from cachewarden.proxy.server.hooks import Flow, Timings
from flow_support import request_flow

SYSTEM = "\n".join(f"Rule {i}: requests of kind {i} go to desk {i % 7} within {i} hours." for i in range(150))


def body(turn: int) -> bytes:
    messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}]
    for i in range(turn):
        messages += [
            {"role": "user", "content": f"Question {i}: where does a request of kind {i} go?"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": f"c{i}",
                        "type": "function",
                        "function": {"name": "desk", "arguments": f'{{"k":{i}}}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": f"c{i}", "content": f"desk {i % 7}"},
        ]
    messages.append({"role": "user", "content": f"Question {turn}?"})
    tools = [{"type": "function", "function": {"name": "desk", "parameters": {"type": "object"}}}]
    # Messages last, as agents send them: each body extends the previous one's bytes.
    return json.dumps({"model": "gpt-4.1", "tools": tools, "messages": messages}).encode()


def flow(turn: int) -> Flow:
    now = time.perf_counter()
    usage = Usage(
        input_total=900 + turn, cached=900, cache_write=0, cache_write_1h=0, uncached=turn, output=5
    )
    return request_flow(
        body(turn),
        turn,
        tenant="team",
        timings=Timings(received=now, sent=now),
        outcome="200",
        usage=usage,
        usage_raw={"prompt_tokens": 900 + turn},
        response_ended=True,
    )


def run_turns(worker: Worker, done: list[Any], turns: range) -> None:
    expected = len(done) + len(turns)
    for turn in turns:
        f = flow(turn)
        worker.handle(("req", request_state(f)))
        worker.handle(("resp", f.id, response_state(f)))
    deadline = time.monotonic() + 60
    while len(done) < expected:
        assert time.monotonic() < deadline, "the worker's lane did not answer"
        time.sleep(0.01)


def cyclic_garbage_of_turns() -> list[str]:
    """Run in a process of its own (``__main__`` below): the types of the cyclic garbage 37 turns
    of a conversation leave, on an index that evicts on every turn."""
    done: list[Any] = []
    lock = threading.Lock()

    def send(message: object) -> None:
        with lock:
            done.append(message)

    worker = Worker(Settings(), worker_analyzers, send)
    try:
        run_turns(worker, done, range(3))  # warm: first-use tables, the conversation's first run
        assert all(m[0] == "done" and m[3] for m in done), "every request analysed, with records"
        gc.collect()
        gc.disable()
        gc.set_debug(gc.DEBUG_SAVEALL)
        try:
            run_turns(worker, done, range(3, 40))
            gc.collect()
            cycles = [type(o).__name__ for o in gc.garbage]
        finally:
            gc.set_debug(0)
            gc.garbage.clear()
            gc.enable()
        records = {r[0] for m in done[3:] for r in m[3]}
        assert {"input_tokens", "prediction_error_tokens"} <= records, "the turns were analysed"
        return cycles
    finally:
        worker.close()


def test_an_analysis_leaves_no_cyclic_garbage() -> None:
    run = subprocess.run(
        [sys.executable, __file__], capture_output=True, text=True, timeout=300, cwd=Path(__file__).parent
    )
    assert run.returncode == 0, run.stderr[-3000:]
    cycles = json.loads(run.stdout.splitlines()[-1])
    assert cycles == [], f"an analysis left cyclic garbage: {sorted(set(cycles))}"


def test_the_worker_freezes_its_start_up_heap_and_collects_rarely() -> None:
    code = (
        "import gc; from cachewarden.proxy.server.analysis_worker import GC_THRESHOLD, tune_gc; "
        "before = gc.get_threshold(); tune_gc(); "
        "print(before, gc.get_threshold() == GC_THRESHOLD, gc.get_freeze_count() > 1000)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split(")", 1)[1].split() == ["True", "True"], out


if __name__ == "__main__":
    from cachewarden.proxy.cli import proxy as cli_proxy

    real_open = cli_proxy.open_index

    def small_index(*args: Any, **kwargs: Any) -> Any:
        # ~20 turns of the conversation: from then on every insert evicts its oldest blocks.
        return real_open(*args, **{**kwargs, "max_tokens": 3_000})

    cli_proxy.open_index = small_index  # type: ignore[assignment]
    print(json.dumps(cyclic_garbage_of_turns()))
