from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class NextIdRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class NextIdResponse(_message.Message):
    __slots__ = ("id",)
    ID_FIELD_NUMBER: _ClassVar[int]
    id: int
    def __init__(self, id: _Optional[int] = ...) -> None: ...

class NextIdsRequest(_message.Message):
    __slots__ = ("count",)
    COUNT_FIELD_NUMBER: _ClassVar[int]
    count: int
    def __init__(self, count: _Optional[int] = ...) -> None: ...

class NextIdsResponse(_message.Message):
    __slots__ = ("ids",)
    IDS_FIELD_NUMBER: _ClassVar[int]
    ids: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, ids: _Optional[_Iterable[int]] = ...) -> None: ...

class DecodeRequest(_message.Message):
    __slots__ = ("id",)
    ID_FIELD_NUMBER: _ClassVar[int]
    id: int
    def __init__(self, id: _Optional[int] = ...) -> None: ...

class DecodeResponse(_message.Message):
    __slots__ = ("id", "timestamp_ms", "datacenter_id", "worker_id", "sequence", "time")
    ID_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    DATACENTER_ID_FIELD_NUMBER: _ClassVar[int]
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    id: int
    timestamp_ms: int
    datacenter_id: int
    worker_id: int
    sequence: int
    time: str
    def __init__(self, id: _Optional[int] = ..., timestamp_ms: _Optional[int] = ..., datacenter_id: _Optional[int] = ..., worker_id: _Optional[int] = ..., sequence: _Optional[int] = ..., time: _Optional[str] = ...) -> None: ...

class StreamIdsRequest(_message.Message):
    __slots__ = ("count", "chunk_size")
    COUNT_FIELD_NUMBER: _ClassVar[int]
    CHUNK_SIZE_FIELD_NUMBER: _ClassVar[int]
    count: int
    chunk_size: int
    def __init__(self, count: _Optional[int] = ..., chunk_size: _Optional[int] = ...) -> None: ...

class GetInfoRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetInfoResponse(_message.Message):
    __slots__ = ("datacenter_id", "worker_id", "epoch_ms", "timestamp_ms", "max_batch", "ready", "layout")
    DATACENTER_ID_FIELD_NUMBER: _ClassVar[int]
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    EPOCH_MS_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    MAX_BATCH_FIELD_NUMBER: _ClassVar[int]
    READY_FIELD_NUMBER: _ClassVar[int]
    LAYOUT_FIELD_NUMBER: _ClassVar[int]
    datacenter_id: int
    worker_id: int
    epoch_ms: int
    timestamp_ms: int
    max_batch: int
    ready: bool
    layout: Layout
    def __init__(self, datacenter_id: _Optional[int] = ..., worker_id: _Optional[int] = ..., epoch_ms: _Optional[int] = ..., timestamp_ms: _Optional[int] = ..., max_batch: _Optional[int] = ..., ready: bool = ..., layout: _Optional[_Union[Layout, _Mapping]] = ...) -> None: ...

class Layout(_message.Message):
    __slots__ = ("name", "timestamp_bits", "datacenter_bits", "worker_bits", "sequence_bits", "epoch_ms", "max_id")
    NAME_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_BITS_FIELD_NUMBER: _ClassVar[int]
    DATACENTER_BITS_FIELD_NUMBER: _ClassVar[int]
    WORKER_BITS_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_BITS_FIELD_NUMBER: _ClassVar[int]
    EPOCH_MS_FIELD_NUMBER: _ClassVar[int]
    MAX_ID_FIELD_NUMBER: _ClassVar[int]
    name: str
    timestamp_bits: int
    datacenter_bits: int
    worker_bits: int
    sequence_bits: int
    epoch_ms: int
    max_id: int
    def __init__(self, name: _Optional[str] = ..., timestamp_bits: _Optional[int] = ..., datacenter_bits: _Optional[int] = ..., worker_bits: _Optional[int] = ..., sequence_bits: _Optional[int] = ..., epoch_ms: _Optional[int] = ..., max_id: _Optional[int] = ...) -> None: ...

class RangeRequest(_message.Message):
    __slots__ = ("from_ms", "to_ms")
    FROM_MS_FIELD_NUMBER: _ClassVar[int]
    TO_MS_FIELD_NUMBER: _ClassVar[int]
    from_ms: int
    to_ms: int
    def __init__(self, from_ms: _Optional[int] = ..., to_ms: _Optional[int] = ...) -> None: ...

class RangeResponse(_message.Message):
    __slots__ = ("min_id", "max_id")
    MIN_ID_FIELD_NUMBER: _ClassVar[int]
    MAX_ID_FIELD_NUMBER: _ClassVar[int]
    min_id: int
    max_id: int
    def __init__(self, min_id: _Optional[int] = ..., max_id: _Optional[int] = ...) -> None: ...
