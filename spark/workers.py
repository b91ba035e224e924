"""Which Python Spark's workers run.

PySpark starts its Python workers with ``$PYSPARK_PYTHON``, or ``python3`` from the PATH
when that is unset: a script started as ``.venv/bin/python job.py`` without activating
the venv gets workers that cannot import amqwire.  On a local master the workers run on
this machine, so this interpreter is the right one; on a cluster it is the executors'
business (``spark.archives`` or an install on each node, see docs/spark.md, "On a cluster").
"""
from __future__ import annotations

import logging
import os
import sys
from typing import Any

__all__ = ["is_connect", "workers_run_this_python"]

log = logging.getLogger("amqwire.spark")

_SPARK_DEFAULT = "python3"  # what PySpark uses when PYSPARK_PYTHON is unset
_warned: set[str] = set()


def is_connect(spark: Any) -> bool:
    """True for a Spark Connect session (``SparkSession.builder.remote(...)``)."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def _configured(sc: Any) -> bool:
    """spark.pyspark.python set on the session (a real SparkContext has getConf)."""
    get_conf = getattr(sc, "getConf", None)
    return get_conf is not None and bool(get_conf().get("spark.pyspark.python", ""))


def workers_run_this_python(spark: Any) -> None:
    """On a local master with PYSPARK_PYTHON and spark.pyspark.python unset, make the
    session's Python workers run this interpreter (``sys.executable``) instead of the
    ``python3`` on the PATH.  On a cluster, warn once that the executors' ``python3``
    needs amqwire."""
    if spark is None or is_connect(spark):
        return  # a Connect server picks its workers' Python itself
    sc = spark.sparkContext
    if os.environ.get("PYSPARK_PYTHON") or sc.pythonExec != _SPARK_DEFAULT or _configured(sc):
        return  # chosen explicitly: respected
    master = sc.master or ""
    if master.startswith("local"):
        sc.pythonExec = sys.executable
        os.environ["PYSPARK_PYTHON"] = sys.executable
        log.debug("amqwire.spark: Python workers run %s (PYSPARK_PYTHON was unset)", sys.executable)
    elif master not in _warned:
        _warned.add(master)
        log.warning(
            "amqwire.spark: PYSPARK_PYTHON is unset, so the executors of %s run the 'python3' on "
            "their PATH, which must have amqwire installed (see docs/spark.md, 'On a cluster')", master
        )
