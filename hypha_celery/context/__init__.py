"""context (issue 26): being built."""

__all__: list[str] = []
