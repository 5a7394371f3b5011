"""A client for the Snowflake ID service: unique 63-bit IDs over gRPC from a list of nodes, with
a deadline on every attempt, health-aware failover, a bound on every call, optional prefetch,
and fork safety.

>>> from snowflake_client import Client
>>> client = Client(["10.0.0.1:50051", "10.0.0.2:50051"], prefetch=True)  # doctest: +SKIP
>>> client.next_id()                                                       # doctest: +SKIP
1724551110457221119

See docs/clients.md in the repository for the guarantees and the trade-offs.
"""

from ._async import AsyncClient
from ._client import Client
from ._core import MAX_IDS_PER_REQUEST, Stats
from ._errors import Closed, InvalidArgument, SnowflakeError, Unavailable
from ._layout import DecodedId, IdRange, Layout
from ._tls import Tls

__all__ = [
    "AsyncClient",
    "Client",
    "Closed",
    "DecodedId",
    "IdRange",
    "InvalidArgument",
    "Layout",
    "MAX_IDS_PER_REQUEST",
    "SnowflakeError",
    "Stats",
    "Tls",
    "Unavailable",
]

__version__ = "0.1.0"
