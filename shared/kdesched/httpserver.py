"""The production HTTP server of ``kdesched function NAME`` and ``kdesched serve``: gunicorn's
threaded worker (``gthread``), hosted in this process.

Why gunicorn: it is what functions-framework and Knative's Python samples serve ``create_app()``
with; werkzeug says its own server is for development. What we take from it is the part that makes
a server production-grade: its hardened HTTP/1.1 parser and limits (request line, header count and
size), a bounded thread pool, keep-alive handling, ``worker_connections``, and a graceful stop
(stop accepting, let requests in flight finish, up to ``graceful_timeout``).

Why its worker without its arbiter (no fork): every kdesched process holds state that must exist
once per container. The classifier's node digests (two copies would each see half the updates),
the evicting functions' per-node locks, coalescing windows and (``KDESCHED_CACHE=1``) watch cache,
``serve``'s leader election, watches, sweep and drain. gunicorn's arbiter forks its workers: the
state would live in a child, and ``serve``'s threads started before the fork would not exist in it.
So there is ONE worker, and it runs here, in a thread of the process that owns the state (the
same code in tests and in the container). The arbiter's other jobs are the kubelet's in a pod:
restarting a dead process (restartPolicy), killing a wedged one (the liveness probe on
``/healthz``), and signals (the CLI handles SIGTERM: ``kdesched.cli.serve``). More workers would not
buy CPU either: the shipped Services' CPU limits are 0.2 to 1 CPU (:func:`container_cpus` reads the
cgroup quota, not the host's cores) and, with the GIL, one process already uses one CPU.

Threads (:func:`threads_for`): the Service's ``containerConcurrency`` (``KDESCHED_CONCURRENCY``,
set beside it in knative/base/services.yaml; a deploy test keeps them equal) for events, plus
:data:`PROBE_THREADS` so that ``/healthz``, ``/readyz`` and a ``/metrics`` scrape are answered while
a five-minute run holds every event slot (Knative's probes do not pass through queue-proxy's
concurrency limit). The app admits at most ``containerConcurrency`` events at once and answers the
rest 503 with Retry-After at once (:class:`kdesched_functions.common.FunctionApp`).

Importing gunicorn costs a start (docs/benchmarks.md, "Function cold start"): this module imports
only the worker, its socket and config modules (not the arbiter), and logs through :mod:`logging` with a small
adapter instead of ``gunicorn.glogging`` (which loads ``logging.config`` and ``logging.handlers``).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import math
import os
import signal
import socket
import struct
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gunicorn import sock as gsock
from gunicorn.config import Config
from gunicorn.workers.gthread import ThreadWorker

log = logging.getLogger("kdesched.http")

PROBE_THREADS = 3
"""Threads beyond the event slots: a liveness probe, a readiness probe and a metrics scrape."""
DEFAULT_GRACEFUL_SECONDS = 10.0
"""How long a stopping server lets requests in flight finish (``graceful_timeout``)."""
KEEPALIVE_SECONDS = 5
"""Idle keep-alive connections (queue-proxy's, the broker's) stay open this long."""
READ_TIMEOUT_SECONDS = 10.0
"""How long a worker thread waits for the next bytes of a request (its head or body) or for a
client to take its answer: a connection stalled longer is closed, its thread freed (gunicorn's
``timeout`` is 0: no arbiter kills a stuck worker here)."""

WSGIApp = Callable[..., Any]


def container_cpus(root: str = "/sys/fs/cgroup") -> float | None:
    """The CPUs the container may use (its cgroup's CPU quota), None without a quota. cgroup v2
    ``cpu.max`` ("200000 100000" = 2 CPUs, "max 100000" = no quota), else cgroup v1
    ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us``. ``os.cpu_count()`` would count the host's cores."""
    base = Path(root)
    try:
        quota, _, period = (base / "cpu.max").read_text().strip().partition(" ")
        if quota == "max":
            return None
        return int(quota) / int(period or 100000)
    except (OSError, ValueError):
        pass
    try:
        q = int((base / "cpu" / "cpu.cfs_quota_us").read_text())
        p = int((base / "cpu" / "cpu.cfs_period_us").read_text())
        return q / p if q > 0 and p > 0 else None
    except (OSError, ValueError):
        return None


def threads_for(concurrency: int) -> int:
    """Worker threads for ``concurrency`` events at once: the events plus the probe reserve."""
    return max(1, concurrency) + PROBE_THREADS


def describe_cpus(cpus: float | None) -> str:
    if cpus is None:
        return f"no CPU quota ({os.cpu_count()} host cores)"
    return f"CPU quota {cpus:g}" + (f" (~{math.ceil(cpus)} core(s))" if cpus > 1 else "")


_STALL = threading.local()
"""``seen``: the request a worker thread is handling timed out (set by :class:`_Log`, read by
:class:`_Worker`; gunicorn logs the error and keeps the exception to itself)."""


class _Log:
    """gunicorn's logger interface over :mod:`logging` (records go to the process's handlers, JSON
    under ``LOG_FORMAT=json``). No access log: the functions log each answered event themselves."""

    def __init__(self, logger: logging.Logger) -> None:
        self._log = logger

    def critical(self, msg: str, *args: Any, **kw: Any) -> None:
        self._log.critical(msg, *args, **kw)

    def error(self, msg: str, *args: Any, **kw: Any) -> None:
        self._log.error(msg, *args, **kw)

    def warning(self, msg: str, *args: Any, **kw: Any) -> None:
        self._log.warning(msg, *args, **kw)

    def info(self, msg: str, *args: Any, **kw: Any) -> None:
        self._log.info(msg, *args, **kw)

    def debug(self, msg: str, *args: Any, **kw: Any) -> None:
        self._log.debug(msg, *args, **kw)

    def exception(self, msg: str, *args: Any, **kw: Any) -> None:
        exc = sys.exc_info()[1]
        if isinstance(exc, OSError) and exc.errno in (errno.EAGAIN, errno.EWOULDBLOCK):
            # the read timeout (_Worker): a client stalled mid-request, not a fault of ours
            _STALL.seen = True
            self._log.debug("closing a connection that stalled mid-request (%s)", exc)
            return
        self._log.exception(msg, *args, **kw)

    def log(self, lvl: int, msg: str, *args: Any, **kw: Any) -> None:
        self._log.log(lvl, msg, *args, **kw)

    def access(self, *args: Any) -> None:
        pass

    def reopen_files(self) -> None:
        pass

    def close_on_exec(self) -> None:
        pass


class _Application:
    """What a gunicorn worker serves: its configuration (``cfg``, gunicorn's own settings and
    validators) and the app (``wsgi()``). gunicorn's ``BaseApplication`` is the same thing plus
    the arbiter, which this module does not use (module docstring)."""

    def __init__(self, app: WSGIApp, options: dict[str, Any]) -> None:
        self.application = app
        self.cfg = Config()
        for key, value in options.items():
            self.cfg.set(key, value)
        self.cfg.validate()

    def wsgi(self) -> WSGIApp:
        return self.application


class _Worker(ThreadWorker):
    """gunicorn's threaded worker, run in a thread of this process instead of a forked child: the
    process that owns the state answers its HTTP (module docstring).

    Each connection a thread serves gets a read (and write) timeout, :data:`READ_TIMEOUT_SECONDS`:
    gthread reads a request's head and body in the pool thread, with no time limit, so a few
    connections that sent half a head and stalled (a buggy client, a peer gone on a half-open
    connection) held every thread, and ``/healthz`` stopped answering until the liveness probe
    restarted the pod. The timeout is the kernel's (``SO_RCVTIMEO`` / ``SO_SNDTIMEO``): gunicorn
    switches the socket between blocking (in a thread) and non-blocking (kept alive, on the
    poller) modes, which resets a Python-level timeout but not these. A connection that timed out
    is shut down at once: gunicorn's graceful close lingers (up to 2 s, on the worker's one event
    loop, where nothing else is accepted or dispatched meanwhile) for a peer to close, and a
    stalled peer never does."""

    read_timeout_seconds = READ_TIMEOUT_SECONDS

    def handle(self, conn: Any) -> Any:
        if not getattr(conn, "kdesched_timed", False):
            conn.kdesched_timed = True
            _set_io_timeouts(conn.sock, self.read_timeout_seconds)
        _STALL.seen = False
        result = super().handle(conn)
        if _STALL.seen:
            with contextlib.suppress(OSError):
                conn.sock.shutdown(socket.SHUT_RDWR)
        return result

    def init_signals(self) -> None:
        """The process's owner handles signals (the CLI); a worker thread cannot install them."""

    def is_parent_alive(self) -> bool:
        return True  # no arbiter to outlive

    def notify(self) -> None:
        """No arbiter reads the heartbeat: the liveness probe on /healthz is the watchdog."""

    def set_accept_enabled(self, enabled: bool) -> None:
        super().set_accept_enabled(enabled)
        if not enabled and not self.alive:
            # stopping: refuse new connections now (a forked gunicorn worker keeps its listener
            # until it exits, so they would wait in the backlog until the graceful stop ends)
            for listener in self.sockets:
                listener.close()


def _set_io_timeouts(sock: socket.socket, seconds: float) -> None:
    """A blocking ``recv``/``send`` on ``sock`` fails (EAGAIN) after ``seconds`` without progress."""
    whole = int(seconds)
    timeval = struct.pack("ll", whole, int((seconds - whole) * 1_000_000))
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, timeval)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, timeval)
    except OSError as exc:  # a socket already closed by its peer: its request fails anyway
        log.debug("could not set a read timeout on a connection: %s", exc)


def _tmp_dir() -> str | None:
    """Where gunicorn puts its (unlinked) heartbeat file: /dev/shm, a tmpfs writable in a container
    whose root filesystem is read-only (the shipped manifests), else the default temporary dir."""
    return "/dev/shm" if os.access("/dev/shm", os.W_OK) else None


class WSGIServer:
    """One WSGI app served on ``host:port`` by gunicorn's gthread worker, in-process. Bound at
    construction (``server_port`` is known at once, 0 picks a free port); :meth:`serve_forever`
    serves until :meth:`shutdown` (from another thread: stop accepting, let requests in flight end
    within ``graceful_seconds``, then return). ``read_timeout_seconds``: a connection that sends
    nothing more of its request (or takes nothing of its answer) for that long is closed."""

    def __init__(self, host: str, port: int, app: WSGIApp, *, threads: int,
                 graceful_seconds: float = DEFAULT_GRACEFUL_SECONDS, backlog: int = 2048,
                 worker_connections: int = 1000, read_timeout_seconds: float = READ_TIMEOUT_SECONDS) -> None:
        options = {"bind": [_bind(host, port)], "workers": 1, "worker_class": "gthread", "threads": threads,
                   "graceful_timeout": math.ceil(graceful_seconds), "timeout": 0, "keepalive": KEEPALIVE_SECONDS,
                   "backlog": backlog, "worker_connections": worker_connections, "worker_tmp_dir": _tmp_dir(),
                   "control_socket_disable": True}
        self.threads = threads
        self._gapp = _Application(app, options)
        self._log = _Log(log)
        address = (host, port)
        self._listener = gsock._sock_type(address)(address, self._gapp.cfg, self._log)
        self.server_port: int = int(self._listener.getsockname()[1])
        self._worker = _Worker(1, os.getppid(), [self._listener], self._gapp, 0, self._gapp.cfg, self._log)
        self._worker.read_timeout_seconds = read_timeout_seconds
        self._started = threading.Event()
        self._stopped = threading.Event()

    def serve_forever(self) -> None:
        """Serve until :meth:`shutdown`; closes the listening socket on the way out."""
        self._started.set()
        try:
            if self._worker.alive:
                self._worker.init_process()
        finally:
            self._listener.close()
            self._stopped.set()

    def shutdown(self, timeout: float | None = None) -> bool:
        """Stop accepting, let requests in flight finish (at most ``graceful_seconds``) and wait
        for :meth:`serve_forever` to return (at most ``timeout``). Returns whether it did."""
        worker = self._worker
        if not self._started.is_set():
            worker.alive = False
            self._listener.close()
            return True
        try:
            worker.handle_exit(signal.SIGTERM, None)
        except (OSError, AttributeError, ValueError):  # still booting: its loop sees alive False
            worker.alive = False
        return self._stopped.wait(timeout)


def _bind(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
