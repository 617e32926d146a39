"""The operator library: one module per operator family. Importing this package registers every operator's
binder with :mod:`reaqtive.binding`."""

from reaqtive.operators import filter, from_iterable, map, trace

__all__ = ["filter", "from_iterable", "map", "trace"]
