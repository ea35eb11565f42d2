"""Pure event logic: what an event is and what it asks for, decided without any I/O.

Why a package of its own: the classifier, the event -> strategies map and the parsing of requests
are rules about events, testable as plain functions, and shared by the Knative functions, ``kdesched
serve`` and ``simulate --event``. They import no API client (an import-linter contract), so none of
them can grow a hidden read of the cluster. ``types`` imports nothing at all (cold starts).
"""
