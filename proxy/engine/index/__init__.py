"""The prefix index: recent prompts of a scope, found by block-chained hashes with an exact LCP.

``memory`` is the default backend, ``redis`` a shared one for several replicas, ``resilient`` wraps
a shared backend so an outage falls back to memory, and ``open_index`` builds one from a URL.
"""
