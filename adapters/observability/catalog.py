"""Every metric TunePlane's processes expose: kind, help and its (bounded) labels. The one list
docs/operations.md#metrics describes and deploy/observability/ queries
(tests/unit/test_observability.py keeps the three in step)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from application import instruments as i

Kind = Literal["counter", "gauge", "histogram"]

# seconds: 1 ms to 1 min (requests, passes, batches); gang phases run to 10 min
FAST = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0, 60.0)
# a loop's lag and a collector's pause: finer where a 100 ms round-trip goal is judged
PAUSES = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.25, 0.5, 1.0, 2.5)
SLOW = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)


@dataclass(frozen=True, slots=True)
class Metric:
    name: str
    kind: Kind
    help: str
    labels: tuple[str, ...] = ()
    buckets: tuple[float, ...] = FAST
    process: str = ""  # the process that exposes it (api, node-gateway, ...)


CATALOG: tuple[Metric, ...] = (
    Metric(i.HTTP_REQUESTS, "counter", "HTTP requests answered, by route template, method and "
           "status class (2xx, 4xx, 5xx)", ("route", "method", "status"), process="api"),
    Metric(i.HTTP_SECONDS, "histogram", "Seconds from a request's arrival to its answer's "
           "start (a streamed answer's body is not counted), by route template", ("route",),
           process="api"),
    Metric(i.PREVIEWS, "counter", "Previews stored (`tp submit --preview`)", process="api"),
    Metric(i.COMMITS, "counter", "Commits answered: created (a new job) or replayed (the same "
           "retry key again)", ("outcome",), process="api"),
    Metric(i.ADMISSION_SECONDS, "histogram", "Seconds one scheduling pass took (snapshot, "
           "decisions, reservations stored)", process="api"),
    Metric(i.PLACEMENTS, "counter", "Placements stored (reserved) or lost to a race, per queue",
           ("queue", "outcome"), process="api"),
    Metric(i.PENDING_JOBS, "gauge", "Jobs waiting for admission at the last pass, per queue",
           ("queue",), process="api"),
    Metric(i.RESERVED_JOBS, "gauge", "Jobs holding a reservation at the last pass, per queue",
           ("queue",), process="api"),
    Metric(i.RESERVED_GPUS, "gauge", "GPUs reserved at the last pass, per queue", ("queue",),
           process="api"),
    Metric(i.FREE_GPUS, "gauge", "GPUs free on nodes that may take work at the last pass, "
           "per pool", ("pool",), process="api"),
    Metric(i.GANG_PHASE_SECONDS, "histogram", "Seconds a gang launch spent in a phase: prepare "
           "(begun to decided; outcome commit or abort), commit (decided to members starting)",
           ("phase", "outcome"), SLOW, process="api"),
    Metric(i.NODE_STREAMS, "gauge", "Node control streams connected to this gateway",
           process="node-gateway"),
    Metric(i.NODE_HEARTBEATS, "counter", "Heartbeats received from nodes",
           process="node-gateway"),
    Metric(i.HEARTBEAT_FLUSH_SECONDS, "histogram", "Seconds writing a round of heartbeats to "
           "PostgreSQL took (the gateway's part of a heartbeat's trip)", process="node-gateway"),
    Metric(i.LOOP_LAG_SECONDS, "histogram", "Seconds the event loop woke late from a 0.1 s "
           "sleep (what held it: a long step, a collection, no CPU): every message answered "
           "waits for it", buckets=PAUSES, process="node-gateway"),
    Metric(i.GC_PAUSE_SECONDS, "histogram", "Seconds one collection of the cycle collector "
           "stopped the process, by generation (0, 1, 2: 2 walks what is not frozen)",
           ("generation",), PAUSES, process="node-gateway"),
    Metric(i.HEARTBEAT_RTT_SECONDS, "histogram", "Seconds from a heartbeat sent to its "
           "acknowledgement received, on the node's clock", process="node"),
    Metric(i.NODE_MEMBERS, "gauge", "Members in this node's journal, by state", ("state",),
           process="node"),
    Metric(i.JOURNAL_FSYNC_SECONDS, "histogram", "Seconds one durable journal transaction took "
           "(SQLite commit with synchronous=FULL: its fsync)", process="node"),
    Metric(i.POINTS_STORED, "counter", "Metric points stored", process="telemetry-gateway"),
    Metric(i.POINTS_DUPLICATE, "counter", "Metric points refused as duplicates (a collector's "
           "resend of what was stored)", process="telemetry-gateway"),
    Metric(i.BATCHES, "counter", "Batches answered: stored, or refused (bad token, bad scope, "
           "bad batch)", ("outcome",), process="telemetry-gateway"),
    Metric(i.BATCH_SECONDS, "histogram", "Seconds from a batch received to its acknowledgement",
           process="telemetry-gateway"),
    Metric(i.COMPACTION_SECONDS, "histogram", "Seconds one compaction pass of small raw-point "
           "blocks took", process="telemetry-gateway"),
    Metric(i.COMPACTED_BLOCKS, "counter", "Raw-point blocks compaction removed (merged into "
           "fewer)", process="telemetry-gateway"),
    Metric(i.SPOOL_RECORDS, "gauge", "Records spooled and not yet acknowledged by the gateway",
           process="collector"),
    Metric(i.SPOOL_BYTES, "gauge", "Bytes the spool holds (reading pauses at --max-spool-mb)",
           process="collector"),
    Metric(i.COLLECTOR_LAG_BYTES, "gauge", "Bytes written to members' metric files and not "
           "yet read by the collector", process="collector"),
    Metric(i.COLLECTOR_MEMBERS, "gauge", "Members the collector follows", process="collector"),
    Metric(i.COLLECTOR_DROPS, "counter", "Records the collector could not keep: corrupt "
           "(unparsable) or dropped (a file truncated or gone before it was read)", ("reason",),
           process="collector"),
    Metric(i.COLLECTOR_SHIPPED, "counter", "Points the telemetry gateway acknowledged",
           process="collector"),
)  # fmt: skip

BY_NAME = {m.name: m for m in CATALOG}
