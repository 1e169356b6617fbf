"""cachewarden's traffic engine: request adapters, tokenizers, prefix index, cache models, pricing.

Modules that do not speak HTTP import without FastAPI so that the linter and the offline commands
(``count``, ``diff``, ``replay``) can use them.
"""

__version__ = "0.1.0"
