"""The errors of the event path, each carrying the HTTP answer it gets: a leaf module (standard
library only) that every layer may import.

Why types: the functions answer every event with a status Knative acts on (docs/reactor.md,
"Status codes"): 400 is final, 429 and 503 are retried. The map from exceptions to statuses used
to be a table of class names as strings (so that the HTTP part need not import the reactor, which
loads the kubernetes client into ``deadletter``): renaming a class silently turned its 429 into a
500. Now an exception says its own answer, by its base class here; the HTTP part
(:func:`kdesched_functions.common.error_status`) checks ``isinstance`` against these bases and
reads :attr:`KdeschedError.status`. A class raised deep in the reactor keeps its answer whatever it
is called or wherever it moves, and importing this module costs nothing.

The bases, by what the sender should do:

==========================  ======  ===========  =============================================
class                       status  Retry-After  meaning
==========================  ======  ===========  =============================================
:class:`InvalidEvent`       400     --           the event can never succeed as sent (``field``)
:class:`BodyTooLarge`       413     --           a body over the limit; never retried
:class:`TryLater`           429     yes          busy (another run holds the lock or Lease)
:class:`Unavailable`        503     yes          not now: stopping, not seeded, overloaded
:class:`CannotRun`          500     --           the run cannot be carried out (its message)
==========================  ======  ===========  =============================================

Never 404, 408 or 409 for a permanent error: Knative retries those (a test checks every class).
"""

from __future__ import annotations

from typing import ClassVar


class KdeschedError(Exception):
    """An error whose HTTP answer its class knows: ``status``, ``retry_after`` (seconds, for 429
    and 503) and ``field`` (the input field at fault, for a 400)."""

    status: ClassVar[int] = 500
    retry_after: ClassVar[int | None] = None
    field: str = ""


class InvalidEvent(KdeschedError, ValueError):
    """The event can never succeed as sent: 400 naming ``field``; Knative does not retry it."""

    status = 400

    def __init__(self, message: str, field: str = "") -> None:
        self.field = field
        super().__init__(message)


class BodyTooLarge(InvalidEvent):
    """A request body over the limit: 413 (not retried)."""

    status = 413


class TryLater(KdeschedError):
    """Busy now, fine later: 429 with Retry-After (Knative retries 429)."""

    status = 429
    retry_after = 5


class Unavailable(KdeschedError):
    """Cannot serve now (stopping, not ready, overloaded): 503 with Retry-After (retried)."""

    status = 503
    retry_after = 5


class Overloaded(Unavailable):
    """Every event slot of this process is taken (``containerConcurrency``): 503, retry soon."""

    retry_after = 1


class CannotRun(KdeschedError):
    """The run cannot be carried out as configured (a policy naming what the cluster lacks, an
    object the model cannot read, no broker for extra replies): 500 with its own message."""

    status = 500
