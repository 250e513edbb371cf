# The optional C accelerator (src/amqp_sansio/_speedups.c); see amqp_sansio._table.
from typing import Final, Protocol

from ._method import Buffer
from ._table import FieldTable

MAX_TABLE_DEPTH: Final[int]
MAX_TABLE_ENTRIES: Final[int]

class TableDecoder(Protocol):
    def __call__(self, buf: Buffer, offset: int, depth: int = 0) -> tuple[FieldTable, int]: ...

def decode_table(buf: Buffer, offset: int, depth: int = 0) -> tuple[FieldTable, int]: ...
def set_fallback(func: TableDecoder, /) -> None: ...
