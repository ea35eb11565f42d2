"""Benchmarks for kdesched: a synthetic cluster generator and a per-phase timing harness.

Why: kdesched's target is a 150,000-pod decision in seconds; these tools make that claim
measurable and repeatable on any machine (``python bench/bench_simulate.py``).
"""
