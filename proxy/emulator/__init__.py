"""A local OpenAI / Anthropic emulator with a reference prefix cache (the upstream for tests and the demo)."""
