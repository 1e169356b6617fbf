"""Captured traffic into a report: log formats, the replay through the engine, text and HTML reports."""
