"""Node control messages survive the wire whole (a Prepare with the Job Capsule flag, an exit
with its outputs' manifest, output scans); reported outputs are checked."""

from __future__ import annotations

import dataclasses
from dataclasses import replace
from datetime import UTC, datetime

import pytest

from adapters.grpc.checkpoint_codec import digest_from, offer_from, offer_to
from adapters.grpc.node_codec import (
    gateway_message_from,
    gateway_message_to,
    node_message_from,
    node_message_to,
)
from domain.artifacts import ArtifactFile, Manifest
from domain.checkpoints import MAX_FILES, ResumeFrom
from domain.errors import InvalidInput
from domain.gpus import GpuDevice, GpuInventory
from domain.node_messages import (
    CheckpointOffer,
    FetchOutput,
    Hello,
    Inventory,
    OutputsScanned,
    Progress,
    ScanOutputs,
    TokenRenewal,
    Vote,
    Welcome,
)
from domain.node_protocol import EngineScan, MemberReport, NodeCapacity, Phase
from proto import node_control_pb2 as pb
from tests.support.journal_writer import entry

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("capsule", [True, False])
def test_a_prepare_round_trips(capsule: bool) -> None:
    order = dataclasses.replace(
        entry("w", 3).order,
        capsule=capsule,
        collector_token="tok",
        collector_token_expires_at=datetime(2027, 1, 2, 3, 4, 5, 678000, tzinfo=UTC),
    )
    wire = gateway_message_to(7, order, 30.0)
    _, body, _ = gateway_message_from(pb.GatewayMessage.FromString(wire.SerializeToString()))
    assert body == order


def test_a_prepare_with_the_checkpoint_to_resume_from_round_trips_and_a_bad_one_is_refused() -> (
    None
):
    for step in (1200, None):
        resume = ResumeFrom("checkpoint-1200", 1, step, _files("state.npz", "sub/state.json"))
        order = dataclasses.replace(entry("w", 3).order, attempt=2, resume=resume)
        wire = gateway_message_to(7, order, 30.0)
        _, body, _ = gateway_message_from(pb.GatewayMessage.FromString(wire.SerializeToString()))
        assert body == order
    for name, path in (("../up", "state.npz"), ("checkpoint-1", "../../etc/passwd")):
        bad = dataclasses.replace(
            order, resume=ResumeFrom(name, 1, 1, Manifest((ArtifactFile(path, 1, "0" * 64),)))
        )
        wire = gateway_message_to(8, bad, 30.0)
        with pytest.raises(InvalidInput):
            gateway_message_from(pb.GatewayMessage.FromString(wire.SerializeToString()))


def test_a_checkpoint_offer_round_trips_and_hostile_ones_are_refused() -> None:
    ref = entry("w", 1).order.ref
    offered = CheckpointOffer(ref, "job-1", "checkpoint-7", 7, _files("a", "b/c"))
    assert offer_from(pb.CheckpointOffer.FromString(offer_to(offered).SerializeToString())) == (
        offered
    )
    assert offer_from(offer_to(replace(offered, step=None))).step is None
    for hostile in (
        replace(offered, name="a/b"),
        replace(offered, name="x\x00"),
        replace(offered, job_id=""),
        replace(offered, manifest=Manifest((ArtifactFile("/abs", 1, "0" * 64),))),
    ):
        with pytest.raises(InvalidInput):
            offer_from(offer_to(hostile))
    many = Manifest(tuple(ArtifactFile(f"f{i}", 0, "0" * 64) for i in range(MAX_FILES + 1)))
    with pytest.raises(InvalidInput, match="at most"):
        offer_from(offer_to(replace(offered, manifest=many)))
    with pytest.raises(InvalidInput, match="sha256"):
        digest_from("zz")


def _files(*names: str) -> Manifest:
    return Manifest.of([ArtifactFile(n, i, f"{i:064x}") for i, n in enumerate(names)])


def test_an_exit_with_its_outputs_and_a_scan_round_trip() -> None:
    ref = entry("w", 1).order.ref
    report = MemberReport(ref, Phase.EXITED, 0, "", None, _files("ckpt/w.bin", "report.json"))
    for body in (
        report,
        replace(report, outputs=Manifest(())),  # an empty directory is not "not scanned"
        replace(report, outputs=None),
        OutputsScanned("scan-1", ref, _files("a")),
        OutputsScanned("scan-2", ref, None, "cannot read"),
    ):
        wire = node_message_to(3, body).SerializeToString()
        assert node_message_from(pb.NodeMessage.FromString(wire)) == (3, body)
    running = MemberReport(ref, Phase.RUNNING, token_expires_at=datetime(2027, 1, 2, tzinfo=UTC))
    wire = node_message_to(5, running).SerializeToString()
    assert node_message_from(pb.NodeMessage.FromString(wire)) == (5, running)
    scan = ScanOutputs("scan-1", ref, "job-1")
    wire = gateway_message_to(4, scan).SerializeToString()
    assert gateway_message_from(pb.GatewayMessage.FromString(wire))[:2] == (4, scan)
    fetch = FetchOutput("fetch-1", ref, "job-1", ArtifactFile("ckpt/w é.bin", 2**40, "ab" * 32))
    wire = gateway_message_to(6, fetch).SerializeToString()
    assert gateway_message_from(pb.GatewayMessage.FromString(wire))[:2] == (6, fetch)


def test_an_exit_whose_log_is_pending_round_trips_and_only_an_exit_can_be_pending() -> None:
    ref = entry("w", 1).order.ref
    pending = MemberReport(ref, Phase.EXITED, 0, "", log_pending=True)
    wire = node_message_to(2, pending).SerializeToString()
    assert node_message_from(pb.NodeMessage.FromString(wire)) == (2, pending)
    older = pb.NodeMessage.FromString(wire)
    older.status.ClearField("log_pending")  # a daemon from before the field: never pending
    assert node_message_from(older) == (2, replace(pending, log_pending=False))
    running = node_message_to(3, MemberReport(ref, Phase.RUNNING))
    running.status.log_pending = True  # meaningless but for an exit: ignored
    assert node_message_from(running) == (3, MemberReport(ref, Phase.RUNNING))


@pytest.mark.parametrize(
    ("path", "sha", "size"),
    [
        ("../escape", "0" * 64, 1),
        ("/etc/passwd", "0" * 64, 1),
        ("a//b", "0" * 64, 1),
        ("", "0" * 64, 1),
        ("ok.txt", "XYZ", 1),  # not 64 hex digits
        ("a\x00b", "0" * 64, 1),  # a control character: an older daemon listed such a name
        ("line\nbreak", "0" * 64, 1),
        ("big", "0" * 64, 2**64 - 1),  # past a BIGINT
        ("a", "0" * 64, 1),  # "a" is listed already: a path twice
    ],
)
def test_reported_outputs_that_cannot_be_kept_are_left_out_and_the_exit_is_kept(
    path: str, sha: str, size: int
) -> None:
    """An exit report is the proof a member ended: an output entry the control plane cannot
    keep is left out and counted in the manifest, never a reason to refuse the exit (it would
    be sent again and refused for ever, the member unknown and its reservation held)."""
    ref = entry("w", 1).order.ref
    msg = node_message_to(1, MemberReport(ref, Phase.EXITED, 0, "", None, _files("a")))
    msg.status.outputs.append(pb.OutputFile(path=path, size=size, sha256=sha))
    _, report = node_message_from(msg)
    assert isinstance(report, MemberReport) and report.exit_code == 0
    assert report.outputs is not None and [f.path for f in report.outputs.files] == ["a"]
    assert report.outputs.left_out_count == 1


def test_a_collector_token_renewal_round_trips_and_needs_its_token_and_expiry() -> None:
    ref = entry("w", 1).order.ref
    renewal = TokenRenewal(ref, "eyJ.new", datetime(2027, 1, 2, 3, 4, 5, tzinfo=UTC))
    wire = gateway_message_to(9, renewal).SerializeToString()
    assert gateway_message_from(pb.GatewayMessage.FromString(wire))[:2] == (9, renewal)
    for bad in (replace(renewal, token=""), pb.CollectorToken(token="eyJ.new")):
        msg = pb.GatewayMessage(seq=10)
        if isinstance(bad, TokenRenewal):
            msg = gateway_message_to(10, bad)
        else:
            msg.collector_token.CopyFrom(bad)
        with pytest.raises(InvalidInput, match="collector token needs the token and its expiry"):
            gateway_message_from(msg)


def test_a_hello_and_an_inventory_carry_the_engine_scan_and_a_welcome_the_installation() -> None:
    report = entry("w", 2).report()
    scan = EngineScan("ENGINE:ID", False, "the engine does not answer", ("mem-x",))
    hello = Hello("n1", NodeCapacity(1, "h200", 2.0, 1024), "10.0.0.1", "v", 3, (report,), scan)
    for body in (hello, replace(hello, scan=None), Inventory(scan, (report,))):
        wire = node_message_to(4, body)
        _, back = node_message_from(pb.NodeMessage.FromString(wire.SerializeToString()))
        assert back == body
    welcome = Welcome(2, 5, 123, "inst-0123")
    sent = gateway_message_to(1, welcome, 10.0)
    got = gateway_message_from(pb.GatewayMessage.FromString(sent.SerializeToString()))
    assert got[1] == welcome
    empty = pb.NodeMessage(seq=5, inventory=pb.Inventory())
    with pytest.raises(InvalidInput, match=r"inventory\.scan is missing"):
        node_message_from(empty)
    huge = pb.NodeMessage(seq=6, inventory=pb.Inventory(scan=pb.EngineScan(engine="x" * 5000)))
    with pytest.raises(InvalidInput, match=r"scan\.engine is longer"):
        node_message_from(huge)
    # why it is incomplete is the daemon's prose: kept, bounded (a huge one refused the whole
    # Inventory before)
    long = pb.NodeMessage(seq=7, inventory=pb.Inventory(scan=pb.EngineScan(reason="x" * 5000)))
    _, inventory = node_message_from(long)
    assert isinstance(inventory, Inventory)
    assert inventory.scan.reason.endswith("… [cut: 5000 characters]")
    assert len(inventory.scan.reason) == 4096


def test_a_vote_round_trips_and_a_yes_is_never_busy() -> None:
    ref = entry("w", 1).order.ref
    for body, back in (
        (Vote(ref, False, "port 29500 held", busy=True), None),
        (Vote(ref, False, "no such image"), None),
        (Vote(ref, True), None),
        (Vote(ref, True, busy=True), Vote(ref, True)),  # a yes holds no condition to wait out
    ):
        wire = node_message_to(3, body).SerializeToString()
        assert node_message_from(pb.NodeMessage.FromString(wire)) == (3, back or body)


H200 = GpuInventory(
    (
        GpuDevice(
            0, "GPU-6f2c1f0e-5a1b-4c3d-9e8f-0a1b2c3d4e5f", "NVIDIA H200", 143771, False, True
        ),
        GpuDevice(1, "GPU-7a3d2e1f-6b2c-4d4e-8f9a-1b2c3d4e5f60", "NVIDIA H200", 143771, True),
    ),
    "580.159.03",
    "13.0",
    "nvml",
)


def _hello_back(capacity: NodeCapacity) -> NodeCapacity:
    hello = Hello("n1", capacity, "10.0.0.1", "v", 3, ())
    wire = node_message_to(1, hello)
    _, back = node_message_from(pb.NodeMessage.FromString(wire.SerializeToString()))
    assert isinstance(back, Hello)
    return back.capacity


def test_a_hello_carries_the_gpu_inventory_and_an_older_daemon_none() -> None:
    cap = NodeCapacity(2, "h200", 16.0, 4096, H200)
    assert _hello_back(cap) == cap
    assert _hello_back(replace(cap, gpu_inventory=None)).gpu_inventory is None
    empty = GpuInventory((), "580.159.03", "13.0", "nvml")  # present but empty stays present
    assert _hello_back(replace(cap, gpu_inventory=empty)).gpu_inventory == empty


@pytest.mark.parametrize(
    ("devices", "error"),
    [
        ([pb.GpuDevice(index=0, uuid="6f2c1f0e", name="x")], "does not start with GPU-"),
        ([pb.GpuDevice(index=0, uuid="GPU-a"), pb.GpuDevice(index=0, uuid="GPU-b")], "index twice"),
        ([pb.GpuDevice(index=0, uuid="GPU-a"), pb.GpuDevice(index=1, uuid="GPU-a")], "UUID twice"),
        ([pb.GpuDevice(index=0, uuid="GPU-a", name="x" * 300)], "longer than 256"),
        ([pb.GpuDevice(index=0, uuid="GPU-a", name="H\x00")], "NUL"),
        ([pb.GpuDevice(index=i, uuid=f"GPU-{i}") for i in range(257)], "more than 256"),
    ],
)
def test_a_malformed_gpu_inventory_is_refused(devices: list[pb.GpuDevice], error: str) -> None:
    hello = pb.Hello(
        node_name="n1",
        capacity=pb.Capacity(gpus=1, gpu_inventory=pb.GpuInventory(devices=devices)),
        address="10.0.0.1",
    )
    with pytest.raises(InvalidInput, match=error):
        node_message_from(pb.NodeMessage(seq=1, hello=hello))


DIRTY = "driver said \x00 oops \x1b[31m\n" + "<p>Access denied by proxy policy. " * 300


def _status(**kw: object) -> pb.MemberStatus:
    ref = pb.MemberRef(attempt_id="att-1", member_id="mem-1", member_index=0, epoch=1)
    values: dict[str, object] = {"ref": ref, "phase": pb.EXITED, "at_unix_ms": 1}
    return pb.MemberStatus(**{**values, **kw})  # type: ignore[arg-type]


def _clean(text: str, length: int) -> None:
    assert text.isprintable() and len(text) == 4096
    assert text.startswith("driver said ? oops ?[31m <p>Access denied")
    assert text.endswith(f"… [cut: {length} characters]")


def test_a_daemons_prose_is_kept_cut_and_cleaned_never_refused() -> None:
    """An engine's 10 KB error page with a NUL in it is still why the member failed: a report's
    or a vote's reason, a progress detail, a scan's error, cut (the cut marked) and made
    printable. Before: refused as malformed (over 4096), or stored with its NUL (an Internal
    Server Error from PostgreSQL)."""
    ref = pb.MemberRef(attempt_id="att-1", member_id="mem-1", member_index=0, epoch=1)
    _, report = node_message_from(pb.NodeMessage(seq=1, status=_status(reason=DIRTY)))
    assert isinstance(report, MemberReport)
    _clean(report.reason, len(DIRTY))
    _, vote = node_message_from(pb.NodeMessage(seq=2, vote=pb.Vote(ref=ref, reason=DIRTY)))
    assert isinstance(vote, Vote)
    _clean(vote.reason, len(DIRTY))
    progress = pb.Progress(ref=ref, stage="pull\x00", detail=DIRTY, fraction=float("nan"))
    _, body = node_message_from(pb.NodeMessage(seq=3, progress=progress))
    assert isinstance(body, Progress)
    assert body.stage == "pull?" and body.text().startswith("pull?: driver said ?")
    _clean(body.detail, len(DIRTY))
    scanned = pb.OutputsScanned(request_id="r1", ref=ref, error=DIRTY)
    _, answer = node_message_from(pb.NodeMessage(seq=4, outputs_scanned=scanned))
    assert isinstance(answer, OutputsScanned)
    _clean(answer.error, len(DIRTY))
    short = "exit 1: no such file\x00"
    _, report = node_message_from(pb.NodeMessage(seq=5, status=_status(reason=short)))
    assert isinstance(report, MemberReport) and report.reason == "exit 1: no such file?"


@pytest.mark.parametrize(
    ("status", "field"),
    [
        (_status(phase=99), "phase"),
        (_status(ref=pb.MemberRef(attempt_id="att-\x00", member_id="m", epoch=1)), "attempt_id"),
        (_status(ref=pb.MemberRef(attempt_id="a", member_id="m\x1b", epoch=1)), "member_id"),
        (_status(ref=pb.MemberRef(attempt_id="a", member_id="m", member_index=2**32 - 1)), "index"),
        (_status(ref=pb.MemberRef(attempt_id="a", member_id="m", epoch=2**64 - 1)), "ref.epoch"),
        (_status(at_unix_ms=2**62), "at_unix_ms"),
        (_status(collector_token_expires_unix_ms=2**62), "collector_token_expires_unix_ms"),
    ],
)
def test_a_report_that_cannot_be_understood_is_refused_naming_the_field(
    status: pb.MemberStatus, field: str
) -> None:
    """Before: a NUL went on to PostgreSQL, a time past year 9999 to ``datetime`` (an Internal
    Server Error each), an integer past its column to the database."""
    with pytest.raises(InvalidInput, match=field) as info:
        node_message_from(pb.NodeMessage(seq=1, status=status))
    assert info.value.field is not None and field in info.value.field


def test_a_hello_leaves_out_only_the_journal_entries_it_cannot_read(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """One bad journal row (a NUL in its id, a time past any clock, an unknown phase) used to
    refuse the whole Hello, forever: the node never reconnected and its other members stayed
    unknown. Now only that entry is left out, in one log line, and the engine scan says it is
    not complete: a member the node holds but the gateway could not read is not proved gone."""
    good = _status(reason="fine")
    bad = [
        _status(ref=pb.MemberRef(attempt_id="att-\x00", member_id="m2", epoch=1)),
        _status(at_unix_ms=2**62),
        _status(phase=99),
    ]
    scan = pb.EngineScan(engine="E1", complete=True, unadopted=["mem-9"])
    hello = pb.Hello(
        node_name="n1", capacity=pb.Capacity(cpus=1, memory_mb=1), address="10.0.0.1",
        journal=[bad[0], good, *bad[1:]], scan=scan,
    )  # fmt: skip
    _, body = node_message_from(pb.NodeMessage(seq=1, hello=hello))
    assert isinstance(body, Hello)
    assert [r.reason for r in body.journal] == ["fine"]
    assert body.scan is not None
    assert (body.scan.engine, body.scan.complete, body.scan.unadopted) == ("E1", False, ("mem-9",))
    assert "could not read 3 of its journal's entries (entry 0:" in body.scan.reason
    [line] = [r.getMessage() for r in caplog.records if "journal entries" in r.getMessage()]
    assert line.startswith("node n1: Hello: 3 journal entries could not be read")
    no_scan = pb.Hello(node_name="n1", address="a", journal=[bad[0]])  # an older daemon
    _, older = node_message_from(pb.NodeMessage(seq=1, hello=no_scan))
    assert isinstance(older, Hello) and (older.journal, older.scan) == ((), None)
    inventory = pb.Inventory(scan=scan, journal=[good, bad[2]])
    _, inv = node_message_from(pb.NodeMessage(seq=2, inventory=inventory))
    assert isinstance(inv, Inventory) and len(inv.journal) == 1 and not inv.scan.complete


@pytest.mark.parametrize(
    ("capacity", "field"),
    [
        (pb.Capacity(cpus=float("nan"), memory_mb=1), "capacity.cpus"),
        (pb.Capacity(cpus=float("inf"), memory_mb=1), "capacity.cpus"),
        (pb.Capacity(cpus=-1, memory_mb=1), "capacity.cpus"),
        (pb.Capacity(cpus=100_001, memory_mb=1), "capacity.cpus"),
        (pb.Capacity(gpus=2**32 - 1, cpus=1, memory_mb=1), "capacity.gpus"),
        (pb.Capacity(gpus=65, cpus=1, memory_mb=1), "capacity.gpus"),
        (pb.Capacity(cpus=1, memory_mb=2**64 - 1), "capacity.memory_mb"),
        (pb.Capacity(cpus=1, memory_mb=2**31), "capacity.memory_mb"),
        (pb.Capacity(gpus=1, gpu_model="h1\x00", cpus=1, memory_mb=1), "capacity.gpu_model"),
        (pb.Capacity(gpus=1, gpu_model="x" * 200_000, cpus=1, memory_mb=1), "capacity.gpu_model"),
    ],
)
def test_a_capacity_past_what_a_node_may_have_is_refused_naming_the_field(
    capacity: pb.Capacity, field: str
) -> None:
    """Before: NaN and infinity were accepted, 2^32-1 GPUs and 2^64-1 MiB went on to the
    database (an Internal Server Error), a NUL in the model too."""
    hello = pb.Hello(node_name="n1", capacity=capacity, address="10.0.0.1")
    with pytest.raises(InvalidInput, match=field.replace(".", r"\.")) as info:
        node_message_from(pb.NodeMessage(seq=1, hello=hello))
    assert info.value.field == field and "--cpus" in info.value.fix


@pytest.mark.parametrize(
    ("device", "error"),
    [
        (pb.GpuDevice(index=0, uuid="GPU-a", memory_mb=2**64 - 1), r"devices\[0\]\.memory_mb"),
        (pb.GpuDevice(index=2**32 - 1, uuid="GPU-a"), r"devices\[0\]\.index"),
        (pb.GpuDevice(index=0, uuid="GPU-a", name="H\u202e"), "NUL or control"),
    ],
)
def test_a_gpu_inventory_past_what_a_node_may_have_is_refused(
    device: pb.GpuDevice, error: str
) -> None:
    """Before: a GPU of 2^64-1 MiB was stored and shown by /v1/fleet."""
    inventory = pb.GpuInventory(devices=[device], driver="580", cuda="13", source="nvml")
    hello = pb.Hello(
        node_name="n1", capacity=pb.Capacity(gpus=1, gpu_inventory=inventory), address="a"
    )
    with pytest.raises(InvalidInput, match=error):
        node_message_from(pb.NodeMessage(seq=1, hello=hello))
