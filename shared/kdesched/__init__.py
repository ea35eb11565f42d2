"""kdesched: an event-driven Kubernetes descheduler.

The import package ``kdesched`` is the repository's ``shared/`` folder (see pyproject.toml). The
layers, top to bottom, are cli -> functions -> reactor -> engine -> evictor -> kube -> strategies ->
policy -> model; an import-linter contract in pyproject.toml keeps imports pointing downwards.
"""

__version__ = "0.1.0"
