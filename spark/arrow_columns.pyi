from typing import final

@final
class ByteBuffer:
    def __new__(cls, cap: int = ...) -> ByteBuffer: ...

@final
class ColumnBuilder:
    def __new__(cls, rows: int, width: int, variable: bool, bytes_per_row: int = ...) -> ColumnBuilder: ...
