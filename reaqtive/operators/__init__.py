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
    "combine_latest",
    "count",
    "debounce",
    "default_if_empty",
    "delay_subscription",
    "distinct",
    "distinct_until_changed",
    "do",
    "element_at",
    "empty",
    "filter",
    "finally_action",
    "first_last_single",
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
    "merge",
    "min_max",
    "named",
    "never",
    "plan",
    "retry",
    "return_value",
    "sample",
    "scan",
    "sequence_equal",
    "settings",
    "skip",
    "skip_until",
    "skip_while",
    "start_with",
    "step_stage",
    "sum_average",
    "switch_latest",
    "take",
    "take_until",
    "take_while",
    "throw",
    "timer",
    "to_list",
    "trace",
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
