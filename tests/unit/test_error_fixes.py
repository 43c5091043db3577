"""An error's fix is printed once, whatever path it took to the operator's screen: the CLI's
renderer, the process entrypoints (gateways, node daemon, collector), problem+json, and the gRPC
status text between a gateway and its clients (issue 18, defect 14: enrollment and telemetry
errors printed "(fix: …) (fix: …)")."""

from __future__ import annotations

import json

import pytest
from grpclib import GRPCError, Status

import adapters.grpc.node_client as node_client
import entrypoints.cli.main  # noqa: F401  (imports every error class the CLI knows)
from adapters.grpc.errors import from_grpc, grpc_error, split_fix
from domain.catalog import check_name
from domain.errors import InvalidInput, TunePlaneError, Unauthenticated
from entrypoints.cli.errors import from_problem, render

pytestmark = pytest.mark.unit

FIX = "create one with `tp node token create --pool POOL`"


def _every_error_class() -> list[type[TunePlaneError]]:
    out, todo = [], [TunePlaneError]
    while todo:
        cls = todo.pop()
        out.append(cls)
        todo.extend(cls.__subclasses__())
    return sorted(set(out), key=lambda c: c.__qualname__)


def _new(cls: type[TunePlaneError], message: str, fix: str) -> TunePlaneError:
    try:
        return cls(message, fix=fix)
    except TypeError:  # a subclass with its own constructor
        pytest.skip(f"{cls.__qualname__} takes other arguments")


@pytest.mark.parametrize("cls", _every_error_class(), ids=lambda c: c.__qualname__)
def test_every_error_shows_its_fix_once_on_every_path(cls: type[TunePlaneError]) -> None:
    exc = _new(cls, "the join token is unknown", FIX)
    assert render(exc).count(FIX) == 1, render(exc)
    assert str(exc).count(FIX) == 1, str(exc)
    # re-wrapped with its own str() (the defect), once or twice
    wrapped = _new(cls, f"enrollment refused: {exc}", exc.fix)
    twice = _new(cls, f"the daemon stopped: {wrapped} (fix: {FIX})", exc.fix)
    for e in (wrapped, twice):
        assert render(e).count(FIX) == 1, render(e)
        assert str(e).count(FIX) == 1, str(e)
    assert twice.message == "the daemon stopped: enrollment refused: the join token is unknown"
    # over gRPC: the gateway's status text, then the client's error (which has its own fix)
    status = grpc_error(exc)
    assert status.message is not None and status.message.count(FIX) == 1, status.message
    back = from_grpc(status, "enrollment refused", fix="a fix of the client's own")
    assert render(back).count(FIX) == 1 and "of the client's own" not in render(back)
    assert back.message == "enrollment refused: the join token is unknown"
    # and back over problem+json, as the HTTP API sends it
    body = json.dumps({"detail": str(exc), "fix": exc.fix}).encode()
    assert render(from_problem(400, "application/problem+json", body)).count(FIX) == 1


def test_the_node_daemon_prints_the_gateways_enrollment_refusal_with_one_fix() -> None:
    """The path the issue saw: the gateway refuses the join token, the daemon wraps the refusal
    and `tp node run` prints it (entrypoints.node_daemon.run_daemon prints ``render``)."""
    refused = grpc_error(Unauthenticated("the join token is unknown", fix=FIX))
    error = node_client._grpc_error(refused, "enrollment refused")
    assert isinstance(error, TunePlaneError)  # from_grpc's: the domain error `tp` renders
    printed = render(error)
    assert printed == f"error: enrollment refused: the join token is unknown\nfix: {FIX}"
    # a status without a fix keeps the client's own
    bare = GRPCError(Status.UNAUTHENTICATED, "the credential was revoked")
    error = node_client._grpc_error(bare, "the gateway closed the control stream")
    assert isinstance(error, TunePlaneError)
    printed = render(error)
    assert printed.count("fix:") == 1 and "tp node token create" in printed


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("plain", ("plain", "")),
        (f"msg (fix: {FIX})", ("msg", FIX)),
        ("a (b) (fix: c (d))", ("a (b)", "c (d)")),
        (" (fix: x)", (" (fix: x)", "")),  # no message: left alone
        ("msg (fix: unterminated", ("msg (fix: unterminated", "")),
        ("", ("", "")),
    ],
)
def test_split_fix(text: str, expected: tuple[str, str]) -> None:
    assert split_fix(text) == expected


def test_only_the_errors_own_fix_is_taken_out_of_its_message() -> None:
    exc = TunePlaneError("no pool gpu (try `tp fleet ls`)", fix="create it")
    assert exc.message == "no pool gpu (try `tp fleet ls`)"
    assert TunePlaneError("x (fix: y)", fix="").message == "x (fix: y)"
    assert str(TunePlaneError("x (y) (fix: y) (y)", fix="y")) == "x (y)"


def test_a_status_text_echoing_a_huge_input_is_bounded_and_keeps_its_fix() -> None:
    """A refusal's text is an HTTP/2 header (grpc-message): one echoing a client's 100 KB node
    name whole ended the Enroll in a protocol error instead of the refusal. Both parts are cut
    (the cut marked), and the client still splits the fix off."""
    with pytest.raises(InvalidInput) as info:
        check_name("a" * 100_000, "node name", "node_name")
    assert len(info.value.message) < 200 and "100000 characters" in info.value.message
    for exc in (info.value, InvalidInput("x" * 100_000, fix="y" * 100_000)):
        status = grpc_error(exc)
        assert status.status is Status.INVALID_ARGUMENT
        assert status.message is not None and len(status.message) <= 2100
        message, fix = split_fix(status.message)
        assert fix and message.startswith(exc.message[:50]) and fix.startswith(exc.fix[:50])
    message, fix = split_fix(grpc_error(InvalidInput("x" * 5000, fix="y")).message or "")
    assert message.endswith("… [cut: 5000 characters]") and fix == "y"
