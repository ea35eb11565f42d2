"""The scale-up that begins a surge-first move, when its answer is not a plain success: a move is
taken for "not begun" (and ended at once, without a write) only when the scale-up certainly did not
land; a write that may have landed is judged by the next settle from the replicas it finds, so the
Deployment is never left at original+1. Driven against tests/reactor/surge_api.py."""

from __future__ import annotations

import pytest
from kdesched.evictor.ledger import Ledger
from kdesched.kube.errors import ApiError, Forbidden, ServerError, Unavailable
from kdesched.reactor.run.surge import Chosen, Ended, Surges

from tests.reactor.surge_api import KEY, T0, Api, begun, drive, run, surge_of, web


def outcomes(ended: list[Ended]) -> list[tuple[str, str]]:
    return [(e.outcome, e.why) for e in ended]


@pytest.mark.parametrize("lost", [Unavailable("read timed out", maybe_sent=True),
                                  ServerError(504, "Gateway Timeout", "the request timed out")],
                         ids=["timeout", "504"])
def test_a_scale_up_whose_answer_was_lost_after_it_landed_is_put_back(lost: ApiError) -> None:
    """The scale PUT landed but its answer was lost: the move is not taken for "not begun"; it goes its
    way (here no replacement in time: given up, the replicas put back)."""
    api = Api(replicas=3)
    old = web(api, "web-1", "node-a")
    api.fail_after_write = lost
    driver, ledger, started = begun(api, old)
    assert api.replicas == 4 and started[KEY]
    web(api, "web-2", "node-b", created=2, ready=False)
    ended: list[Ended] = []
    ledger = drive(driver, ledger, api, T0 + 1, ended)
    assert KEY not in ledger.surges
    assert api.replicas == 3, f"left at {api.replicas} replicas after {outcomes(ended)}"


@pytest.mark.parametrize("refused", [Unavailable("connection refused"), Forbidden(403, "Forbidden", "no")],
                         ids=["never-connected", "403"])
def test_a_scale_up_that_certainly_did_not_land_ends_the_move_at_once(refused: ApiError) -> None:
    class Refusing(Api):
        def replace_subresource(self, *args: object, **kw: object) -> dict[str, object]:
            raise refused

    api = Refusing(replicas=1)
    old = web(api, "web-1", "node-a")
    driver, ledger, started = begun(api, old)
    assert started[KEY] and api.replicas == 1
    ended: list[Ended] = []
    ledger = drive(driver, ledger, api, T0 + 1, ended, until=T0 + 2)
    assert KEY not in ledger.surges and [o for o, _ in outcomes(ended)] == ["overridden"]
    assert not [c for c in api.calls if c[0] == "scale"]


def test_a_move_not_begun_does_not_end_a_later_move_of_the_same_pod() -> None:
    """Process a records a move and loses the scale-up (409); process b ends that move after the start
    grace. Later process c begins a new move of the same pod (still on the tainted node): a settles
    it between c's ledger write and c's scale-up. The mark of the first move must not end the second
    (c's scale-up would then land with no move left to put it back): marks are per move (the pod and
    when it began), and dropped once their move has left the ledger."""
    api = Api(replicas=1)
    old = web(api, "web-1", "node-a")
    a, b, c = (Surges(api, enabled=True, timeout_seconds=120) for _ in range(3))  # type: ignore[arg-type]
    s1 = surge_of(api, old)
    stale = str(api.rv)
    api.annotations["x"] = "y"
    api.spec_write()  # the Deployment changed between the choice and the scale-up
    assert a.start(Chosen(None, surges={KEY: (s1, stale)}))[KEY]  # type: ignore[arg-type]  # 409: not begun
    ended: list[Ended] = []
    ledger = run(b, Ledger(surges={KEY: s1}), api, T0 + 31, ended)  # another process ends it after 30 s
    assert KEY not in ledger.surges and api.replicas == 1
    api.controller_observes()
    s2 = surge_of(api, old, at=T0 + 60)
    version = str(api.rv)
    ledger = run(a, Ledger(surges={KEY: s2}), api, T0 + 60.5, ended)  # before c's scale-up lands
    assert KEY in ledger.surges, f"the new move was ended: {outcomes(ended)}"
    assert c.start(Chosen(None, surges={KEY: (s2, version)})) == {KEY: ""}  # type: ignore[arg-type]
    web(api, "web-2", "node-b", created=61, ready=False)  # the surge pod starting
    drive(a, ledger, api, T0 + 61, ended)
    assert api.replicas == 1, f"left at {api.replicas} replicas after {outcomes(ended)}"


def test_a_given_up_move_keeps_its_block_when_the_ledger_write_loses_a_race() -> None:
    """A settle gives the move up at its timeout (scaled back, the workload blocked 300 s); its ledger
    write then loses a race and the settle is tried again on the ledger as it was, with the replicas
    now back at the original. The move must end as it was given up, with its block (else the workload
    is surged again at once, for a quota churning a failing extra pod), not as overridden."""
    api = Api(replicas=1)
    old = web(api, "web-1", "node-a")
    driver, before, _ = begun(api, old)
    ended: list[Ended] = []
    after = run(driver, before, api, T0 + 121, ended)
    assert api.replicas == 1 and KEY in after.surge_blocks
    again: list[Ended] = []
    retried = run(driver, before, api, T0 + 121.05, again)
    assert KEY in retried.surge_blocks and KEY not in retried.surges, outcomes(again)
    assert [e.outcome for e in again] == ["gave-up"]
    assert [c for c in api.calls if c[0] == "scale"] == [("scale", 2), ("scale", 1)]  # scaled back once
