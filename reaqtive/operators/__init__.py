"""The operator library: one module per operator family.

Each module registers its operators' binders with :mod:`reaqtive.core.binding` when imported; binding imports a
built-in operator's module on the first use of its name (:data:`reaqtive.core.binding.BUILTIN_OPERATORS`), so
importing this package imports none of them, and ``reaqtive.operators.<module>`` loads the module when first reached
as an attribute (PEP 562). :func:`reaqtive.core.binding.load_builtin_operators` imports them all. Modules whose name
starts with ``_`` hold shared building blocks.
"""

from __future__ import annotations

import importlib

__all__ = [
    "aggregate",
    "any_all_contains",
    "buffer",
    "buffer_time",
    "debounce",
    "default_if_empty",
    "delay_subscription",
    "distinct",
    "do",
    "filter",
    "first_last_single",
    "fixed_sources",
    "flat_map",
    "from_iterable",
    "group_by",
    "ignore_elements",
    "keyed_groups",
    "keyed_steps",
    "keyed_timed",
    "keyed_window",
    "keyed_window_steps",
    "map",
    "math_aggregates",
    "merge",
    "named",
    "plan",
    "retry",
    "sample",
    "scan",
    "sequence_equal",
    "settings",
    "skip_until",
    "start_with",
    "step_stage",
    "take",
    "take_until",
    "take_while",
    "timer",
    "window",
    "window_aggregates",
    "window_time",
]
"""The operator modules (a test checks the list against the package's files)."""


def __getattr__(name: str) -> object:
    """PEP 562: import an operator module on first use as an attribute of the package."""
    if name in __all__:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
