"""The evictor: who may be evicted (DefaultEvictor filters), how many (limits, PDB budgets), and
the one place that acts on the API (execute.py, with retries, events and metrics).

Why one package: every eviction of every strategy and every trigger goes through the same filters,
limits and retry policy, so an operator can reason about all of them from one place.
"""
