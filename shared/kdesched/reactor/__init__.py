"""The reactor: turn cluster changes into small, scoped, coordinated descheduling runs.

Why: the event-driven part of kdesched lives here and nowhere else. ``classifier`` turns raw Node
watch events into semantic ones, ``events`` maps a semantic event to the strategies and nodes it
affects, ``coordination`` makes at-least-once, parallel deliveries safe (coalescing, Lease,
per-node locks, cool-downs, token buckets), ``runner`` carries a scoped run out, ``watch`` and
``serve`` run it all without Knative. See docs/reactor.md.
"""
