"""How many threads a member's numerical libraries start: one per CPU of its share.

OpenMP, OpenBLAS, MKL and numexpr start one thread per CPU *of the host* by default, whatever
share of it the member was given. A member limited to 2 CPUs on a 64-core host then runs 64
BLAS threads under a 2-CPU quota: they preempt one another and the quota throttles them (on a
loaded 2-core machine, a numpy member spent several times its useful CPU this way). Each backend
adds these variables to every member's environment at launch, sized from the member's CPUs
divided among its processes (one per GPU where the runtime starts one per GPU, as ``torchrun``
does; ``torchrun`` itself sets ``OMP_NUM_THREADS=1`` when it is unset). A variable the job's own
environment sets is left as the job set it. docs/backends.md#threads.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS")


def thread_env(cpus: float, processes: int, given: Mapping[str, str]) -> dict[str, str]:
    """The thread variables for a member of ``cpus`` CPUs running ``processes`` processes
    (at least one thread each), without those ``given`` already sets."""
    if not math.isfinite(cpus) or cpus <= 0:
        return {}  # no CPU limit known: the libraries' own defaults
    threads = str(max(1, math.floor(cpus / max(1, processes))))
    return {name: threads for name in THREAD_VARS if name not in given}
