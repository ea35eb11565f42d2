"""A real Prometheus server (and ``promtool``) for tests: started on a free loopback port, scraping the
loopback targets a test names, or serving series backfilled from OpenMetrics text.

Why: kdesched's dashboard queries and alert rules are PromQL, and its metrics-based utilization reads
Prometheus' HTTP API. A hand-written stand-in would accept whatever the code under test assumes; the
real server (Debian's ``prometheus`` 2.42, the release the issue names) parses the PromQL, scrapes
``/metrics`` through its own parser and answers queries the way a cluster's Prometheus does.

Found like the k8s kit (tests/realk8s/controlplane.py): ``$KDESCHED_PROMETHEUS`` (the ``prometheus``
binary, or a directory holding it and ``promtool``) wins, then ``PATH``. :func:`find_prometheus`
returns None when neither has it; the tier is then skipped with one line, unless
``KDESCHED_REQUIRE_PROMETHEUS=1`` (.ci/run sets it once the package is installed) makes that a failure.

Nothing here relies on a Prometheus the package may have started as a service (port 9090): every
server is this module's own, on a free port, with its data in a temporary directory, stopped (and
SIGKILLed with its parent) however the test ends.

Usable from pytest (tests/realprom/conftest.py) and from scripts::

    kit = find_prometheus()
    with Prometheus(kit) as prom:          # scrapes nothing yet
        prom.scrape("127.0.0.1:8080")      # file_sd: picked up within a second, no restart
        prom.wait_for('up{instance="127.0.0.1:8080"} == 1')
        prom.query("sum(kdesched_evictions_total)")

    with Prometheus.backfilled(kit, openmetrics_text) as prom:   # promtool tsdb create-blocks-from
        prom.query("node_cpu_usage", at=ts)
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
import weakref
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self
from urllib.parse import urlencode

import yaml

PROM_ENV = "KDESCHED_PROMETHEUS"
REQUIRE_ENV = "KDESCHED_REQUIRE_PROMETHEUS"
SKIP_REASON = (f"real Prometheus tier skipped: install Debian's prometheus package (see README) "
               f"or set {PROM_ENV} to the prometheus binary")


@dataclass(frozen=True)
class PromKit:
    """The two binaries of a Prometheus release."""

    prometheus: Path
    promtool: Path


def find_prometheus(env: Mapping[str, str] | None = None) -> PromKit | None:
    """The kit, or None (the caller skips, or fails when required).

    ``$KDESCHED_PROMETHEUS`` names the ``prometheus`` binary or a directory holding it; ``promtool``
    is taken from beside it, else from ``PATH``. Without the variable both come from ``PATH``.
    A variable that names nothing usable raises RuntimeError (a misconfiguration is not a skip).
    """
    env = os.environ if env is None else env
    given = env.get(PROM_ENV)
    if given:
        path = Path(given)
        server = path / "prometheus" if path.is_dir() else path
        if not (server.is_file() and os.access(server, os.X_OK)):
            raise RuntimeError(f"{PROM_ENV}={given}: no executable prometheus there")
        tool = server.parent / "promtool"
        tool_path = str(tool) if tool.is_file() else shutil.which("promtool")
        if not tool_path:
            raise RuntimeError(f"{PROM_ENV}={given}: no promtool beside it nor on PATH")
        return PromKit(server, Path(tool_path))
    server_path, tool_path = shutil.which("prometheus"), shutil.which("promtool")
    if server_path and tool_path:
        return PromKit(Path(server_path), Path(tool_path))
    return None


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PromError(Exception):
    """The server refused a query (a PromQL parse error, a bad parameter) or did not answer."""


def _die_with_parent() -> None:
    """In the child before exec: SIGKILL it when the test process dies (even by SIGKILL)."""
    try:
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


_LIVE: weakref.WeakSet[Prometheus] = weakref.WeakSet()


@atexit.register
def _stop_all() -> None:
    for prom in list(_LIVE):
        prom.stop()


def backfill(kit: PromKit, openmetrics_text: str, data_dir: Path) -> str:
    """Turn OpenMetrics text into TSDB blocks under ``data_dir`` (``promtool tsdb create-blocks-from
    openmetrics``); a server started on that directory serves them. Timestamps are seconds (the
    OpenMetrics unit); samples older than the retention (15 days) are dropped by the server.
    Returns promtool's output; raises PromError naming promtool's complaint."""
    text = openmetrics_text if openmetrics_text.rstrip().endswith("# EOF") else openmetrics_text.rstrip() + "\n# EOF\n"
    data_dir.mkdir(parents=True, exist_ok=True)
    src = data_dir.parent / f"{data_dir.name}.om.txt"
    src.write_text(text)
    done = subprocess.run([str(kit.promtool), "tsdb", "create-blocks-from", "openmetrics", str(src), str(data_dir)],
                          check=False, capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise PromError(f"promtool create-blocks-from openmetrics failed: {(done.stderr or done.stdout).strip()}")
    return done.stdout


def check_rules(kit: PromKit, *paths: Path | str) -> subprocess.CompletedProcess[str]:
    """``promtool check rules PATH...`` (the caller asserts on returncode and output)."""
    return subprocess.run([str(kit.promtool), "check", "rules", *map(str, paths)], check=False,
                          capture_output=True, text=True, timeout=60)


class Prometheus:
    """One ``prometheus`` server on 127.0.0.1:<free port>, data in a temporary directory.

    Targets are scraped every ``scrape_interval`` through a file_sd file, so :meth:`scrape` adds one
    without a restart. ``rule_files`` are loaded and evaluated every ``evaluation_interval``."""

    def __init__(self, kit: PromKit, *, scrape_interval: str = "1s", evaluation_interval: str = "1s",
                 rule_files: Iterable[Path | str] = (), data_dir: Path | None = None, keep_logs: bool = False) -> None:
        self.kit = kit
        self.scrape_interval = scrape_interval
        self.evaluation_interval = evaluation_interval
        self.rule_files = [str(Path(p).resolve()) for p in rule_files]
        self.workdir = Path(tempfile.mkdtemp(prefix="kdesched-prom-"))
        self.data_dir = data_dir or self.workdir / "data"
        self.keep_logs = keep_logs
        self.port = 0
        self.popen: subprocess.Popen[bytes] | None = None
        self._targets: dict[str, dict[str, str]] = {}
        self.log = self.workdir / "prometheus.log"

    @classmethod
    def backfilled(cls, kit: PromKit, openmetrics_text: str, **kwargs: Any) -> Prometheus:
        """A server (not yet started) whose storage holds ``openmetrics_text`` as blocks."""
        prom = cls(kit, **kwargs)
        backfill(kit, openmetrics_text, prom.data_dir)
        return prom

    # -- lifecycle -------------------------------------------------------------------------------
    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> Self:
        if self.popen is None:
            self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _write_targets(self) -> None:
        groups = [{"targets": [target], "labels": labels} for target, labels in sorted(self._targets.items())]
        tmp = self.workdir / "targets.json.tmp"
        tmp.write_text(json.dumps(groups))
        tmp.replace(self.workdir / "targets.json")  # atomic: the watcher never reads half a file

    def _write_config(self) -> Path:
        config = {
            "global": {"scrape_interval": self.scrape_interval, "scrape_timeout": self.scrape_interval,
                       "evaluation_interval": self.evaluation_interval},
            "rule_files": self.rule_files,
            "scrape_configs": [{"job_name": "kdesched", "file_sd_configs": [
                {"files": [str(self.workdir / "targets.json")], "refresh_interval": "1s"}]}],
        }
        path = self.workdir / "prometheus.yml"
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        return path

    def start(self, timeout: float = 60.0) -> Prometheus:
        self._write_targets()
        config = self._write_config()
        self.port = free_port()
        with open(self.log, "ab") as out:
            self.popen = subprocess.Popen(
                [str(self.kit.prometheus), f"--config.file={config}", f"--storage.tsdb.path={self.data_dir}",
                 f"--web.listen-address=127.0.0.1:{self.port}", "--storage.tsdb.retention.time=15d",
                 "--web.console.templates=/nonexistent", "--web.console.libraries=/nonexistent"],
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=self.workdir,
                start_new_session=True, preexec_fn=_die_with_parent)  # noqa: PLW1509 - prctl only
        _LIVE.add(self)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.popen.poll() is not None:
                raise RuntimeError(f"prometheus exited with {self.popen.returncode}:\n{self.tail()}")
            if self._ready():
                return self
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"prometheus not ready on {self.url} within {timeout:.0f}s:\n{self.tail()}")

    def _ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as resp:
                return bool(resp.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self, timeout: float = 15.0) -> None:
        """Idempotent: terminate, wait, kill; then remove the data (unless ``keep_logs``)."""
        popen, self.popen = self.popen, None
        if popen is not None and popen.poll() is None:
            try:
                os.killpg(popen.pid, signal.SIGTERM)
                popen.wait(timeout)
            except ProcessLookupError:
                pass
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(popen.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                popen.wait(5)
        _LIVE.discard(self)
        if not self.keep_logs:
            shutil.rmtree(self.workdir, ignore_errors=True)

    # -- targets ---------------------------------------------------------------------------------
    def scrape(self, target: str, **labels: str) -> None:
        """Scrape ``target`` (host:port of an HTTP /metrics) from now on, with extra target labels."""
        self._targets[target] = dict(labels)
        if self.popen is not None:
            self._write_targets()

    def unscrape(self, target: str) -> None:
        self._targets.pop(target, None)
        if self.popen is not None:
            self._write_targets()

    # -- HTTP API --------------------------------------------------------------------------------
    def api(self, path: str, **params: Any) -> Any:
        """GET /api/v1/<path>; the ``data`` of a success, PromError with the server's error otherwise."""
        query = urlencode([(k, v) for k, v in params.items() if v is not None], doseq=True)
        url = f"{self.url}/api/v1/{path}" + (f"?{query}" if query else "")
        try:
            with urllib.request.urlopen(url, timeout=30) as resp:
                body = json.loads(resp.read())
        except urllib.error.HTTPError as err:
            try:
                body = json.loads(err.read())
            except ValueError:
                raise PromError(f"{path}: HTTP {err.code}") from err
        except (urllib.error.URLError, OSError) as err:
            raise PromError(f"{path}: {err}") from err
        if body.get("status") != "success":
            raise PromError(f"{params.get('query', path)}: {body.get('errorType')}: {body.get('error')}")
        return body["data"]

    def query(self, expr: str, *, at: float | None = None) -> list[dict[str, Any]]:
        """An instant query: the result list of a vector (a scalar becomes one unlabelled sample)."""
        data = self.api("query", query=expr, time=at)
        if data["resultType"] in ("scalar", "string"):
            return [{"metric": {}, "value": data["result"]}]
        return list(data["result"])

    def value(self, expr: str, *, at: float | None = None) -> float | None:
        """The single value of ``expr`` (None when empty; PromError when several series)."""
        result = self.query(expr, at=at)
        if not result:
            return None
        if len(result) > 1:
            raise PromError(f"{expr}: {len(result)} series, expected one")
        return float(result[0]["value"][1])

    def series(self, match: str, *, start: float | None = None, end: float | None = None) -> list[dict[str, str]]:
        return list(self.api("series", **{"match[]": match, "start": start, "end": end}))

    def label_values(self, label: str = "__name__") -> list[str]:
        return list(self.api(f"label/{label}/values"))

    def rules(self) -> list[dict[str, Any]]:
        return [rule for group in self.api("rules")["groups"] for rule in group["rules"]]

    def wait_for(self, expr: str, *, timeout: float = 30.0, interval: float = 0.5,
                 check: Callable[[list[dict[str, Any]]], bool] = bool) -> list[dict[str, Any]]:
        """Poll ``expr`` until ``check(result)`` (default: any series); AssertionError with the last
        result and the log tail on timeout. A PromQL error is raised at once (it will not heal)."""
        deadline = time.monotonic() + timeout
        result: list[dict[str, Any]] = []
        while True:
            result = self.query(expr)
            if check(result):
                return result
            if time.monotonic() >= deadline:
                raise AssertionError(f"{expr!r} not satisfied within {timeout:.0f}s; last result: {result}\n"
                                     f"targets: {self.api('targets').get('activeTargets')}\n{self.tail(10)}")
            if not self.alive():
                raise AssertionError(f"prometheus died:\n{self.tail()}")
            time.sleep(interval)
