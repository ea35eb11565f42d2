"""The reactor: turn cluster changes into small, scoped, coordinated descheduling runs.

Why: the event-driven part of kdesched lives here and nowhere else, in four layers (imports point
downwards only; import-linter checks it, docs/design.md):

* :mod:`.serve`: ``kdesched serve``, the whole reactor in one process (leader election, dispatch,
  the sweep, the start-up reconcile, the drain);
* :mod:`.run`: the run machinery: a request becomes a coalesced, locked run, decided against the
  disruption ledger, executed, reported and repeated while it holds paced moves;
* :mod:`.io`: what the reactor reads from and writes to the API server (the run Lease, the ledger's
  Leases, snapshots, the Node watch, Events, the node record);
* :mod:`.events`: pure event logic: event types, the classifier, the event -> strategies map, the
  requests parsed at the edge, when a node is usable. No I/O;

and :mod:`.metrics`, the counters every layer adds to. See docs/reactor.md.
"""
