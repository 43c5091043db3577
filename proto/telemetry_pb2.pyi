from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class SourceBatch(_message.Message):
    __slots__ = ("source", "kind", "tag_names", "offset", "tag", "step", "wall_time", "value")
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    TAG_NAMES_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    TAG_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    WALL_TIME_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    source: str
    kind: str
    tag_names: _containers.RepeatedScalarFieldContainer[str]
    offset: bytes
    tag: bytes
    step: bytes
    wall_time: bytes
    value: bytes
    def __init__(self, source: _Optional[str] = ..., kind: _Optional[str] = ..., tag_names: _Optional[_Iterable[str]] = ..., offset: _Optional[bytes] = ..., tag: _Optional[bytes] = ..., step: _Optional[bytes] = ..., wall_time: _Optional[bytes] = ..., value: _Optional[bytes] = ...) -> None: ...

class Counters(_message.Message):
    __slots__ = ("corrupt_records", "dropped_records", "dropped_bytes")
    CORRUPT_RECORDS_FIELD_NUMBER: _ClassVar[int]
    DROPPED_RECORDS_FIELD_NUMBER: _ClassVar[int]
    DROPPED_BYTES_FIELD_NUMBER: _ClassVar[int]
    corrupt_records: int
    dropped_records: int
    dropped_bytes: int
    def __init__(self, corrupt_records: _Optional[int] = ..., dropped_records: _Optional[int] = ..., dropped_bytes: _Optional[int] = ...) -> None: ...

class Batch(_message.Message):
    __slots__ = ("seq", "attempt", "member", "sources", "counters")
    SEQ_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    MEMBER_FIELD_NUMBER: _ClassVar[int]
    SOURCES_FIELD_NUMBER: _ClassVar[int]
    COUNTERS_FIELD_NUMBER: _ClassVar[int]
    seq: int
    attempt: str
    member: str
    sources: _containers.RepeatedCompositeFieldContainer[SourceBatch]
    counters: Counters
    def __init__(self, seq: _Optional[int] = ..., attempt: _Optional[str] = ..., member: _Optional[str] = ..., sources: _Optional[_Iterable[_Union[SourceBatch, _Mapping]]] = ..., counters: _Optional[_Union[Counters, _Mapping]] = ...) -> None: ...

class Ack(_message.Message):
    __slots__ = ("seq", "accepted", "duplicates")
    SEQ_FIELD_NUMBER: _ClassVar[int]
    ACCEPTED_FIELD_NUMBER: _ClassVar[int]
    DUPLICATES_FIELD_NUMBER: _ClassVar[int]
    seq: int
    accepted: int
    duplicates: int
    def __init__(self, seq: _Optional[int] = ..., accepted: _Optional[int] = ..., duplicates: _Optional[int] = ...) -> None: ...
