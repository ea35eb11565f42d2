"""Reactor metrics, registered in the evictor's registry so ``/metrics`` serves one registry.

Why: an operator tuning ``settleSeconds``/``balanceDelaySeconds`` or the rate limits needs to see how many events came
in, how many runs they became, how often the Lease was busy and why evictions were refused.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from prometheus_client import Counter, Gauge, Histogram

from kdesched.evictor.metrics import REGISTRY

if TYPE_CHECKING:
    from kdesched.kube.clock import ServerClock

EVENTS = Counter("kdesched_reactor_events_total", "CloudEvents received by a function, by function, type and status.",
                 ["function", "type", "status"], registry=REGISTRY)
EMITTED = Counter("kdesched_reactor_emitted_total", "Semantic node events emitted by the classifier, by type.",
                  ["type"], registry=REGISTRY)
COALESCED = Counter("kdesched_reactor_coalesced_requests_total",
                    "Requests served by a run started for another request of the same burst.", ["kind"],
                    registry=REGISTRY)
REACTOR_RUNS = Counter("kdesched_reactor_runs_total", "Runs started by the reactor, by kind.", ["kind"],
                       registry=REGISTRY)
LOCK_BUSY = Counter("kdesched_reactor_lock_busy_total", "Requests answered 429 because another run held the lock.",
                    ["kind"], registry=REGISTRY)
REFUSALS = Counter("kdesched_reactor_gate_refusals_total", "Evictions refused by cool-downs or rate limits.",
                   ["reason"], registry=REGISTRY)
CLASSIFIER_NODES = Gauge("kdesched_classifier_nodes", "Nodes in the classifier's digest cache.", registry=REGISTRY)
CLASSIFIER_DROPPED = Counter("kdesched_classifier_dropped_total",
                             "Node events the classifier dropped as stale (redelivered, older, of a dead or older "
                             "incarnation), by reason.", ["reason"], registry=REGISTRY)
# Labelled by the identity the instance campaigns with (the Lease's holderIdentity when it leads), and
# set only by `kdesched serve` (to 0 as it starts): the functions, which share this registry but hold
# no standing Lease, export no series, so `sum(kdesched_serve_leader) < 1` means "serve runs, none leads".
LEADER = Gauge("kdesched_serve_leader", "1 while this `kdesched serve` instance holds the leader Lease, "
               "0 while it is a standby; by the identity it campaigns with.", ["identity"], registry=REGISTRY)


WAITING = Counter("kdesched_reactor_not_usable_total",
                  "Rebalance triggers that ran nothing because their node was not usable for ordinary pods yet.",
                  ["type"], registry=REGISTRY)

LEDGER_WRITES = Counter("kdesched_ledger_writes_total",
                        "Conditional writes of the disruption ledger, by result: written, or conflict (another run "
                        "wrote it first; the run re-read and decided again).", ["result"], registry=REGISTRY)
LEDGER_MOVES = Gauge("kdesched_ledger_moves", "Workloads with a move in progress in the disruption ledger, as this "
                     "process last read it.", registry=REGISTRY)
LEDGER_RECORDS = Gauge("kdesched_ledger_records", "Workload records of the disruption ledger (one Lease each: moves in "
                       "progress and cool-downs still running), as this process last read them.", registry=REGISTRY)
CONTINUATIONS = Counter("kdesched_reactor_continuations_total",
                        "Repeats of runs that held paced evictions (or were held by a cool-down), by outcome: "
                        "scheduled, resumed (from the ledger at start), ended (nothing held any more), timed-out, revived "
                        "(a timed-out move woken by progress on a workload it held), batched (a node scope's repeat "
                        "decided in one run with another's).",
                        ["outcome"], registry=REGISTRY)
RECONCILED = Counter("kdesched_reactor_reconciled_total", "Semantic events the start-up reconcile sent: node changes "
                     "made while kdesched was starting or down (compared with the node record).", registry=REGISTRY)
REPLACEMENT_TIMEOUTS = Counter("kdesched_replacement_timeouts_total",
                               "Workloads whose held move the disruption ledger gave up because the workload was "
                               "not back at its Ready count within replacementTimeoutSeconds.", registry=REGISTRY)

MOVES_MADE = Counter("kdesched_moves_made_total", "Evictions whose move the disruption ledger follows (checked "
                     "moves), by strategy.", ["strategy"], registry=REGISTRY)
MOVES = Counter("kdesched_moves_total", "Checked moves, by strategy and outcome: achieved (the replacement became "
                "Ready elsewhere), wasted (back on the node it left, or on another node the same move is "
                "draining), pending_timeout (not Ready within replacementTimeoutSeconds), "
                "unknown (no replacement to tell by).", ["strategy", "outcome"], registry=REGISTRY)
MOVE_READY = Histogram("kdesched_move_time_to_ready_seconds", "From an eviction's admission to its replacement "
                       "being Ready (checked moves), by strategy.", ["strategy"], registry=REGISTRY,
                       buckets=(1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600))

SURGE_MOVES = Counter("kdesched_surge_moves_total", "Surge-first moves (the replacement made before the pod goes), by "
                      "outcome: started, not-started (the Deployment changed after it was read), done (the marked pod "
                      "was removed by its ReplicaSet), gave-up (no replacement Ready in time, a quota, landed back), "
                      "overridden (replicas changed by someone else, a rollout, the owner gone).", ["outcome"],
                      registry=REGISTRY)
SURGE_FALLBACKS = Counter("kdesched_surge_fallbacks_total", "Pods that would have moved surge-first and kept the normal "
                          "rules instead, by reason (kdesched.evictor.surge.Fallback).", ["reason"], registry=REGISTRY)
SURGE_HELD = Gauge("kdesched_surge_moves_held", "Surge-first moves kept at +1 with no time limit, as this process's "
                   "last settle judged the disruption ledger, by reason (kdesched.evictor.surge.Held): rollout, "
                   "eviction-refused (past the timeout), not-seen-going, scale-back-unsafe, extra-evictions-spent, "
                   "pods-unknown.", ["reason"], registry=REGISTRY)
SURGE_HELD_PAST_TIMEOUT = Gauge("kdesched_surge_held_past_timeout_seconds", "How long the held surge-first move that "
                                "is furthest past its timeout (replacementTimeoutSeconds) has been past it, as this "
                                "process's last settle saw; 0 when none is.", registry=REGISTRY)
CLOCK_OFFSET = Gauge("kdesched_clock_offset_seconds", "This process's wall clock minus the API server's, as estimated "
                     "from the Date of its answers (positive: this process is ahead). kdesched writes and compares "
                     "every shared time on the API server's clock, so an offset changes no decision; NaN before the "
                     "first answer.", registry=REGISTRY)


def follow_clock(clock: ServerClock) -> None:
    """Serve ``clock``'s offset as :data:`CLOCK_OFFSET` (read at scrape time; the latest call wins:
    one process has one API client, and its siblings share its clock)."""
    CLOCK_OFFSET.set_function(lambda: clock.offset_seconds() if clock.synced else float("nan"))
