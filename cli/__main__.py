"""``python -m amqwire.cli``: the ``amqwire`` command."""
import sys

from amqwire.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
