"""``kdesched policy validate`` and ``kdesched policy convert``: a policy file checked, or written
as descheduler/v1alpha2, without contacting a cluster.

Why a module of its own: unlike ``simulate`` and ``run`` (:mod:`kdesched.cli.main`) they read no
cluster and plan nothing; they share only the policy loading of :mod:`kdesched.cli.common`.
"""

from __future__ import annotations

import argparse
import os
import sys

from kdesched.cli.common import EXIT_OK, InputError, load_policy_arg, stdin_once


def cmd_policy_validate(args: argparse.Namespace) -> int:
    policy = load_policy_arg(args.file).policy
    plugins = sum(len(p.deschedule) + len(p.balance) for p in policy.profiles)
    print(f"{args.file}: valid policy ({policy.api_version}), {len(policy.profiles)} profile(s), "
          f"{plugins} strategy plugin(s)")
    return EXIT_OK


def write_file_atomically(path: str, text: str, what: str) -> None:
    """Write ``text`` to ``path`` whole or not at all: a temporary file beside it, then a rename.
    An unusable ``path`` (a directory, a missing folder, no permission) is an InputError naming it."""
    import tempfile

    target = os.path.abspath(path)
    folder = os.path.dirname(target)
    if os.path.isdir(target):
        raise InputError(f"{what} {path}: is a directory; give a file name, e.g. {os.path.join(path, 'policy.yaml')}")
    if not os.path.isdir(folder):
        raise InputError(f"{what} {path}: the folder {folder} does not exist")
    try:
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{os.path.basename(target)}.", suffix=".tmp")
    except OSError as exc:
        raise InputError(f"{what} {path}: cannot write in {folder}: {exc.strerror or exc}") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, target)
    except OSError as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise InputError(f"{what} {path}: cannot write: {exc.strerror or exc}") from None


def cmd_policy_convert(args: argparse.Namespace) -> int:
    import json

    import yaml

    from kdesched.policy.dump import policy_to_v1alpha2

    stdin_once(("FILE", args.file), ("--output-file", args.output_file))
    policy = load_policy_arg(args.file).policy
    doc = policy_to_v1alpha2(policy)
    if args.output == "json":
        text = json.dumps(doc, indent=2) + "\n"
    else:
        text = yaml.safe_dump(doc, sort_keys=False, default_flow_style=False)
    if args.output_file and args.output_file != "-":
        write_file_atomically(args.output_file, text, "--output-file")
    else:
        sys.stdout.write(text)
    return EXIT_OK
