"""``python -m kdesched`` = the ``kdesched`` command (kdesched.cli.entry: start-up without the cyclic GC)."""

from kdesched.cli.entry import main

raise SystemExit(main())
