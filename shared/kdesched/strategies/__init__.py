"""Descheduling strategies: pure functions of a plan-aware cluster state that plan evictions.

One module per strategy; :mod:`kdesched.strategies.registry` lists them all. Nothing in this
package imports an API client or does I/O.
"""
