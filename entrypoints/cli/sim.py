"""`tp sim --scenario FILE --seed N`: the deterministic simulator (docs/simulator.md).

Runs locally, in-process: no server is needed or contacted.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, TextIO

from cyclopts import Parameter

from entrypoints.cli import errors, output


@contextlib.contextmanager
def _quiet_logs(verbose: bool) -> Iterator[None]:
    """The supervisor warns about every deferred launch; in a simulation that is noise unless
    asked for."""
    logger = logging.getLogger("tuneplane")
    level = logger.level
    if verbose:
        from entrypoints import logs

        logs.setup("sim", hooks=False)  # in the `tp` process: its hooks stay Python's
    else:
        logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def sim(
    *,
    scenario: Annotated[Path, Parameter(help="scenario file (TOML), e.g. deploy/sim/small.toml")],
    seed: Annotated[int, Parameter(help="seed of every random choice; same seed, same run")] = 1,
    steps: Annotated[
        int | None, Parameter(help="stop after this many steps (default: the scenario's)")
    ] = None,
    trace: Annotated[
        Path | None, Parameter(help="write the canonical trace, one JSON line per step")
    ] = None,
    explain: Annotated[
        int, Parameter(help="explain at most this many unfinished jobs at the end (`tp job why`)")
    ] = 20,
    json: Annotated[bool, Parameter(name="--json", help="print the summary as JSON")] = False,
    verbose: Annotated[bool, Parameter(help="show the control loop's log")] = False,
) -> int:
    """Run the real admission, reservation and launch code over in-memory adapters with a fake
    clock, seeded workload and faults; check the reservation invariants after every step; print
    a summary and the trace hash. Exit code 1 if an invariant is violated."""
    from domain.errors import InvalidInput
    from entrypoints.sim import InvariantViolated, run_scenario
    from entrypoints.sim_scenario import load_scenario

    if steps is not None and steps < 1:
        raise InvalidInput(
            f"--steps {steps} is not a number of steps", fix="give 1 or more", field="steps"
        )
    if explain < 0:
        raise InvalidInput(
            f"--explain {explain} is negative", fix="give 0 or more", field="explain"
        )
    loaded = load_scenario(scenario)
    sink: TextIO | None = None
    try:
        if trace is not None:
            try:
                sink = trace.open("w", encoding="utf-8")
            except OSError as exc:
                raise InvalidInput(
                    f"cannot write the trace to {trace}: {exc}",
                    fix="give a writable path",
                    field="trace",
                ) from None
        write = (lambda line: print(line, file=sink)) if sink is not None else None
        with _quiet_logs(verbose):
            summary = asyncio.run(
                run_scenario(loaded, seed, steps=steps, trace=write, explain=explain)
            )
    except InvariantViolated as exc:
        output.err.print(f"error: {exc}", markup=False)
        for v in exc.violations[1:]:
            output.err.print(f"  also: {v}", markup=False)
        hint = f" (the trace up to it is in {trace})" if trace else "; --trace FILE keeps the steps"
        output.err.print(
            "fix: this is a bug in the scheduling core: reproduce it with "
            f"`tp sim --scenario {scenario} --seed {seed}`{hint}",
            markup=False,
        )
        return errors.FAILED
    finally:
        if sink is not None:
            sink.close()
    if json:
        output.print_json(summary.to_dict())
    else:
        for line in summary.lines():
            output.out.print(line, markup=False)
    return errors.OK
