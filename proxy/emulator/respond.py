"""ASGI responses that can misbehave on purpose: paced SSE streams and connections dropped mid-body.

Dropping a connection: the app returns without sending the final (``more_body: False``) message, so
the server closes the socket with the chunked body unfinished, and the client sees a truncated
stream, as when a provider's edge resets the connection.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence

from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from .encoding import encoder
from .sse import Event

SSE_MEDIA_TYPE = "text/event-stream; charset=utf-8"


def _raw_headers(headers: Mapping[str, str]) -> list[tuple[bytes, bytes]]:
    return [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()]


class EventStreamResponse(Response):
    """Server-sent events with an optional wait before the first event, per-token pacing and a drop."""

    def __init__(
        self,
        events: Sequence[Event],
        *,
        headers: Mapping[str, str],
        first_delay: float = 0.0,
        per_token: float = 0.0,
        disconnect_after: int | None = None,
        coding: str | None = None,
    ) -> None:
        super().__init__(status_code=200, media_type=SSE_MEDIA_TYPE)
        self.events = events
        self.extra_headers = {"content-type": SSE_MEDIA_TYPE, "cache-control": "no-cache", **headers}
        # Compressed event by event (``encoding``); a dropped connection never sends the end.
        self.encoder = encoder(coding) if coding else None
        if coding:
            self.extra_headers.update({"content-encoding": coding, "vary": "Accept-Encoding"})
        self.first_delay = first_delay
        self.per_token = per_token
        self.disconnect_after = disconnect_after

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send(
            {"type": "http.response.start", "status": 200, "headers": _raw_headers(self.extra_headers)}
        )
        if self.first_delay > 0:
            await asyncio.sleep(self.first_delay)
        for n, event in enumerate(self.events):
            if self.disconnect_after is not None and n >= self.disconnect_after:
                return  # drop the connection: the body never completes
            if event.tokens and self.per_token > 0:
                await asyncio.sleep(self.per_token * event.tokens)
            data = event.encode() if self.encoder is None else self.encoder.chunk(event.encode())
            if self.encoder is not None and n == len(self.events) - 1 and self.disconnect_after is None:
                # The end of the compressed stream goes with the last event: a client that stops
                # reading at the terminal event ([DONE], message_stop) has then read every byte.
                data += self.encoder.finish()
            await send({"type": "http.response.body", "body": data, "more_body": True})
        if self.disconnect_after is not None:
            return  # fewer events than asked for: still never complete the body
        await send({"type": "http.response.body", "body": b"", "more_body": False})


class TruncatedResponse(Response):
    """A JSON response that announces its full length, sends half of it and drops the connection."""

    def __init__(self, content: bytes, *, status_code: int, headers: Mapping[str, str]) -> None:
        super().__init__(status_code=status_code, media_type="application/json")
        self.content = content
        self.extra_headers = {
            "content-type": "application/json",
            **headers,
            "content-length": str(len(content)),
        }

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send(
            {
                "type": "http.response.start",
                "status": self.status_code,
                "headers": _raw_headers(self.extra_headers),
            }
        )
        await send(
            {"type": "http.response.body", "body": self.content[: len(self.content) // 2], "more_body": True}
        )
