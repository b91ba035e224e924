"""amqwire.cli: the ``amqwire`` command (publish, get, consume, queues, perf, bridge).

``amqwire SUBCOMMAND ...``, ``python -m amqwire ...`` and ``python -m amqwire.cli ...`` are
the same program; ``main(argv)`` runs it and returns the exit code.
"""
from .main import main

__all__ = ["main"]
