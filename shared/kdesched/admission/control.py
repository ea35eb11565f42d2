"""What every admission control is: a frozen settings object that starts a :class:`Check` per run.

Why: the decision "may this pod go now" was spread over the reactor (a gate function passed down
into the planner, then a filter applied after planning), the engine and six evictor modules, and a
new control touched about seven places. A control is now one module holding its settings (parsed
once, from the policy's ``kdesched:`` block) and its check; the pipeline
(:mod:`kdesched.admission.pipeline`) asks every check in one documented order. A check answers at
one or more of three moments, by overriding the method for it:

* :meth:`Check.run`: once, before planning: a brake that holds every eviction of the run;
* :meth:`Check.pod`: while the planner plans, for each pod a strategy wants evicted. A verdict that
  *defers* (a closed window, a fresh node change) does not refuse the pod: the planner still plans it
  (the report shows its wave and destination), its plan check defers it, and the checks after it in
  the order neither refuse nor count it (:meth:`Check.deferred`): this run does not send it;
* :meth:`Check.planned`: for each eviction of the finished plan (when a control must see the
  pacing's waves first: windows, budgets).

And :meth:`Check.record`: the state the control keeps in the disruption ledger, written with the
run's admissions (the bucket's draw, the health brake's last unhealthy time). Pure: what a control
needs from outside is read by the reactor and handed in through :class:`RunContext`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

from kdesched.evictor.ledger import Ledger
from kdesched.evictor.planner import PlannedEviction
from kdesched.evictor.reasons import Verdict
from kdesched.model.alerts import AlertsReading
from kdesched.model.records import Pod
from kdesched.model.snapshot import Snapshot


def _no_labels(_namespace: str) -> Mapping[str, str] | None:
    return None


@dataclass(frozen=True, slots=True)
class RunContext:
    """What one run decides with: the ledger as read (settled), its snapshot and the time."""

    ledger: Ledger
    snapshot: Snapshot
    now: float  # epoch seconds, the API server's clock
    complete: bool = True  # the snapshot holds every pod (and node)
    trigger: str = ""  # taints, affinity, rebalance, sweep, manual, continuation (windows filter on it)
    stop_when_spent: bool = False  # balance runs stop planning once the bucket is empty
    namespace_labels: Callable[[str], Mapping[str, str] | None] = _no_labels  # for namespace budgets
    alerts: AlertsReading | None = None  # Prometheus' alerts, read for the alert brake
    owners_changed: frozenset[str] = frozenset()  # workloads whose owner changed during a surge-first move
    origin: str = ""  # a continuation: the label of the run it repeats (sweep, manual...; windows filter on it too)
    all_nodes: bool = True  # the snapshot holds every Node, whatever its pods (the health brake judges them)


class Check:
    """One control during one run; the default answers nothing."""

    def run(self) -> Verdict | None:
        """A verdict for every eviction of the run (a brake), or None."""
        return None

    def pod(self, pod: Pod, strategy: str, held: bool) -> Verdict | None:
        """Refuse ``pod`` while planning (``held``: pacing holds it for a later wave), or None."""
        return None

    def passed(self, pod: Pod, strategy: str, held: bool) -> None:
        """Every check let ``pod`` through: count it (a bucket's token, a record's room)."""

    def deferred(self, pod: Pod, strategy: str, held: bool) -> None:
        """A control before this one defers ``pod`` (a brake, a closed window): this run does not send
        it, so count nothing for it. May raise
        :class:`~kdesched.strategies.framework.DeferralsPlanned` to end the strategy's planning."""

    def planned(self, eviction: PlannedEviction, held: bool) -> Verdict | None:
        """Refuse or defer one eviction of the finished plan, or None."""
        return None

    @property
    def writes(self) -> bool:
        """Must the run write the ledger even if it admits nothing (:meth:`record` changes it)?"""
        return False

    def record(self, ledger: Ledger, admitted: int, stamp: float) -> Ledger:
        """The ledger with this control's state after the run admitted ``admitted`` evictions."""
        return ledger


class Control(Protocol):
    """A control's settings, able to start its check for a run."""

    @property
    def name(self) -> str: ...

    def start(self, ctx: RunContext) -> Check: ...
