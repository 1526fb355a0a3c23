"""A failed read of a file is never reported as a corrupt file (issue 36): the decoders'
error conversion lets I/O errors through to the retry layer."""

from __future__ import annotations

import errno
import gzip
import io
from typing import Any

import numpy as np
import pytest

from streamload.errors import FormatError
from streamload.formats._io_errors import is_parse_error
from streamload.formats.dolma._csv import RowLimits, read_rows
from streamload.formats.numpy.npy import describe_npy


class FailingFile(io.RawIOBase):
    """A seekable file over ``data`` whose reads raise ``error`` (a remote read that failed)."""

    def __init__(self, data: bytes, error: OSError) -> None:
        super().__init__()
        self.data, self.error, self.pos = data, error, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        self.pos = offset + (len(self.data) if whence == io.SEEK_END else 0)
        return self.pos

    def tell(self) -> int:
        return self.pos

    def readinto(self, buffer: Any) -> int:
        raise self.error


NETWORK = [OSError(errno.EREMOTEIO, "InternalError"), ConnectionResetError(), TimeoutError()]


@pytest.mark.parametrize(
    ("exc", "parse"),
    [
        (OSError("Couldn't deserialize thrift"), True),
        (gzip.BadGzipFile("Not a gzipped file"), True),
        (EOFError("truncated"), True),
        (ValueError("bad header"), True),
        *((e, False) for e in NETWORK),
    ],
)
def test_parse_errors_are_told_from_io_errors(exc: BaseException, parse: bool) -> None:
    assert is_parse_error(exc) is parse


@pytest.mark.parametrize("error", NETWORK, ids=type)
def test_a_failed_read_propagates_from_every_decoder(error: OSError) -> None:
    pq = pytest.importorskip("pyarrow.parquet")
    import pyarrow as pa

    from streamload.formats.arrow.columns import arrow_errors

    buf = io.BytesIO()
    pq.write_table(pa.table({"input_ids": [[1, 2]]}), buf)
    with pytest.raises(type(error)), arrow_errors("x.parquet", "Parquet"):
        pq.ParquetFile(FailingFile(buf.getvalue(), error))
    npy = io.BytesIO()
    np.save(npy, np.arange(4, dtype=np.uint16))
    with pytest.raises(type(error)):
        describe_npy(io.BufferedReader(FailingFile(npy.getvalue(), error)), "x.npy", "x.npy",
                     len(npy.getvalue()), "auto")  # fmt: skip
    limits = RowLimits(num_tokens=4, max_rows=100, max_bytes=1 << 20)
    with pytest.raises(type(error)):
        read_rows(FailingFile(gzip.compress(b"d0,s,0,4\n"), error), "x.csv.gz", limits)


def test_corrupt_bytes_stay_format_errors() -> None:
    pq = pytest.importorskip("pyarrow.parquet")
    import pyarrow as pa

    from streamload.formats.arrow.columns import arrow_errors

    buf = io.BytesIO()
    pq.write_table(pa.table({"input_ids": [[1, 2]] * 100}), buf)
    data = buf.getvalue()
    bad = data[:-30] + b"\xff" * 22 + data[-8:]  # a footer pyarrow cannot deserialize
    with (
        pytest.raises(FormatError, match="not a readable Parquet file"),
        arrow_errors("x.parquet", "Parquet"),
    ):
        pq.ParquetFile(io.BytesIO(bad))
    limits = RowLimits(num_tokens=4, max_rows=100, max_bytes=1 << 20)
    with pytest.raises(FormatError, match="not a readable gzip file"):
        read_rows(io.BytesIO(b"\x1f\x8b junk"), "x.csv.gz", limits)
