"""The gRPC contract (SPEC §5), checked with Google's own stack: stubs that `grpc_tools.protoc`
generates from proto/snowflake/v1/snowflake.proto, the `grpcio` client, and the standard
`grpc.health.v1` client from `grpcio-health-checking`, against the real `snowflake serve`."""

import threading
import time

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from conftest import wait_until

SERVICE = "snowflake.v1.Snowflake"
EPOCH = 1288834974657
MAX_BATCH = 100_000


class Peer:
    """A channel to a running server, with the Snowflake and Health stubs."""

    def __init__(self, server, pb):
        host, port = server.addrs["grpc"]
        self.server = server
        self.pb, stubs = pb
        self.channel = grpc.insecure_channel(f"{host}:{port}")
        grpc.channel_ready_future(self.channel).result(timeout=10)
        self.stub = stubs.SnowflakeStub(self.channel)
        self.health = health_pb2_grpc.HealthStub(self.channel)

    def status(self, service=""):
        return self.health.Check(health_pb2.HealthCheckRequest(service=service), timeout=5).status

    def close(self):
        self.channel.close()


@pytest.fixture
def peer(serve, pb):
    server = serve("--datacenter-id", "7", "--worker-id", "13", protocols=("grpc",))
    peer = Peer(server, pb)
    assert wait_until(lambda: peer.status() == health_pb2.HealthCheckResponse.SERVING), "never SERVING"
    yield peer
    peer.close()


def invalid_argument(call):
    with pytest.raises(grpc.RpcError) as raised:
        call()
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT, raised.value
    return raised.value.details()


def fields(peer_id):
    return (
        (peer_id >> 22) + EPOCH,
        (peer_id >> 17) & 0x1F,
        (peer_id >> 12) & 0x1F,
        peer_id & 0xFFF,
    )


def test_next_id_carries_the_node_pair_and_the_current_time(peer):
    info = peer.stub.GetInfo(peer.pb.GetInfoRequest(), timeout=5)
    new_id = peer.stub.NextId(peer.pb.NextIdRequest(), timeout=5).id
    after = peer.stub.GetInfo(peer.pb.GetInfoRequest(), timeout=5)
    timestamp_ms, datacenter, worker, _ = fields(new_id)
    assert 0 < new_id < 2**63
    assert (datacenter, worker) == (7, 13)
    assert info.timestamp_ms <= timestamp_ms <= after.timestamp_ms


def test_next_ids_are_strictly_increasing(peer):
    first = peer.stub.NextId(peer.pb.NextIdRequest(), timeout=5).id
    ids = list(peer.stub.NextIds(peer.pb.NextIdsRequest(count=1000), timeout=5).ids)
    assert len(ids) == 1000
    assert first < ids[0]
    assert all(a < b for a, b in zip(ids, ids[1:]))
    biggest = peer.stub.NextIds(peer.pb.NextIdsRequest(count=MAX_BATCH), timeout=30).ids
    assert len(biggest) == MAX_BATCH and biggest[0] > ids[-1]


def test_decode_the_worked_example(peer):
    decoded = peer.stub.Decode(peer.pb.DecodeRequest(id=1724551110457221119), timeout=5)
    assert decoded.id == 1724551110457221119
    assert decoded.timestamp_ms == 1700000000000
    assert (decoded.datacenter_id, decoded.worker_id, decoded.sequence) == (7, 13, 4095)
    assert decoded.time == "2023-11-14T22:13:20.000Z"
    fresh = peer.stub.NextId(peer.pb.NextIdRequest(), timeout=5).id
    mine = peer.stub.Decode(peer.pb.DecodeRequest(id=fresh), timeout=5)
    assert (mine.timestamp_ms, mine.datacenter_id, mine.worker_id, mine.sequence) == fields(fresh)


def test_get_info(peer):
    info = peer.stub.GetInfo(peer.pb.GetInfoRequest(), timeout=5)
    assert (info.datacenter_id, info.worker_id) == (7, 13)
    assert info.epoch_ms == EPOCH
    assert info.timestamp_ms > 1_700_000_000_000
    assert info.max_batch == MAX_BATCH
    assert info.ready


def test_stream_ids_in_chunks_in_order(peer):
    sizes, ids = [], []
    for message in peer.stub.StreamIds(peer.pb.StreamIdsRequest(count=20_000), timeout=30):
        sizes.append(len(message.ids))
        ids.extend(message.ids)
    assert sizes == [4096, 4096, 4096, 4096, 3616]
    assert all(a < b for a, b in zip(ids, ids[1:]))
    chunked = peer.stub.StreamIds(peer.pb.StreamIdsRequest(count=10, chunk_size=3), timeout=10)
    assert [len(m.ids) for m in chunked] == [3, 3, 3, 1]


def test_bad_arguments_are_invalid_argument_naming_the_value(peer):
    stub, pb = peer.stub, peer.pb
    assert invalid_argument(lambda: stub.NextIds(pb.NextIdsRequest(count=0), timeout=5)) == (
        "invalid count: expected 1..=100000, found 0"
    )
    assert invalid_argument(lambda: stub.NextIds(pb.NextIdsRequest(), timeout=5)) == (
        "invalid count: expected 1..=100000, found 0"
    )
    assert invalid_argument(lambda: stub.NextIds(pb.NextIdsRequest(count=100_001), timeout=5)) == (
        "invalid count: expected 1..=100000, found 100001"
    )
    message = invalid_argument(lambda: stub.Decode(pb.DecodeRequest(id=-1), timeout=5))
    assert "-1" in message and "9223372036854775807" in message, message
    message = invalid_argument(lambda: list(stub.StreamIds(pb.StreamIdsRequest(count=0), timeout=5)))
    assert message == "invalid count: expected 1..=100000000, found 0"
    message = invalid_argument(
        lambda: list(stub.StreamIds(pb.StreamIdsRequest(count=5, chunk_size=100_001), timeout=5))
    )
    assert "found 100001" in message, message
    # The connection stays usable after every refusal.
    assert stub.NextId(pb.NextIdRequest(), timeout=5).id > 0


def test_health_reports_both_names_and_watch_streams(peer):
    serving = health_pb2.HealthCheckResponse.SERVING
    assert peer.status("") == serving
    assert peer.status(SERVICE) == serving
    with pytest.raises(grpc.RpcError) as raised:
        peer.status("no.such.Service")
    assert raised.value.code() == grpc.StatusCode.NOT_FOUND
    watch = peer.health.Watch(health_pb2.HealthCheckRequest(service=SERVICE), timeout=5)
    assert next(watch).status == serving
    watch.cancel()


def test_concurrent_clients_never_get_the_same_id(peer):
    results, errors = [], []

    def work():
        try:
            ids = []
            for _ in range(20):
                ids.append(peer.stub.NextId(peer.pb.NextIdRequest(), timeout=5).id)
                ids.extend(peer.stub.NextIds(peer.pb.NextIdsRequest(count=50), timeout=5).ids)
            results.append(ids)
        except Exception as error:  # noqa: BLE001 - reported below
            errors.append(error)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert not errors, errors
    every = [i for ids in results for i in ids]
    assert len(every) == 4 * 20 * 51
    assert len(set(every)) == len(every)


def test_sigterm_with_an_open_channel_exits_cleanly(peer):
    peer.stub.NextId(peer.pb.NextIdRequest(), timeout=5)
    watch = peer.health.Watch(health_pb2.HealthCheckRequest(service=""), timeout=30)
    assert next(watch).status == health_pb2.HealthCheckResponse.SERVING
    started = time.monotonic()
    assert peer.server.stop() == 0
    # The open watch must not hold the drain up to the 10 s shutdown timeout.
    assert time.monotonic() - started < 5
