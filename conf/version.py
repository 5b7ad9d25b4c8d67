"""The project's version, as installed (pyproject.toml is its one source)."""

from __future__ import annotations

import argparse
from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("namesrv-stream")
except PackageNotFoundError:  # running from a checkout that was never installed
    __version__ = "0+unknown"


def argument_parser(prog: str, description: str) -> argparse.ArgumentParser:
    """The command-line parser every entry point starts from (it knows `--version`)."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    return parser
