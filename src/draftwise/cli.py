"""`draftwise` command line: one subcommand per job, each registered by the module that owns it."""
from __future__ import annotations

import argparse
import importlib
import sys

# (module, function) pairs; each function takes the subparsers object and adds its own subcommand(s)
# with `set_defaults(func=...)`. Importing lazily keeps `draftwise --help` fast.
_COMMANDS = [
    ("draftwise.commands", "add_cli"),        # generate
    ("draftwise.zoo.build", "add_cli"),       # zoo build
    ("draftwise.zoo.demo", "add_cli"),        # demo
    ("draftwise.train.cli", "add_cli"),       # train {eagle3,mtp,dflash,dspark}
    ("draftwise.bench.cli", "add_cli"),       # bench, serve
    ("draftwise.planner.cli", "add_cli"),     # plan, profile
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="draftwise", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    for module, fn in _COMMANDS:
        try:
            mod = importlib.import_module(module)
        except ModuleNotFoundError as exc:  # a part not built yet
            if exc.name and exc.name.startswith("draftwise"):
                continue
            raise
        getattr(mod, fn)(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        rc = args.func(args)
    except (ValueError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return int(rc or 0)


if __name__ == "__main__":
    sys.exit(main())
