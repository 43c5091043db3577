"""The Prepare order of one member placed on a node: what its daemon creates and, on Commit,
starts (image pinned by digest, command, environment with the rendezvous of its gang, limits,
GPUs, the Job Capsule or source archive)."""

from __future__ import annotations

from domain.capsule import DIGEST_ENV, ENTRY, IMAGE_ENV, RUNNER
from domain.node_messages import PrepareOrder
from domain.node_ports import NodeWork
from domain.rendezvous import ray_wrap, rendezvous_env
from domain.threads import thread_env


def prepare_order(work: NodeWork) -> PrepareOrder:
    spec, a, ref = work.spec, work.assignment, work.placed.ref
    env = dict(spec.env)
    env.update(thread_env(a.mcpu / 1000, max(1, len(a.gpus)), spec.env))
    env.update(
        TUNEPLANE_JOB_ID=work.placed.job_id,
        TUNEPLANE_ATTEMPT_ID=ref.attempt_id,
        TUNEPLANE_ATTEMPT=str(work.attempt),
        TUNEPLANE_MEMBER_INDEX=str(ref.index),
        TUNEPLANE_RUNTIME=spec.runtime.name,  # host processes find its environment by it
    )
    if work.members > 1 or spec.runtime.process_model in ("torch-process-group", "ray"):
        env.update(
            rendezvous_env(
                members=work.members,
                index=ref.index,
                master_addr=work.master_addr,
                master_port=work.master_port,
                gpus_per_member=len(a.gpus),
                process_model=spec.runtime.process_model,
                peers=work.peers,
            )
        )
    command = spec.command
    source = spec.source.digest if spec.source else None
    capsule = spec.capsule is not None
    if spec.capsule is not None:
        source = spec.capsule.blob
        env[DIGEST_ENV] = spec.capsule.digest
        env[IMAGE_ENV] = spec.runtime.digest  # the order's image, as the runner checks
    if spec.runtime.process_model == "ray":  # head (then the driver) or worker
        driver = ("/bin/sh", ENTRY) if capsule else command
        command = tuple(ray_wrap(list(driver), ref.index, work.master_addr, work.master_port))
        if capsule:
            command = ("/bin/sh", RUNNER, *command)  # the runner checks, then starts it
    elif capsule:
        command = ("/bin/sh", RUNNER)
    return PrepareOrder(
        ref=ref,
        node=work.placed.node,
        job_id=work.placed.job_id,
        image=spec.runtime.digest,
        command=command,
        env=env,
        cpus=a.mcpu / 1000,
        memory_mb=a.memory_mb,
        gpu_indices=a.gpus,
        source_digest=source,
        members=work.members,
        process_model=spec.runtime.process_model,
        check_port=work.master_port if ref.index == 0 and work.members > 1 else 0,
        capsule=capsule,
        attempt=work.attempt,
    )
