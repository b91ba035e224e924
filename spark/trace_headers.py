"""The sink's ``traceparentColumn``: each row's W3C trace context written into its headers.

Done on the Arrow arrays of a batch, never per row in Python: the headers map is rebuilt
from its offsets with one ``take`` of its keys and one of its values, each row's entries
followed by a ``traceparent`` entry where the column holds one (a null leaves the row as it
was, headers or none; a ``traceparent`` the headers held already is replaced by the column's).
"""
from __future__ import annotations

from typing import Any, Optional

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

TRACEPARENT = "traceparent"


def check_types(traceparent_type: Any, headers_type: Optional[Any]) -> None:
    """On the driver: ValueError naming the column when the types cannot take part."""
    from pyspark.sql.types import MapType, StringType

    if not isinstance(traceparent_type, StringType):
        raise ValueError(f"traceparentColumn: the column must be a string, not {traceparent_type.simpleString()}")
    if headers_type is not None and not (
        isinstance(headers_type, MapType) and isinstance(headers_type.keyType, StringType)
        and isinstance(headers_type.valueType, StringType)
    ):
        raise ValueError("traceparentColumn: the headers column must be a map<string,string> to take the trace "
                         f"context, not {headers_type.simpleString()} (or leave headers out)")


def with_traceparent(headers: Optional[pa.Array], traceparent: pa.Array) -> pa.MapArray:
    """``headers`` (a map<string, string> array, or None) with each row's ``traceparent``."""
    if isinstance(traceparent, pa.ChunkedArray):
        traceparent = traceparent.combine_chunks()
    rows = len(traceparent)
    present = np.asarray(traceparent.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
    added = present.astype(np.int64)
    if headers is None:
        offsets = np.zeros(rows + 1, dtype=np.int32)
        np.cumsum(added, out=offsets[1:])
        keys = pa.array([TRACEPARENT] * int(added.sum()), type=pa.string())
        return pa.MapArray.from_arrays(pa.array(offsets), keys, traceparent.filter(pa.array(present)),
                                       mask=pa.array(~present))
    if isinstance(headers, pa.ChunkedArray):
        headers = headers.combine_chunks()
    old_offsets = headers.offsets.to_numpy().astype(np.int64)  # into the children, which ignore a slice
    first, entries = int(old_offsets[0]), int(old_offsets[-1] - old_offsets[0])
    keys = headers.keys.slice(first, entries).cast(pa.string())
    items = headers.items.slice(first, entries).cast(pa.string())
    row_of_entry = np.repeat(np.arange(rows), np.diff(old_offsets))
    # a row given a context drops the traceparent its headers held: one entry per key
    replaced = np.asarray(pc.fill_null(pc.equal(keys, TRACEPARENT), False).to_numpy(zero_copy_only=False), dtype=bool)
    kept = np.nonzero(~(replaced & present[row_of_entry]))[0]
    kept_rows = row_of_entry[kept]
    kept_lengths = np.bincount(kept_rows, minlength=rows)
    kept_offsets = np.zeros(rows + 1, dtype=np.int64)
    np.cumsum(kept_lengths, out=kept_offsets[1:])
    new_offsets = np.zeros(rows + 1, dtype=np.int64)
    np.cumsum(kept_lengths + added, out=new_offsets[1:])
    if new_offsets[-1] > np.iinfo(np.int32).max:
        raise ValueError("traceparentColumn: the batch's headers would exceed 2**31 entries")
    order = np.empty(int(new_offsets[-1]), dtype=np.int64)
    order[new_offsets[kept_rows] + np.arange(len(kept)) - kept_offsets[kept_rows]] = kept
    with_context = np.nonzero(present)[0]
    order[new_offsets[with_context + 1] - 1] = len(keys) + with_context
    take = pa.array(order)
    all_keys = pa.concat_arrays([keys, pa.array([TRACEPARENT] * rows, type=pa.string())])
    all_items = pa.concat_arrays([items, traceparent.cast(pa.string())])
    no_headers = np.asarray(headers.is_null().to_numpy(zero_copy_only=False), dtype=bool)
    return pa.MapArray.from_arrays(pa.array(new_offsets.astype(np.int32)), all_keys.take(take), all_items.take(take),
                                   mask=pa.array(no_headers & ~present))
