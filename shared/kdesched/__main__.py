"""``python -m kdesched`` = the ``kdesched`` command."""

from kdesched.cli.main import main

raise SystemExit(main())
