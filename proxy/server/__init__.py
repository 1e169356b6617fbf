"""The sidecar: ASGI app, forwarding, analysis beside the request, metrics, configuration,
transforms and live lint rules. The only layer (with ``cli``) that speaks HTTP.
"""
