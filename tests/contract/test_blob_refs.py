"""Contract: what refers to a blob (``uow.blob_refs``): a job of any state through its source
archive or Job Capsule, a preview until it expires, a published plugin's package; nothing
else."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from domain.capsule import CapsuleRef
from domain.lifecycle import JobState
from domain.submission import SourceRef
from domain.unit_of_work import UnitOfWorkFactory
from tests.contract.builders import T0, a_job, a_preview, a_spec
from tests.contract.test_plugins import a_plugin

pytestmark = pytest.mark.contract


def d(n: int) -> str:
    return f"sha256:{n:064x}"


async def test_jobs_live_previews_and_plugins_refer_to_their_blobs(
    uow_factory: UnitOfWorkFactory,
) -> None:
    with_capsule = a_spec(source=SourceRef(d(1), 10), capsule=CapsuleRef(d(90), d(2), 20))
    async with uow_factory() as uow:
        await uow.jobs.add(a_job(spec=with_capsule, state=JobState.SUCCEEDED))
        await uow.jobs.add(a_job(spec=a_spec(source=None)))  # no source: refers to nothing
        await uow.previews.add(a_preview(spec=a_spec(source=SourceRef(d(3), 1))))
        expired = a_preview(
            spec=a_spec(source=SourceRef(d(4), 1)), created_at=T0 - timedelta(hours=2)
        )
        await uow.previews.add(expired)
        await uow.plugins.add(replace(a_plugin("exact-match", "1.0.0"), blob=d(5)))
        await uow.commit()
    asked = [d(n) for n in (1, 2, 3, 4, 5, 6, 90)]
    async with uow_factory() as uow:
        assert await uow.blob_refs.referenced(asked, T0) == {d(1), d(2), d(3), d(5)}
        # the capsule's own digest (its manifest) is not a blob; an unasked blob is not answered
        assert await uow.blob_refs.referenced([d(2)], T0) == {d(2)}
        assert await uow.blob_refs.referenced([], T0) == set()
        later = T0 + timedelta(hours=2)  # the live preview expired too
        assert await uow.blob_refs.referenced(asked, later) == {d(1), d(2), d(5)}
