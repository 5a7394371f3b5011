"""The client's typed errors: what a caller can catch and what each one means."""

from __future__ import annotations

from typing import Mapping


class SnowflakeError(Exception):
    """The base of every error the client raises on purpose."""


class InvalidArgument(SnowflakeError, ValueError):
    """A request or setting is wrong, and retrying it unchanged will not help: a count, an ID
    or a time out of range, a malformed endpoint, an unreadable TLS file, or a request the
    service itself refused with ``INVALID_ARGUMENT``. The message names the value and the
    valid range."""


class Unavailable(SnowflakeError):
    """No endpoint could serve the call within ``give_up_after``.

    ``waited`` is how long the call tried (seconds); ``reasons`` maps each endpoint, as given
    to the client, to its last failure (or ``"not tried"``).
    """

    def __init__(self, waited: float, reasons: Mapping[str, str]):
        self.waited = waited
        self.reasons = dict(reasons)
        details = "; ".join(f"{name}: {why}" for name, why in self.reasons.items())
        super().__init__(f"no endpoint could serve within {round(waited * 1000)} ms: {details}")


class Closed(SnowflakeError):
    """The client was closed: it hands out nothing more (buffered IDs were dropped)."""

    def __init__(self) -> None:
        super().__init__("the client is closed")
