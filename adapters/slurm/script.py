"""What one TunePlane attempt becomes on Slurm: the files of its directory in the shared
directory and the batch script. Pure: the backend writes what this module builds.

One Slurm job per attempt; every member is one task of one ``srun`` step, one task per node
(a role per component of a heterogeneous job when the job has several roles). The attempt's
directory (``<shared dir>/<attempt id>/``, on a filesystem every Slurm node and the control
plane see) holds:

* ``capsule.tar``: the Job Capsule, byte for byte the blob of ``spec.capsule.blob``: the batch
  script checks its sha256 before unpacking it to ``capsule/``; the runner then checks the
  manifest against the committed digest (docs/capsule.md), as in a container;
* ``source.tar.gz``: a job without a capsule gets its source archive instead;
* ``member.sh``: the per-task wrapper (rendezvous environment from ``SLURM_*``, log, exit file);
* ``batch.log`` (the batch step), ``member-<rank>.log`` and ``member-<rank>.exit`` (written by
  the tasks), ``released-<rank>`` (written by the backend when TunePlane forgets the member).

Members run as host processes under ``srun``: no container runtime is used. The runner expects
the capsule at /tuneplane/capsule and the workspace at /workspace, so each task enters a private
mount namespace (``unshare -m``; ``-r`` too when not root) and bind-mounts its directories
there. A site with a container runtime would use pyxis/enroot (``srun --container-image``) or
Apptainer (``apptainer exec --bind``) with the same binds (docs/slurm.md).
"""

from __future__ import annotations

import math
import shlex

from adapters.slurm.collector import SlurmCollector, end_lines, start_lines
from adapters.slurm.versions import JobRequest
from domain.artifacts import OUTPUT_ENV
from domain.capsule import CAPSULE_DIR, DIGEST_ENV, ENTRY, IMAGE_ENV
from domain.checkpoints import CHECKPOINT_ENV, RESUME_ENV
from domain.ports import LaunchRequest
from domain.rendezvous import RAY
from domain.threads import thread_env

WORKSPACE = "/workspace"

# Rank 0 of a Ray gang: the head in the foreground of this task (``--block``: its processes
# are this task's, stopped with it, never left behind on the node), then the driver; when the
# driver ends, or the task is stopped, the head is stopped too.
RAY_HEAD = r"""ray start --head --port="$MASTER_PORT" --block & head=$!
trap 'kill -TERM $head ${drv:-} 2>/dev/null; wait; exit 143' TERM INT
up=
for _ in $(seq 240); do
    kill -0 $head 2>/dev/null || break
    ray status --address="$MASTER_ADDR:$MASTER_PORT" >/dev/null 2>&1 && { up=1; break; }
    sleep 0.5
done
[ -n "$up" ] || { echo "tuneplane-slurm: the Ray head did not start" >&2; kill $head; exit 97; }
export RAY_ADDRESS="$MASTER_ADDR:$MASTER_PORT"  # the driver's ray.init() joins this head
"$@" & drv=$!
wait $drv; rc=$?
kill -TERM $head 2>/dev/null; wait $head
exit $rc
"""
JOB_PREFIX = "tp-"
COMMENT_PREFIX = "tuneplane "
CAPSULE_CHECK_FAILED = 91  # the runner's "manifest is not the one committed"
RUNTIME_MISSING = 93  # the runner's "the runtime does not satisfy the runtime contract"


def job_name(attempt_id: str) -> str:
    """The Slurm job name of an attempt: what a retried launch looks up before submitting."""
    return f"{JOB_PREFIX}{attempt_id}"


def comment(attempt_id: str) -> str:
    """``tuneplane attempt=<attempt id>``: what marks a Slurm job as an attempt's."""
    return f"{COMMENT_PREFIX}attempt={attempt_id}"


def parse_comment(text: str) -> str | None:
    """The attempt id of a TunePlane job's comment, else None."""
    if not text.startswith(COMMENT_PREFIX + "attempt="):
        return None
    attempt = text.removeprefix(COMMENT_PREFIX + "attempt=").strip()
    return attempt if attempt and "/" not in attempt and " " not in attempt else None


def runtime_lines(runtime: str, directory: str | None) -> str:
    """Put the node's environment of the job's runtime first on ``PATH`` (the site's
    ``TUNEPLANE_SLURM_RUNTIMES``: the runtime's ``python3`` and its tools), as an image's
    environment is in a container; the job's own ``env`` comes after it and may still set
    ``PATH``. A node without that directory fails the member as a runtime that does not
    satisfy the contract (93), naming the directory, before anything starts."""
    if directory is None:
        return ""
    d = shlex.quote(directory)
    said = shlex.quote(f"tuneplane-slurm: runtime {runtime}'s directory {directory} is not on")
    return (
        f"if [ ! -d {d} ]; then\n"
        f'  echo {said} "node ${{SLURMD_NODENAME:-$(hostname)}}'
        ' (TUNEPLANE_SLURM_RUNTIMES; docs/slurm.md)"\n'
        f'  echo {RUNTIME_MISSING} >"$D/member-$R.exit.tmp" && mv "$D/member-$R.exit.tmp"'
        ' "$D/member-$R.exit"\n'
        f"  exit {RUNTIME_MISSING}\nfi\n"
        f'export PATH={d}:"$PATH"\n'
    )


def checkpoint_env(request: LaunchRequest) -> dict[str, str]:
    """``TUNEPLANE_CHECKPOINT_DIR`` (the attempt's directory in the shared directory) and
    ``TUNEPLANE_RESUME_FROM`` (the checkpoint it resumes from, in place in an earlier attempt's
    directory, verified by the control plane; empty when none), given the directory."""
    if request.checkpoints is None:
        return {}
    resume = ""
    if request.resume_root and request.resume:
        resume = f"{request.resume_root}/{request.resume}"
    return {CHECKPOINT_ENV: request.checkpoints, RESUME_ENV: resume}


def member_script(
    request: LaunchRequest,
    directory: str,
    master_port_base: int,
    collector: SlurmCollector | None = None,
    runtime_dir: str | None = None,
    outputs_root: str | None = None,
) -> str:
    """The wrapper every task runs (``bash member.sh``): its rank is ``SLURM_PROCID``. Every
    member gets ``TUNEPLANE_METRICS_DIR``; with ``collector``, a collector runs beside it
    (:mod:`adapters.slurm.collector`); with ``runtime_dir``, the node's environment of the
    job's runtime comes first on ``PATH`` (:func:`runtime_lines`); with the request's
    checkpoint directory, the checkpoint variables (:func:`checkpoint_env`); with ``outputs_root``,
    ``TUNEPLANE_OUTPUT_DIR`` is the rank's ``<root>/<job>/<attempt>/<rank>`` (recorded as
    artifacts when the member succeeds: ``adapters.outputs.FilesystemOutputs``' layout)."""
    spec = request.spec
    gpus = max((r.resources.gpus for r in spec.roles), default=0)
    env = {
        **spec.env,
        **thread_env(spec.resources.cpus, gpus, spec.env),
        "TUNEPLANE_JOB_ID": request.job_id,
        "TUNEPLANE_ATTEMPT_ID": request.attempt_id,
        "TUNEPLANE_ATTEMPT": str(request.attempt),
        **checkpoint_env(request),
    }
    exports = runtime_lines(spec.runtime.name, runtime_dir)
    exports += "".join(f"export {k}={shlex.quote(v)}\n" for k, v in sorted(env.items()))
    if outputs_root is not None:
        where = shlex.quote(f"{outputs_root}/{request.job_id}/{request.attempt_id}/")
        exports += f'export {OUTPUT_ENV}={where}"$R"; mkdir -p "${OUTPUT_ENV}"\n'
    if spec.capsule is not None:
        exports += f"export {DIGEST_ENV}={shlex.quote(spec.capsule.digest)}\n"
        exports += f"export {IMAGE_ENV}={shlex.quote(spec.runtime.digest)}\n"
        run = (
            f"mkdir -p {CAPSULE_DIR} {WORKSPACE} 2>/dev/null\n"
            'U="unshare -m --propagation private"; [ "$(id -u)" = 0 ] || U="$U -r"\n'
            '$U /bin/sh -c \'mount --bind "$1/capsule/tuneplane/capsule" ' + CAPSULE_DIR + " &&"
            ' mount --bind "$2" '
            + WORKSPACE
            + " && shift 2 && exec /bin/sh "
            + CAPSULE_DIR
            + '/runner.sh "$@"\''
            + ' member "$D" "$W" "${START[@]}" &\n'
        )
    else:
        run = (
            'cd "$W" || { echo "tuneplane-slurm: cannot enter $W"; exit 94; }\n'
            'if [ -f "$D/source.tar.gz" ]; then tar -xzf "$D/source.tar.gz" -C "$W" 2>/dev/null'
            ' || tar -xf "$D/source.tar.gz" -C "$W" || exit 94; fi\n'
            '"${START[@]}" &\n'
        )
    # what the task starts: the command; through the runner when there is a capsule (then
    # START holds what the runner starts once its checks passed: nothing but for Ray)
    command = " ".join(shlex.quote(a) for a in spec.command)
    driver = f"/bin/sh {ENTRY}" if spec.capsule is not None else command
    if spec.runtime.process_model == RAY:  # head then the driver on rank 0, workers elsewhere
        start = (
            'if [ "$RANK" = 0 ]; then export TUNEPLANE_RAY_HEAD=1\n'
            "  START=(bash -c " + shlex.quote(RAY_HEAD) + " ray-head " + driver + ")\n"
            'else export RAY_ADDRESS="$MASTER_ADDR:$MASTER_PORT"\n'
            "  START=(sh -c 'exec ray start --address=\"$RAY_ADDRESS\" --block')\nfi\n"
        )
    elif spec.capsule is not None:
        start = "START=()\n"
    else:
        start = f"START=({command})\n"
    return (
        "#!/bin/bash\n"
        f"# TunePlane attempt {request.attempt_id}: one member per task (docs/slurm.md)\n"
        f"D={shlex.quote(directory)}\n"
        "R=${SLURM_PROCID:?not in an srun step}\n"
        'W="$D/workspace-$R"; mkdir -p "$W"\n'
        'exec >"$D/member-$R.log" 2>&1 </dev/null\n'
        + exports
        + "export RANK=$R TUNEPLANE_MEMBER_INDEX=$R NODE_RANK=$R LOCAL_RANK=0\n"
        f"export WORLD_SIZE={spec.members} NNODES={spec.members}\n"
        # member 0 runs on the batch host, the node whose address srun was launched from
        "export MASTER_ADDR=${TUNEPLANE_MASTER_ADDR:-${SLURM_LAUNCH_NODE_IPADDR:-127.0.0.1}}\n"
        f"export MASTER_PORT=$(( {master_port_base} + ${{SLURM_JOB_ID:-0}} % 1000 ))\n"
        f"export NPROC_PER_NODE={max(gpus, 1)}\n"
        'export TUNEPLANE_RENDEZVOUS="$MASTER_ADDR:$MASTER_PORT"\n'
        + start_lines(collector, request.attempt_id)
        + start
        # stopped before the command started: never start it; after: pass the signal on
        + "child=\n"
        + "trap 'if [ -n \"$child\" ]; then kill -TERM $child 2>/dev/null; else exit 143; fi'"
        " TERM INT\n" + run + "child=$!\n"
        "wait $child; rc=$?\n"
        "while kill -0 $child 2>/dev/null; do wait $child; rc=$?; done\n"
        'echo $rc >"$D/member-$R.exit.tmp" && mv "$D/member-$R.exit.tmp" "$D/member-$R.exit"\n'
        + end_lines(collector)
        + "exit $rc\n"
    )


def batch_script(request: LaunchRequest, directory: str) -> str:
    """The batch script: check and unpack the capsule, then one ``srun`` step, one task per
    node (across every component of a heterogeneous job)."""
    spec = request.spec
    d = shlex.quote(directory)
    lines = [
        "#!/bin/bash",
        f"# TunePlane attempt {request.attempt_id} (docs/slurm.md)",
        f"D={d}",
        'rm -f "$D"/member-*.exit  # a requeued job starts afresh',
    ]
    if spec.capsule is not None:
        want = spec.capsule.blob.removeprefix("sha256:")
        lines += [
            f"want={want}",
            'got=$(sha256sum "$D/capsule.tar" 2>/dev/null | cut -d" " -f1)',
            'if [ "$got" != "$want" ]; then',
            '  echo "tuneplane-slurm: $D/capsule.tar has sha256 ${got:-(unreadable)},'
            ' not the committed blob $want" >&2',
            f"  for r in $(seq 0 {spec.members - 1}); do echo {CAPSULE_CHECK_FAILED}"
            ' >"$D/member-$r.exit"; done',
            f"  exit {CAPSULE_CHECK_FAILED}",
            "fi",
            'rm -rf "$D/capsule" && mkdir -p "$D/capsule" && tar -xf "$D/capsule.tar" -C'
            ' "$D/capsule" || exit 91',
        ]
    # one step, one task per node; with several roles, across the components of the
    # heterogeneous job (ranks in role order: SLURM_PROCID counts across components)
    step = " : ".join(
        (f"--het-group={i} " if len(spec.roles) > 1 else "")
        + f'-N{r.members} -n{r.members} --ntasks-per-node=1 bash "$D/member.sh"'
        for i, r in enumerate(spec.roles)
    )
    lines += [f"srun --kill-on-bad-exit=1 {step}", "exit $?"]
    return "\n".join(lines) + "\n"


def job_parts(
    request: LaunchRequest,
    directory: str,
    partition_of: dict[str, str],
    environment: dict[str, str],
    gres_name: str = "gpu",
) -> list[JobRequest]:
    """The Slurm job's components: one per role when there are several (a heterogeneous job,
    each on its pool's partition), else one."""
    spec = request.spec
    roles = spec.roles
    parts = []
    for i, role in enumerate(roles):
        r = role.resources
        parts.append(
            JobRequest(
                name=job_name(request.attempt_id),
                comment=comment(request.attempt_id) if i == 0 else "",
                nodes=role.members,
                cwd=directory,
                stdout=f"{directory}/batch.log",
                environment=environment,
                partition=partition_of.get(role.pool),
                cpus_per_task=max(1, math.ceil(r.cpus)),
                memory_mb_per_node=r.memory_mb,
                gpus_per_node=r.gpus,
                gres_name=gres_name,
            )
        )
    return parts
