"""Alembic revisions, one file per revision, named ``NNNN_<slug>.py`` with revision ``NNNN``."""
