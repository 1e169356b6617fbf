"""Adapters from a provider request body to a Prompt."""
