"""``kdesched serve``: the whole reactor in one process, no Knative needed.

Why a package of its own: it is the only place that owns a process (threads, leader election, HTTP,
the drain); ``server`` composes it from collaborators with one job each (``leader``, ``dispatch``)
and the run machinery below. Nothing in the reactor imports it.
"""
