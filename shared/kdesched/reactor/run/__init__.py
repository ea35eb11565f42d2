"""The run machinery: from a parsed request to a coordinated run, its report and its repeats.

Why a package of its own: coalescing and locks (``coalescing``), node-scoped runs (``noderuns``),
the ledger admission (``admit``), the admission pipeline's answers (``controls``), surge-first moves
(``surge``), one decided run (``execution``), what a live run tells people (``notices``), paced
repeats (``continuation``), the reply (``reports``) and the settings live here, composed by
:class:`~kdesched.reactor.run.runner.Reactor`, which the Knative functions and ``kdesched serve``
both call. It uses the I/O package's adapters and the pure event logic, never the reverse.
"""
