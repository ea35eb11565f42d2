"""Surge-first scale-backs judged on a view that lags the cluster (evictor.surge._not_seen_going,
_unseen; reactor.run.surge._rejudged). Adapted from the review of af8a868..a50aa1c (/tmp/review11.md,
findings 1 and 4)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from kdesched.evictor.ledger import Settled
from kdesched.evictor.scale_down import ranked_before_all
from kdesched.evictor.surge import SCALE_DOWN_GRACE_SECONDS
from kdesched.reactor.run.surge import Ended

from tests.builders import NOW
from tests.reactor.surge_api import KEY, T0, Api, run, three_on_node_a_evicted, web


def scales(api: Api) -> list[int]:
    return [c[1] for c in api.calls if c[0] == "scale"]


def _evicted_web1(api: Api) -> tuple[Any, Any, list[Ended]]:
    """3 replicas: web-1 (Ready for less time than its siblings), web-2, web-3 all on node-a; the extra
    pod web-9 Ready on spare-1; web-1 evicted at T0 + 6."""
    old, driver, ledger, ended = three_on_node_a_evicted(api, first_created=-100)
    return old, (driver, ledger), ended


def test_the_30s_scale_back_on_a_lagging_view_deletes_no_original_pod() -> None:
    """The 30 s path runs because the run's view still shows web-1 alive after an accepted eviction (a
    watch cache or snapshot lagging). In that view web-1 ranks first, but in the cluster it is
    terminating (the ReplicaSet does not count it) and web-10, the ReplicaSet's pod for it, has been
    Ready for 25 s: the ReplicaSet would delete web-2 or web-3 (doubled up on node-a). web-1 is never
    counted as spare there, and the scale-back is judged again on the pods read now: no scale-back."""
    api = Api(replicas=3)
    old, (driver, ledger), ended = _evicted_web1(api)
    stale_view = [old, api.pods["web-2"], api.pods["web-3"], api.pods["web-9"]]  # as of before the eviction
    api.pods["web-1"] = replace(old, deletion_time=NOW)  # the truth, which a LIST returns
    web(api, "web-10", "spare-2", created=7)  # Ready at T0 + 10
    now = T0 + 37
    truth = [p for p in api.pods.values() if not p.terminating]
    first = ranked_before_all([api.pods["web-9"], api.pods["web-10"]], truth, now)
    assert first is not None and first.name in ("web-2", "web-3")  # what a scale-back now deletes
    driver.advance(Settled(ledger), {KEY: stale_view}, now, ended)
    assert api.replicas == 4, f"scaled back on a view known to lag: the ReplicaSet deletes {first.name} ({scales(api)})"


def test_the_30s_scale_back_goes_ahead_when_the_pods_read_now_allow_it() -> None:
    """The same lagging view, but in the cluster the ReplicaSet's pod for web-1 is not Ready yet: it
    goes first, so the scale-back, judged again on the pods read now, is carried out."""
    api = Api(replicas=3)
    old, (driver, ledger), ended = _evicted_web1(api)
    stale_view = [old, api.pods["web-2"], api.pods["web-3"], api.pods["web-9"]]
    api.pods["web-1"] = replace(old, deletion_time=NOW)
    web(api, "web-10", "spare-2", created=30, ready=False)
    # (in the stale view web-9 ranks before the originals only if it is not Ready: make it so there)
    stale_view[3] = web(Api(), "web-9", "spare-1", created=2, ready=False)
    driver.advance(Settled(ledger), {KEY: stale_view}, T0 + 37, ended)
    assert api.replicas == 3 and scales(api)[-1] == 3


def test_the_pod_gone_scale_back_waits_for_the_pod_made_for_it() -> None:
    """A view a few seconds old shows web-1 terminating but not web-10, the ReplicaSet's pod for it,
    already Ready: scaled back on it, the ReplicaSet deletes web-2 or web-3 (doubled up). Until a pod
    beyond the original replicas is seen (proof the ReplicaSet saw web-1 going), the move waits. (The
    pods read again before a scale-back, finding 1's fix, catch this one too: the check then sees
    web-10 Ready.)"""
    api = Api(replicas=3)
    old, (driver, ledger), ended = _evicted_web1(api)
    api.pods["web-1"] = replace(old, deletion_time=NOW)
    view = list(api.pods.values())  # web-1 terminating, web-2, web-3, web-9: no pod for web-1 yet
    web(api, "web-10", "spare-2", created=7)  # in the cluster: made and Ready at T0 + 10
    now = T0 + 12
    truth = [p for p in api.pods.values() if not p.terminating]
    first = ranked_before_all([api.pods["web-9"], api.pods["web-10"]], truth, now)
    assert first is not None and first.name in ("web-2", "web-3")
    driver.advance(Settled(ledger), {KEY: view}, now, ended)
    assert api.replicas == 4, f"scaled back while the ReplicaSet deletes {first.name}"


def test_the_pod_gone_scale_back_waits_until_the_replicaset_saw_it_going_then_at_most_the_grace() -> None:
    """The pods read now show web-1 terminating and no pod made for it. The ReplicaSet may not have
    seen web-1 going yet (its informer lagging behind kdesched's read): it still counts web-1 and a
    scale-back makes it delete a doubled-up Ready sibling, the race step 3 of docs/safety.md waits
    for. So the move waits (this scaled back at T0 + 8 before). If the ReplicaSet never makes the pod
    (a quota, say), SCALE_DOWN_GRACE_SECONDS after the eviction it has surely observed web-1 going,
    and the scale-back goes ahead."""
    api = Api(replicas=3)
    old, (driver, ledger), ended = _evicted_web1(api)
    api.pods["web-1"] = replace(old, deletion_time=NOW)
    ledger = run(driver, ledger, api, T0 + 8, ended)
    assert api.replicas == 4 and KEY in ledger.surges
    run(driver, ledger, api, T0 + 6 + SCALE_DOWN_GRACE_SECONDS, ended)
    assert api.replicas == 3 and [e.outcome for e in ended] == ["done"]
