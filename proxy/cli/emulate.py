"""``cachewarden emulate``: run the OpenAI / Anthropic emulator with its reference prefix cache."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from cachewarden.proxy.emulator.latency import ENV as LATENCY_ENV
from cachewarden.proxy.emulator.latency import LatencyModel, latency_from_env, parse_latency


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="cachewarden emulate",
        description="A local OpenAI (Chat Completions, Responses) and Anthropic (Messages) emulator with a "
        "provider-faithful prompt cache. Point the SDKs at http://HOST:PORT/v1 (OpenAI) or http://HOST:PORT "
        "(Anthropic).",
    )
    parser.add_argument("--host", default="127.0.0.1", help="interface to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8788, help="port to listen on (default 8788)")
    parser.add_argument(
        "--latency",
        nargs="?",
        const="on",
        default=None,
        metavar="SPEC",
        help="simulate latency (time to first token grows with uncached prompt tokens); optional SPEC "
        f"'ttft=0.15,input=0.00002,cached=0.000002,output=0.01' (seconds); also ${LATENCY_ENV}",
    )
    parser.add_argument(
        "--no-compress",
        action="store_true",
        help="answer plain bytes even to clients that accept gzip, br or zstd (to read the wire)",
    )
    parser.add_argument("--log-level", default="warning", help="uvicorn log level (default warning)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    latency: LatencyModel | None
    try:
        latency = parse_latency(args.latency) if args.latency is not None else latency_from_env()
    except ValueError as exc:
        print(f"cachewarden emulate: error: {exc}", file=sys.stderr)
        return 2
    if not 0 <= args.port <= 65535:
        print("cachewarden emulate: error: --port must be 0-65535", file=sys.stderr)
        return 2

    import uvicorn
    from cachewarden.proxy.emulator.app import create_app

    app = create_app(latency=latency, compress=not args.no_compress)
    print(f"cachewarden emulate: listening on http://{args.host}:{args.port}", file=sys.stderr, flush=True)
    uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level)
    return 0
