"""State forged behind a valid checksum is refused, field by field (issue 14, "forged values of wrong types").

For every operator case of ``test_checkpoint_bounded_demand.py`` (and the stateful overloads those cases do not
reach), with a subscriber that asks for everything and with a slow one (so that stages queue and hold), the
query runs to a tick and is saved, the query and each inner subscription as its own unit; then,
for each value its operators saved (each entry of each node's record, and the items of the lists and records
inside it), the value is replaced by one of a wrong type (``None``, a ``str``, a ``float``, a ``bool``, an ``int``,
a ``dict``, a ``list``) or out of range (``-1``, ``2**64``), the blob is re-encoded with a valid checksum, and the
query is recovered from it. Loading must raise a ``StateFormatError`` naming the operator, or the recovered
query must produce exactly what it produces from the real state (a value the field legitimately accepts).

The exceptions are listed in :data:`LENIENT`: the user's values (an accumulator, buffered elements, keys: their
type is the user's, so a forged one of a plausible type is out of scope; see ``docs/state-format.md``), and the
other types a field legitimately holds (``None`` for "not yet"), which may change the result as any other
right-typed value would.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any, Final

import pytest

from reaqtive.state import StateFormatError
from tests.engine.corruption_support import decode_state
from tests.operators._forged_support import Blobs, Demand, Pointer, forge, pointers, run_from, save_at, value_at
from tests.operators.test_checkpoint_bounded_demand import CASES as BOUNDED_DEMAND_CASES
from tests.operators.test_checkpoint_bounded_demand import XS, Case, odd

S: Final = timedelta(seconds=1)

CASES: Final = [
    *BOUNDED_DEMAND_CASES,
    # the stateful overloads those cases do not reach
    Case("aggregate without a seed", lambda xs: xs.aggregate(operator.add), XS),
    Case("scan with a seed", lambda xs: xs.scan(100, operator.add), XS),
    Case("distinct with a comparer", lambda xs: xs.distinct(comparer=lambda a, b: a == b), XS),
    Case("group_by expiring", lambda xs: xs.group_by(odd, expire_after=12 * S).flat_map(lambda g: g.count()), XS),
]

STOPS: Final = (211, 232)
"""Where the saved state comes from: early (most stages still running) and in the middle."""
SLOW: Final = ((205, 1), (226, 2), (262, 3), (330, 50))
"""A subscriber that asks for little, so that stages queue elements, hold lists and keep streams waiting."""

USER: Final = "the user's value"

Spec = dict[tuple[Any, ...], Any]
"""Per pointer pattern (``"*"``: any index): :data:`USER`, or the further types the field legitimately holds."""


def held(*after: int) -> Callable[[list[Any]], Spec]:
    """An aggregate's record: ``[disposed, held, (result if held), *fields]``; the result and the fields at
    positions ``after`` (counted after the result) are the user's."""

    def spec(values: list[Any]) -> Spec:
        shift = 3 if values[1] is True else 2
        user: Spec = {(2,): USER} if shift == 3 else {}
        return user | {(shift + index,): USER for index in after}

    return spec


def fixed(spec: Spec) -> Callable[[list[Any]], Spec]:
    return lambda values: spec


def inner_slots(values: list[Any]) -> Spec:
    """flat_map, merge_all, switch_latest: ``[.., slots [[number, done, [kind, payload], queue]], ..]``; the
    outer element saved by value is the user's, a reference's kind and stream id are not (a group's key is)."""
    spec: Spec = {(3, "*", 3, "*"): USER}  # queued elements
    for index, slot in enumerate(values[3] if type(values[3]) is list else []):
        by_reference = type(slot[2]) is list and slot[2][0] == 1
        spec[(3, index, 2, 1, 2) if by_reference else (3, index, 2, 1)] = USER
    return spec


INNER_STREAMS: Final = {  # group_by, window: [.., inners [[number, key, held, closed]], ..]
    (4, "*", 1): USER,  # a group's key (a window's is None)
    (4, "*", 2): (list, type(None)),  # None once emitted, the elements waiting with it before
    (4, "*", 2, "*"): USER,
}
TIME_BUFFER: Final = {(1, "*"): USER, (3, "*", "*"): USER}  # the open list's elements, the closed lists'
KEYED_ROWS: Final = {(4, "*", 0): USER, (4, "*", 3): USER}  # aggregate_by_key's rows waiting: their keys and values


def keyed_page(values: list[Any]) -> Spec:
    """A page of a keyed state table: ``[disposed, keys, records]``. The keys are the user's, and so is the last
    field of each record (``aggregate_by_key``'s accumulator); the owner checks the others when it loads, naming
    the page."""
    records = values[2] if type(values[2]) is list else []
    return {(1, "*"): USER} | {(2, index, len(record) - 1): USER for index, record in enumerate(records) if record}


LENIENT: Final[dict[str, Callable[[list[Any]], Spec]]] = {
    "reaqtive:aggregate": held(1),
    "reaqtive:aggregate+seed": held(0),
    "reaqtive:average": held(1),
    "reaqtive:sum": held(0),
    "reaqtive:min": held(0),
    "reaqtive:max": held(0),
    "reaqtive:first": held(),
    "reaqtive:last": held(0),
    "reaqtive:single": held(0),
    "reaqtive:to_list": lambda values: {(2, "*"): USER, (3, "*"): USER},
    "reaqtive:scan": fixed({(2,): USER}),
    "reaqtive:scan+seed": fixed({(1,): USER}),
    "reaqtive:distinct+comparer": fixed({(1, "*"): USER}),
    "reaqtive:distinct_until_changed": fixed({(2,): USER}),
    "reaqtive:buffer/count": fixed({(1, "*"): USER}),
    "reaqtive:buffer/count+skip": fixed({(2, "*", "*"): USER}),
    "reaqtive:buffer/time": fixed(TIME_BUFFER),
    "reaqtive:buffer/time_or_count": fixed(TIME_BUFFER),
    "reaqtive:buffer/time+shift": fixed({(1, "*", "*"): USER, (3, "*", "*"): USER}),
    "reaqtive:combine_latest": fixed({(3, "*"): USER, (4, "*", 1): USER}),
    "reaqtive:merge": fixed({(3, "*", "*"): USER}),
    "reaqtive:sequence_equal": lambda values: {(shift, "*"): USER for shift in (4, 6) if values[1] is True}
    | {(shift, "*"): USER for shift in (3, 5) if values[1] is not True},  # [disposed, held, (result), 2 sides]
    "reaqtive:debounce": fixed({(2,): USER, (4,): USER}),
    "reaqtive:debounce+selector": fixed({(2,): USER, (4,): USER}),
    "reaqtive:sample": fixed({(2,): USER, (4,): USER}),
    # None: the time is set when the stage first starts (a stage is saved after it started, but the state of
    # one that never started is a right-typed value)
    "reaqtive:take+duration": fixed({(1,): (type(None),)}),
    "reaqtive:skip+duration": fixed({(1,): (type(None),)}),
    "reaqtive:delay_subscription": fixed({(1,): (type(None),)}),
    "reaqtive:timer": fixed({(1,): (type(None),)}),
    "reaqtive:timer+period": fixed({(1,): (type(None),)}),
    "reaqtive:flat_map": inner_slots,
    "reaqtive:merge_all": inner_slots,
    "reaqtive:switch_latest": inner_slots,
    "reaqtive:group_by": fixed(INNER_STREAMS),
    "reaqtive:group_by+keyed": fixed({(5, "*"): USER}),  # results waiting for demand (records: keyed pages)
    # ... and the keys waiting for a slot, with their elements
    "reaqtive:group_by+keyed+bounded": fixed({(5, "*"): USER, (8, "*", 0): USER, (8, "*", 1, "*"): USER}),
    "reaqtive:window/count": fixed(INNER_STREAMS),
    "reaqtive:window/count+skip": fixed(INNER_STREAMS),
    "reaqtive:window/time": fixed(INNER_STREAMS),
    "reaqtive:window/time+shift": fixed(INNER_STREAMS),
    "reaqtive:window/time_or_count": fixed(INNER_STREAMS),
    "reaqtive:group_by+expiry": fixed(INNER_STREAMS),
    "reaqtive:aggregate_by_key": fixed(KEYED_ROWS),
    "reaqtive:aggregate_by_key+hopping": fixed(KEYED_ROWS),
    "reaqtive:aggregate_by_key+session": fixed(KEYED_ROWS),
    "reaqtive:keyed_page": keyed_page,
}

WHEN: Final = datetime(2026, 1, 1, tzinfo=UTC)


def wrong_values(value: Any) -> list[Any]:
    """Values of other types than ``value`` (some with the same meaning: ``1`` for ``True``, ``"7"`` for ``7``,
    a naive time for an aware one), and, for an ``int``, impossible ones (``-1``, ``2**64``)."""
    candidates: list[Any] = [None, "false", 1.5, True, 1, {"0": value}, [value]]
    if type(value) is int:
        candidates += [str(value), float(value)]
    if type(value) is datetime:
        candidates += [int(value.timestamp() * 1e6), value.isoformat(), value - WHEN]
    if type(value) in (list, tuple, set):
        candidates += [{str(index): item for index, item in enumerate(value)}, "abc"]
    forged = [candidate for candidate in candidates if type(candidate) is not type(value)]
    if type(value) is int:
        forged += [candidate for candidate in (-1, 2**64) if candidate != value]
    if type(value) is datetime:
        forged.append(value.replace(tzinfo=None))
    return forged


def matches(pattern: tuple[Any, ...], pointer: Pointer) -> bool:
    return len(pattern) == len(pointer) and all(p in ("*", q) for p, q in zip(pattern, pointer, strict=True))


def forgeries(case: Case, stop: int, blobs: Blobs) -> Iterator[tuple[str, int, str, Pointer, Any, tuple[type, ...]]]:
    """``(unit, record index, operator, pointer, forged value, legitimate types)`` for every owned value."""
    for unit, blob in blobs.items():
        for index, record in enumerate(decode_state(blob)):
            values = record.values()
            spec = LENIENT.get(record.name, fixed({}))(values)
            for pointer in pointers(values):
                if any(rule == USER and matches(pattern, pointer[: len(pattern)]) for pattern, rule in spec.items()):
                    continue  # the user's value, or inside one
                rules = [rule for pattern, rule in spec.items() if rule != USER and matches(pattern, pointer)]
                legitimate = tuple(kind for rule in rules for kind in rule)
                for forged in wrong_values(value_at(values, pointer)):
                    yield unit, index, record.name, pointer, forged, legitimate


@pytest.mark.parametrize("demand", [None, SLOW], ids=["unbounded", "slow"])
@pytest.mark.parametrize("stop", STOPS)
@pytest.mark.parametrize("case", CASES, ids=repr)
def test_a_forged_field_is_refused_naming_the_operator_or_changes_nothing(
    case: Case, stop: int, demand: Demand
) -> None:
    blobs = save_at(case, stop, demand)
    real = run_from(case, stop, blobs, demand)
    assert real.error is None, f"the real state does not recover: {real.error!r}"
    problems = []
    for unit, index, name, pointer, forged, legitimate in forgeries(case, stop, blobs):
        outcome = run_from(case, stop, {**blobs, unit: forge(blobs[unit], index, pointer, forged)}, demand)
        if outcome.rejected_by(name) or (outcome.error is None and outcome.messages == real.messages):
            continue
        if isinstance(forged, legitimate) and (outcome.error is None or outcome.rejected_by(name)):
            continue  # another value of a type the field holds: out of scope
        what = f"{outcome.error!r:.200}" if outcome.error is not None else f"output {outcome.messages!r:.200}"
        problems.append(f"{unit or 'query'} {name} entry {list(pointer)} = {forged!r:.40}: {what}")
    assert not problems, "\n".join(problems)


def test_the_message_names_the_operator_the_field_and_what_was_found() -> None:
    case = next(case for case in CASES if case.label == "take_duration")
    blobs = save_at(case, 211)
    outcome = run_from(case, 211, {"": forge(blobs[""], 0, (1,), "tomorrow")})
    assert isinstance(outcome.error, StateFormatError)
    message = str(outcome.error)
    assert "'reaqtive:take+duration'" in message and "'end'" in message and "str 'tomorrow'" in message


@pytest.mark.parametrize(
    ("label", "name", "pointer", "forged"),
    [
        ("take", "reaqtive:take", (1,), 6),  # more left than take(5) ever had
        ("skip", "reaqtive:skip", (1,), 4),  # skip(3)
        ("element_at", "reaqtive:element_at", (2,), 5),  # element_at(4)
        ("retry", "reaqtive:retry+count", (1,), 3),  # retry(2)
        ("retry", "reaqtive:retry+count", (1,), 0),  # no attempt left, the current one included
        ("start_with", "reaqtive:start_with", (1,), 3),  # two values
        ("timer(due, period)", "reaqtive:timer+period", (3,), 9),  # delivered more ticks than fired
        ("buffer(count)", "reaqtive:buffer/count", (1,), [1, 2, 3]),  # as long as a full list of buffer(3)
        ("buffer(count, skip)", "reaqtive:buffer/count+skip", (1,), 7),  # lists that 7 elements do not open
        ("buffer(duration, shift)", "reaqtive:buffer/time+shift", (1,), [[1], [1], [1]]),  # 2 open at most
        ("window(count)", "reaqtive:window/count+skip", (5,), 1),  # windows that 1 element does not open
        ("flat_map over a hot source", "reaqtive:flat_map", (4,), [2]),  # a turn for a slot with nothing queued
        ("merge", "reaqtive:merge", (4,), 2),  # a cursor past the inputs
        ("combine_latest", "reaqtive:combine_latest", (4,), [[2, 7]]),  # queued for an input that does not exist
        ("average", "reaqtive:average", (2,), 0),  # a total without a count
        ("debounce(duration)", "reaqtive:debounce", (6,), None),  # an element pending with no time to go out
    ],
)
def test_fields_that_contradict_each_other_are_refused(label: str, name: str, pointer: Pointer, forged: Any) -> None:
    case = next(case for case in CASES if case.label == label)
    blobs = save_at(case, 211)
    index = next(i for i, record in enumerate(decode_state(blobs[""])) if record.name == name)
    outcome = run_from(case, 211, {"": forge(blobs[""], index, pointer, forged)})
    assert isinstance(outcome.error, StateFormatError), outcome
    assert repr(name) in str(outcome.error)


@pytest.mark.parametrize("label", ["buffer(duration)", "take_duration", "debounce(duration)", "timer(due)"])
@pytest.mark.parametrize("when", [datetime(1900, 1, 1, tzinfo=UTC), datetime(2226, 1, 1, tzinfo=UTC)])
def test_a_deadline_outside_the_hosts_clock_bounds_is_refused(label: str, when: datetime) -> None:
    """The host says when the query started and by when its state was saved; a deadline before the start or
    more than a period after the save was never set by the operator."""
    case = next(case for case in CASES if case.label == label)
    blobs = save_at(case, 211)
    record = decode_state(blobs[""])[-1]
    index = next(i for i, value in enumerate(record.values()) if type(value) is datetime)
    outcome = run_from(case, 211, {"": forge(blobs[""], len(decode_state(blobs[""])) - 1, (index,), when)})
    assert isinstance(outcome.error, StateFormatError) and repr(record.name) in str(outcome.error), outcome


def test_a_deadline_within_the_bounds_loads() -> None:
    case = next(case for case in CASES if case.label == "buffer(duration)")
    blobs = save_at(case, 211)
    saved = decode_state(blobs[""])[0].values()[2]
    outcome = run_from(case, 211, {"": forge(blobs[""], 0, (2,), saved + timedelta(seconds=-3))})
    assert outcome.error is None
