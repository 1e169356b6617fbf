"""Why a request missed: attribution by reason family, volatile-value detectors, text diff helpers.

Above ``engine``, below ``server`` and ``replay``; no HTTP.
"""
