"""docs/backends.md's capability table: well formed, and its storage rows agree with what each
backend adapter declares (the e2e parity suite checks the behaviour rows on real backends)."""

from __future__ import annotations

import pytest

from adapters.docker.backend import DockerBackend
from adapters.kubernetes.backend import KubernetesBackend
from adapters.node.backend import NodeBackend
from adapters.slurm.backend import SlurmBackend
from domain.backend_ports import Backend
from entrypoints.cli.job_metrics import NO_METRICS
from tests.support.capabilities import BACKENDS, DOC, capabilities, outcomes

pytestmark = pytest.mark.unit

ADAPTERS: dict[str, type[Backend]] = {
    "local": DockerBackend,
    "node": NodeBackend,
    "slurm": SlurmBackend,
    "kubernetes": KubernetesBackend,
}


def test_every_backend_has_a_cell_in_every_row() -> None:
    table = capabilities()
    assert {"metrics", "member_logs", "artifacts", "failed_exit", "stop", "outside_cancel"} <= set(
        table
    )
    for name, cells in table.items():
        assert tuple(cells) == BACKENDS, name


def test_storage_rows_match_the_adapters() -> None:
    table = capabilities()
    for backend, cls in ADAPTERS.items():
        storage = cls.storage
        for row in ("capsule", "shared_outputs"):
            said = table[row][backend] == "yes"
            assert said == getattr(storage, row), (
                f"{DOC}: {row} on {backend} says {table[row][backend]}, "
                f"{cls.__name__}.storage.{row} is {getattr(storage, row)}"
            )


def test_n_a_only_where_metrics_are_missing() -> None:
    table = capabilities()
    for backend in BACKENDS:
        if table["durable_spool"][backend] == "n/a":
            assert table["metrics"][backend] == "no", backend


def test_every_behaviour_row_has_an_outcome() -> None:
    found = outcomes()
    assert set(found) == {
        "failed exit",
        "failed exit: the others",
        "killed by a signal",
        "stop",
        "outside cancellation",
    }


@pytest.mark.parametrize(
    "text, problem",
    [
        ("<!-- capability table -->\n| a | b |\n|---|\n| `x` | yes | maybe | no | no |\n", "maybe"),
        ("<!-- capability table -->\n| a | b |\n|---|\n| x | yes | yes | no | no |\n", "backticks"),
        ("nothing here\n", "no '<!-- capability table'"),
        (
            "<!-- capability table -->\n| a |\n|---|\n| `x` | yes | yes | no | no |\n"
            "| `x` | yes | yes | no | no |\n",
            "twice",
        ),
    ],
)
def test_a_malformed_table_is_refused_naming_the_problem(text: str, problem: str) -> None:
    with pytest.raises(AssertionError, match=problem):
        capabilities(text)


def test_an_outcome_reason_must_be_fragments_in_backticks() -> None:
    head = "<!-- outcome table -->\n| s |\n|---|\n"
    good = head + "| `x` | failed | every | failed | 3 | `a` or `b` |\n"
    assert outcomes(good)["x"].reasons == ("a", "b")
    assert outcomes(head + '| `x` | failed | 0 | failed | any | `""` |\n')["x"].reasons == ("",)
    with pytest.raises(AssertionError, match="is not `fragment`"):
        outcomes(head + "| `x` | failed | 0 | failed | any | exited |\n")


def test_tp_job_metrics_says_which_backends_collect_none() -> None:
    table = capabilities()["metrics"]
    assert {b for b, cell in table.items() if cell == "no"} == NO_METRICS, table


async def test_host_process_nodes_pin_runtimes_without_any_engine() -> None:
    from domain.catalog import RuntimeSpec

    backend = NodeBackend(None, host_processes=True)
    spec = RuntimeSpec("busybox", "localhost/tuneplane/runtime-busybox:1", None, "single-process")
    pin = await backend.pin(spec)
    assert pin.digest.startswith("sha256:") and pin.packages == {}
    assert pin == await backend.pin(spec)  # the same name pins the same way every time
    registered = RuntimeSpec("t", "host/t:1", "3.12", "single-process", digest="sha256:" + "a" * 64)
    assert (await backend.pin(registered)).digest == "sha256:" + "a" * 64
