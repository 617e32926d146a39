"""Host settings that bound operator state, read from the operator context.

A host (the engine, a test) passes settings to :class:`~reaqtive.core.context.OperatorContext`; an operator reads
the ones it needs in ``set_context``. A limit is a positive ``int``; without one, state is unbounded. When an
operator would hold more than its limit it signals :class:`~reaqtive.core.errors.LimitExceededError` through
``on_error`` and ends its subscription.
"""

from __future__ import annotations

import sys
from typing import Final

from reaqtive.core.context import OperatorContext
from reaqtive.core.errors import InvalidSettingError

__all__ = [
    "MAX_BUFFER_COUNT",
    "MAX_BUFFER_SIZE",
    "MAX_CONCURRENT_INNER",
    "MAX_DISTINCT_ELEMENTS",
    "MAX_GROUP_COUNT",
    "MAX_LIST_SIZE",
    "MAX_QUEUE_SIZE",
    "MAX_WINDOW_COUNT",
    "UNLIMITED",
    "read_limit",
]

UNLIMITED: Final = sys.maxsize
"""The limit when a setting is absent."""

MAX_LIST_SIZE: Final = "reaqtive://operators/to_list/settings/max_list_size"
MAX_DISTINCT_ELEMENTS: Final = "reaqtive://operators/distinct/settings/max_distinct_elements"
MAX_BUFFER_SIZE: Final = "reaqtive://operators/buffer/settings/max_buffer_size"
MAX_BUFFER_COUNT: Final = "reaqtive://operators/buffer/settings/max_buffer_count"
MAX_QUEUE_SIZE: Final = "reaqtive://operators/settings/max_queue_size"
"""Bounds the queues of multi-input operators (merge, combine_latest, sequence_equal) and of time-driven
sources that wait for demand."""
MAX_WINDOW_COUNT: Final = "reaqtive://operators/window/settings/max_window_count"
MAX_GROUP_COUNT: Final = "reaqtive://operators/group_by/settings/max_group_count"
MAX_CONCURRENT_INNER: Final = "reaqtive://operators/flat_map/settings/max_concurrent_inner"


def read_limit(context: OperatorContext, key: str) -> int:
    """The limit ``key`` from ``context``: a positive ``int``, or :data:`UNLIMITED` when absent.

    A value that is not a positive ``int`` raises :class:`~reaqtive.core.errors.InvalidSettingError`: a typo in a
    host's configuration should fail loudly, not silently lift the limit.
    """
    found, value = context.try_get_element(key)
    if not found:
        return UNLIMITED
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise InvalidSettingError(f"setting {key!r} must be a positive int, got {value!r}")
    return value
