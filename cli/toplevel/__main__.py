"""``python -m amqwire``: the ``amqwire`` command (installed as ``amqwire/__main__.py``)."""
import sys

from amqwire.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
