"""Telemetry adapters: source parsers, the collector's spool and tailer, the PostgreSQL store."""
