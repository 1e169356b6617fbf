"""The prefix index: recent prompts of a scope, found by block-chained hashes with an exact LCP.

``base`` holds what every backend shares (the ``PrefixIndex`` protocol, ``Match``, ``IndexStats``);
``memory`` is the default backend (a burst trie in ``trie``, the walk's per-sequence work in
``query``, eviction in ``lru``), ``redis`` a shared one for several replicas, ``resilient`` wraps a
shared backend so that an outage falls back to memory, and ``open_index`` builds one from a URL.
"""
