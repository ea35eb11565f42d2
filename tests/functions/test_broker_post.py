"""``post_events`` (the classifier's extra events, its re-sync and start-up reconcile, posted to the
broker) against a real HTTP server on the loopback: each attempt's ``timeout`` bounds the whole
request. Before, it was a socket timeout, which bounds each read, not the answer: a broker (or a proxy
in front of it) that trickled its status line or header lines held the post for as long as it
trickled, and the classifier's own request from Knative timed out with every event queued behind it.
A post that runs out of time fails like any other failed post: retried, then raised, so the
classifier answers 503 and Knative delivers the event again (the cache was not committed)."""

from __future__ import annotations

import functools
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import pytest
from kdesched.kube.client import KubeClient
from kdesched.reactor.events import routing as ev
from kdesched_functions import FUNCTIONS
from kdesched_functions.classifier import ClassifierFunction
from kdesched_functions.common import Reply, post_events

from tests.builders import node_obj
from tests.fakeapi import FakeApiServer
from tests.functions.helpers import ce_request, post, reply_event

TAINT = {"key": "maintenance", "value": "true", "effect": "NoSchedule"}
ACCEPTED = b"HTTP/1.1 202 Accepted\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"

Answer = Callable[[socket.socket, threading.Event], None]


@dataclass
class Broker:
    """A broker ingress on 127.0.0.1: each connection in its own thread, answered by ``answer``
    (settable while it runs); ``requests`` holds each request's head and body as received."""

    answer: Answer
    url: str = ""
    requests: list[bytes] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)


def _read_request(c: socket.socket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = c.recv(65536)
        if not chunk:
            return data
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                   if line.lower().startswith(b"content-length:")), 0)
    while len(body) < length:
        chunk = c.recv(65536)
        if not chunk:
            break
        body += chunk
    return head + b"\r\n\r\n" + body


@pytest.fixture
def broker() -> Iterator[Broker]:
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", 0))
    srv.listen(16)
    srv.settimeout(0.1)
    b = Broker(answer=lambda c, stop: c.sendall(ACCEPTED), url=f"http://127.0.0.1:{srv.getsockname()[1]}/kdesched/kdesched")

    def handle(conn: socket.socket) -> None:
        try:
            with conn:
                conn.settimeout(5)
                b.requests.append(_read_request(conn))
                b.answer(conn, b.stop)
        except OSError:
            pass  # the client hung up (it gave up on a trickle): this connection is done

    def loop() -> None:
        while not b.stop.is_set():
            try:
                conn, _ = srv.accept()
            except OSError:
                continue
            threading.Thread(target=handle, args=(conn,), daemon=True).start()

    t = threading.Thread(target=loop, daemon=True)
    t.start()
    yield b
    b.stop.set()
    t.join(2)
    srv.close()


def trickle(head: bytes, pieces: list[bytes], every: float) -> Answer:
    """Send ``head``, then one piece every ``every`` seconds (each well within a socket timeout),
    until the pieces run out, the client hangs up or the test ends."""
    def answer(c: socket.socket, stop: threading.Event) -> None:
        c.sendall(head)
        for piece in pieces:
            if stop.wait(every):
                return
            c.sendall(piece)  # raises once the client is gone: this connection's thread ends with it
    return answer


# 8 s of an answer head that never ends: 32 header lines, one every 0.25 s; or the status line
# itself, a byte every 0.25 s. When the trickle runs out the server closes, and http.client takes the
# end of the stream for the end of the head: the old code then saw a 2xx, the post "succeeded"
HEADER_LINES = trickle(b"HTTP/1.1 202 Accepted\r\n", [b"X-Slow-%d: 1\r\n" % i for i in range(32)], 0.25)
STATUS_BYTES = trickle(b"", [bytes([c]) for c in b"HTTP/1.1 202 Accepted\r\nX-Slow: 1\r\n"][:32], 0.25)

REPLY = Reply(ev.LABELS_CHANGED, {"node": "n1", "before": {}, "after": {}}, subject="n1", id="node-n1-7-labels")


def test_events_are_posted_in_binary_mode(broker: Broker) -> None:
    """The post itself (no test posted to a real HTTP server before): binary mode, one POST per event."""
    post_events(broker.url, "classifier", [REPLY, Reply(ev.NODE_ADDED, {"node": "n2"}, subject="n2")],
                timeout=2.0)
    assert len(broker.requests) == 2
    head, _, body = broker.requests[0].partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    headers = {k.lower(): v.strip() for k, v in (line.split(":", 1) for line in lines[1:])}
    assert lines[0] == "POST /kdesched/kdesched HTTP/1.1"
    assert (headers["ce-type"], headers["ce-source"], headers["ce-subject"], headers["ce-id"]) == (
        ev.LABELS_CHANGED, "/kdesched/classifier", "n1", "node-n1-7-labels")
    assert headers["content-type"] == "application/json" and body == b'{"node": "n1", "before": {}, "after": {}}'


@pytest.mark.parametrize("answer", [HEADER_LINES, STATUS_BYTES], ids=["header-lines", "status-line-bytes"])
def test_a_trickled_answer_fails_each_attempt_at_its_timeout(broker: Broker, answer: Answer) -> None:
    broker.answer = answer
    slept: list[float] = []
    started = time.monotonic()
    with pytest.raises(RuntimeError) as failed:
        post_events(broker.url, "classifier", [REPLY], attempts=2, timeout=1.0, sleep=slept.append)
    took = time.monotonic() - started
    assert str(failed.value) == (f"posting {ev.LABELS_CHANGED} to {broker.url} failed after 2 attempts: "
                                 "the broker did not answer within 1s"), failed.value
    assert took < 3.5, f"two attempts of 1 s took {took:.1f}s"
    assert len(broker.requests) == 2 and slept == [0.2]  # retried after its back-off, as any failed post


def test_the_classifier_answers_503_within_its_posts_timeouts_and_the_redelivery_emits_again(
        broker: Broker, fake_api: FakeApiServer, kube: KubeClient) -> None:
    """The classifier's handling of a failed post is unchanged: 503 with Retry-After (Knative delivers
    the event again), the cache not committed; only now it comes within the posts' timeouts."""
    fake_api.add(node_obj("n1"), node_obj("n2"))
    broker.answer = HEADER_LINES
    posting = functools.partial(post_events, attempts=2, timeout=0.5, sleep=lambda s: None)
    c = FUNCTIONS["classifier"].create_app(client=kube, broker_url=broker.url, post=posting).test_client()
    n2 = fake_api.get("Node", "n2")
    assert n2 is not None
    n2["spec"]["taints"] = [TAINT]
    n2["metadata"]["labels"] = {"team": "c"}
    fake_api.update(n2)
    changed = fake_api.get("Node", "n2")
    started = time.monotonic()
    resp = post(c, *ce_request(ev.APISERVER_UPDATE, changed))
    took = time.monotonic() - started
    assert resp.status_code == 503 and resp.headers.get("Retry-After"), resp.get_data()
    assert resp.get_json()["error"].startswith("could not post events to the broker: posting "), resp.get_json()
    assert "did not answer within 0.5s" in resp.get_json()["error"]
    assert took < 2.5, f"the classifier answered after {took:.1f}s; its posts' timeouts are 2 x 0.5 s"
    # the broker answers again: Knative's redelivery emits both events (nothing was committed)
    broker.answer = lambda conn, stop: conn.sendall(ACCEPTED)
    broker.requests.clear()
    resp = post(c, *ce_request(ev.APISERVER_UPDATE, changed))
    assert resp.status_code == 200 and reply_event(resp).get_type() == ev.TAINTS_CHANGED
    assert [r.split(b"\r\n")[0] for r in broker.requests] == [b"POST /kdesched/kdesched HTTP/1.1"]
    assert b"ce-type: " + ev.LABELS_CHANGED.encode() in broker.requests[0].lower()


def test_a_resync_change_whose_post_ran_out_of_time_is_held_and_posted_by_the_next_resync(
        broker: Broker, fake_api: FakeApiServer, kube: KubeClient) -> None:
    """The re-sync's failed post keeps its node held in the record, as for any failed post
    (test_classifier_resync_held.py), and the re-sync ends within the posts' timeouts."""
    fake_api.add({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kdesched"}})
    fake_api.add(node_obj("n1"), node_obj("n2"))
    now = [1000.0]
    posting = functools.partial(post_events, attempts=2, timeout=0.5, sleep=lambda s: None)
    fn = ClassifierFunction(kube, broker.url, posting, resync_seconds=300, clock=lambda: now[0],
                            record_namespace="kdesched")
    assert fn.seed() and fn.recorder is not None
    n1 = fake_api.get("Node", "n1")
    assert n1 is not None
    n1["spec"]["taints"] = [TAINT]
    fake_api.update(n1)
    broker.answer = HEADER_LINES
    now[0] += 301
    started = time.monotonic()
    fn.resync_if_due()
    took = time.monotonic() - started
    assert took < 2.5, f"the re-sync took {took:.1f}s; its post's timeouts are 2 x 0.5 s"
    # held: the next re-sync posts it again (the cache already shows n1 tainted, only the hold remembers)
    broker.answer = lambda conn, stop: conn.sendall(ACCEPTED)
    broker.requests.clear()
    now[0] += 301
    fn.resync_if_due()
    assert [b"ce-type: " + ev.TAINTS_CHANGED.encode() in r.lower() for r in broker.requests] == [True]
    # and then let go: the re-sync after it posts nothing
    broker.requests.clear()
    now[0] += 301
    fn.resync_if_due()
    assert broker.requests == []


def test_an_answer_that_is_not_http_is_retried_like_any_failed_attempt(broker: Broker) -> None:
    """A proxy or half-started broker answering garbage (``BadStatusLine``) is a failed attempt, retried
    like a refused connection, not an error that skips the retries (before: it escaped on the first)."""
    answers = iter([lambda c, stop: c.sendall(b"HELLO\r\n\r\n"), lambda c, stop: c.sendall(ACCEPTED)])
    broker.answer = lambda c, stop: next(answers)(c, stop)
    slept: list[float] = []
    post_events(broker.url, "classifier", [REPLY], attempts=2, timeout=2.0, sleep=slept.append)
    assert len(broker.requests) == 2 and slept == [0.2]
    broker.answer = lambda c, stop: c.sendall(b"HELLO\r\n\r\n")
    with pytest.raises(RuntimeError, match="failed after 2 attempts"):
        post_events(broker.url, "classifier", [REPLY], attempts=2, timeout=2.0, sleep=slept.append)


def test_a_post_of_several_events_gives_up_at_its_overall_deadline(broker: Broker) -> None:
    """``within`` bounds the whole call, not each event: the classifier answers Knative's request
    after posting its extra events, and each event's own bound (3 attempts of 5 s) times three events
    passed the classifier's 30 s ``timeoutSeconds`` (Knative then gave up on an answer still coming)."""
    broker.answer = HEADER_LINES
    three = [REPLY, Reply(ev.NODE_READY, {"node": "n1"}, subject="n1"), Reply(ev.NODE_ADDED, {"node": "n2"})]
    started = time.monotonic()
    with pytest.raises(RuntimeError) as failed:
        post_events(broker.url, "classifier", three, attempts=3, timeout=1.0, within=1.5, sleep=time.sleep)
    took = time.monotonic() - started
    assert str(failed.value) == (f"posting {ev.LABELS_CHANGED} to {broker.url} ran out of the 1.5s given to "
                                 "post 3 event(s) (0 posted): the broker did not answer within 1s"), failed.value
    assert took < 2.5, f"a post given 1.5 s took {took:.1f}s"  # before: 3 events x (3 x 1 s + 0.6 s)
    # the second attempt had the 0.5 s left, not a full second: cut at the deadline
    assert len(broker.requests) == 2


def test_a_back_off_that_would_pass_the_deadline_is_not_slept(broker: Broker) -> None:
    broker.answer = lambda c, stop: c.sendall(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n")
    slept: list[float] = []
    with pytest.raises(RuntimeError, match=r"ran out of the 0.1s given to post 1 event\(s\) \(0 posted\): "):
        post_events(broker.url, "classifier", [REPLY], attempts=5, timeout=1.0, within=0.1, sleep=slept.append)
    assert slept == [] and len(broker.requests) == 1


def test_events_posted_before_the_deadline_are_counted_in_the_error(broker: Broker) -> None:
    answers = iter([lambda c, stop: c.sendall(ACCEPTED)])
    broker.answer = lambda c, stop: next(answers, HEADER_LINES)(c, stop)
    two = [REPLY, Reply(ev.NODE_READY, {"node": "n1"}, subject="n1")]
    with pytest.raises(RuntimeError, match=r"ran out of the 1s given to post 2 event\(s\) \(1 posted\)"):
        post_events(broker.url, "classifier", two, attempts=3, timeout=5.0, within=1.0, sleep=time.sleep)


def test_the_classifier_answers_within_its_post_deadline_whatever_the_number_of_events(
        broker: Broker, fake_api: FakeApiServer, kube: KubeClient) -> None:
    """A node that turns Ready, tainted and relabelled at once: three events, two posted before the
    reply. Each may take its full attempts; together they stop at the classifier's own deadline for its
    posts (``post_within``, 20 s by default, inside Knative's 30 s), and it answers 503."""
    fake_api.add(node_obj("n1"), node_obj("n2", ready=False))
    broker.answer = HEADER_LINES
    posting = functools.partial(post_events, attempts=2, timeout=1.0, sleep=lambda s: None)
    app = FUNCTIONS["classifier"].create_app(client=kube, broker_url=broker.url, post=posting)
    fn = app.config["KDESCHED_CLASSIFIER"]
    assert fn.post_within == 20.0
    fn.post_within = 1.2
    c = app.test_client()
    n2 = fake_api.get("Node", "n2")
    assert n2 is not None
    n2["spec"]["taints"] = [{**TAINT, "effect": "PreferNoSchedule"}]  # (still usable: node.ready too)
    n2["metadata"]["labels"] = {"team": "c"}
    n2["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    fake_api.update(n2)
    started = time.monotonic()
    resp = post(c, *ce_request(ev.APISERVER_UPDATE, fake_api.get("Node", "n2")))
    took = time.monotonic() - started
    assert resp.status_code == 503 and resp.headers.get("Retry-After"), resp.get_data()
    assert "ran out of the 1.2s given to post 2 event(s) (0 posted)" in resp.get_json()["error"], resp.get_json()
    assert took < 2.2, f"the classifier answered after {took:.1f}s; its posts were given 1.2 s"  # before: 2 x 2 s
