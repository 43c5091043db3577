"""Alembic migration scripts (a package so that setuptools ships them)."""
