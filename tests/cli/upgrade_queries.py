"""Queries and functions for the ``reaqtive update`` tests (``--query`` and ``--functions`` name them)."""

from __future__ import annotations

from typing import Any

from reaqtive import Query
from reaqtive.engine import FunctionRegistry


def count_one(count: int, _: Any) -> int:
    return count + 1


def add(total: Any, value: Any) -> Any:
    return total + value


def pair(*values: Any) -> tuple[Any, ...]:
    return values


def functions() -> FunctionRegistry:
    registry = FunctionRegistry()
    for function in (count_one, add, pair):
        registry.register(function.__name__, function)
    return registry


def count() -> Query[Any]:
    return Query.stream("a").scan(0, count_one).named("count")


def count_and_sum() -> Query[Any]:
    return Query.combine_latest(count(), Query.stream("a").scan(0, add).named("sum"), selector=pair)


NOT_A_QUERY = 3
