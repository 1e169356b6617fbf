"""The one exception hierarchy of cachewarden; translated to exit codes / HTTP statuses at the edges.

CachewardenError
├── RequestError         a request body that cannot be read (bad JSON / UTF-8, wrong types, too deep)
├── ConfigError          a bad configuration or data file (model table, pricing, rules)
└── TokenizerError       a tokenizer that cannot be loaded offline
"""

from __future__ import annotations


class CachewardenError(Exception):
    """Base class: something cachewarden can explain to the user in one line."""


class RequestError(CachewardenError):
    """A request body that cannot be turned into a Prompt.

    ``path`` names where in the body the problem is (``messages[3].content``), when known.
    """

    def __init__(self, message: str, path: str | None = None) -> None:
        self.path = path
        super().__init__(f"{path}: {message}" if path else message)


class ConfigError(CachewardenError):
    """A configuration or data file that is missing or malformed."""


class TokenizerError(CachewardenError):
    """A tokenizer that cannot be loaded (missing rank file, bad tokenizer.json)."""
