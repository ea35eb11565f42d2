"""The readings a run takes besides its snapshot: the alert brake's Prometheus alerts and the
measured node usage a balance strategy plans on.

Why: both are reads of the outside world (Prometheus, the metrics API) taken once per run, with
their own settings and, in ``kdesched serve``, a moving average of node usage kept between runs
(:class:`~kdesched.kube.usage.MetricsCollector`). The run machinery asks this one object for
them and never learns where they come from.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from kdesched.admission.alerts import AlertBrakeSettings
from kdesched.kube.client import KubeClient
from kdesched.kube.usage import MetricsCollector, read_brake_alerts, read_usage
from kdesched.model.alerts import AlertsReading
from kdesched.policy.types import Policy
from kdesched.policy.usage import UsageSettings


class RunReadings:
    """One process's readings for its runs."""

    def __init__(self, client: KubeClient, alert_brake: AlertBrakeSettings, usage: UsageSettings) -> None:
        self.client = client
        self.alert_brake = alert_brake
        self.usage = usage
        # kdesched serve's moving average of node usage (kdesched.kube.usage.MetricsCollector), set
        # by the server when the policy balances on KubernetesMetrics; None: fresh readings per run
        self.metrics_collector: MetricsCollector | None = None

    def alerts(self) -> AlertsReading | None:
        """The alert brake's reading for one run (kdesched.admission.alerts), when it is on."""
        s = self.alert_brake
        if not s.enabled:
            return None
        return read_brake_alerts(self.client, s.url, secret_namespace=s.token_secret_namespace,
                                 secret_name=s.token_secret_name, token_file=s.token_file, ca_file=s.ca_file,
                                 timeout=s.timeout_seconds, settle_seconds=s.settle_seconds)

    def with_usage(self, policy: Policy, snapshot: Any) -> Any:
        """The snapshot plus the measured usage the policy balances on (LowNodeUtilization's
        metricsUtilization), read now, with the event path's young-node rule; unchanged when no
        strategy of ``policy`` reads usage (kdesched.kube.usage)."""
        usage = read_usage(self.client, policy, self.usage, event_path=True, collector=self.metrics_collector)
        if usage is None:
            return snapshot
        return replace(snapshot, actual_usage=usage, notes=(*snapshot.notes, *usage.notes()))
