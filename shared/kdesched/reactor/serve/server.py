"""``kdesched serve``: the whole reactor in one process, no Knative needed.

Why: many clusters have no Knative, and a plain Deployment is the simplest way to run kdesched.
This loop does what the Knative wiring does, in-process: watch Nodes (:mod:`kdesched.reactor.io.watch`), classify,
dispatch each semantic event to the same reactor code the functions call (threads, so bursts
coalesce exactly as with containerConcurrency > 1), run the periodic sweep, and serve the
CloudEvents HTTP endpoint for manual runs plus /healthz, /readyz and /metrics.

Each job is a collaborator: :class:`~kdesched.reactor.serve.leader.Leadership` (only the holder of
the ``<lease>-leader`` Lease watches and runs; the others wait and still answer HTTP; it checks the
Leases before campaigning, so a missing namespace or refusing RBAC exits 1 naming the fix, and it
steps down by client-go's rules, after which ``serve`` shuts down as on SIGTERM and exits 0),
:class:`~kdesched.reactor.serve.dispatch.Dispatcher` (events and sweeps on worker threads, retried
while busy) and :class:`~kdesched.reactor.io.reconcile.NodeRecorder` (the start-up reconcile and the
node record, the same code as the classifier function's). :class:`ReactorServer` composes them with
the reactor, the watch or the cache, and HTTP.

Warm cache (``--cache``, on by default): a :class:`~kdesched.kube.cache.ClusterCache` LISTs and
WATCHes the kinds the policy reads, runs plan from it (:class:`~kdesched.reactor.io.loaders.CachedLoader`), and
its Node reflector also feeds the classifier (one Node watch). Until a kind is listed, or once the
cache is past its ceiling, runs LIST per event as without it (docs/reactor.md, "Warm cache").

Shutdown (SIGTERM -> :meth:`ReactorServer.shutdown`): a threading.Event stops the watch, cuts
settle windows short, abandons a run that has not started evicting, and tells a run that is
evicting to stop (the evictor checks the event between batches). Runs get ``drain_seconds``
(``--drain-seconds``, default :data:`DEFAULT_DRAIN_SECONDS`) to end; then, ended or not, HTTP stops,
the leader Lease is released, the node record written and ``run`` returns 0. All of it must end
before the kubelet's SIGKILL: one deadline, the drain plus :data:`SHUTDOWN_MARGIN_SECONDS`, which
the Deployment's ``terminationGracePeriodSeconds`` (30) covers after the default drain
(tests/reactor/test_serve_failures.py checks the manifest against both); the release and the
record write try each request once, with a timeout from the time left.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from kdesched.evictor.metrics import REGISTRY
from kdesched.kube.cache import DEFAULT_MAX_OBJECTS, RECOVER_FRACTION, ClusterCache
from kdesched.kube.client import NO_READ_RETRY, KubeClient
from kdesched.kube.errors import ApiError
from kdesched.kube.usage import MetricsCollector
from kdesched.policy.types import Policy
from kdesched.policy.usage import needs_usage
from kdesched.reactor import metrics as m
from kdesched.reactor.events.classifier import Classifier
from kdesched.reactor.events.routing import kinds_needed
from kdesched.reactor.io.lease import default_identity
from kdesched.reactor.io.loaders import CachedLoader
from kdesched.reactor.io.reconcile import NodeRecorder, NodeRecordStore
from kdesched.reactor.io.watch import ClassifierFeed, NodeWatcher
from kdesched.reactor.run.runner import Reactor
from kdesched.reactor.run.settings import ReactorSettings
from kdesched.reactor.serve.dispatch import Dispatcher
from kdesched.reactor.serve.leader import LEADER_SUFFIX, Leadership, LeaseAccessError

log = logging.getLogger("kdesched.reactor.serve")

RECORD_SECONDS = 10.0  # how often the leader writes the node record when it changed
DEFAULT_DRAIN_SECONDS = 15.0  # how long a stopping serve waits for runs in flight to end
SHUTDOWN_MARGIN_SECONDS = 10.0  # after the drain: stop HTTP, release the leader Lease, write the node record
HTTP_GRACE_SECONDS = 3.0  # of that margin: requests in flight when HTTP stops (runs were told to stop)
EXIT_SECONDS = 1.0  # of that margin: left after the release and the record write, for the exit itself


AppFactory = Callable[["ReactorServer"], Any]  # returns a WSGI app (the functions layer builds it)


class _CacheCollector(Collector):
    """``kdesched_cache_*`` on /metrics, read from the current server's cache at scrape time."""

    def __init__(self) -> None:
        self.cache: ClusterCache | None = None
        self.server: ReactorServer | None = None

    def collect(self) -> Iterable[GaugeMetricFamily]:
        cache = self.cache
        objects = GaugeMetricFamily("kdesched_cache_objects", "Objects in the watch cache of kdesched serve, by kind.",
                                    labels=["kind"])
        size = GaugeMetricFamily("kdesched_cache_bytes_estimate",
                                 "Estimated memory of the watch cache's records (objects x measured bytes per record).")
        synced = GaugeMetricFamily("kdesched_cache_synced", "1 once the kind's first LIST is in the watch cache.",
                                   labels=["kind"])
        off = GaugeMetricFamily("kdesched_cache_disabled",
                                "1 when the watch cache gave up (over its ceiling): runs LIST per event.")
        relists = GaugeMetricFamily("kdesched_cache_relists_gone", "Re-LISTs after a 410 Gone watch, all kinds.")
        back = GaugeMetricFamily("kdesched_cache_recoveries", "Times the watch cache came back on after giving up "
                                 f"(its objects fell under {RECOVER_FRACTION:.0%} of the ceiling).")
        read = GaugeMetricFamily("kdesched_cache_read_bytes", "Bytes the watch cache read (LIST pages and WATCH streams).")
        backoffs = GaugeMetricFamily("kdesched_cache_backoffs", "Times the watch cache waited before re-listing or "
                                     "re-watching (after a 410, a failed LIST or WATCH), all kinds.")
        backoff_s = GaugeMetricFamily("kdesched_cache_backoff_seconds", "Seconds the watch cache spent in those waits.")
        ceiling = GaugeMetricFamily("kdesched_cache_max_objects", "The watch cache's ceiling (objects), from "
                                    "--cache-max-objects or the container's memory limit.")
        stale = GaugeMetricFamily("kdesched_cache_stale", "1 while the kind has been neither listed nor watched for "
                                  "longer than the watch cache's bound (120 s): not served, runs LIST it per event.",
                                  labels=["kind"])
        runs = GaugeMetricFamily("kdesched_cache_snapshots", "Run snapshots of kdesched serve, by where they came "
                                 "from: cache (the watch cache) or list (LISTed for the run).", labels=["source"])
        server = self.server
        if server is not None:
            runs.add_metric(["cache"], server.snapshots_from_cache)
            runs.add_metric(["list"], server.snapshots_listed)
        if cache is not None:
            stats = cache.stats()
            too_old = {kind for kind, _ in stats.stale}
            for kind, count in stats.objects.items():
                objects.add_metric([kind], count)
                synced.add_metric([kind], 1 if kind in stats.synced else 0)
                stale.add_metric([kind], 1 if kind in too_old else 0)
            size.add_metric([], stats.bytes_estimate)
            off.add_metric([], 1 if stats.disabled else 0)
            relists.add_metric([], stats.relists_gone)
            back.add_metric([], stats.recoveries)
            read.add_metric([], stats.bytes_read)
            backoffs.add_metric([], stats.backoffs)
            backoff_s.add_metric([], stats.backoff_seconds)
            ceiling.add_metric([], stats.max_objects)
        return [objects, size, synced, stale, off, relists, back, read, runs, backoffs, backoff_s, ceiling]


CACHE_METRICS = _CacheCollector()
REGISTRY.register(CACHE_METRICS)


class ReactorServer:
    """The serve loop. ``app_factory`` builds the HTTP app (kept outside the reactor layer: Flask
    and CloudEvents live in the functions layer); None = no HTTP endpoint."""

    def __init__(self, policy: Policy, settings: ReactorSettings, client: KubeClient, *,
                 host: str = "0.0.0.0", port: int = 8080, app_factory: AppFactory | None = None,
                 sweep_interval_seconds: float | None = None, leader_election: bool = True,
                 identity: str | None = None, workers: int = 8, retry_delay_seconds: float = 5.0,
                 watch_timeout_seconds: int = 300, cache: bool = True,
                 cache_max_objects: int = DEFAULT_MAX_OBJECTS, drain_seconds: float = DEFAULT_DRAIN_SECONDS,
                 clock: Callable[[], float] = time.monotonic, http_concurrency: int = 10) -> None:
        if not (math.isfinite(drain_seconds) and drain_seconds >= 0):
            raise ValueError(f"drain_seconds must be a finite number >= 0, got {drain_seconds!r}")
        self.stop = threading.Event()
        self.identity = identity or default_identity()
        self.client = client
        self.settings = settings
        self.reactor = Reactor(policy, settings, client, identity=self.identity, stop=self.stop)
        self.classifier = Classifier()
        self.node_record = NodeRecordStore(client, settings.lease_namespace, f"{settings.lease_name}{LEADER_SUFFIX}",
                                           self.identity)
        self.node_records = NodeRecorder(self.node_record, self.classifier)  # the same code as the classifier function's
        self.dispatcher = Dispatcher(self.reactor, self.stop, workers=workers, retry_delay_seconds=retry_delay_seconds,
                                     recorded_mark=self.node_records.recorded_mark)
        self.dispatch = self.dispatcher.dispatch
        self.reports = self.dispatcher.reports  # recent reports (bounded), for tests and debugging
        self.watcher = NodeWatcher(client, self.classifier, self.dispatch, stop=self.stop,
                                   watch_timeout_seconds=watch_timeout_seconds)
        self.cache: ClusterCache | None = None
        self.feed: ClassifierFeed | None = None
        self.loader: CachedLoader | None = None
        if cache:
            # the kinds this policy's runs read (Nodes, Pods, PDBs; the others only when an evictor
            # setting looks them up): a kind nothing reads is not held in memory
            self.cache = ClusterCache(client, kinds=kinds_needed(self.reactor.policy), max_objects=cache_max_objects,
                                      stop=self.stop, watch_timeout_seconds=watch_timeout_seconds)
            # (the watcher's ``listed`` event keeps meaning "the node list is in", whoever LISTs)
            self.feed = ClassifierFeed(self.classifier, self.dispatch, listed=self.watcher.listed)
            self.cache.listen("Node", self.feed)  # one Node watch for the classifier and the cache
            # a replacement turned Ready: the paced moves of its workload go on now, not at their timer
            self.cache.on_pod_ready(self.reactor.pod_turned_ready)
            self.loader = CachedLoader(self.cache)
            self.reactor.loader = self.loader  # plan from the cache once it is synced (LIST until then)
            CACHE_METRICS.cache = self.cache
        CACHE_METRICS.server = self
        self.sweep_interval = settings.sweep_interval_seconds if sweep_interval_seconds is None else sweep_interval_seconds
        self.leader_election = leader_election
        self.leadership = Leadership(client, settings, self.identity, enabled=leader_election, clock=clock)
        # node-local runs take no run Lease: the leader's tenure stops them at its renew deadline
        self.reactor.execution.still_leading = self.leadership.still_leading
        self._record_thread: threading.Thread | None = None
        self.drain_seconds = drain_seconds
        self.abandoned_runs = 0  # runs still in flight when the drain ended (told to stop, not waited for)
        self._led = False
        self.host, self.port = host, port
        self.app_factory = app_factory
        self.http_concurrency = http_concurrency  # POST / events at once (the app answers more 503)
        self._http: Any = None

    # -- readiness ---------------------------------------------------------------------------------
    def ready(self) -> tuple[bool, str]:
        """Ready = leader-capable: a standby that can take the Lease over is ready; one that cannot
        (not checked yet, or the last election attempt failed) says why."""
        leadership = self.leadership
        if not leadership.checked.is_set():
            return False, (f"starting: checking the Leases in namespace {self.settings.lease_namespace!r}"
                           + (f" ({leadership.error})" if leadership.error else ""))
        if leadership.error:
            return False, f"not leader-capable: {leadership.error}"
        if not leadership.is_leader.is_set():
            return True, "standby (not the leader)"
        if not self.classifier.seeded:
            return False, "leader, node cache not seeded yet"
        if self.cache is not None and not self.cache.disabled and self.cache.unsynced():
            return False, f"leader, {self.cache.describe()}"
        cache = f"; {self.cache.describe()}" if self.cache is not None else ""
        brake = self.reactor.brake_status.status()  # the health brake holds evictions: ready all the same
        return True, f"leader, watching {len(self.classifier)} node(s){cache}" + (f"; {brake}" if brake else "")

    @property
    def snapshots_from_cache(self) -> int:
        return self.loader.from_cache if self.loader is not None else 0

    @property
    def snapshots_listed(self) -> int:
        return self.loader.listed if self.loader is not None else 0

    # -- leading ----------------------------------------------------------------------------------
    def _lead(self) -> None:
        """Watch and sweep while we hold the leader Lease; step down when it cannot be kept."""
        self.leadership.is_leader.set()
        self._led = True
        m.LEADER.labels(self.identity).set(1)
        log.info("leading as %s", self.identity)
        if self.cache is not None:
            self.cache.start()  # its Node reflector feeds the classifier too
        else:
            threading.Thread(target=self.watcher.run, name="kdesched-watch", daemon=True).start()
        if self.sweep_interval > 0:
            threading.Thread(target=self.dispatcher.sweep_loop, args=(self.sweep_interval, self.leadership.is_leader),
                             name="kdesched-sweep", daemon=True).start()
        # moves a previous leader (or this process before a restart) left paced: continue them
        threading.Thread(target=self.reactor.resume, name="kdesched-resume", daemon=True).start()
        if needs_usage(self.reactor.policy)[0] and self.reactor.readings.metrics_collector is None:
            # balancing on KubernetesMetrics: keep a moving average of node usage, as upstream's collector
            collector = MetricsCollector(self.client)
            self.reactor.readings.metrics_collector = collector
            threading.Thread(target=collector.run, args=(self.stop,), name="kdesched-metrics", daemon=True).start()
        if self.leader_election:  # what changed while no one watched; then keep the record for the next one
            self._record_thread = threading.Thread(target=self._reconcile_and_record, name="kdesched-node-record",
                                                   daemon=True)
            self._record_thread.start()
        if not self.leader_election:
            self.stop.wait()
            return
        self.leadership.hold(self.stop)  # until the stop event, or stepping down (which sets it)

    # -- lifecycle ------------------------------------------------------------------------------------
    def start_http(self) -> None:
        if self.app_factory is None:
            return
        # gunicorn's threaded worker in this process, beside the watches and the sweep (never a
        # forked worker: the reactor's state and threads live here; kdesched.httpserver)
        from kdesched.httpserver import WSGIServer, threads_for

        threads = threads_for(self.http_concurrency)
        self._http = WSGIServer(self.host, self.port, self.app_factory(self), threads=threads,
                                graceful_seconds=HTTP_GRACE_SECONDS)
        self.port = self._http.server_port
        threading.Thread(target=self._http.serve_forever, name="kdesched-http", daemon=True).start()
        log.info("serving HTTP on %s:%d (gunicorn gthread in this process, %d threads)", self.host, self.port, threads)

    def run(self) -> int:
        """Block until :meth:`shutdown`; returns the exit code: 0, or 1 when the Leases cannot be used
        (:meth:`Leadership.preflight <kdesched.reactor.serve.leader.Leadership.preflight>`: the error names
        the namespace and the fix)."""
        m.LEADER.labels(self.identity).set(0)  # a standby until it leads: the series exists from the start
        self.start_http()
        try:
            try:
                leading = self.leadership.preflight()
            except LeaseAccessError as exc:
                self.leadership.error = str(exc)
                log.error("cannot start: %s", exc)
                return 1
            except ApiError as exc:  # API server unreachable or failing: not a configuration error
                self.leadership.error = f"leader election failed: {exc}"
                log.warning("checking the Leases failed, retrying: %s", exc)
                self.leadership.checked.set()
                leading = False
            while not self.stop.is_set():
                if leading or self.leadership.acquire():
                    self._lead()
                    break
                # every retry period (client-go's RetryPeriod): a released Lease is taken within
                # it; a live holder's is still taken only once unchanged for a whole duration
                self.stop.wait(self.leadership.timing.retry_seconds)
        finally:
            self._cleanup()
        return 0

    def shutdown(self) -> None:
        """Ask the loop to stop (safe from a signal handler)."""
        self.stop.set()

    def _reconcile_and_record(self) -> None:
        """The start-up reconcile (:mod:`kdesched.reactor.io.reconcile`): once the first node LIST is in,
        dispatch what changed since the node record the previous leader kept; then keep the record
        up to date (every ``RECORD_SECONDS`` when something changed, and once at shutdown)."""
        while not self.watcher.listed.wait(0.1):
            if self.stop.is_set():
                return
        if self.stop.is_set():
            return
        self.node_records.reconcile(self.dispatch)
        while not self.stop.wait(RECORD_SECONDS):
            self.write_node_record()

    def write_node_record(self) -> None:
        """Write the node record if it changed since the last write (best effort, logged)."""
        self.node_records.write(force=True)

    def _cleanup(self) -> None:
        """Stop: runs in flight get ``drain_seconds`` to end (those still evicting were told to stop
        by the stop event and are not waited for longer), then HTTP stops, the leader Lease is
        released and the node record written, all by one deadline before the kubelet's SIGKILL
        (``drain_seconds`` + :data:`SHUTDOWN_MARGIN_SECONDS`, module docstring)."""
        started = time.monotonic()
        drained = started + self.drain_seconds
        end = drained + SHUTDOWN_MARGIN_SECONDS - EXIT_SECONDS  # the release and the record write by then
        self.stop.set()
        self.reactor.continuations.cancel_all()
        self.dispatcher.pool.shutdown(wait=False, cancel_futures=True)
        if self._record_thread is not None:  # it logs: let it end before the process (or a test) does
            self._record_thread.join(timeout=max(0.0, min(5.0, drained - time.monotonic())))
        while self.reactor.execution.active_runs and time.monotonic() < drained:
            time.sleep(0.05)
        self.abandoned_runs = self.reactor.execution.active_runs
        if self.abandoned_runs:
            log.warning("%d run(s) still in flight after the %gs drain: told to stop at their next eviction "
                        "batch, not waited for; releasing the Lease and exiting", self.abandoned_runs,
                        self.drain_seconds)
        if self._http is not None:  # stop accepting; requests in flight get HTTP_GRACE_SECONDS
            self._http.shutdown(timeout=HTTP_GRACE_SECONDS + 1)
            self._http = None
        self._hand_over(end)
        self.leadership.is_leader.clear()
        m.LEADER.labels(self.identity).set(0)
        log.info("stopped")

    def _hand_over(self, end: float) -> None:
        """Release the leader Lease (also one won by an attempt SIGTERM cut short), then write this
        leader's last node record, where the nodes of events it did not act on keep their marks
        from before them: the release first, as it is what a standby waits for; each request tried
        once (no read retries) and all by ``end``. What is not done by then is left (the Lease
        expires; the previous record stays)."""
        led = self._led and self.leader_election
        if not (self.leadership.won or led):
            return
        quick = self.client.sibling(read_retry=NO_READ_RETRY,
                                    request_timeout=max(0.1, (end - time.monotonic()) / 4))

        def hand_over() -> None:
            if self.leadership.won:
                self.leadership.release(quick)
            if led:
                self.node_records.hold(self.dispatcher.not_acted_on())
                self.node_records.store = NodeRecordStore(quick, self.node_record.namespace, self.node_record.name,
                                                          self.identity)
                self.node_records.write(force=True, released=True)

        worker = threading.Thread(target=hand_over, name="kdesched-hand-over", daemon=True)
        worker.start()
        worker.join(max(0.0, end - time.monotonic()))
        if worker.is_alive():
            log.warning("releasing the leader Lease and writing the node record did not end by the shutdown "
                        "deadline: left (the Lease expires by itself)")
