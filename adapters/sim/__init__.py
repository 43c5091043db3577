"""The simulator's adapters: production code that ``tp sim`` and the property tests compose
with the in-memory adapters (``adapters.memory``) and the real application code.

* ``clock``: a fake clock that moves only when told, and counting ids;
* ``backend``: an ExecutionBackend whose members run for a seeded duration on their reserved
  nodes, can be refused, and are ``unknown`` while their node is out of contact;
* ``faults``: a coordinator crash at a chosen point (before or after the k-th commit, after the
  k-th launch) through wrappers of the unit-of-work factory and of the backend;
* ``invariants``: the reservation invariants, checked from the store and the backends.
"""

from adapters.sim.backend import SimBackend
from adapters.sim.blobs import MemoryBlobStore
from adapters.sim.clock import CountingIds, SimClock
from adapters.sim.faults import Crash, CrashingBackend, CrashingUnitOfWork, CrashPlan, CrashPoint
from adapters.sim.invariants import Inspection, Violation, check_invariants, inspect

__all__ = [
    "CountingIds",
    "Crash",
    "CrashPlan",
    "CrashPoint",
    "CrashingBackend",
    "CrashingUnitOfWork",
    "Inspection",
    "MemoryBlobStore",
    "SimBackend",
    "SimClock",
    "Violation",
    "check_invariants",
    "inspect",
]
