"""Where the cluster is: an explicit kubeconfig, the in-cluster service account, or $KUBECONFIG.

Why: the same binary runs as a Knative Service (in-cluster), as ``kdesched run --kubeconfig`` on a
laptop and against a local fake in tests. The resolution order is fixed and every failure becomes
one :class:`ConfigError` line that names the file or the missing variable, never a traceback.

The official client's kubeconfig loader ignores a user's impersonation fields (``as``,
``as-groups``, ``as-uid``, ``as-user-extra``, what ``kubectl --as`` honours); silently acting as the
underlying identity instead would be a privilege surprise, so :func:`load_impersonation` reads them
and the client sends the ``Impersonate-*`` headers.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import urllib3
import yaml

from kdesched.kube.errors import ConfigError, trim

if TYPE_CHECKING:
    from kubernetes.client import Configuration

SERVICE_HOST_ENV = "KUBERNETES_SERVICE_HOST"
DEFAULT_KUBECONFIG = "~/.kube/config"

# urllib3 retries only the transport: one more connect, and one more read for idempotent methods
# (a kept-alive connection the server closed meanwhile). HTTP statuses are never retried here:
# the evictor's tenacity policy owns that, so attempts and backoff are counted in one place.
TRANSPORT_RETRIES = urllib3.Retry(total=2, connect=1, read=1, status=0, redirect=0, other=0,
                                  raise_on_status=False, backoff_factor=0)
# TCP keepalive on every connection of the pool (the kubernetes client's ``keep_alive``: client-go's
# timings, probes after 30 s idle, every 15 s, 9 of them). A watch of a quiet kind carries no byte
# for minutes: without probes a load balancer's or NAT's idle timeout drops it silently (Azure's
# LB: 4 minutes, less than the 300 s watch), and a peer gone without a reset is found by the kernel
# after ~165 s instead of by the watch's read timeout (timeoutSeconds + 30 s).
TCP_KEEPALIVE = True


# Client-side limits. kube-scheduler v1.24 ships qps 50 / burst 100 (a control-plane component that
# writes a binding per pod); a descheduler's writes cost the API server more than that (each
# eviction deletes a pod, and its controller and the scheduler then create and bind a replacement),
# so it must not ask for more than a scheduler does. 50 requests/s still carries a 700-eviction
# pass (an eviction and an Event each) in ~28 s, 5x faster than upstream's shipped 5 requests/s.
DEFAULT_QPS = 50.0
DEFAULT_BURST = 100
DEFAULT_MAX_CONCURRENT_EVICTIONS = 16
QPS_ENV = "KDESCHED_KUBE_API_QPS"
BURST_ENV = "KDESCHED_KUBE_API_BURST"
CONCURRENCY_ENV = "KDESCHED_MAX_CONCURRENT_EVICTIONS"
MAX_CONCURRENCY = 256
MAX_QPS = 10_000.0
MAX_BURST = 10_000


@dataclass(frozen=True, slots=True)
class ClientLimits:
    """How hard one client may use the API server: a token bucket (``qps`` refill, ``burst`` size,
    every request takes a token, as client-go's flowcontrol) and how many evictions may be in flight
    at once (the HTTP connection pool is sized for it)."""

    qps: float = DEFAULT_QPS
    burst: int = DEFAULT_BURST
    max_concurrent_evictions: int = DEFAULT_MAX_CONCURRENT_EVICTIONS

    def __post_init__(self) -> None:
        for field, problem in limit_problems(self.qps, self.burst, self.max_concurrent_evictions):
            raise ValueError(f"{field}: {problem}")

    @property
    def connections(self) -> int:
        """The urllib3 pool size: every eviction in flight, as many Event posts beside them, and a few
        for reads and watches (a request beyond the pool opens a connection that is thrown away)."""
        return 2 * self.max_concurrent_evictions + 8


def limit_problems(qps: float, burst: int, concurrency: int) -> list[tuple[str, str]]:
    """(setting, problem) for each invalid value: 0 < qps <= 10,000, 1 <= burst <= 10,000,
    1 <= concurrency <= 256."""
    import math

    out = []
    if not (isinstance(qps, int | float) and math.isfinite(qps) and 0 < qps <= MAX_QPS):
        out.append(("qps", f"must be a number > 0 and at most {MAX_QPS:,.0f}, got {qps!r}"))
    if not (isinstance(burst, int) and 1 <= burst <= MAX_BURST):
        out.append(("burst", f"must be an integer from 1 to {MAX_BURST:,}, got {burst!r}"))
    if not (isinstance(concurrency, int) and 1 <= concurrency <= MAX_CONCURRENCY):
        out.append(("max_concurrent_evictions", f"must be an integer from 1 to {MAX_CONCURRENCY}, got {concurrency!r}"))
    return out


def parse_qps(text: str) -> float:
    """A ``--kube-api-qps`` / ``$KDESCHED_KUBE_API_QPS`` value: a finite number > 0, at most 10,000."""
    import math

    why = f"must be a number > 0 (requests per second) and at most {MAX_QPS:,.0f}, got {text!r}"
    try:
        value = float(text)
    except ValueError:
        raise ValueError(why) from None
    if not math.isfinite(value) or not 0 < value <= MAX_QPS:
        raise ValueError(why)
    return value


def parse_count(text: str, low: int, high: int | None = None) -> int:
    """An integer in [low, high] from a flag or an environment variable."""
    bounds = f"from {low} to {high}" if high is not None else f">= {low}"
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"must be an integer {bounds}, got {text!r}") from None
    if value < low or (high is not None and value > high):
        raise ValueError(f"must be an integer {bounds}, got {text!r}")
    return value


def limits_from_env(env: Mapping[str, str] | None = None, *, qps: float | None = None, burst: int | None = None,
                    max_concurrent_evictions: int | None = None) -> ClientLimits:
    """The client limits: explicit values (flags) win, else ``$KDESCHED_KUBE_API_QPS``,
    ``$KDESCHED_KUBE_API_BURST``, ``$KDESCHED_MAX_CONCURRENT_EVICTIONS``, else the defaults. A bad
    environment value is a :class:`ConfigError` naming the variable (the functions set them so)."""
    env = os.environ if env is None else env
    try:
        if qps is None and env.get(QPS_ENV):
            where = QPS_ENV
            qps = parse_qps(env[QPS_ENV])
        if burst is None and env.get(BURST_ENV):
            where = BURST_ENV
            burst = parse_count(env[BURST_ENV], 1, MAX_BURST)
        if max_concurrent_evictions is None and env.get(CONCURRENCY_ENV):
            where = CONCURRENCY_ENV
            max_concurrent_evictions = parse_count(env[CONCURRENCY_ENV], 1, MAX_CONCURRENCY)
    except ValueError as exc:
        raise ConfigError(f"${where}: {exc}") from None
    return ClientLimits(DEFAULT_QPS if qps is None else qps, DEFAULT_BURST if burst is None else burst,
                        DEFAULT_MAX_CONCURRENT_EVICTIONS if max_concurrent_evictions is None
                        else max_concurrent_evictions)


def default_kubeconfig_path() -> str:
    """``$KUBECONFIG`` (possibly a ``:``-separated list) read now, else ``~/.kube/config``."""
    return os.environ.get("KUBECONFIG") or DEFAULT_KUBECONFIG


@dataclass(frozen=True, slots=True)
class Impersonation:
    """Whom to act as (a kubeconfig user's ``as`` fields): sent as ``Impersonate-*`` headers."""

    user: str
    groups: tuple[str, ...] = ()
    uid: str | None = None
    extra: tuple[tuple[str, tuple[str, ...]], ...] = ()

    def headers(self) -> list[tuple[str, str]]:
        """Header lines in order; ``Impersonate-Group`` and ``Impersonate-Extra-*`` repeat."""
        lines = [("Impersonate-User", self.user)]
        lines += [("Impersonate-Group", g) for g in self.groups]
        if self.uid:
            lines.append(("Impersonate-Uid", self.uid))
        for key, values in self.extra:
            lines += [(f"Impersonate-Extra-{quote_extra_key(key)}", v) for v in values]
        return lines


def quote_extra_key(key: str) -> str:
    """An extra key percent-encoded as client-go does (header names allow only token characters)."""
    return quote(key, safe="!#$&'*+-.^_`|~")


def _kubeconfig_files(path: str) -> list[Path]:
    return [Path(p).expanduser() for p in path.split(os.pathsep) if p]


def load_impersonation(kubeconfig: str | None = None, context: str | None = None) -> Impersonation | None:
    """The impersonation fields of the kubeconfig user that :func:`load_configuration` uses (None if
    there are none, or in-cluster). Merging follows kubectl: the first file that sets
    ``current-context`` wins, and the first definition of a context or user name wins."""
    if kubeconfig is None and os.environ.get(SERVICE_HOST_ENV) and context is None:
        return None
    path = kubeconfig if kubeconfig is not None else default_kubeconfig_path()
    docs: list[dict[str, Any]] = []
    for file in _kubeconfig_files(path):
        if not file.is_file():
            continue
        try:
            doc = yaml.safe_load(file.read_text())
        except (yaml.YAMLError, OSError, ValueError) as exc:
            raise ConfigError(f"{file}: invalid kubeconfig: {trim(str(exc))}") from None
        if isinstance(doc, dict):
            docs.append(doc)
    name = context or next((d["current-context"] for d in docs if d.get("current-context")), None)
    ctx = _named(docs, "contexts", "context", name)
    user = _named(docs, "users", "user", ctx.get("user") if ctx else None)
    if not user:
        return None
    where = f"{path}: user {ctx.get('user') if ctx else ''!s}"
    act_as = user.get("as")
    groups = user.get("as-groups") or []
    uid = user.get("as-uid")
    extra = user.get("as-user-extra") or {}
    if act_as is not None and not isinstance(act_as, str):
        raise ConfigError(f"{where}: 'as' must be a string")
    if not isinstance(groups, list) or not all(isinstance(g, str) for g in groups):
        raise ConfigError(f"{where}: 'as-groups' must be a list of strings")
    if uid is not None and not isinstance(uid, str):
        raise ConfigError(f"{where}: 'as-uid' must be a string")
    if not isinstance(extra, dict) or not all(isinstance(k, str) and isinstance(v, list)
                                              and all(isinstance(x, str) for x in v) for k, v in extra.items()):
        raise ConfigError(f"{where}: 'as-user-extra' must map strings to lists of strings")
    if not act_as:
        if groups or uid or extra:
            raise ConfigError(f"{where}: 'as-groups', 'as-uid' or 'as-user-extra' given without 'as' (a user to act as)")
        return None
    return Impersonation(act_as, tuple(groups), uid, tuple((k, tuple(v)) for k, v in sorted(extra.items())))


def _named(docs: list[dict[str, Any]], section: str, field: str, name: object) -> dict[str, Any] | None:
    if not isinstance(name, str):
        return None
    for doc in docs:
        for entry in doc.get(section) or ():
            if isinstance(entry, dict) and entry.get("name") == name:
                value = entry.get(field)
                return value if isinstance(value, dict) else None
    return None


_SECTIONS = (("clusters", "cluster"), ("contexts", "context"), ("users", "user"))


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def check_kubeconfig(path: str, context: str | None = None) -> None:
    """A :class:`ConfigError` naming the file and field for a kubeconfig the official loader would
    fail on with a TypeError or KeyError, or accept and then fail far away: sections that are not
    lists of named entries (``contexts: 5``), a context without a cluster, a cluster without a
    ``server`` (exit 1 without naming the field, before) or with one that is not an http(s) URL.
    Files of a ``:``-separated list are merged as kubectl does: the first ``current-context``
    and the first entry of a name win."""
    from urllib.parse import urlsplit

    docs: list[tuple[Path, dict[str, Any]]] = []
    for file in _kubeconfig_files(path):
        if not file.is_file():
            continue
        try:
            doc = yaml.safe_load(file.read_text(encoding="utf-8"))
        except (yaml.YAMLError, OSError, ValueError) as exc:
            raise ConfigError(f"{file}: invalid kubeconfig: {trim(str(exc))}") from None
        if doc is None:
            continue
        if not isinstance(doc, dict):
            raise ConfigError(f"{file}: invalid kubeconfig: expected a mapping with clusters, contexts and users, "
                              f"got {type(doc).__name__}")
        for section, item in _SECTIONS:
            entries = doc.get(section)
            if entries is None:
                continue
            if not isinstance(entries, list):
                raise ConfigError(f"{file}: {section}: must be a list of entries with name and {item}, got "
                                  f"{_show(entries)}")
            for i, entry in enumerate(entries):
                where = f"{file}: {section}[{i}]"
                if not isinstance(entry, dict):
                    raise ConfigError(f"{where}: must be a mapping with name and {item}, got {_show(entry)}")
                if not isinstance(entry.get("name"), str) or not entry["name"]:
                    raise ConfigError(f"{where}.name: must be a non-empty string, got {_show(entry.get('name'))}")
                if entry.get(item) is not None and not isinstance(entry[item], dict):
                    raise ConfigError(f"{where}.{item}: must be a mapping, got {_show(entry[item])}")
        current = doc.get("current-context")
        if current is not None and not isinstance(current, str):
            raise ConfigError(f"{file}: current-context: must be a string, got {_show(current)}")
        docs.append((file, doc))
    name = context or next((d["current-context"] for _, d in docs if d.get("current-context")), None)
    if not name:
        return  # the loader says that no context is set

    def find(section: str, wanted: str) -> tuple[str, dict[str, Any]] | None:
        for file, doc in docs:
            for i, entry in enumerate(doc.get(section) or ()):
                if entry["name"] == wanted:
                    return f"{file}: {section}[{i}] ({wanted})", entry
        return None

    found = find("contexts", name)
    if found is None:
        raise ConfigError(f"{path}: context {name!r} is not in contexts"
                          + (" (--context)" if context else " (current-context)"))
    where, entry = found
    body: dict[str, Any] = entry.get("context") or {}
    cluster = body.get("cluster")
    if not isinstance(cluster, str) or not cluster:
        raise ConfigError(f"{where}.context.cluster: is required (a name from clusters), got {_show(cluster)}")
    user = body.get("user")
    if user is not None and not isinstance(user, str):
        raise ConfigError(f"{where}.context.user: must be a string, got {_show(user)}")
    namespace = body.get("namespace")
    if namespace is not None and not isinstance(namespace, str):
        raise ConfigError(f"{where}.context.namespace: must be a string, got {_show(namespace)}")
    found = find("clusters", cluster)
    if found is None:
        raise ConfigError(f"{where}.context.cluster: {cluster!r} is not in clusters")
    where, entry = found
    cluster_body: dict[str, Any] = entry.get("cluster") or {}
    server = cluster_body.get("server")
    if not isinstance(server, str) or not server.strip():
        raise ConfigError(f"{where}.cluster.server: is required (the API server's URL, e.g. https://127.0.0.1:6443), "
                          f"got {_show(server)}")
    try:
        parts = urlsplit(server)
        port_ok = parts.port is None or parts.port > 0
    except ValueError:
        parts, port_ok = None, False
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname or not port_ok:
        raise ConfigError(f"{where}.cluster.server: must be an http or https URL, e.g. https://127.0.0.1:6443, "
                          f"got {_show(server)}")
    if any(c.isspace() or not c.isprintable() for c in server):
        # urlsplit drops a trailing newline (and tabs), the HTTP client does not: every request then failed as a
        # lost connection (run retried for 17 s and exited 1, serve retried forever)
        raise ConfigError(f"{where}.cluster.server: must be a URL without spaces, newlines or control characters, "
                          f"got {_show(server)}")


def load_configuration(kubeconfig: str | None = None, context: str | None = None) -> Configuration:
    """A fresh client Configuration (never the process-wide default).

    Order: an explicit ``kubeconfig`` file; else in-cluster when ``KUBERNETES_SERVICE_HOST`` is set;
    else ``$KUBECONFIG`` / ``~/.kube/config``.
    """
    # imported here, not at module level: the CLI builds its flags from this module, and
    # ``kdesched simulate`` must not pay the import of a client it never uses (docs/benchmarks.md)
    from kubernetes import config as k8s_config
    from kubernetes.client import Configuration
    from kubernetes.config.config_exception import ConfigException

    configuration = Configuration()
    configuration.retries = TRANSPORT_RETRIES
    configuration.keep_alive = TCP_KEEPALIVE
    if kubeconfig is None and os.environ.get(SERVICE_HOST_ENV) and context is None:
        try:
            k8s_config.load_incluster_config(client_configuration=configuration)
        except ConfigException as exc:
            raise ConfigError(f"in-cluster configuration ({SERVICE_HOST_ENV} is set): {trim(str(exc))}") from None
        return configuration
    path = kubeconfig if kubeconfig is not None else default_kubeconfig_path()
    files = _kubeconfig_files(path)
    if not files:
        raise ConfigError("no kubeconfig file given")
    if kubeconfig is not None and not files[0].is_file():
        raise ConfigError(f"{kubeconfig}: no such kubeconfig file")
    if kubeconfig is None and not any(f.is_file() for f in files):
        raise ConfigError(f"{path}: no kubeconfig file found (and {SERVICE_HOST_ENV} is not set, so not in a cluster)")
    check_kubeconfig(path, context)
    try:
        k8s_config.load_kube_config(config_file=path, context=context, client_configuration=configuration,
                                    persist_config=False)
    except ConfigException as exc:
        raise ConfigError(f"{path}: {trim(str(exc))}") from None
    except (yaml.YAMLError, OSError, ValueError) as exc:
        raise ConfigError(f"{path}: invalid kubeconfig: {trim(str(exc))}") from None
    except (KeyError, TypeError, AttributeError) as exc:
        # the loader indexes into the document and fails this way when it is not a kubeconfig
        raise ConfigError(f"{path}: invalid kubeconfig (expected a mapping with clusters, users and "
                          f"contexts): {type(exc).__name__}: {trim(str(exc))}") from None
    return configuration


def host_configuration(url: str) -> Configuration:
    """Plain HTTP, no authentication: for the in-repo fake API server in tests."""
    from kubernetes.client import Configuration

    configuration = Configuration()
    configuration.retries = TRANSPORT_RETRIES
    configuration.keep_alive = TCP_KEEPALIVE
    configuration.host = url.rstrip("/")
    configuration.verify_ssl = False
    return configuration
