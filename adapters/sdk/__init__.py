"""Workload-side helpers, importable inside training containers (standard library only)."""
