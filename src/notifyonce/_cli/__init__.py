"""The ``notifyonce`` command line (the console script runs `main`).

``parser`` builds the argument tree and runs a command; the commands live in ``ledger``,
``broadcast``, ``recipients``, ``serve`` and ``web``; ``common`` holds what they share.
Imports go one way: parser -> the commands -> common.
"""

from __future__ import annotations

from notifyonce._cli.parser import main

__all__ = ["main"]
