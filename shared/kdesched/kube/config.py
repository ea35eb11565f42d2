"""Where the cluster is: an explicit kubeconfig, the in-cluster service account, or $KUBECONFIG.

Why: the same binary runs as a Knative Service (in-cluster), as ``kdesched run --kubeconfig`` on a
laptop and against a local fake in tests. The resolution order is fixed and every failure becomes
one :class:`ConfigError` line that names the file or the missing variable, never a traceback.
"""

from __future__ import annotations

import os
from pathlib import Path

import urllib3
import yaml
from kdesched.kube.errors import ConfigError, trim
from kubernetes import config as k8s_config
from kubernetes.client import Configuration
from kubernetes.config.config_exception import ConfigException

SERVICE_HOST_ENV = "KUBERNETES_SERVICE_HOST"
DEFAULT_KUBECONFIG = "~/.kube/config"

# urllib3 retries only the transport: one more connect, and one more read for idempotent methods
# (a kept-alive connection the server closed meanwhile). HTTP statuses are never retried here:
# the evictor's tenacity policy owns that, so attempts and backoff are counted in one place.
TRANSPORT_RETRIES = urllib3.Retry(total=2, connect=1, read=1, status=0, redirect=0, other=0,
                                  raise_on_status=False, backoff_factor=0)


def default_kubeconfig_path() -> str:
    """``$KUBECONFIG`` (possibly a ``:``-separated list) read now, else ``~/.kube/config``."""
    return os.environ.get("KUBECONFIG") or DEFAULT_KUBECONFIG


def load_configuration(kubeconfig: str | None = None, context: str | None = None) -> Configuration:
    """A fresh client Configuration (never the process-wide default).

    Order: an explicit ``kubeconfig`` file; else in-cluster when ``KUBERNETES_SERVICE_HOST`` is set;
    else ``$KUBECONFIG`` / ``~/.kube/config``.
    """
    configuration = Configuration()
    configuration.retries = TRANSPORT_RETRIES
    if kubeconfig is None and os.environ.get(SERVICE_HOST_ENV) and context is None:
        try:
            k8s_config.load_incluster_config(client_configuration=configuration)
        except ConfigException as exc:
            raise ConfigError(f"in-cluster configuration ({SERVICE_HOST_ENV} is set): {trim(str(exc))}") from None
        return configuration
    path = kubeconfig if kubeconfig is not None else default_kubeconfig_path()
    files = [Path(p).expanduser() for p in path.split(os.pathsep) if p]
    if not files:
        raise ConfigError("no kubeconfig file given")
    if kubeconfig is not None and not files[0].is_file():
        raise ConfigError(f"{kubeconfig}: no such kubeconfig file")
    if kubeconfig is None and not any(f.is_file() for f in files):
        raise ConfigError(f"{path}: no kubeconfig file found (and {SERVICE_HOST_ENV} is not set, so not in a cluster)")
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
    configuration = Configuration()
    configuration.retries = TRANSPORT_RETRIES
    configuration.host = url.rstrip("/")
    configuration.verify_ssl = False
    return configuration
