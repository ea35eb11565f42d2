"""The classifier across a lost reply and a restart (issue 31): Flask's test client, SDK-made
CloudEvents (binary and structured), the fake API server behind as the one backing store of two
processes (two app instances: the second is the restarted classifier)."""

from __future__ import annotations

import random
import time
import uuid
from typing import Any

import pytest
from kdesched.kube.client import KubeClient
from kdesched.reactor.events import routing as ev
from kdesched.reactor.events.answers import (
    ANSWERS_ANNOTATION,
    MAX_ANSWERS,
    MAX_ANSWERS_BYTES,
    RETRY_WINDOW_SECONDS,
    AnswerJournal,
    decode_answers,
    encode_answers,
)
from kdesched.reactor.events.classifier import SemanticEvent
from kdesched.reactor.io.reconcile import ANNOTATIONS_BUDGET, RECORD_ANNOTATION, NodeRecordStore
from kdesched_functions import FUNCTIONS

from tests.builders import node_obj
from tests.fakeapi import FakeApiServer
from tests.functions.helpers import MODES, ce_request, post, reply_event

TAINT = {"key": "maintenance", "value": "true", "effect": "NoSchedule"}
SOURCE = "https://10.96.0.1:443"  # ApiServerSource's
NS = "kdesched"
LEASE_PATH = f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases/kdesched-classifier"


class Posted:
    """The broker: what the classifier posted (its extra events and its start-up reconcile)."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str, str]] = []

    def __call__(self, url: str, function: str, replies: list[Any], *, within: float | None = None) -> None:
        self.events += [(r.type, r.subject, r.id) for r in replies]


def start(kube: KubeClient, posted: Posted) -> Any:
    """One classifier process: its app (seeded, its start-up reconcile done) and test client."""
    app = FUNCTIONS["classifier"].create_app(client=kube, broker_url="http://broker.local", post=posted,
                                             record_namespace=NS)
    fn = app.config["KDESCHED_CLASSIFIER"]
    deadline = time.monotonic() + 10
    while fn.recorder.recorded is None and time.monotonic() < deadline:  # the reconcile runs in a thread
        time.sleep(0.01)
    assert fn.recorder.recorded is not None
    return app.test_client()


def cluster(fake: FakeApiServer) -> None:
    fake.add({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    fake.add(node_obj("n1"), node_obj("n2", labels={"team": "b"}))


def change(fake: FakeApiServer, name: str, **kw: Any) -> dict[str, Any]:
    obj = fake.get("Node", name)
    assert obj is not None
    if "taints" in kw:
        obj["spec"]["taints"] = kw["taints"]
    if "labels" in kw:
        obj["metadata"]["labels"] = kw["labels"]
    fake.update(obj)
    out = fake.get("Node", name)
    assert out is not None
    return out


@pytest.mark.parametrize("mode", MODES)
def test_a_redelivery_after_a_lost_reply_and_a_restart_gets_the_same_reply(fake_api: FakeApiServer, kube: KubeClient,
                                                                          mode: str) -> None:
    cluster(fake_api)
    posted = Posted()
    first = start(kube, posted)
    node = change(fake_api, "n2", taints=[TAINT], labels={"team": "c"})  # taints and labels in one write
    resp = post(first, *ce_request(ev.APISERVER_UPDATE, node, mode, id="upd-1", source=SOURCE))
    assert resp.status_code == 200
    reply = reply_event(resp)  # ... lost on its way to the broker
    assert reply.get_type() == ev.TAINTS_CHANGED
    assert [(t, n) for t, n, _ in posted.events] == [(ev.LABELS_CHANGED, "n2")]  # the extra event, handed over
    # the answer and the node's new state went to the Lease before the reply left
    notes = fake_api.get("Lease", "kdesched-classifier", NS)["metadata"]["annotations"]  # type: ignore[index]
    assert RECORD_ANNOTATION in notes
    assert [(a.key, a.reply.id) for a in decode_answers(notes[ANSWERS_ANNOTATION])] == [((SOURCE, "upd-1"), reply.get_id())]

    # the classifier restarts (a new process: nothing in memory) before the dispatcher redelivers
    restarted = start(kube, posted)
    assert len(posted.events) == 1  # its start-up reconcile sends nothing: the record holds the change
    again = post(restarted, *ce_request(ev.APISERVER_UPDATE, node, mode, id="upd-1", source=SOURCE))
    assert again.status_code == 200, again.get_data(as_text=True)  # not 202: the change is not lost
    replayed = reply_event(again)
    assert (replayed.get_type(), replayed.get_id(), replayed.get_source(), replayed.get_subject()) == (
        reply.get_type(), reply.get_id(), reply.get_source(), reply.get_subject())
    assert replayed.get_data() == reply.get_data()
    assert len(posted.events) == 1  # the extra event is not posted twice
    # another event with the same node state (a heartbeat) is still nothing
    assert post(restarted, *ce_request(ev.APISERVER_UPDATE, node, mode, id="upd-2", source=SOURCE)).status_code == 202


@pytest.mark.parametrize("mode", MODES)
def test_a_duplicate_delivery_is_the_same_event_never_a_new_one(fake_api: FakeApiServer, kube: KubeClient,
                                                                mode: str) -> None:
    """A delivery that did reach the broker, delivered again (at-least-once): the same reply, same
    id, so the consumer's dedup on source + id drops it; in this process and in a restarted one;
    and once the answer is past the journal's bound it is answered 202, not replayed for ever."""
    cluster(fake_api)
    posted = Posted()
    first = start(kube, posted)
    node = change(fake_api, "n1", taints=[TAINT])
    replies = [reply_event(post(first, *ce_request(ev.APISERVER_UPDATE, node, mode, id="dup", source=SOURCE)))
               for _ in range(2)]
    restarted = start(kube, posted)
    resp = post(restarted, *ce_request(ev.APISERVER_UPDATE, node, mode, id="dup", source=SOURCE))
    replies.append(reply_event(resp))
    assert {(r.get_type(), r.get_id()) for r in replies} == {(ev.TAINTS_CHANGED, replies[0].get_id())}
    assert posted.events == []  # nothing else emitted: no extra, no reconcile
    fn = restarted.application.config["KDESCHED_CLASSIFIER"]
    fn.answers.wall = lambda: time.time() + fn.answers.max_seconds + 1  # an hour later
    late = post(restarted, *ce_request(ev.APISERVER_UPDATE, node, mode, id="dup", source=SOURCE))
    assert late.status_code == 202 and late.get_data() == b""


def test_a_change_answered_then_overtaken_is_still_replayed_after_a_restart(fake_api: FakeApiServer,
                                                                            kube: KubeClient) -> None:
    """A taint change whose reply is lost, then a label change of the same node delivered: after a
    restart the taint change's redelivery still gets its reply (a reply recomputed from the recorded
    state could not: the record is past it)."""
    cluster(fake_api)
    posted = Posted()
    first = start(kube, posted)
    tainted = change(fake_api, "n1", taints=[TAINT])
    lost = reply_event(post(first, *ce_request(ev.APISERVER_UPDATE, tainted, id="t", source=SOURCE)))
    relabelled = change(fake_api, "n1", labels={"team": "z"})
    assert reply_event(post(first, *ce_request(ev.APISERVER_UPDATE, relabelled, id="l", source=SOURCE))).get_type() \
        == ev.LABELS_CHANGED
    restarted = start(kube, posted)
    again = reply_event(post(restarted, *ce_request(ev.APISERVER_UPDATE, tainted, id="t", source=SOURCE)))
    assert (again.get_type(), again.get_id()) == (ev.TAINTS_CHANGED, lost.get_id())
    assert posted.events == []


def test_an_answer_is_not_replayed_for_a_node_re_created_while_the_classifier_was_down(fake_api: FakeApiServer,
                                                                                       kube: KubeClient) -> None:
    """An answer is replayed only while its node incarnation is cached: n3 (uid 1) answered node.added,
    then deleted and re-created (uid 2) while no classifier ran; the late add of uid 1 is nothing."""
    cluster(fake_api)
    posted = Posted()
    first = start(kube, posted)
    new = node_obj("n3")
    new["metadata"]["uid"] = "uid-n3-1"
    fake_api.add(new)
    old = fake_api.get("Node", "n3")
    assert reply_event(post(first, *ce_request(ev.APISERVER_ADD, old, id="add-n3", source=SOURCE))).get_type() \
        == ev.NODE_ADDED
    fake_api.delete("Node", "n3")
    again = node_obj("n3")
    again["metadata"]["uid"] = "uid-n3-2"
    fake_api.add(again)
    restarted = start(kube, posted)  # caches uid 2; its reconcile sends node.added of uid 2
    assert [(t, n) for t, n, _ in posted.events] == [(ev.NODE_ADDED, "n3")]
    late = post(restarted, *ce_request(ev.APISERVER_ADD, old, id="add-n3", source=SOURCE))
    assert late.status_code == 202 and late.get_data() == b""


def test_a_failed_record_write_still_replies(fake_api: FakeApiServer, kube: KubeClient) -> None:
    """The API server refuses the write: the reply goes out all the same (failing the event would send
    it to the dead-letter sink after the retries); the answer stays in memory for a redelivery and is
    written by the next write."""
    cluster(fake_api)
    posted = Posted()
    first = start(kube, posted)
    fake_api.script("PUT", LEASE_PATH, [500])  # the answer's write
    node = change(fake_api, "n1", taints=[TAINT])
    resp = post(first, *ce_request(ev.APISERVER_UPDATE, node, id="w", source=SOURCE))
    assert resp.status_code == 200 and reply_event(resp).get_type() == ev.TAINTS_CHANGED
    again = post(first, *ce_request(ev.APISERVER_UPDATE, node, id="w", source=SOURCE))
    assert reply_event(again).get_id() == reply_event(resp).get_id()
    fn = first.application.config["KDESCHED_CLASSIFIER"]
    assert fn.recorder.write(force=True) == ""
    notes = fake_api.get("Lease", "kdesched-classifier", NS)["metadata"]["annotations"]  # type: ignore[index]
    assert [a.key for a in decode_answers(notes[ANSWERS_ANNOTATION])] == [(SOURCE, "w")]


def test_the_journal_is_bounded() -> None:
    now = [1000.0]
    journal = AnswerJournal(wall=lambda: now[0])
    big = {"node": "n", "after": {"labels": {f"label-{i}.example.com/key": "v" * 40 for i in range(40)}}}
    for i in range(MAX_ANSWERS + 50):
        journal.answer(("/src", f"id-{i}"), "uid", SemanticEvent(ev.NODE_ADDED, f"uid-{i}-added", "n", big))
        now[0] += 1
    assert len(journal) == MAX_ANSWERS and journal.get(("/src", "id-0")) is None
    assert journal.get(("/src", f"id-{MAX_ANSWERS + 49}")) is not None
    text = encode_answers(journal.entries(), max_bytes=4000)  # the oldest go first until it fits
    kept = decode_answers(text)
    assert len(text) <= 4000 and 0 < len(kept) < MAX_ANSWERS
    assert kept[-1].key == ("/src", f"id-{MAX_ANSWERS + 49}")
    assert len(encode_answers(journal.entries())) <= MAX_ANSWERS_BYTES
    now[0] += journal.max_seconds + MAX_ANSWERS + 60
    assert len(journal) == 0
    for bad in (None, "", "a1:not base64!", "a9:abc"):
        assert decode_answers(bad) == []



def test_a_burst_inside_the_retry_window_is_kept_whole_in_memory_and_on_the_lease(fake_api: FakeApiServer,
                                                                                  kube: KubeClient) -> None:
    """The count bound applies only to answers older than the retry window; on the Lease the
    answers get the room the node record leaves, not a fixed 32 kB."""
    now = [1000.0]
    journal = AnswerJournal(wall=lambda: now[0])
    for i in range(3 * MAX_ANSWERS):  # a zone tainted unreachable: 768 answers in 7.7 s
        uid = str(uuid.UUID(int=random.Random(i).getrandbits(128)))  # ids and uids compress as little as real ones
        journal.answer((SOURCE, f"id-{i}"), uid, SemanticEvent(ev.TAINTS_CHANGED, f"{uid}-{1000 + i}-taints", f"n{i}",
                                                               {"node": f"n{i}", "after": {"taints": [TAINT]}}))
        now[0] += 0.01
    assert len(journal) == 3 * MAX_ANSWERS and journal.get((SOURCE, "id-0")) is not None
    fake_api.add({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    store = NodeRecordStore(kube, NS, "kdesched-classifier", "")
    assert store.write({}, holder_only=False, answers=journal) == ""
    notes = fake_api.get("Lease", "kdesched-classifier", NS)["metadata"]["annotations"]  # type: ignore[index]
    assert len(decode_answers(notes[ANSWERS_ANNOTATION])) == 3 * MAX_ANSWERS
    assert len(notes[ANSWERS_ANNOTATION]) > MAX_ANSWERS_BYTES
    assert sum(len(k) + len(v) for k, v in notes.items()) <= ANNOTATIONS_BUDGET + 100
    now[0] += RETRY_WINDOW_SECONDS + 1  # out of the window: the count bound holds again
    assert len(journal) == MAX_ANSWERS and journal.get((SOURCE, f"id-{3 * MAX_ANSWERS - 1}")) is not None
