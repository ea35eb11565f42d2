"""The reactor's I/O: everything it reads from or writes to the API server, through kdesched.kube.

Why a package of its own: the run Lease (``lease``), the disruption ledger's Leases
(``ledger_store``), a run's snapshot (``loaders``) and its other readings (``readings``: alerts,
measured usage), a new node's probe (``probe``), the Node watch (``watch``), the node record
(``reconcile``) and the "why not" Events (``whynot``) each wrap one kind of cluster access behind
a small interface the run machinery is given. They know events but no run (import-linter: the
layers inside the reactor).
"""
