"""The ``kdesched`` command: the composition root that wires policy, snapshot, engine, executor,
reactor and functions together. Nothing below it imports it."""
