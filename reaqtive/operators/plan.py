"""``explain``: which path each stage of a query runs on, and for a general one why (issue 32, item 3).

A query binds each operator to a stage; three paths exist (DESIGN 13, 14, 16):

* **keyed**: ``group_by(k).flat_map(lambda g: <chain>)`` whose inner query is a chain of operators with keyed
  steps runs as one stage with a record per key (:mod:`reaqtive.operators.keyed_groups`);
* **fused**: adjacent per-element stages (``map``, ``filter``, ``do``, ``scan``) handle each element in one frame
  (:mod:`reaqtive.operators._fusion`);
* **general**: one stage per operator; for a ``group_by ... flat_map``, a subscription (a subject and a stage per
  inner operator, hosted a checkpoint unit) per group.

The plan is made by the binders' own decisions (:func:`~reaqtive.operators.keyed_groups.plan_keyed_groups`,
:func:`~reaqtive.operators._fusion.fused_run`) in the form in force (the process's switches, or a recorded
subscription's form under :func:`~reaqtive.operators.keyed_steps.in_keyed_form`), so it says what binding would do,
not a second copy of the rules. Like binding, it calls a ``flat_map``'s selector once on a stand-in group.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from reaqtive.core.expression import Expression, is_expression
from reaqtive.operators._fusion import fused_run
from reaqtive.operators.keyed_groups import plan_keyed_groups
from reaqtive.operators.keyed_steps import keyed_form

__all__ = ["FUSED", "GENERAL", "KEYED", "QueryPlan", "StagePlan", "explain"]

KEYED: Final = "keyed"
FUSED: Final = "fused"
GENERAL: Final = "general"


@dataclass(frozen=True, slots=True)
class StagePlan:
    """One stage of a plan: the operator(s) it runs, its path, why it is general, and what it runs."""

    op: str
    """The operator, or ``"group_by+flat_map"`` for the keyed stage that runs both."""
    path: str
    """:data:`KEYED`, :data:`FUSED` or :data:`GENERAL`."""
    reason: str | None
    """Why a general stage is general (``None`` for keyed and fused ones, and for plain operators)."""
    detail: str | None
    """The keyed chain, or the operators of a fused run."""
    depth: int
    """Nesting under a stage with several inputs (0: on the main line from the result to its first source)."""

    def to_dict(self) -> dict[str, Any]:
        """The stage as plain data (JSON)."""
        return {"op": self.op, "path": self.path, "reason": self.reason, "detail": self.detail, "depth": self.depth}


@dataclass(frozen=True, slots=True)
class QueryPlan:
    """How a query binds: its stages from the result down to its sources, in the keyed form ``form``."""

    stages: tuple[StagePlan, ...]
    form: int
    """The keyed form the plan was made in (:mod:`reaqtive.operators.keyed_steps`; 0: keyed execution off)."""

    def to_dict(self) -> dict[str, Any]:
        """The plan as plain data (JSON)."""
        return {"keyed_form": self.form, "stages": [stage.to_dict() for stage in self.stages]}

    def __str__(self) -> str:
        lines = [f"plan (keyed form {self.form}), from the result to the sources:"]
        for stage in self.stages:
            indent = "  " * (stage.depth + 1)
            line = f"{indent}{stage.op}: {stage.path}"
            if stage.detail:
                line += f" [{stage.detail}]"
            if stage.reason:
                line += f" - {stage.reason}"
            lines.append(line)
        return "\n".join(lines)


Resolve = Callable[[Expression[Any]], Expression[Any] | None]
"""What a host's stream reference stands for (an engine's observable definition), or ``None``."""


def explain(query: Expression[Any], resolve: Resolve | None = None) -> QueryPlan:
    """The plan of ``query`` as it would bind now (see the module). ``resolve`` replaces a source node by the
    query it names (the CLI expands a stored subscription's definitions with it)."""
    stages: list[StagePlan] = []
    todo: list[tuple[Expression[Any], int]] = [(query, 0)]  # a stack: a deep query needs no deep recursion
    while todo:
        node, depth = todo.pop()
        if resolve is not None:
            resolved = resolve(node)
            if resolved is not None:
                todo.append((resolved, depth))
                continue
        below = _plan_node(node, depth, stages)
        inputs = [arg for arg in below.args if is_expression(arg)] if below is not None else []
        nested = depth + 1 if len(inputs) > 1 else depth
        todo.extend((source, nested) for source in reversed(inputs))
    return QueryPlan(tuple(stages), keyed_form())


def _plan_node(node: Expression[Any], depth: int, stages: list[StagePlan]) -> Expression[Any] | None:
    """Add the stage(s) of ``node`` to ``stages``; the node whose inputs come next (``None``: none)."""
    if node.op == "flat_map" and len(node.args) == 4:
        source, selector, result_selector, max_concurrent = node.args
        if is_expression(source) and source.op == "group_by" and callable(selector):
            decision = plan_keyed_groups(source, selector, result_selector, max_concurrent)
            if not isinstance(decision, str):
                detail = "one stage, a record per key: g." + ".".join(decision.names) if decision.names else \
                    "one stage, a record per key: g"
                extras = [
                    "result_selector" if decision.result_selector is not None else "",
                    f"max_concurrent={decision.max_concurrent}" if decision.max_concurrent is not None else "",
                    "expire_after" if decision.group_args.expire_after is not None else "",
                ]
                detail = ", ".join([detail, *(extra for extra in extras if extra)])
                stages.append(StagePlan("group_by+flat_map", KEYED, None, detail, depth))
                return source  # the group_by runs inside the keyed stage: its source comes next
            stages.append(StagePlan("flat_map", GENERAL, f"a subscription per group: {decision}", None, depth))
            return node
    if node.op == "group_by":
        above = stages[-1] if stages else None
        reason = ("its groups are the flat_map's subscriptions above" if above is not None and above.op == "flat_map"
                  else "only a flat_map over a group_by runs keyed")
        stages.append(StagePlan(node.op, GENERAL, reason, None, depth))
        return node
    queries, why_not = fused_run(node)
    if queries and why_not is None:
        ops = " > ".join(query.op for query in reversed(queries))
        for query in queries:
            stages.append(StagePlan(query.op, FUSED, None, f"one frame: {ops}", depth))
        return queries[-1]
    if queries:
        stages.append(StagePlan(node.op, GENERAL, why_not, None, depth))
        return node
    label = f"{node.op} {node.args[0]!r}" if node.op == "stream" and node.args else node.op
    stages.append(StagePlan(label, GENERAL, None, None, depth))
    return node
