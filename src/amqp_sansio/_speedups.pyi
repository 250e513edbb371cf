# The optional C accelerator (src/amqp_sansio/_speedups.c); see amqp_sansio._table.
from collections.abc import Mapping
from typing import Final, Protocol

from ._table import FieldTable, FieldValue
from ._util import Buffer

VERSION: Final[int]
MAX_TABLE_DEPTH: Final[int]
MAX_TABLE_ENTRIES: Final[int]

class TableDecoder(Protocol):
    def __call__(self, buf: Buffer, offset: int, depth: int = 0) -> tuple[FieldTable, int]: ...

class TableEncoder(Protocol):
    def __call__(self, out: bytearray, table: Mapping[str, FieldValue] | None) -> None: ...

def decode_table(buf: Buffer, offset: int, depth: int = 0) -> tuple[FieldTable, int]: ...
def encode_table(out: bytearray, table: Mapping[str, FieldValue] | None) -> None: ...
def set_fallbacks(decode_table: TableDecoder, encode_table: TableEncoder, /) -> None: ...

class ArgsUnpacker(Protocol):
    # One value per code, of the field's type, then the offset: each generated decoder casts
    # the result to the exact tuple its codes make.
    def __call__(self, codes: bytes, buf: Buffer, offset: int, /) -> tuple[object, ...] | None: ...

def unpack_fields(codes: bytes, buf: Buffer, offset: int, /) -> tuple[object, ...] | None: ...
def unpack_properties(codes: bytes, buf: Buffer, offset: int, /) -> tuple[object, ...] | None: ...
