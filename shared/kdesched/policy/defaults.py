"""kdesched's default policy: what runs when no ``--policy`` is given.

Why: without a policy kdesched uses the one of the seed articles (RemoveDuplicates, LowNodeUtilization
cpu/memory/pods 20 -> 50, RemovePodsViolatingInterPodAntiAffinity, RemovePodsViolatingNodeAffinity
required, RemovePodsViolatingNodeTaints). It ships as package data written in v1alpha1, the way
those articles write it, and goes through the same loader as any user file, so the default can
never drift from what a user would get by passing the same file. (The seed articles are the
descheduling articles kdesched grew out of; their four stories are ``examples/seed-*``.)
"""

from __future__ import annotations

from functools import lru_cache
from importlib import resources

from kdesched.policy.load import load_policy_text
from kdesched.policy.types import Policy

DEFAULT_POLICY_RESOURCE = "data/default-policy.yaml"
DEFAULT_POLICY_SOURCE = "<default policy>"


def default_policy_text() -> str:
    """The default policy file as shipped (``kdesched policy show-default`` prints it)."""
    return resources.files("kdesched").joinpath(DEFAULT_POLICY_RESOURCE).read_text(encoding="utf-8")


@lru_cache(maxsize=1)
def default_policy() -> Policy:
    """The loaded default policy (frozen, so one shared instance is safe)."""
    return load_policy_text(default_policy_text(), DEFAULT_POLICY_SOURCE)
