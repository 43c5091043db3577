"""TunePlane's pure model: no I/O, no clock reads, no randomness; the standard library and
``packaging`` only (pyproject's import contracts list them, domain/ruff.toml bans the clock)."""
