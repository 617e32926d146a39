"""Every chained operator as a function, for ``query.pipe(...)``: the flat namespace RxPY users know.

>>> from reaqtive import from_iterable, ops
>>> from_iterable(range(10)).pipe(
...     ops.filter(lambda x: x % 2 == 0),
...     ops.scan(0, lambda total, x: total + x),
...     ops.take(3),
... ).run(print)  # doctest: +ELLIPSIS
0
2
6
<...>

``ops.<name>(...)`` is the builder the fluent method ``Query.<name>`` delegates to (the very same function, with
its types and docstring), so ``q.pipe(ops.map(f), ops.take(3))`` builds the same query as ``q.map(f).take(3)``.
Each returns an :class:`~reaqtive.core.expression.OperatorCall`: an operator waiting for its source, which
``pipe`` applies, and which can also be called on a query (``ops.take(3)(q)``). The names shadow the built-ins
``map``, ``filter``, ``min``, ``max``, ``sum``, ``all`` and ``any``: use them qualified (``ops.map``), as here.
Sources (``from_iterable``, ``interval``, ...) are not here: they start a query rather than extend one. A test
checks that every fluent operator method has its function here, so this module cannot fall behind.
"""

from reaqtive.operators.aggregate import aggregate, to_list
from reaqtive.operators.any_all_contains import all, any, contains, is_empty
from reaqtive.operators.buffer import buffer
from reaqtive.operators.debounce import debounce
from reaqtive.operators.default_if_empty import default_if_empty
from reaqtive.operators.delay_subscription import delay_subscription
from reaqtive.operators.distinct import distinct, distinct_until_changed
from reaqtive.operators.do import do, finally_action, trace
from reaqtive.operators.filter import filter, filter_indexed
from reaqtive.operators.first_last_single import (
    element_at,
    element_at_or_default,
    first,
    first_or_default,
    last,
    last_or_default,
    single,
    single_or_default,
)
from reaqtive.operators.flat_map import flat_map, merge_all, switch_latest
from reaqtive.operators.group_by import group_by
from reaqtive.operators.ignore_elements import ignore_elements
from reaqtive.operators.keyed_window import aggregate_by_key
from reaqtive.operators.map import map, map_indexed
from reaqtive.operators.math_aggregates import average, count, max, min, sum
from reaqtive.operators.merge import combine_latest, merge
from reaqtive.operators.named import named
from reaqtive.operators.retry import retry
from reaqtive.operators.sample import sample
from reaqtive.operators.scan import scan
from reaqtive.operators.sequence_equal import sequence_equal
from reaqtive.operators.skip_until import skip_until
from reaqtive.operators.start_with import start_with
from reaqtive.operators.take import skip, take
from reaqtive.operators.take_until import take_until
from reaqtive.operators.take_while import skip_while, skip_while_indexed, take_while, take_while_indexed
from reaqtive.operators.window import window

__all__ = [
    "aggregate",
    "aggregate_by_key",
    "all",
    "any",
    "average",
    "buffer",
    "combine_latest",
    "contains",
    "count",
    "debounce",
    "default_if_empty",
    "delay_subscription",
    "distinct",
    "distinct_until_changed",
    "do",
    "element_at",
    "element_at_or_default",
    "filter",
    "filter_indexed",
    "finally_action",
    "first",
    "first_or_default",
    "flat_map",
    "group_by",
    "ignore_elements",
    "is_empty",
    "last",
    "last_or_default",
    "map",
    "map_indexed",
    "max",
    "merge",
    "merge_all",
    "min",
    "retry",
    "sample",
    "scan",
    "sequence_equal",
    "single",
    "single_or_default",
    "skip",
    "skip_until",
    "skip_while",
    "skip_while_indexed",
    "start_with",
    "sum",
    "switch_latest",
    "take",
    "take_until",
    "take_while",
    "take_while_indexed",
    "to_list",
    "named",
    "trace",
    "window",
]
