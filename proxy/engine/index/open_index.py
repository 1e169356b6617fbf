"""``open_index(url)``: the prefix index a proxy replica uses, chosen by URL.

* ``None``, ``""`` or ``memory://`` — ``MemoryIndex`` (one replica).
* ``redis://[:password@]host:port/db`` or ``rediss://…`` (TLS) — a ``RedisIndex`` shared by all
  replicas, wrapped in ``ResilientIndex`` with a local ``MemoryIndex``: the proxy keeps answering
  when Redis is away. Query parameters of redis-py apply (``socket_timeout=0.05`` …); ours:
  ``namespace=NAME`` (key prefix, default ``cachewarden``; replicas that share predictions must
  share it), ``retry=SECONDS`` (first reconnection delay, default 1) and ``cluster=1`` (the URL
  names one node of a Redis Cluster; every scope's keys live in one hash slot).

Nothing connects here: a replica that starts while Redis is down starts on its local index.
The ``redis`` package is only imported for a Redis URL (extra ``cachewarden[redis]``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypedDict, Unpack
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from .base import PrefixIndex
from .memory import MemoryIndex
from .resilient import ResilientIndex

__all__ = ["IndexCaps", "open_index"]

# A local Redis answers in well under a millisecond; past this, answer locally and count an outage.
DEFAULT_TIMEOUT_SECONDS = 0.05
_MEMORY = ("", "memory", "memory://")
_OURS = ("namespace", "retry", "cluster")


class IndexCaps(TypedDict, total=False):
    """``MemoryIndex``'s bounds."""

    block_size: int
    max_entries: int
    max_tokens: int
    max_age_seconds: float


def open_index(
    url: str | None,
    *,
    on_outage: Callable[[str], None] | None = None,
    secret: bytes = b"",
    expired_window_seconds: float = 3600.0,
    **caps: Unpack[IndexCaps],
) -> PrefixIndex:
    """The index for ``url``; ``caps`` are ``MemoryIndex``'s (``block_size``, ``max_entries``,
    ``max_tokens``, ``max_age_seconds``) and apply to the local index (``block_size`` and
    ``max_age_seconds`` to the shared one too). ``secret`` keys the hashes stored in Redis; all
    replicas must use the same one. Raises ``ValueError`` for an unusable URL."""
    if url is None or url.strip().lower() in _MEMORY:
        return MemoryIndex(**caps)
    parts = urlsplit(url.strip())
    if parts.scheme not in ("redis", "rediss"):
        raise ValueError(f"index URL {url!r}: expected memory:// or redis://host:port/db (rediss:// for TLS)")
    query = parse_qsl(parts.query, keep_blank_values=True)
    ours = {k: v for k, v in query if k in _OURS}
    # The index reads raw bytes; a decoding client would break every record.
    rest = [(k, v) for k, v in query if k not in _OURS and k != "decode_responses"]
    try:
        retry = float(ours.get("retry", "1"))
    except ValueError:
        raise ValueError(f"index URL {url!r}: retry must be a number of seconds") from None
    cluster = ours.get("cluster", "0").lower() in ("1", "true", "yes")
    try:
        import redis
        from redis.backoff import NoBackoff
        from redis.cluster import RedisCluster
        from redis.retry import Retry

        from .redis import RedisIndex
        from .redis_cluster import LazyClient
    except ImportError:
        raise ValueError(
            f"index URL {url!r} needs the redis package: pip install 'cachewarden[redis]'"
        ) from None
    address = urlunsplit(parts._replace(query=urlencode(rest)))
    # URL parameters win over these (redis-py merges them last).
    timeouts = {"socket_timeout": DEFAULT_TIMEOUT_SECONDS, "socket_connect_timeout": DEFAULT_TIMEOUT_SECONDS}
    client: Any
    if cluster:
        # One retry (a moved slot, a restarted node), then the error is ResilientIndex's to count.
        client = LazyClient(lambda: RedisCluster.from_url(address, retry=Retry(NoBackoff(), 1), **timeouts))
    else:
        client = redis.Redis.from_url(
            address,
            **timeouts,
            # One immediate retry on a dropped connection (a restarted server), none on a timeout:
            # a slow Redis must cost one timeout, not four with backoff (redis-py's default).
            retry=Retry(NoBackoff(), 1, supported_errors=(redis.ConnectionError,)),
        )
    primary = RedisIndex(
        client,
        # Redis' blocks are its own (one record a block; 512 by default): only an explicit one applies.
        **({"block_size": caps["block_size"]} if "block_size" in caps else {}),
        namespace=ours.get("namespace", "cachewarden"),
        secret=secret,
        expired_window_seconds=expired_window_seconds,
        max_age_seconds=caps.get("max_age_seconds", 24 * 3600),
        # Inserts and marks leave the analysis' path (redis_writes.py). On one Redis, reads follow
        # them on the same connection and see them without waiting; on a cluster a thread sends
        # them, and reads need not wait for it: the local index below holds this replica's
        # writes, and answers are merged.
        write_behind=True,
        read_own_writes=False,
    )
    return ResilientIndex(primary, MemoryIndex(**caps), on_outage=on_outage, retry_seconds=retry)
