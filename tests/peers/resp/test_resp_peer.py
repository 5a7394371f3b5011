"""The RESP front door (SPEC §8) with Redis's most used client library: redis-py, with its own
RESP2 and RESP3 parsers and with hiredis (the C parser most clients in other languages share),
against the real `snowflake serve`. A team that uses `INCR` for IDs switches by changing the
address only."""

import threading

import pytest
import redis
from redis.connection import _HiredisParser, _RESP2Parser, _RESP3Parser

EPOCH = 1288834974657

PARSERS = [
    pytest.param(_RESP2Parser, 2, id="python-resp2"),
    pytest.param(_RESP3Parser, 3, id="python-resp3"),
    pytest.param(_HiredisParser, 2, id="hiredis-resp2"),
    pytest.param(_HiredisParser, 3, id="hiredis-resp3"),
]


@pytest.fixture(scope="module")
def node():
    from conftest import Serve

    server = Serve("--resp-addr", "127.0.0.1:0", "--worker-id", "21", protocols=("resp",))
    yield server
    server.stop()


def client(node, parser, protocol):
    host, port = node.addrs["resp"]
    pool = redis.ConnectionPool(host=host, port=port, parser_class=parser, protocol=protocol,
                                client_name="orders-service", socket_timeout=5)
    return redis.Redis(connection_pool=pool)


def worker(snowflake_id):
    return (snowflake_id >> 12) & 0x1F


@pytest.mark.parametrize("parser,protocol", PARSERS)
def test_incr_incrby_and_the_snowflake_commands(node, parser, protocol):
    r = client(node, parser, protocol)
    assert r.ping()
    first = r.incr("orders:id")
    assert worker(first) == 21
    last = r.incrby("orders:id", 100)
    assert last > first
    # The caller owns the 100 consecutive IDs ending at the reply, all of one millisecond.
    owned = range(last - 99, last + 1)
    assert len({i >> 22 for i in owned}) == 1
    ids = r.execute_command("SNOWFLAKE.NEXT", 10)
    assert len(ids) == 10 and ids == sorted(ids) and ids[0] > last
    decoded = r.execute_command("SNOWFLAKE.DECODE", ids[0])
    if isinstance(decoded, list):  # RESP2: a flat array
        decoded = dict(zip(decoded[::2], decoded[1::2]))
    decoded = {(k.decode() if isinstance(k, bytes) else k): v for k, v in decoded.items()}
    assert decoded["worker_id"] == 21
    assert decoded["timestamp_ms"] == (ids[0] >> 22) + EPOCH
    assert r.client_getname() in (b"orders-service", "orders-service")
    with pytest.raises(redis.ResponseError, match="expected 1..=4096"):
        r.incrby("orders:id", 5000)
    with pytest.raises(redis.ResponseError, match="unknown command"):
        r.execute_command("GET", "x")
    r.close()


@pytest.mark.parametrize("parser,protocol", PARSERS)
def test_pipelines_and_many_threads_never_share_an_id(node, parser, protocol):
    results, errors = [], []

    def work():
        try:
            r = client(node, parser, protocol)
            for _ in range(20):
                pipe = r.pipeline(transaction=False)
                for _ in range(50):
                    pipe.incr("k")
                pipe.incrby("k", 10)
                answers = pipe.execute()
                results.extend(answers[:-1])
                results.extend(range(answers[-1] - 9, answers[-1] + 1))
            r.close()
        except Exception as err:  # noqa: BLE001
            errors.append(repr(err))

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(results) == 4 * 20 * 60
    assert len(set(results)) == len(results), "an ID issued twice"
