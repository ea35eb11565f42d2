"""The alert brake's settings and verdict (kdesched.admission.alerts): pure, no Prometheus here
(tests/kube/test_alerts.py covers the reads, tests/realprom/test_alert_brake.py the real server)."""

from __future__ import annotations

from typing import Any

import pytest
from kdesched.admission.alerts import (
    Alert,
    AlertBrakeSettings,
    AlertReason,
    AlertsReading,
    fail_open_note,
    judge,
    parse_alert_brake,
)
from kdesched.policy.errors import PolicyError
from kdesched.reactor.run.settings import parse_settings

URL = "http://prometheus.monitoring.svc:9090"
ON = {"enabled": True, "url": URL, "alertFilterRegexp": "^(EtcdMembersDown|CephHealthError)$"}


def errors_of(raw: Any) -> list[str]:
    with pytest.raises(PolicyError) as exc:
        parse_alert_brake(raw)
    return exc.value.errors


# --- parse -----------------------------------------------------------------------------------------


def test_defaults_are_off_and_cautious() -> None:
    s = parse_alert_brake(None)
    assert s == AlertBrakeSettings()
    assert (s.enabled, s.alert_filter_match_only, s.alert_firing_only, s.fail_closed) == (False, True, True, True)
    assert (s.timeout_seconds, s.settle_seconds, s.recheck_seconds) == (5.0, 0.0, 30.0)
    assert parse_alert_brake({}) == AlertBrakeSettings()


def test_a_full_block() -> None:
    s = parse_alert_brake({**ON, "authToken": {"secretReference": {"namespace": "monitoring", "name": "prom"}},
                           "caFile": "/etc/ca.pem", "timeoutSeconds": 2.5, "alertFilterMatchOnly": False,
                           "alertFiringOnly": False, "settleSeconds": 120, "recheckSeconds": 10,
                           "failClosed": False})
    assert s.enabled and s.url == URL and s.filter_source == ON["alertFilterRegexp"]
    assert (s.token_secret_namespace, s.token_secret_name, s.token_file, s.ca_file) == ("monitoring", "prom", "",
                                                                                       "/etc/ca.pem")
    assert (s.timeout_seconds, s.settle_seconds, s.recheck_seconds) == (2.5, 120.0, 10.0)
    assert not (s.alert_filter_match_only or s.alert_firing_only or s.fail_closed)
    assert parse_alert_brake({**ON, "tokenFile": "/var/run/token", "url": URL + "/prom/"}).token_file == "/var/run/token"


def test_every_bad_field_is_named_at_once() -> None:
    errors = errors_of({
        "enabled": "yes", "url": "ftp://x", "tokenFile": 3, "caFile": ["a"], "timeoutSeconds": 0,
        "alertFilterRegexp": "(unclosed", "alertFilterMatchOnly": 1, "alertFiringOnly": "true",
        "settleSeconds": -1, "recheckSeconds": float("inf"), "failClosed": None, "alertFilter": "x",
        "authToken": {"secretReference": {"namespace": "monitoring"}, "bearer": "x"},
    })
    where = "kdesched.alertBrake"
    expected = [
        f'{where}.alertFilter: unknown field',
        f'{where}.enabled: must be true or false, got "yes"',
        f'{where}.url: must be an http(s) URL such as',
        f'{where}.authToken.bearer: unknown field',
        f'{where}.authToken.secretReference: needs both namespace and name',
        f'{where}.tokenFile: must be a file path, got 3',
        f"{where}.caFile: must be a file path, got ['a']",
        f'{where}.alertFilterRegexp: is not a valid regular expression (missing ), unterminated subpattern',
        f'{where}.timeoutSeconds: must be a number > 0 (seconds), got 0',
        f'{where}.alertFilterMatchOnly: must be true or false, got 1',
        f'{where}.alertFiringOnly: must be true or false, got "true"',
        f'{where}.settleSeconds: must be a number >= 0 (seconds), got -1',
        f'{where}.recheckSeconds: must be a number > 0 (seconds), got inf',
    ]
    for want in expected:
        assert any(e.startswith(want) for e in errors), (want, errors)
    assert len(errors) == len(expected), errors


@pytest.mark.parametrize("value", ["10", "²", "１０", "٣", True])
def test_numbers_are_numbers_unicode_digits_refused(value: Any) -> None:
    errors = errors_of({"timeoutSeconds": value})
    shown = "true" if value is True else f'"{value}"'
    assert errors == [f"kdesched.alertBrake.timeoutSeconds: must be a number > 0 (seconds), got {shown}"]


@pytest.mark.parametrize("url, problem", [
    ("prometheus:9090", "must be an http(s) URL such as"),
    ("http://", "must be an http(s) URL such as"),
    ("http://prom:abc", "is not a URL (Port could not be cast to integer value"),
    ("http://prom:9090/?x=1", "must be Prometheus' base URL, without a query or fragment"),
    ("http://prom:9090#top", "must be Prometheus' base URL, without a query or fragment"),
    (" http://prom:9090", "must be an http(s) URL without spaces"),
    ("", "is required when the alert brake is enabled"),
])
def test_bad_urls(url: str, problem: str) -> None:
    errors = errors_of({**ON, "url": url})
    assert len(errors) == 1 and errors[0].startswith(f"kdesched.alertBrake.url: {problem}"), errors


def test_enabled_needs_a_url_and_a_filter() -> None:
    errors = errors_of({"enabled": True})
    assert [e.split(":")[0] for e in errors] == ["kdesched.alertBrake.url", "kdesched.alertBrake.alertFilterRegexp"]
    assert "required when the alert brake is enabled" in errors[0] and "Watchdog" in errors[1]
    parse_alert_brake({"enabled": False, "timeoutSeconds": 1})  # disabled: nothing required


def test_token_secret_or_file_not_both() -> None:
    errors = errors_of({**ON, "tokenFile": "/t", "authToken": {"secretReference": {"namespace": "m", "name": "p"}}})
    assert errors == ["kdesched.alertBrake.tokenFile: set authToken.secretReference or tokenFile, not both"]
    assert errors_of("on") == ['kdesched.alertBrake: must be a mapping, got "on"']
    assert errors_of({"authToken": "s3cret"}) == ['kdesched.alertBrake.authToken: must be a mapping, got "s3cret"']


def test_the_kdesched_block_carries_it_and_names_its_errors() -> None:
    settings = parse_settings({"alertBrake": ON})
    assert settings.alert_brake.enabled and settings.alert_brake.url == URL
    assert parse_settings({}).alert_brake == AlertBrakeSettings()
    with pytest.raises(PolicyError) as exc:
        parse_settings({"alertBrake": {"enabled": True, "url": URL, "alertFilterRegexp": "["}, "settleSeconds": "x"})
    assert [e.split(":")[0] for e in exc.value.errors] == ["kdesched.settleSeconds",
                                                            "kdesched.alertBrake.alertFilterRegexp"]


# --- judge -----------------------------------------------------------------------------------------


def settings(**raw: Any) -> AlertBrakeSettings:
    return parse_alert_brake({**ON, **raw})


def alert(name: str, state: str = "firing", **labels: str) -> Alert:
    return Alert(name, state, {"alertname": name, **labels})


def reading(*alerts: Alert, error: str = "", recent: dict[tuple[str, str], float] | None = None) -> AlertsReading:
    return AlertsReading(tuple(alerts), error, URL, recent or {})


def test_firing_matching_alerts_hold_and_are_named() -> None:
    v = judge(reading(alert("EtcdMembersDown", job="etcd"), alert("EtcdMembersDown", job="etcd2"),
                      alert("KubePodCrashLooping"), alert("Watchdog")), settings())
    assert v.holds and v.reason is AlertReason.FIRING and v.retry_after == 30.0
    assert v.alerts == ("EtcdMembersDown",)
    assert v.message == (
        f'alert brake: 2 alert(s) firing in Prometheus at {URL} matching alertBrake.alertFilterRegexp '
        '"^(EtcdMembersDown|CephHealthError)$": EtcdMembersDown (x2); no eviction is admitted while they are '
        'firing; re-checked every 30s')


def test_pending_does_not_hold_unless_asked() -> None:
    r = reading(alert("CephHealthError", "pending"))
    assert not judge(r, settings()).holds
    v = judge(r, settings(alertFiringOnly=False))
    assert v.holds and "1 alert(s) active" in v.message and v.alerts == ("CephHealthError",)


def test_the_filter_is_searched_in_the_alert_name() -> None:
    assert not judge(reading(alert("KubePodCrashLooping")), settings()).holds
    # unanchored (Go's regexp.MatchString, kured): "Etcd" matches EtcdMembersDown
    assert judge(reading(alert("EtcdMembersDown")), settings(alertFilterRegexp="Etcd")).holds
    # anchored: a whole name only
    assert not judge(reading(alert("EtcdMembersDownSoon")), settings()).holds
    # labels other than alertname are not searched
    assert not judge(reading(alert("Other", severity="CephHealthError")), settings()).holds


def test_match_only_false_is_kureds_ignore_list() -> None:
    s = settings(alertFilterRegexp="^(Watchdog|InfoInhibitor)$", alertFilterMatchOnly=False)
    assert not judge(reading(alert("Watchdog"), alert("InfoInhibitor")), s).holds
    v = judge(reading(alert("Watchdog"), alert("KubeNodeNotReady")), s)
    assert v.holds and v.alerts == ("KubeNodeNotReady",)
    assert 'not ignored by alertBrake.alertFilterRegexp "^(Watchdog|InfoInhibitor)$"' in v.message


def test_many_alerts_first_few_and_a_count() -> None:
    v = judge(reading(*(alert(f"A{i}") for i in range(8))), settings(alertFilterRegexp="^A"))
    assert v.alerts == tuple(f"A{i}" for i in range(8))
    assert "8 alert(s) firing" in v.message and "A0, A1, A2, A3, A4 and 3 more;" in v.message


def test_unreadable_fails_closed_naming_the_url() -> None:
    err = f"cannot reach Prometheus at {URL}: [Errno 111] Connection refused"
    v = judge(reading(error=err), settings())
    assert v.holds and v.reason is AlertReason.UNREADABLE and v.retry_after == 30.0
    assert v.message == (f"alert brake: cannot read the alerts ({err}); no eviction is admitted until Prometheus at "
                         f"{URL} answers (alertBrake.failClosed); re-checked every 30s")
    opened = judge(reading(error=err), settings(failClosed=False))
    assert not opened.holds and "failClosed is false: evictions go on" in opened.message


def test_firing_wins_over_a_failed_settle_query() -> None:
    v = judge(reading(alert("CephHealthError"), error="settle query failed"), settings(settleSeconds=60))
    assert v.reason is AlertReason.FIRING


def test_recovery_and_settle_time() -> None:
    s = settings(settleSeconds=60)
    # resolved 20 s ago by Prometheus' clock: 40 s left
    v = judge(reading(recent={("CephHealthError", "firing"): 20.0}), s)
    assert v.holds and v.reason is AlertReason.SETTLING and v.retry_after == 40.0 and v.alerts == ("CephHealthError",)
    assert "within alertBrake.settleSeconds (60s): CephHealthError; evictions resume in 40s" in v.message
    # long enough ago, another alert, or only pending (firing-only): no hold
    assert not judge(reading(recent={("CephHealthError", "firing"): 61.0}), s).holds
    assert not judge(reading(recent={("Watchdog", "firing"): 1.0}), s).holds
    assert not judge(reading(recent={("CephHealthError", "pending"): 1.0}), s).holds
    # without a settle time, recovery is immediate
    assert not judge(reading(recent={("CephHealthError", "firing"): 1.0}), settings()).holds
    assert not judge(reading(), s).holds


def test_disabled_never_holds() -> None:
    assert judge(reading(error="down"), AlertBrakeSettings()).holds is False
    assert judge(reading(alert("X")), AlertBrakeSettings(enabled=False)).holds is False


def test_no_filter_in_hand_built_settings_counts_every_alert() -> None:
    s = AlertBrakeSettings(enabled=True, url=URL)
    assert judge(reading(alert("Anything")), s).holds
    assert "firing in Prometheus at" in judge(reading(alert("Anything")), s).message


# --- an answer with entries that cannot be read ----------------------------------------------------

SKIPPED = ("GET /api/v1/alerts: data.alerts[1].labels: must be a map of strings",
           "GET /api/v1/alerts: data.alerts[3].state: must be firing or pending, got 1")


def partly(*alerts: Alert, recent: dict[tuple[str, str], float] | None = None) -> AlertsReading:
    """A reading whose answer held ``alerts`` and two entries that could not be read."""
    return AlertsReading(tuple(alerts), "", URL, recent or {}, SKIPPED)


def test_a_readable_firing_match_holds_even_when_other_entries_cannot_be_read() -> None:
    """Before, one malformed entry made the whole answer unreadable: with failClosed: false the brake
    opened although EtcdMembersDown, readable and matching, was firing in the same answer."""
    r = partly(alert("EtcdMembersDown"), alert("Watchdog"))
    for fail_closed in (True, False):
        v = judge(r, settings(failClosed=fail_closed))
        assert v.holds and v.reason is AlertReason.FIRING and v.alerts == ("EtcdMembersDown",), v
        assert v.message.endswith(
            f"re-checked every 30s; 2 of 4 alert entries answered by Prometheus at {URL} cannot be read "
            f"(skipped; the first: {SKIPPED[0]})"), v.message
    assert fail_open_note(r, settings(failClosed=False)) == ""  # held: nothing went on unread


def test_entries_that_cannot_be_read_and_no_readable_match_fail_closed() -> None:
    r = partly(alert("Watchdog"))
    v = judge(r, settings())
    assert v.holds and v.reason is AlertReason.UNREADABLE and v.retry_after == 30.0
    assert v.message == (
        f"alert brake: cannot read every alert (2 of 3 alert entries answered by Prometheus at {URL} cannot be "
        f"read (skipped; the first: {SKIPPED[0]})); no eviction is admitted while one of them might be an "
        "alert that holds (alertBrake.failClosed); re-checked every 30s")


def test_with_fail_closed_false_they_let_evictions_go_and_say_how_many_and_why() -> None:
    r = partly(alert("Watchdog"))
    opened = judge(r, settings(failClosed=False))
    assert not opened.holds and opened.message == (
        f"alert brake: cannot read every alert (2 of 3 alert entries answered by Prometheus at {URL} cannot be "
        f"read (skipped; the first: {SKIPPED[0]})); alertBrake.failClosed is false: evictions go on")
    assert fail_open_note(r, settings(failClosed=False)) == opened.message


def test_a_settling_alert_is_a_readable_reason_too() -> None:
    r = partly(recent={("CephHealthError", "firing"): 20.0})
    assert judge(r, settings(failClosed=False, settleSeconds=60)).reason is AlertReason.SETTLING
    assert judge(r, settings(settleSeconds=60)).reason is AlertReason.UNREADABLE  # as an unreadable answer


def test_a_failed_read_and_skipped_entries_are_both_named() -> None:
    r = AlertsReading((alert("Watchdog"),), "the settle query failed", URL, {}, SKIPPED[:1])
    v = judge(r, settings())
    assert v.reason is AlertReason.UNREADABLE and v.message.startswith(
        f"alert brake: cannot read the alerts (the settle query failed; 1 of 2 alert entries answered by Prometheus "
        f"at {URL} cannot be read (skipped; the first: {SKIPPED[0]})); no eviction is admitted until Prometheus")
