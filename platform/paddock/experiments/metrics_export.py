"""A run's metric points at full resolution, as CSV or Parquet bytes, read in chunks.

Rows come in the order of the (run, key, step) index, a chunk at a time by keyset: each chunk
is one query for the points after the last (key, step) read, so no cursor or transaction is
held open while a slow client reads, any thread may run the next chunk (the ASGI server
pulls them one by one), and a point stored while the export runs is read at most once.
Memory stays at a chunk for CSV; Parquet is written a row group per chunk into a spooled
temporary file (its footer comes last), which is then read out in pieces.
"""

from __future__ import annotations

import csv
import io
import tempfile
from collections.abc import Iterator, Sequence

from django.db.models import Q

from paddock.experiments.models import MetricPoint

FORMATS = ("csv", "parquet")
COLUMNS = ("step", "key", "value", "time")  # time: Unix seconds, as the job reported it
CONTENT_TYPES = {"csv": "text/csv; charset=utf-8", "parquet": "application/vnd.apache.parquet"}
CHUNK_ROWS = 20_000
READ_BYTES = 1 << 20
SPOOL_BYTES = 16 << 20  # a Parquet export larger than this goes to a temporary file on disk

Row = tuple[int, str, float, float]


def metric_rows(
    *, run_id: int, keys: Sequence[str] | None = None, chunk_rows: int | None = None
) -> Iterator[list[Row]]:
    """Every stored point of the run (of `keys`, when given) as (step, key, value, time),
    ordered by key then step, in lists of at most `chunk_rows`. The caller has checked that
    the actor may read the run."""
    chunk_rows = chunk_rows or CHUNK_ROWS
    points = MetricPoint.objects.filter(run_id=run_id)
    if keys:
        points = points.filter(key__in=list(keys))
    after: tuple[str, int] | None = None
    while True:
        page = points
        if after is not None:
            key, step = after
            page = page.filter(Q(key__gt=key) | Q(key=key, step__gt=step))
        rows = list(
            page.order_by("key", "step").values_list("step", "key", "value", "time")[:chunk_rows]
        )
        if rows:
            yield rows
        if len(rows) < chunk_rows:
            return
        after = (rows[-1][1], rows[-1][0])


def csv_chunks(chunks: Iterator[list[Row]]) -> Iterator[bytes]:
    """A header line, then one piece of CSV per chunk. Floats are written as repr() (their
    shortest exact form, `nan`/`inf` as pandas reads them), so a value reads back equal."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(COLUMNS)
    yield buffer.getvalue().encode()
    for rows in chunks:
        buffer.seek(0)
        buffer.truncate()
        writer.writerows((step, key, repr(value), repr(time)) for step, key, value, time in rows)
        yield buffer.getvalue().encode()


def parquet_chunks(chunks: Iterator[list[Row]]) -> Iterator[bytes]:
    """The rows as one Parquet file (a row group per chunk), read out in pieces."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = pa.schema(
        [("step", pa.int64()), ("key", pa.string()), ("value", pa.float64()),
         ("time", pa.float64())]
    )  # fmt: skip
    with tempfile.SpooledTemporaryFile(max_size=SPOOL_BYTES) as spool:
        with pq.ParquetWriter(spool, schema) as writer:
            for rows in chunks:
                columns = list(zip(*rows, strict=True))
                writer.write_table(pa.Table.from_arrays(columns, schema=schema))
        spool.seek(0)
        while piece := spool.read(READ_BYTES):
            yield piece


ENCODERS = {"csv": csv_chunks, "parquet": parquet_chunks}


def metrics_export(*, run_id: int, fmt: str, keys: Sequence[str] | None = None) -> Iterator[bytes]:
    """The bytes of the export of one run, lazily: nothing is read before the first next()."""
    if fmt not in ENCODERS:
        raise ValueError(f"format must be one of {FORMATS}")
    return ENCODERS[fmt](metric_rows(run_id=run_id, keys=keys))
