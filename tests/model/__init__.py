"""Unit tests of the model layer (records, quantities, selectors, scheduling predicates, snapshots, files)."""
