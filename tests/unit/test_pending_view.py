"""The scheduler's kept view in queue order (application/pending_view.py): after any mix of
puts (new jobs, jobs changed in place), drops and a queue's priority changing, it lists
exactly the jobs queue_order would, in the same order."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest

from application.pending_view import PendingView
from domain.admission import PendingJob, QueueView, queue_order
from domain.fleet import Queue

pytestmark = pytest.mark.unit
T0 = datetime(2026, 12, 6, tzinfo=UTC)


def queues(high: int) -> dict[str, QueueView]:
    return {
        "default": QueueView(Queue("default", "t"), 0, 0),
        "high": QueueView(Queue("high", "t", priority=high), 0, 0),
    }


def a_job(rng: random.Random, i: int) -> PendingJob:
    queue = rng.choice(["default", "high", "gone"])  # "gone": a queue no longer configured
    at = T0 + timedelta(seconds=rng.randrange(50))  # ties on time: the id decides
    return PendingJob(f"job-{i:04d}", queue, at, (), attempts=rng.randrange(3))


@pytest.mark.parametrize("seed", range(5))
def test_the_view_stays_in_queue_order_through_changes(seed: int) -> None:
    rng = random.Random(seed)
    view, jobs = PendingView(), {}
    first = [a_job(rng, i) for i in range(300)]
    view.replace_all(first)
    jobs = {j.id: j for j in first}
    for step in range(40):
        prio = rng.choice([-5, 0, 5]) if step % 10 == 0 else 5
        for _ in range(rng.randrange(20)):
            job = a_job(rng, rng.randrange(400))  # new, or an existing id changed in place
            view.put(job)
            jobs[job.id] = job
        for job_id in rng.sample(sorted(jobs), k=min(len(jobs), rng.randrange(15))):
            view.drop(job_id)
            del jobs[job_id]
        view.drop("job-missing")  # dropping what is not there changes nothing
        expected = queue_order(list(jobs.values()), queues(prio))
        assert list(view.ordered(queues(prio))) == expected
        assert len(view) == len(jobs)


def test_a_priority_change_reorders_the_kept_jobs() -> None:
    early = PendingJob("a", "default", T0, ())
    late = PendingJob("b", "high", T0 + timedelta(seconds=1), ())
    view = PendingView()
    view.replace_all([late, early])
    assert [j.id for j in view.ordered(queues(0))] == ["a", "b"]  # FIFO at equal priority
    assert [j.id for j in view.ordered(queues(5))] == ["b", "a"]  # high first now
    view.put(PendingJob("b", "default", T0 + timedelta(seconds=1), (), attempts=1))  # moved
    assert [j.id for j in view.ordered(queues(5))] == ["a", "b"]
