"""Writes of ``RedisIndex`` sent beside the analysis instead of in its way (``write_behind=True``).

On a single Redis, ``Channel``: the index's own connection, on which writes are sent at once and
their replies read later (see the class). On a Redis Cluster (no pipelines), ``WriteBehind``:
an insert or a mark queues its script calls and returns; one daemon thread sends the queue at
once while the analysis goes on (the socket wait releases the GIL). A read of
the same index first takes whatever is still queued into its own round trip (and waits for a
send in flight), so an index always reads its own writes. A failed send is not lost silently:
the next call of that index raises it, where ``ResilientIndex`` counts the outage as before.
"""

from __future__ import annotations

import os
import socket
import threading
import weakref
from collections import deque
from collections.abc import Callable
from typing import Any, TypeAlias

import redis

try:
    import hiredis
except ImportError:  # redis-py's own read path then (the extra installs hiredis)
    hiredis = None  # type: ignore[assignment]

__all__ = ["Channel", "Command", "WriteBehind", "bulk"]

# A command: its arguments, or already in RESP (the index packs its script calls itself, from
# parts it keeps: a node's key is packed once, not on every call through it).
Command: TypeAlias = tuple[Any, ...] | bytes


class WriteBehind:
    """A queue of calls drained by one sender thread (started on first use)."""

    def __init__(self, send: Callable[[list[Any]], object]) -> None:
        self._send = send
        self._queue: list[Any] = []
        self._cv = threading.Condition()
        self._inflight = False
        self._error: Exception | None = None
        self._thread: threading.Thread | None = None

    def submit(self, calls: list[Any]) -> None:
        with self._cv:
            self._raise_pending_error()
            self._queue.extend(calls)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="cachewarden-redis-writes", daemon=True
                )
                self._thread.start()
            self._cv.notify_all()

    def take(self) -> list[Any]:
        """The calls not sent yet (the caller sends them before its read), after any send in flight."""
        with self._cv:
            while self._inflight:
                self._cv.wait()
            self._raise_pending_error()
            calls, self._queue = self._queue, []
            return calls

    def _raise_pending_error(self) -> None:
        if self._error is not None:
            error, self._error = self._error, None
            raise error

    def _run(self) -> None:
        while True:
            with self._cv:
                while not self._queue:
                    self._cv.wait()
                calls, self._queue = self._queue, []
                self._inflight = True
            try:
                self._send(calls)
            except Exception as exc:  # raised by the index's next call
                with self._cv:
                    self._error = exc
            finally:
                with self._cv:
                    self._inflight = False
                    self._cv.notify_all()


class _Ticket:
    """The replies one ``ask`` waits for."""

    __slots__ = ("expected", "replies")

    def __init__(self, expected: int) -> None:
        self.expected = expected
        self.replies: list[Any] = []


class Channel:
    """A connection of the indexes on one Redis (``shared``): commands go out at once and in
    order; their replies are read, in the same order, when a caller needs one.

    A write (``post``) is sent and not waited for: Redis runs it while the analysis goes on, with
    no thread to wake and no lock to wait on; its reply goes to the write's handler (its tag, a
    callable) when a later read of the channel comes to it. A read (``ask``) goes out behind every
    write sent before it on the same connection, so Redis runs it after them: an index reads its
    own writes without waiting for them. ``ask`` returns a ticket for ``wait``: asks sent before
    any wait cost one round trip together. ``prelude`` (``SCRIPT LOAD`` of the scripts) goes first
    on every new connection, and again after a reply says a script is missing (``SCRIPT FLUSH``).
    An error in a write's reply is raised by the next call, as ``WriteBehind`` does; a broken
    connection fails what waits on it (its writes due are lost) and is made again.
    """

    def __init__(self, pool: Any, prelude: list[tuple[Any, ...]]) -> None:
        self._pool = pool
        self._users = 0
        self._prelude = prelude
        # Re-entrant: a reply's handler may post again (a write resent with its blocks' bytes).
        self._lock = threading.RLock()
        self._conn: Any = None
        self._load = True  # the prelude goes before the next commands
        # One entry per reply still to read: (ticket, or None for a write; its command; its tag).
        self._queue: deque[tuple[_Ticket | None, Command, Any]] = deque()
        self._error: Exception | None = None
        # Replies are read from the connection's socket by a reader of the channel's own, made
        # after the connection's handshake (redis-py's read path costs about as much as the recv).
        self._reader: Any = None
        self._buf = bytearray(65536)

    def post(self, commands: list[Command], tags: list[Any]) -> None:
        with self._lock:
            self._raise_pending_error()
            # Nobody reading (an index that only writes): read what is due before it piles up
            # here and in Redis' output buffer; those replies are long there.
            while len(self._queue) > _MAX_DUE:
                self._read_one()
            self._send(commands, [(None, c, t) for c, t in zip(commands, tags, strict=True)])

    def ask(self, commands: list[Command]) -> _Ticket:
        with self._lock:
            self._raise_pending_error()
            ticket = _Ticket(len(commands))
            self._send(commands, [(ticket, c, None) for c in commands])
            return ticket

    def wait(self, ticket: _Ticket) -> list[Any]:
        """The replies of an ``ask``; raises the first error among them."""
        with self._lock:
            while len(ticket.replies) < ticket.expected:
                self._read_one()
            for reply in ticket.replies:
                if isinstance(reply, Exception):
                    raise reply
            return ticket.replies

    def drain(self) -> None:
        """Reads every reply still due (the writes sent are then done); raises a write's error."""
        with self._lock:
            while self._queue:
                self._read_one()
            self._raise_pending_error()

    @classmethod
    def shared(cls, key: object, pool: Any, prelude: list[tuple[Any, ...]]) -> Channel:
        """The channel of every index of this process on one server (``key``): the engine's two
        indexes then send their lookups in one packet and read both replies in one go, and each
        reads the other's writes too. Made from the first caller's pool."""
        with _SHARED_LOCK:
            chan = _SHARED.get(key)
            if chan is None:
                chan = _SHARED[key] = cls(pool, prelude)
            chan._users += 1
            return chan

    def release(self) -> None:
        """One user fewer; the last one closes the connection."""
        with self._lock:
            self._users -= 1
            if self._users <= 0:
                self.close()

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.disconnect()
            self._conn, self._load, self._reader = None, True, None
            self._queue.clear()

    def _raise_pending_error(self) -> None:
        if self._error is not None:
            error, self._error = self._error, None
            raise error

    def _send(self, commands: list[Command], entries: list[tuple[_Ticket | None, Command, Any]]) -> None:
        if self._conn is None:
            self._conn = self._pool.make_connection()
        for attempt in (1, 2):
            load = self._load
            out = [*self._prelude, *commands] if load else commands
            try:
                # One buffer: redis-py sends each item of a list with a sendall of its own.
                packed = [c if type(c) is bytes else _pack(c) for c in out]  # type: ignore[arg-type]
                _send_all(self._conn, b"".join(packed))
            except (redis.ConnectionError, redis.TimeoutError) as exc:
                # A dropped connection (a restarted server): one immediate retry on a new one, when
                # no reply is due on the old one (those would be lost with it).
                retry = attempt == 1 and not self._queue
                self._broken(exc)
                if not retry:
                    raise
                continue
            if load:
                self._load = False
                self._queue.extend((None, c, None) for c in self._prelude)
            self._queue.extend(entries)
            if self._reader is None and hiredis is not None:
                self._reader = hiredis.Reader(
                    protocolError=redis.exceptions.InvalidResponse, replyError=_error
                )
            return

    def _broken(self, exc: Exception) -> None:
        """The connection is gone: what waits on it fails with ``exc``; the writes due are lost."""
        self._conn.disconnect()
        self._load, self._reader = True, None
        for ticket, _, _ in self._queue:
            if ticket is not None:
                ticket.replies.extend([exc] * (ticket.expected - len(ticket.replies)))
        self._queue.clear()

    def _read_one(self) -> None:
        ticket, command, tag = self._queue[0]
        try:
            if self._reader is not None:
                reply: Any = self._reply()
            else:
                try:
                    reply = self._conn.read_response()
                except redis.ResponseError as exc:  # an error reply: the connection is fine
                    reply = exc
        except Exception as exc:  # the connection is gone (redis-py has closed it, or we do)
            self._broken(exc)
            raise
        self._queue.popleft()
        missing = isinstance(reply, redis.exceptions.NoScriptError)
        if missing:
            self._load = True
        if ticket is not None:
            ticket.replies.append(reply)
        elif missing and tag is not None:
            self._send([command], [(None, command, tag)])  # behind the prelude, sent with it
        elif isinstance(reply, Exception):
            if tag is not None and self._error is None:
                self._error = reply
        elif tag is not None:
            tag(reply)

    def _reply(self) -> Any:
        """The next reply (an error reply is its exception, returned); raises redis-py's errors."""
        reader = self._reader
        reply = reader.gets()
        while reply is False:
            sock = self._conn._sock
            if sock is None:
                raise redis.ConnectionError("Connection closed.")
            try:
                n = _receive(sock, self._buf)
            except TimeoutError as exc:  # socket.timeout: the client's socket_timeout
                raise redis.TimeoutError("Timeout reading from socket") from exc
            except OSError as exc:
                raise redis.ConnectionError(f"Error while reading from socket: {exc.args}") from exc
            if not n:
                raise redis.ConnectionError("Connection closed by server.")
            reader.feed(self._buf, 0, n)
            reply = reader.gets()
        return reply


def _send_all(conn: Any, data: bytes) -> None:
    """``data`` on redis-py's connection. A socket with a timeout is non-blocking underneath and
    Python polls it before each send, one more system call every time; here a plain socket is
    written directly first, and a send fits its buffer (all but a stalled Redis'). What does not
    fit, and any TLS socket, goes through redis-py, whose timeout then applies."""
    sock = conn._sock
    if type(sock) is not socket.socket:  # not connected yet (redis-py connects), or TLS
        conn.send_packed_command([data], check_health=False)
        return
    try:
        sent = os.write(sock.fileno(), data)
    except BlockingIOError:
        sent = 0
    except OSError as exc:  # a reset or closed connection: as redis-py reports it
        conn.disconnect()
        raise redis.ConnectionError(f"Error {exc.errno} while writing to socket. {exc.strerror}.") from exc
    if sent < len(data):
        conn.send_packed_command([data[sent:]], check_health=False)


def _receive(sock: socket.socket, buf: bytearray) -> int:
    """What the socket has, into ``buf`` (as ``recv_into``): a plain socket is read directly when it
    has a reply waiting (most often: the analysis worked while Redis answered), skipping the poll
    Python makes first on a socket with a timeout; when nothing is there yet, ``recv_into`` waits
    with that timeout."""
    if type(sock) is socket.socket:
        try:
            return os.readv(sock.fileno(), [buf])
        except BlockingIOError:
            pass
    return sock.recv_into(buf)


def _error(message: str) -> redis.ResponseError:
    """An error reply as redis-py raises it (a missing script is the one the channel acts on)."""
    if message.startswith("NOSCRIPT"):
        return redis.exceptions.NoScriptError(message.removeprefix("NOSCRIPT").lstrip())
    return redis.ResponseError(message)


_MAX_DUE = 512  # replies a channel lets wait before a write reads some

# Weak: a channel lives as long as an index uses it.
_SHARED: weakref.WeakValueDictionary[object, Channel] = weakref.WeakValueDictionary()
_SHARED_LOCK = threading.Lock()


def bulk(raw: bytes) -> bytes:
    """One argument in RESP."""
    return b"$%d\r\n%s\r\n" % (len(raw), raw)


def argument(a: object) -> bytes:
    """One argument of any type a command takes, in RESP (as redis-py encodes it)."""
    if isinstance(a, bytes):
        return bulk(a)
    if isinstance(a, str):
        return bulk(a.encode())
    return bulk(b"%d" % a if isinstance(a, int) else repr(a).encode())


def _pack(args: tuple[Any, ...]) -> bytes:
    """One command in RESP: what redis-py's packer makes, at a tenth of its cost for these
    arguments (mostly bytes)."""
    return b"".join([b"*%d\r\n" % len(args), *map(argument, args)])
