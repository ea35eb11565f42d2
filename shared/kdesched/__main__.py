"""``python -m kdesched`` = the ``kdesched`` command (kdesched.cli.startup: start-up without the cyclic GC)."""

from kdesched.cli.startup import main

raise SystemExit(main())
