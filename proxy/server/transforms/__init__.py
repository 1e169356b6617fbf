"""Transforms applied to a request body before forwarding: canonicalisation, optimisation, and the
rewriter that chains them for the ASGI app.
"""
