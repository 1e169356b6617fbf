"""The emulator's ASGI app: OpenAI (Chat Completions, Responses) and Anthropic (Messages) wire formats.

Routes
    POST /v1/chat/completions            POST /v1/responses      GET|DELETE /v1/responses/{id}
    POST /v1/responses/input_tokens      POST /v1/messages       POST /v1/messages/count_tokens
    POST /_emulator/reset                POST /_emulator/advance {"seconds": N}
    GET  /_emulator/state                GET  /healthz

Each generation request: API key (the cache is per key) → fault header → body → Prompt (shared
adapters) → tokens and count (shared counter) → ReferenceCache usage → deterministic completion →
JSON or SSE. Time is ``app.state.clock()`` plus the offset moved by /_emulator/advance, so tests can
inject a clock or jump past a TTL.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from collections.abc import Mapping
from dataclasses import asdict
from typing import Any

from cachewarden.proxy.engine.adapters import load_body, parse_request
from cachewarden.proxy.engine.errors import CachewardenError, RequestError
from cachewarden.proxy.engine.models import ModelTable, load_model_table
from cachewarden.proxy.engine.prompt import Prompt, Provider
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from .bodies import Turn, anthropic_message, chat_completion, new_id, response_items, response_object
from .cache import CacheRequestError
from .completions import Completion, complete
from .diagnostics import requested as diagnostics_requested
from .encoding import choose, compress
from .errors import Family, error_response, request_id_header
from .faults import HEADER as FAULT_HEADER
from .faults import Fault, FaultSyntaxError, parse_fault
from .latency import LatencyModel
from .respond import EventStreamResponse, TruncatedResponse
from .sse import Event, anthropic_events, chat_events, responses_events
from .state import Clock, EmulatorState, StoredResponse, wall_clock

_OPENAI_NO_KEY = (
    "You didn't provide an API key. You need to provide your API key in an Authorization header using "
    "Bearer auth (i.e. Authorization: Bearer YOUR_KEY)."
)


def _family(provider: Provider) -> Family:
    return "anthropic" if provider == "anthropic" else "openai"


def _state(request: Request) -> EmulatorState:
    state: EmulatorState = request.app.state.emulator
    return state


def _now(request: Request) -> float:
    clock: Clock = request.app.state.clock
    return clock() + _state(request).offset


def _api_key(request: Request, family: Family) -> str | None:
    """The caller's key, hashed (it only names a cache); None when the request carries none."""
    raw = request.headers.get("x-api-key") if family == "anthropic" else None
    if not raw:
        auth = request.headers.get("authorization", "")
        scheme, _, token = auth.partition(" ")
        raw = token.strip() if scheme.lower() == "bearer" else ""
    if not raw:
        return None
    return hashlib.blake2b(raw.encode(), digest_size=16).hexdigest()


async def _preflight(request: Request, family: Family) -> tuple[str, Fault | None] | Response:
    """Key and fault of a request, or the error response that ends it here."""
    key = _api_key(request, family)
    if key is None:
        message = "x-api-key header is required" if family == "anthropic" else _OPENAI_NO_KEY
        return error_response(family, 401, message)
    try:
        fault = parse_fault(request.headers.get(FAULT_HEADER))
    except FaultSyntaxError as exc:
        return error_response(family, 400, str(exc))
    if fault is not None and fault.delay > 0:
        await asyncio.sleep(fault.delay)
    if fault is not None and fault.status is not None:
        return error_response(family, fault.status, fault.message, headers=fault.retry_headers)
    return key, fault


def _user_items(value: Any) -> list[Any]:
    if isinstance(value, str):
        return [{"role": "user", "content": value}]
    return list(value) if isinstance(value, list) else []


def _with_previous(state: EmulatorState, body: dict[str, Any], owner: str) -> dict[str, Any]:
    """A Responses body with the stored conversation of ``previous_response_id`` put in front of its input."""
    previous = body.get("previous_response_id")
    if previous is None:
        return body
    stored = state.responses.get(str(previous), owner)
    if stored is None:
        raise RequestError(f"Previous response with id '{previous}' not found.", "previous_response_id")
    merged = {k: v for k, v in body.items() if k != "previous_response_id"}
    merged["input"] = stored.input_items + stored.output_items + _user_items(body.get("input"))
    return merged


def _seed(prompt: Prompt) -> str:
    return "\x00".join([prompt.model, *(s.digest for s in prompt.segments)])


def _validate(provider: Provider, body: Mapping[str, Any]) -> None:
    if provider == "anthropic":
        max_tokens = body.get("max_tokens")
        if max_tokens is None:
            raise RequestError("Field required", "max_tokens")
        if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 0:
            raise RequestError("Input should be a non-negative integer", "max_tokens")
    stream = body.get("stream")
    if stream is not None and not isinstance(stream, bool):
        raise RequestError("Input should be a valid boolean", "stream")


def _response_ids(provider: Provider) -> tuple[str, str]:
    if provider == "openai-chat":
        return new_id("chatcmpl-", 29), ""
    if provider == "openai-responses":
        return new_id("resp_", 48), new_id("msg_", 48)
    return new_id("msg_01", 22), ""


def _choices(
    provider: Provider, body: Mapping[str, Any], seed: str, first: Completion
) -> tuple[Completion, ...]:
    """Chat Completions ``n``: more answers to the same prompt, each from its own seed."""
    n = body.get("n")
    if provider != "openai-chat" or not isinstance(n, int) or isinstance(n, bool) or n <= 1:
        return ()
    return (first, *(complete(provider, body, f"{seed}\x00choice {k}") for k in range(1, min(n, 128))))


def _events(turn: Turn, body: Mapping[str, Any]) -> list[Event]:
    if turn.provider == "openai-chat":
        options = body.get("stream_options")
        include_usage = isinstance(options, Mapping) and options.get("include_usage") is True
        return chat_events(turn, include_usage)
    if turn.provider == "openai-responses":
        return responses_events(turn)
    return anthropic_events(turn)


def _final_body(turn: Turn) -> dict[str, Any]:
    if turn.provider == "openai-chat":
        return chat_completion(turn)
    if turn.provider == "openai-responses":
        return response_object(turn)
    return anthropic_message(turn)


async def _generate(request: Request, provider: Provider) -> Response:
    family = _family(provider)
    state = _state(request)
    pre = await _preflight(request, family)
    if isinstance(pre, Response):
        return pre
    key, fault = pre
    try:
        body = load_body(await request.body())
        _validate(provider, body)
        full = _with_previous(state, body, key) if provider == "openai-responses" else body
        prompt = parse_request(full, provider)
        info = state.table.lookup(prompt.model, provider)
        tokenized = state.counter.tokenize(prompt)
        diagnosis = (
            (state.diagnoses.diagnose(key, body, prompt, tokenized),)
            if provider == "anthropic" and diagnostics_requested(body)
            else ()
        )
        usage = state.cache.process(key, prompt, tokenized, info.cache, _now(request))
    except (RequestError, CacheRequestError) as exc:
        return error_response(family, 400, str(exc), param=getattr(exc, "path", None))
    except CachewardenError as exc:
        return error_response(family, 500, str(exc))

    completion = complete(provider, full, _seed(prompt))
    response_id, item_id = _response_ids(provider)
    turn = Turn(
        provider=provider,
        model=prompt.model,
        response_id=response_id,
        created=int(time.time()),
        completion=completion,
        usage=usage,
        report_writes=provider != "anthropic" and info.cache.mode == "breakpoints",
        body=body,
        item_id=item_id,
        choices=_choices(provider, full, _seed(prompt), completion),
        diagnostics=diagnosis,
    )
    if provider == "anthropic":
        state.diagnoses.remember(response_id, key, prompt)
    final = _final_body(turn)
    if provider == "openai-responses" and body.get("store", True) is not False:
        stored = StoredResponse(key, _user_items(full.get("input")), response_items(turn), final)
        state.responses.put(response_id, stored)

    headers = request_id_header(family)
    latency = state.latency
    first = latency.first_token(usage) if latency is not None else 0.0
    per_token = latency.per_token() if latency is not None else 0.0
    disconnect = fault.disconnect if fault is not None else None
    # Compressed when the client accepts it, as the providers' edges do (``encoding``).
    coding = choose(request.headers.get("accept-encoding")) if state.compress else None
    if body.get("stream") is True:
        return EventStreamResponse(
            _events(turn, body),
            headers=headers,
            first_delay=first,
            per_token=per_token,
            disconnect_after=disconnect,
            coding=coding,
        )
    if first or per_token:
        await asyncio.sleep(first + per_token * turn.output_tokens)
    if disconnect is not None:
        return TruncatedResponse(json.dumps(final).encode(), status_code=200, headers=headers)
    if coding is None:
        return JSONResponse(final, headers=headers)
    content = compress(coding, bytes(JSONResponse(final).body))
    encoded = {**headers, "content-encoding": coding, "vary": "Accept-Encoding"}
    return Response(content, media_type="application/json", headers=encoded)


async def chat_completions(request: Request) -> Response:
    return await _generate(request, "openai-chat")


async def responses(request: Request) -> Response:
    return await _generate(request, "openai-responses")


async def messages(request: Request) -> Response:
    return await _generate(request, "anthropic")


async def _count(request: Request, provider: Provider) -> Response:
    family = _family(provider)
    pre = await _preflight(request, family)
    if isinstance(pre, Response):
        return pre
    key, _ = pre
    state = _state(request)
    try:
        body = load_body(await request.body())
        full = _with_previous(state, body, key) if provider == "openai-responses" else body
        count = state.counter.tokenize(parse_request(full, provider)).count
    except RequestError as exc:
        return error_response(family, 400, str(exc), param=exc.path)
    except CachewardenError as exc:
        return error_response(family, 500, str(exc))
    payload: dict[str, Any] = {"input_tokens": count}
    if provider == "openai-responses":
        payload = {"object": "response.input_tokens", **payload}
    return JSONResponse(payload, headers=request_id_header(family))


async def count_tokens(request: Request) -> Response:
    return await _count(request, "anthropic")


async def responses_input_tokens(request: Request) -> Response:
    return await _count(request, "openai-responses")


async def stored_response(request: Request) -> Response:
    pre = await _preflight(request, "openai")
    if isinstance(pre, Response):
        return pre
    key, _ = pre
    response_id = request.path_params["response_id"]
    state = _state(request)
    if request.method == "DELETE":
        if state.responses.delete(response_id, key):
            return JSONResponse({"id": response_id, "object": "response.deleted", "deleted": True})
    else:
        stored = state.responses.get(response_id, key)
        if stored is not None:
            return JSONResponse(stored.body, headers=request_id_header("openai"))
    return error_response("openai", 404, f"Response with id '{response_id}' not found.")


# -- admin (tests, demo) ----------------------------------------------------------------------------


async def admin_reset(request: Request) -> Response:
    _state(request).reset()
    return JSONResponse({"reset": True, "now": _now(request)})


async def admin_advance(request: Request) -> Response:
    try:
        payload = json.loads(await request.body() or b"{}")
    except ValueError:
        payload = None
    seconds = payload.get("seconds") if isinstance(payload, dict) else None
    if not isinstance(seconds, int | float) or isinstance(seconds, bool) or seconds < 0:
        return JSONResponse({"error": 'expected {"seconds": N} with N >= 0'}, status_code=400)
    state = _state(request)
    state.offset += float(seconds)
    return JSONResponse({"offset": state.offset, "now": _now(request)})


async def admin_state(request: Request) -> Response:
    state = _state(request)
    latency = state.latency
    return JSONResponse(
        {
            "now": _now(request),
            "offset": state.offset,
            "latency": None if latency is None else asdict(latency),
        }
    )


async def healthz(request: Request) -> Response:
    return JSONResponse({"status": "ok"})


async def _http_error(request: Request, exc: Exception) -> Response:
    status = exc.status_code if isinstance(exc, HTTPException) else 500
    family: Family = "anthropic" if request.url.path.startswith("/v1/messages") else "openai"
    message = f"Unknown request URL: {request.method} {request.url.path}." if status in (404, 405) else None
    return error_response(family, status, message)


def create_app(
    *,
    clock: Clock | None = None,
    latency: LatencyModel | None = None,
    table: ModelTable | None = None,
    compress: bool = True,
) -> Starlette:
    """The emulator app. ``clock`` (seconds) defaults to wall time; ``latency`` None means instant;
    ``compress`` False answers plain bytes whatever the client accepts."""
    routes = [
        Route("/v1/chat/completions", chat_completions, methods=["POST"]),
        Route("/v1/responses", responses, methods=["POST"]),
        Route("/v1/responses/input_tokens", responses_input_tokens, methods=["POST"]),
        Route("/v1/responses/{response_id}", stored_response, methods=["GET", "DELETE"]),
        Route("/v1/messages", messages, methods=["POST"]),
        Route("/v1/messages/count_tokens", count_tokens, methods=["POST"]),
        Route("/_emulator/reset", admin_reset, methods=["POST"]),
        Route("/_emulator/advance", admin_advance, methods=["POST"]),
        Route("/_emulator/state", admin_state, methods=["GET"]),
        Route("/healthz", healthz, methods=["GET"]),
    ]
    app = Starlette(routes=routes, exception_handlers={404: _http_error, 405: _http_error})
    app.state.emulator = EmulatorState(table=table or load_model_table(), latency=latency, compress=compress)
    app.state.clock = clock or wall_clock
    return app
