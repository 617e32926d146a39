"""``query.explain()``: which path each stage runs on, and why a general one is
general (issue 32, item 3). The plan comes from the binders' own decisions: each test checks it against what
binding does."""

from __future__ import annotations

import json
from typing import Any

from reaqtive import Query, from_iterable, keyed_execution
from reaqtive.core.streams import LONG_MAX
from reaqtive.operators._fusion import stage_fusion
from reaqtive.operators.keyed_groups import KeyedGroups
from reaqtive.operators.keyed_steps import in_keyed_form
from reaqtive.operators.plan import FUSED, GENERAL, KEYED, QueryPlan
from tests.support import Recorder


def paths(plan: QueryPlan) -> list[tuple[str, str]]:
    return [(stage.op, stage.path) for stage in plan.stages]


def key_of(x: int) -> int:
    return x % 3


def counts(group: Query[int]) -> Query[Any]:
    return group.scan(0, lambda n, _: n + 1)


def tag(group: Any, n: int) -> tuple[object, int]:
    return (group.key, n)


def windows(group: Query[int]) -> Query[Any]:
    return group.window(2).merge_all()


def test_a_keyed_group_by_is_one_keyed_stage_and_adjacent_maps_fuse() -> None:
    query = from_iterable(range(9)).map(abs).filter(bool).group_by(key_of).flat_map(counts, tag).take(4)
    plan = query.explain()
    assert paths(plan) == [
        ("take", GENERAL), ("group_by+flat_map", KEYED), ("filter", FUSED), ("map", FUSED), ("from_iterable", GENERAL)
    ]
    keyed = plan.stages[1]
    assert keyed.detail is not None and "g.scan" in keyed.detail and "result_selector" in keyed.detail
    assert isinstance(query.args[0].subscribe(Recorder(initial=LONG_MAX)), KeyedGroups)  # binding agrees


def test_a_general_group_by_says_why_in_the_words_of_the_binder() -> None:
    plan = from_iterable(range(9)).group_by(key_of).flat_map(windows).explain()
    assert paths(plan)[:2] == [("flat_map", GENERAL), ("group_by", GENERAL)]
    reason = plan.stages[0].reason
    assert reason is not None and "'window', 'merge_all' have no keyed step" in reason
    assert "general - a subscription per group" in str(plan)


def test_the_plan_follows_the_switches_in_force() -> None:
    query = from_iterable(range(9)).group_by(key_of).flat_map(counts).map(str).filter(bool)
    with keyed_execution(False):
        off = query.explain()
    assert off.form == 0 and off.stages[2].path == GENERAL and "keyed execution is off" in str(off.stages[2].reason)
    with in_keyed_form(1):
        tagged = from_iterable(range(3)).group_by(key_of).flat_map(counts, tag).explain()
    assert "made before it ran keyed" in str(tagged.stages[0].reason)
    with stage_fusion(False):
        unfused = query.explain()
    assert unfused.stages[0].path == GENERAL and unfused.stages[0].reason == "stage fusion is off"


def test_a_stage_with_several_inputs_shows_them_nested() -> None:
    plan = from_iterable([1]).merge(from_iterable([2]).map(str).filter(bool)).explain()
    assert [stage.depth for stage in plan.stages] == [0, 1, 1, 1, 1]
    assert json.loads(json.dumps(plan.to_dict()))["stages"][0] == {
        "op": "merge", "path": GENERAL, "reason": None, "detail": None, "depth": 0
    }
