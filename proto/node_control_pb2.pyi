from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Phase(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PHASE_UNSPECIFIED: _ClassVar[Phase]
    PREPARING: _ClassVar[Phase]
    PREPARED: _ClassVar[Phase]
    REFUSED: _ClassVar[Phase]
    ABORTED: _ClassVar[Phase]
    STARTING: _ClassVar[Phase]
    RUNNING: _ClassVar[Phase]
    EXITED: _ClassVar[Phase]
    MISSING: _ClassVar[Phase]
PHASE_UNSPECIFIED: Phase
PREPARING: Phase
PREPARED: Phase
REFUSED: Phase
ABORTED: Phase
STARTING: Phase
RUNNING: Phase
EXITED: Phase
MISSING: Phase

class Capacity(_message.Message):
    __slots__ = ("gpus", "gpu_model", "cpus", "memory_mb", "gpu_uuids", "gpu_inventory")
    GPUS_FIELD_NUMBER: _ClassVar[int]
    GPU_MODEL_FIELD_NUMBER: _ClassVar[int]
    CPUS_FIELD_NUMBER: _ClassVar[int]
    MEMORY_MB_FIELD_NUMBER: _ClassVar[int]
    GPU_UUIDS_FIELD_NUMBER: _ClassVar[int]
    GPU_INVENTORY_FIELD_NUMBER: _ClassVar[int]
    gpus: int
    gpu_model: str
    cpus: float
    memory_mb: int
    gpu_uuids: _containers.RepeatedScalarFieldContainer[str]
    gpu_inventory: GpuInventory
    def __init__(self, gpus: _Optional[int] = ..., gpu_model: _Optional[str] = ..., cpus: _Optional[float] = ..., memory_mb: _Optional[int] = ..., gpu_uuids: _Optional[_Iterable[str]] = ..., gpu_inventory: _Optional[_Union[GpuInventory, _Mapping]] = ...) -> None: ...

class GpuInventory(_message.Message):
    __slots__ = ("devices", "driver", "cuda", "source")
    DEVICES_FIELD_NUMBER: _ClassVar[int]
    DRIVER_FIELD_NUMBER: _ClassVar[int]
    CUDA_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    devices: _containers.RepeatedCompositeFieldContainer[GpuDevice]
    driver: str
    cuda: str
    source: str
    def __init__(self, devices: _Optional[_Iterable[_Union[GpuDevice, _Mapping]]] = ..., driver: _Optional[str] = ..., cuda: _Optional[str] = ..., source: _Optional[str] = ...) -> None: ...

class GpuDevice(_message.Message):
    __slots__ = ("index", "uuid", "name", "memory_mb", "mig", "nvlink")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    UUID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    MEMORY_MB_FIELD_NUMBER: _ClassVar[int]
    MIG_FIELD_NUMBER: _ClassVar[int]
    NVLINK_FIELD_NUMBER: _ClassVar[int]
    index: int
    uuid: str
    name: str
    memory_mb: int
    mig: bool
    nvlink: bool
    def __init__(self, index: _Optional[int] = ..., uuid: _Optional[str] = ..., name: _Optional[str] = ..., memory_mb: _Optional[int] = ..., mig: _Optional[bool] = ..., nvlink: _Optional[bool] = ...) -> None: ...

class EnrollRequest(_message.Message):
    __slots__ = ("join_token", "node_name", "capacity", "address")
    JOIN_TOKEN_FIELD_NUMBER: _ClassVar[int]
    NODE_NAME_FIELD_NUMBER: _ClassVar[int]
    CAPACITY_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    join_token: str
    node_name: str
    capacity: Capacity
    address: str
    def __init__(self, join_token: _Optional[str] = ..., node_name: _Optional[str] = ..., capacity: _Optional[_Union[Capacity, _Mapping]] = ..., address: _Optional[str] = ...) -> None: ...

class EnrollReply(_message.Message):
    __slots__ = ("node_name", "pool", "credential", "credential_id")
    NODE_NAME_FIELD_NUMBER: _ClassVar[int]
    POOL_FIELD_NUMBER: _ClassVar[int]
    CREDENTIAL_FIELD_NUMBER: _ClassVar[int]
    CREDENTIAL_ID_FIELD_NUMBER: _ClassVar[int]
    node_name: str
    pool: str
    credential: str
    credential_id: str
    def __init__(self, node_name: _Optional[str] = ..., pool: _Optional[str] = ..., credential: _Optional[str] = ..., credential_id: _Optional[str] = ...) -> None: ...

class MemberRef(_message.Message):
    __slots__ = ("attempt_id", "member_id", "member_index", "epoch")
    ATTEMPT_ID_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    MEMBER_INDEX_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    attempt_id: str
    member_id: str
    member_index: int
    epoch: int
    def __init__(self, attempt_id: _Optional[str] = ..., member_id: _Optional[str] = ..., member_index: _Optional[int] = ..., epoch: _Optional[int] = ...) -> None: ...

class MemberStatus(_message.Message):
    __slots__ = ("ref", "phase", "has_exit_code", "exit_code", "reason", "at_unix_ms", "has_outputs", "outputs", "collector_token_expires_unix_ms", "log_pending")
    REF_FIELD_NUMBER: _ClassVar[int]
    PHASE_FIELD_NUMBER: _ClassVar[int]
    HAS_EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    AT_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    HAS_OUTPUTS_FIELD_NUMBER: _ClassVar[int]
    OUTPUTS_FIELD_NUMBER: _ClassVar[int]
    COLLECTOR_TOKEN_EXPIRES_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    LOG_PENDING_FIELD_NUMBER: _ClassVar[int]
    ref: MemberRef
    phase: Phase
    has_exit_code: bool
    exit_code: int
    reason: str
    at_unix_ms: int
    has_outputs: bool
    outputs: _containers.RepeatedCompositeFieldContainer[OutputFile]
    collector_token_expires_unix_ms: int
    log_pending: bool
    def __init__(self, ref: _Optional[_Union[MemberRef, _Mapping]] = ..., phase: _Optional[_Union[Phase, str]] = ..., has_exit_code: _Optional[bool] = ..., exit_code: _Optional[int] = ..., reason: _Optional[str] = ..., at_unix_ms: _Optional[int] = ..., has_outputs: _Optional[bool] = ..., outputs: _Optional[_Iterable[_Union[OutputFile, _Mapping]]] = ..., collector_token_expires_unix_ms: _Optional[int] = ..., log_pending: _Optional[bool] = ...) -> None: ...

class OutputFile(_message.Message):
    __slots__ = ("path", "size", "sha256")
    PATH_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    path: str
    size: int
    sha256: str
    def __init__(self, path: _Optional[str] = ..., size: _Optional[int] = ..., sha256: _Optional[str] = ...) -> None: ...

class Hello(_message.Message):
    __slots__ = ("node_name", "capacity", "address", "daemon_version", "epoch", "journal", "scan")
    NODE_NAME_FIELD_NUMBER: _ClassVar[int]
    CAPACITY_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    DAEMON_VERSION_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    JOURNAL_FIELD_NUMBER: _ClassVar[int]
    SCAN_FIELD_NUMBER: _ClassVar[int]
    node_name: str
    capacity: Capacity
    address: str
    daemon_version: str
    epoch: int
    journal: _containers.RepeatedCompositeFieldContainer[MemberStatus]
    scan: EngineScan
    def __init__(self, node_name: _Optional[str] = ..., capacity: _Optional[_Union[Capacity, _Mapping]] = ..., address: _Optional[str] = ..., daemon_version: _Optional[str] = ..., epoch: _Optional[int] = ..., journal: _Optional[_Iterable[_Union[MemberStatus, _Mapping]]] = ..., scan: _Optional[_Union[EngineScan, _Mapping]] = ...) -> None: ...

class EngineScan(_message.Message):
    __slots__ = ("engine", "complete", "reason", "unadopted")
    ENGINE_FIELD_NUMBER: _ClassVar[int]
    COMPLETE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    UNADOPTED_FIELD_NUMBER: _ClassVar[int]
    engine: str
    complete: bool
    reason: str
    unadopted: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, engine: _Optional[str] = ..., complete: _Optional[bool] = ..., reason: _Optional[str] = ..., unadopted: _Optional[_Iterable[str]] = ...) -> None: ...

class Inventory(_message.Message):
    __slots__ = ("scan", "journal")
    SCAN_FIELD_NUMBER: _ClassVar[int]
    JOURNAL_FIELD_NUMBER: _ClassVar[int]
    scan: EngineScan
    journal: _containers.RepeatedCompositeFieldContainer[MemberStatus]
    def __init__(self, scan: _Optional[_Union[EngineScan, _Mapping]] = ..., journal: _Optional[_Iterable[_Union[MemberStatus, _Mapping]]] = ...) -> None: ...

class Heartbeat(_message.Message):
    __slots__ = ("sent_unix_ms",)
    SENT_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    sent_unix_ms: int
    def __init__(self, sent_unix_ms: _Optional[int] = ...) -> None: ...

class Vote(_message.Message):
    __slots__ = ("ref", "yes", "reason", "busy")
    REF_FIELD_NUMBER: _ClassVar[int]
    YES_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    BUSY_FIELD_NUMBER: _ClassVar[int]
    ref: MemberRef
    yes: bool
    reason: str
    busy: bool
    def __init__(self, ref: _Optional[_Union[MemberRef, _Mapping]] = ..., yes: _Optional[bool] = ..., reason: _Optional[str] = ..., busy: _Optional[bool] = ...) -> None: ...

class Progress(_message.Message):
    __slots__ = ("ref", "stage", "fraction", "detail")
    REF_FIELD_NUMBER: _ClassVar[int]
    STAGE_FIELD_NUMBER: _ClassVar[int]
    FRACTION_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    ref: MemberRef
    stage: str
    fraction: float
    detail: str
    def __init__(self, ref: _Optional[_Union[MemberRef, _Mapping]] = ..., stage: _Optional[str] = ..., fraction: _Optional[float] = ..., detail: _Optional[str] = ...) -> None: ...

class CredentialAck(_message.Message):
    __slots__ = ("credential_id",)
    CREDENTIAL_ID_FIELD_NUMBER: _ClassVar[int]
    credential_id: str
    def __init__(self, credential_id: _Optional[str] = ...) -> None: ...

class LogChunk(_message.Message):
    __slots__ = ("ref", "data", "last", "truncated", "live", "offset")
    REF_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    LAST_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    LIVE_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    ref: MemberRef
    data: bytes
    last: bool
    truncated: bool
    live: bool
    offset: int
    def __init__(self, ref: _Optional[_Union[MemberRef, _Mapping]] = ..., data: _Optional[bytes] = ..., last: _Optional[bool] = ..., truncated: _Optional[bool] = ..., live: _Optional[bool] = ..., offset: _Optional[int] = ...) -> None: ...

class NodeMessage(_message.Message):
    __slots__ = ("seq", "hello", "heartbeat", "vote", "progress", "status", "credential_ack", "log", "outputs_scanned", "inventory")
    SEQ_FIELD_NUMBER: _ClassVar[int]
    HELLO_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_FIELD_NUMBER: _ClassVar[int]
    VOTE_FIELD_NUMBER: _ClassVar[int]
    PROGRESS_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    CREDENTIAL_ACK_FIELD_NUMBER: _ClassVar[int]
    LOG_FIELD_NUMBER: _ClassVar[int]
    OUTPUTS_SCANNED_FIELD_NUMBER: _ClassVar[int]
    INVENTORY_FIELD_NUMBER: _ClassVar[int]
    seq: int
    hello: Hello
    heartbeat: Heartbeat
    vote: Vote
    progress: Progress
    status: MemberStatus
    credential_ack: CredentialAck
    log: LogChunk
    outputs_scanned: OutputsScanned
    inventory: Inventory
    def __init__(self, seq: _Optional[int] = ..., hello: _Optional[_Union[Hello, _Mapping]] = ..., heartbeat: _Optional[_Union[Heartbeat, _Mapping]] = ..., vote: _Optional[_Union[Vote, _Mapping]] = ..., progress: _Optional[_Union[Progress, _Mapping]] = ..., status: _Optional[_Union[MemberStatus, _Mapping]] = ..., credential_ack: _Optional[_Union[CredentialAck, _Mapping]] = ..., log: _Optional[_Union[LogChunk, _Mapping]] = ..., outputs_scanned: _Optional[_Union[OutputsScanned, _Mapping]] = ..., inventory: _Optional[_Union[Inventory, _Mapping]] = ...) -> None: ...

class OutputsScanned(_message.Message):
    __slots__ = ("request_id", "ref", "found", "files", "error")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    REF_FIELD_NUMBER: _ClassVar[int]
    FOUND_FIELD_NUMBER: _ClassVar[int]
    FILES_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    ref: MemberRef
    found: bool
    files: _containers.RepeatedCompositeFieldContainer[OutputFile]
    error: str
    def __init__(self, request_id: _Optional[str] = ..., ref: _Optional[_Union[MemberRef, _Mapping]] = ..., found: _Optional[bool] = ..., files: _Optional[_Iterable[_Union[OutputFile, _Mapping]]] = ..., error: _Optional[str] = ...) -> None: ...

class Welcome(_message.Message):
    __slots__ = ("epoch", "heartbeat_seconds", "server_unix_ms", "installation")
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    SERVER_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    INSTALLATION_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    heartbeat_seconds: int
    server_unix_ms: int
    installation: str
    def __init__(self, epoch: _Optional[int] = ..., heartbeat_seconds: _Optional[int] = ..., server_unix_ms: _Optional[int] = ..., installation: _Optional[str] = ...) -> None: ...

class HeartbeatAck(_message.Message):
    __slots__ = ("sent_unix_ms",)
    SENT_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    sent_unix_ms: int
    def __init__(self, sent_unix_ms: _Optional[int] = ...) -> None: ...

class SourceChunk(_message.Message):
    __slots__ = ("digest", "offset", "data", "last")
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    LAST_FIELD_NUMBER: _ClassVar[int]
    digest: str
    offset: int
    data: bytes
    last: bool
    def __init__(self, digest: _Optional[str] = ..., offset: _Optional[int] = ..., data: _Optional[bytes] = ..., last: _Optional[bool] = ...) -> None: ...

class Prepare(_message.Message):
    __slots__ = ("ref", "job_id", "image", "command", "env", "cpus", "memory_mb", "gpu_indices", "source_digest", "members", "process_model", "check_port", "node_name", "collector_token", "capsule", "collector_token_expires_unix_ms", "attempt", "resume")
    class EnvEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    REF_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    IMAGE_FIELD_NUMBER: _ClassVar[int]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    ENV_FIELD_NUMBER: _ClassVar[int]
    CPUS_FIELD_NUMBER: _ClassVar[int]
    MEMORY_MB_FIELD_NUMBER: _ClassVar[int]
    GPU_INDICES_FIELD_NUMBER: _ClassVar[int]
    SOURCE_DIGEST_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    PROCESS_MODEL_FIELD_NUMBER: _ClassVar[int]
    CHECK_PORT_FIELD_NUMBER: _ClassVar[int]
    NODE_NAME_FIELD_NUMBER: _ClassVar[int]
    COLLECTOR_TOKEN_FIELD_NUMBER: _ClassVar[int]
    CAPSULE_FIELD_NUMBER: _ClassVar[int]
    COLLECTOR_TOKEN_EXPIRES_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    RESUME_FIELD_NUMBER: _ClassVar[int]
    ref: MemberRef
    job_id: str
    image: str
    command: _containers.RepeatedScalarFieldContainer[str]
    env: _containers.ScalarMap[str, str]
    cpus: float
    memory_mb: int
    gpu_indices: _containers.RepeatedScalarFieldContainer[int]
    source_digest: str
    members: int
    process_model: str
    check_port: int
    node_name: str
    collector_token: str
    capsule: bool
    collector_token_expires_unix_ms: int
    attempt: int
    resume: Resume
    def __init__(self, ref: _Optional[_Union[MemberRef, _Mapping]] = ..., job_id: _Optional[str] = ..., image: _Optional[str] = ..., command: _Optional[_Iterable[str]] = ..., env: _Optional[_Mapping[str, str]] = ..., cpus: _Optional[float] = ..., memory_mb: _Optional[int] = ..., gpu_indices: _Optional[_Iterable[int]] = ..., source_digest: _Optional[str] = ..., members: _Optional[int] = ..., process_model: _Optional[str] = ..., check_port: _Optional[int] = ..., node_name: _Optional[str] = ..., collector_token: _Optional[str] = ..., capsule: _Optional[bool] = ..., collector_token_expires_unix_ms: _Optional[int] = ..., attempt: _Optional[int] = ..., resume: _Optional[_Union[Resume, _Mapping]] = ...) -> None: ...

class Resume(_message.Message):
    __slots__ = ("name", "attempt", "step", "files")
    NAME_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    FILES_FIELD_NUMBER: _ClassVar[int]
    name: str
    attempt: int
    step: int
    files: _containers.RepeatedCompositeFieldContainer[OutputFile]
    def __init__(self, name: _Optional[str] = ..., attempt: _Optional[int] = ..., step: _Optional[int] = ..., files: _Optional[_Iterable[_Union[OutputFile, _Mapping]]] = ...) -> None: ...

class CheckpointOffer(_message.Message):
    __slots__ = ("ref", "job_id", "name", "step", "files")
    REF_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    FILES_FIELD_NUMBER: _ClassVar[int]
    ref: MemberRef
    job_id: str
    name: str
    step: int
    files: _containers.RepeatedCompositeFieldContainer[OutputFile]
    def __init__(self, ref: _Optional[_Union[MemberRef, _Mapping]] = ..., job_id: _Optional[str] = ..., name: _Optional[str] = ..., step: _Optional[int] = ..., files: _Optional[_Iterable[_Union[OutputFile, _Mapping]]] = ...) -> None: ...

class CheckpointWants(_message.Message):
    __slots__ = ("recorded", "sha256")
    RECORDED_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    recorded: bool
    sha256: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, recorded: _Optional[bool] = ..., sha256: _Optional[_Iterable[str]] = ...) -> None: ...

class CheckpointFilePiece(_message.Message):
    __slots__ = ("ref", "job_id", "sha256", "data")
    REF_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    ref: MemberRef
    job_id: str
    sha256: str
    data: bytes
    def __init__(self, ref: _Optional[_Union[MemberRef, _Mapping]] = ..., job_id: _Optional[str] = ..., sha256: _Optional[str] = ..., data: _Optional[bytes] = ...) -> None: ...

class CheckpointFileStored(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class CheckpointFileRequest(_message.Message):
    __slots__ = ("ref", "job_id", "sha256")
    REF_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    ref: MemberRef
    job_id: str
    sha256: str
    def __init__(self, ref: _Optional[_Union[MemberRef, _Mapping]] = ..., job_id: _Optional[str] = ..., sha256: _Optional[str] = ...) -> None: ...

class CollectorToken(_message.Message):
    __slots__ = ("ref", "token", "expires_unix_ms")
    REF_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    ref: MemberRef
    token: str
    expires_unix_ms: int
    def __init__(self, ref: _Optional[_Union[MemberRef, _Mapping]] = ..., token: _Optional[str] = ..., expires_unix_ms: _Optional[int] = ...) -> None: ...

class Commit(_message.Message):
    __slots__ = ("ref",)
    REF_FIELD_NUMBER: _ClassVar[int]
    ref: MemberRef
    def __init__(self, ref: _Optional[_Union[MemberRef, _Mapping]] = ...) -> None: ...

class Abort(_message.Message):
    __slots__ = ("ref", "reason")
    REF_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    ref: MemberRef
    reason: str
    def __init__(self, ref: _Optional[_Union[MemberRef, _Mapping]] = ..., reason: _Optional[str] = ...) -> None: ...

class Stop(_message.Message):
    __slots__ = ("ref", "grace_seconds")
    REF_FIELD_NUMBER: _ClassVar[int]
    GRACE_SECONDS_FIELD_NUMBER: _ClassVar[int]
    ref: MemberRef
    grace_seconds: float
    def __init__(self, ref: _Optional[_Union[MemberRef, _Mapping]] = ..., grace_seconds: _Optional[float] = ...) -> None: ...

class Forget(_message.Message):
    __slots__ = ("ref", "reason")
    REF_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    ref: MemberRef
    reason: str
    def __init__(self, ref: _Optional[_Union[MemberRef, _Mapping]] = ..., reason: _Optional[str] = ...) -> None: ...

class RotateCredential(_message.Message):
    __slots__ = ("credential", "credential_id", "old_valid_until_unix_ms")
    CREDENTIAL_FIELD_NUMBER: _ClassVar[int]
    CREDENTIAL_ID_FIELD_NUMBER: _ClassVar[int]
    OLD_VALID_UNTIL_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    credential: str
    credential_id: str
    old_valid_until_unix_ms: int
    def __init__(self, credential: _Optional[str] = ..., credential_id: _Optional[str] = ..., old_valid_until_unix_ms: _Optional[int] = ...) -> None: ...

class Refused(_message.Message):
    __slots__ = ("seq", "reason")
    SEQ_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    seq: int
    reason: str
    def __init__(self, seq: _Optional[int] = ..., reason: _Optional[str] = ...) -> None: ...

class GatewayMessage(_message.Message):
    __slots__ = ("seq", "welcome", "heartbeat_ack", "source", "prepare", "commit", "abort", "stop", "forget", "rotate", "refused", "scan_outputs", "collector_token", "fetch_output")
    SEQ_FIELD_NUMBER: _ClassVar[int]
    WELCOME_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_ACK_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    PREPARE_FIELD_NUMBER: _ClassVar[int]
    COMMIT_FIELD_NUMBER: _ClassVar[int]
    ABORT_FIELD_NUMBER: _ClassVar[int]
    STOP_FIELD_NUMBER: _ClassVar[int]
    FORGET_FIELD_NUMBER: _ClassVar[int]
    ROTATE_FIELD_NUMBER: _ClassVar[int]
    REFUSED_FIELD_NUMBER: _ClassVar[int]
    SCAN_OUTPUTS_FIELD_NUMBER: _ClassVar[int]
    COLLECTOR_TOKEN_FIELD_NUMBER: _ClassVar[int]
    FETCH_OUTPUT_FIELD_NUMBER: _ClassVar[int]
    seq: int
    welcome: Welcome
    heartbeat_ack: HeartbeatAck
    source: SourceChunk
    prepare: Prepare
    commit: Commit
    abort: Abort
    stop: Stop
    forget: Forget
    rotate: RotateCredential
    refused: Refused
    scan_outputs: ScanOutputs
    collector_token: CollectorToken
    fetch_output: FetchOutput
    def __init__(self, seq: _Optional[int] = ..., welcome: _Optional[_Union[Welcome, _Mapping]] = ..., heartbeat_ack: _Optional[_Union[HeartbeatAck, _Mapping]] = ..., source: _Optional[_Union[SourceChunk, _Mapping]] = ..., prepare: _Optional[_Union[Prepare, _Mapping]] = ..., commit: _Optional[_Union[Commit, _Mapping]] = ..., abort: _Optional[_Union[Abort, _Mapping]] = ..., stop: _Optional[_Union[Stop, _Mapping]] = ..., forget: _Optional[_Union[Forget, _Mapping]] = ..., rotate: _Optional[_Union[RotateCredential, _Mapping]] = ..., refused: _Optional[_Union[Refused, _Mapping]] = ..., scan_outputs: _Optional[_Union[ScanOutputs, _Mapping]] = ..., collector_token: _Optional[_Union[CollectorToken, _Mapping]] = ..., fetch_output: _Optional[_Union[FetchOutput, _Mapping]] = ...) -> None: ...

class ScanOutputs(_message.Message):
    __slots__ = ("request_id", "ref", "job_id")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    REF_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    ref: MemberRef
    job_id: str
    def __init__(self, request_id: _Optional[str] = ..., ref: _Optional[_Union[MemberRef, _Mapping]] = ..., job_id: _Optional[str] = ...) -> None: ...

class FetchOutput(_message.Message):
    __slots__ = ("request_id", "ref", "job_id", "path", "size", "sha256")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    REF_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    ref: MemberRef
    job_id: str
    path: str
    size: int
    sha256: str
    def __init__(self, request_id: _Optional[str] = ..., ref: _Optional[_Union[MemberRef, _Mapping]] = ..., job_id: _Optional[str] = ..., path: _Optional[str] = ..., size: _Optional[int] = ..., sha256: _Optional[str] = ...) -> None: ...

class OutputFilePiece(_message.Message):
    __slots__ = ("request_id", "error", "data")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    error: str
    data: bytes
    def __init__(self, request_id: _Optional[str] = ..., error: _Optional[str] = ..., data: _Optional[bytes] = ...) -> None: ...

class OutputFileStored(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...
