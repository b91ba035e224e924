"""One fuzz target under atheris (libFuzzer), in the instrumented build (``bash fuzz/build``):

    LD_PRELOAD=$(.venv-fuzz/bin/python -c 'import atheris; print(atheris.path())')/asan_with_fuzzer.so \\
        .venv-fuzz/bin/python fuzz/fuzz_one.py TARGET [libFuzzer options] [CORPUS_DIR ...]

``bash fuzz/run`` does this for every target with the options of a campaign.  The compiled
codec reports its C edges to libFuzzer (``-fsanitize=fuzzer-no-link``); the Python parts
(the targets' checks, the Spark decoder) are instrumented by atheris at import.
"""
import sys
from pathlib import Path

import atheris

sys.path.insert(0, str(Path(__file__).resolve().parent))
with atheris.instrument_imports(include=["targets", "amqwire.spark.decode"]):
    import amqwire.spark.decode  # noqa: F401
    import targets


def main() -> None:
    if len(sys.argv) < 2 or sys.argv[1] not in targets.TARGETS:
        sys.exit(f"usage: fuzz_one.py TARGET [libFuzzer options]; targets: {', '.join(targets.TARGETS)}")
    target = targets.TARGETS[sys.argv[1]]
    atheris.Setup([sys.argv[0]] + sys.argv[2:], target)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
