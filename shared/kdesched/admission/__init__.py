"""Admission: may a planned eviction go now? One pure module per control (its settings, parsed once
from the policy's ``kdesched:`` block, and a check returning a typed verdict). No I/O here: the
readings a control needs (e.g. Prometheus' alerts) are taken by :mod:`kdesched.kube` and passed in."""
