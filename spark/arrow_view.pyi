from typing import Any

class ArrowColumn:
    name: str
    format: str
    def __len__(self) -> int: ...

def view(array: Any, name: str = ...) -> ArrowColumn: ...
