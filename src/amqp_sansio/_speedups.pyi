# The optional C accelerator (src/amqp_sansio/_speedups.c); see amqp_sansio._table.
from collections.abc import Callable, Mapping
from typing import Final, Generic, Protocol, TypeVar, final

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

_T_co = TypeVar("_T_co", covariant=True)

@final
class Builder(Generic[_T_co]):
    # Decodes the generated class cls straight into a new instance's slots; what it can't,
    # fallback does (None: it returns None then).
    @property
    def cls(self) -> type[_T_co]: ...
    @property
    def codes(self) -> bytes: ...
    @property
    def names(self) -> tuple[str, ...]: ...
    @property
    def nones(self) -> tuple[str, ...]: ...
    @property
    def properties(self) -> bool: ...
    @property
    def fallback(self) -> Callable[[Buffer, int], tuple[_T_co, int]] | None: ...
    def __new__(
        cls,
        cls_: type[_T_co],
        codes: bytes,
        names: tuple[str, ...],
        nones: tuple[str, ...],
        properties: bool,
        fallback: Callable[[Buffer, int], tuple[_T_co, int]] | None = None,
    ) -> Builder[_T_co]: ...
    def __call__(self, buf: Buffer, offset: int, /) -> tuple[_T_co, int] | None: ...
