"""The operator library: one module per operator family.

Importing this package imports every module in it, which registers each operator's binder with
:mod:`reaqtive.core.binding` (modules whose name starts with ``_`` hold shared building blocks).
"""

import importlib
import pkgutil

__all__: list[str] = []

for _info in sorted(pkgutil.iter_modules(__path__), key=lambda info: info.name):
    if not _info.name.startswith("_"):
        importlib.import_module(f"{__name__}.{_info.name}")
        __all__.append(_info.name)
