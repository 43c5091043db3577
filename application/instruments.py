"""The port through which use cases and adapters report TunePlane's own measurements (request
counts, pass durations, queue depths), and its no-op twin.

The application names what it measures (the constants below); which library records it, and how
it is exposed, is an adapter's business (``adapters/observability/prometheus.py``: Prometheus
metrics, one registry per process). Labels take bounded values only (a queue, a pool, an
outcome, a state): never a job, attempt, member, user or node id (docs/operations.md#metrics).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from typing import Protocol

# -- the API (entrypoints/api/instrumentation.py)
HTTP_REQUESTS = "tuneplane_api_requests_total"
HTTP_SECONDS = "tuneplane_api_request_duration_seconds"
# -- submissions (application/submissions.py)
PREVIEWS = "tuneplane_submissions_previews_total"
COMMITS = "tuneplane_submissions_commits_total"
# -- the scheduler (application/scheduler.py)
ADMISSION_SECONDS = "tuneplane_scheduler_pass_duration_seconds"
PENDING_JOBS = "tuneplane_scheduler_pending_jobs"
RESERVED_JOBS = "tuneplane_scheduler_reserved_jobs"
RESERVED_GPUS = "tuneplane_scheduler_reserved_gpus"
FREE_GPUS = "tuneplane_scheduler_free_gpus"
PLACEMENTS = "tuneplane_scheduler_placements_total"
# -- the gang coordinator (application/gang.py)
GANG_PHASE_SECONDS = "tuneplane_gang_phase_duration_seconds"
# -- the node gateway (adapters/grpc/node_gateway.py, application/node_control.py)
NODE_STREAMS = "tuneplane_node_gateway_streams"
NODE_HEARTBEATS = "tuneplane_node_gateway_heartbeats_total"
HEARTBEAT_FLUSH_SECONDS = "tuneplane_node_gateway_heartbeat_flush_seconds"
# -- a server process's event loop and collector (entrypoints/loop_watch.py)
LOOP_LAG_SECONDS = "tuneplane_event_loop_lag_seconds"
GC_PAUSE_SECONDS = "tuneplane_gc_pause_seconds"
# -- the node daemon (adapters/grpc/node_client.py, adapters/node/journal.py)
HEARTBEAT_RTT_SECONDS = "tuneplane_node_heartbeat_round_trip_seconds"
NODE_MEMBERS = "tuneplane_node_members"
JOURNAL_FSYNC_SECONDS = "tuneplane_node_journal_commit_seconds"
# -- the telemetry gateway (adapters/grpc/telemetry_gateway.py, metric_compaction.py)
POINTS_STORED = "tuneplane_telemetry_points_stored_total"
POINTS_DUPLICATE = "tuneplane_telemetry_points_duplicate_total"
BATCHES = "tuneplane_telemetry_batches_total"
BATCH_SECONDS = "tuneplane_telemetry_batch_duration_seconds"
COMPACTION_SECONDS = "tuneplane_telemetry_compaction_duration_seconds"
COMPACTED_BLOCKS = "tuneplane_telemetry_compacted_blocks_total"
# -- the collector (adapters/telemetry/collector.py)
SPOOL_RECORDS = "tuneplane_collector_spool_records"
SPOOL_BYTES = "tuneplane_collector_spool_bytes"
COLLECTOR_LAG_BYTES = "tuneplane_collector_lag_bytes"
COLLECTOR_MEMBERS = "tuneplane_collector_members"
COLLECTOR_DROPS = "tuneplane_collector_dropped_total"
COLLECTOR_SHIPPED = "tuneplane_collector_shipped_points_total"


class Instruments(Protocol):
    """Where measurements go. ``name`` is one of the constants above; ``labels`` are the
    bounded labels its definition declares (an adapter refuses others)."""

    def inc(self, name: str, amount: float = 1.0, **labels: str) -> None:
        """Add ``amount`` to a counter."""

    def observe(self, name: str, value: float, **labels: str) -> None:
        """Record one value (seconds, bytes) in a histogram."""

    def set(self, name: str, value: float, **labels: str) -> None:
        """Set a gauge."""

    def replace(self, name: str, values: Mapping[str, float]) -> None:
        """Set a gauge with one label to exactly ``values`` (label value → value): label
        values missing from ``values`` are removed (a queue deleted, a pool emptied)."""

    def timer(self, name: str, **labels: str) -> AbstractContextManager[None]:
        """Observe the seconds the ``with`` block took (on a monotonic clock) in a histogram."""


class NoInstruments:
    """Measures nothing: processes and tests built without instrumentation."""

    def inc(self, name: str, amount: float = 1.0, **labels: str) -> None:
        return None

    def observe(self, name: str, value: float, **labels: str) -> None:
        return None

    def set(self, name: str, value: float, **labels: str) -> None:
        return None

    def replace(self, name: str, values: Mapping[str, float]) -> None:
        return None

    def timer(self, name: str, **labels: str) -> AbstractContextManager[None]:
        return _nothing()


@contextmanager
def _nothing() -> Iterator[None]:
    yield


NO_INSTRUMENTS: Instruments = NoInstruments()
