"""The kit holds exactly the JVM kit 1.0.4's verification tests, under the JVM names, in the registry."""

from __future__ import annotations

import inspect

import pytest

from reaqtive.tck import (
    IdentityProcessorVerification,
    PublisherVerification,
    SubscriberBlackboxVerification,
    SubscriberWhiteboxVerification,
)
from reaqtive.tck.rules import (
    BLACKBOX_RULES,
    IDENTITY_PROCESSOR_RULES,
    JVM_TEST_COUNTS,
    PUBLISHER_RULES,
    WHITEBOX_RULES,
    Kind,
    Rule,
    rule_for,
)

CLASSES: list[tuple[type, tuple[Rule, ...]]] = [
    (PublisherVerification, PUBLISHER_RULES),
    (SubscriberWhiteboxVerification, WHITEBOX_RULES),
    (SubscriberBlackboxVerification, BLACKBOX_RULES),
    (IdentityProcessorVerification, IDENTITY_PROCESSOR_RULES),
]


def test_names(cls: type) -> set[str]:
    return {name for name, _ in inspect.getmembers(cls, inspect.isfunction) if name.startswith("test_")}


test_names.__test__ = False  # type: ignore[attr-defined]  # a helper, not a test


@pytest.mark.parametrize(("cls", "rules"), CLASSES, ids=lambda value: getattr(value, "__name__", ""))
def test_counts_match_the_jvm_kit(cls: type, rules: tuple[Rule, ...]) -> None:
    assert len(test_names(cls)) == JVM_TEST_COUNTS[cls.__name__]
    assert len(rules) == JVM_TEST_COUNTS[cls.__name__]


def test_159_tests_in_all() -> None:
    assert sum(len(test_names(cls)) for cls, _ in CLASSES) == 159 == sum(JVM_TEST_COUNTS.values())


@pytest.mark.parametrize(("cls", "rules"), CLASSES, ids=lambda value: getattr(value, "__name__", ""))
def test_methods_and_registry_agree(cls: type, rules: tuple[Rule, ...]) -> None:
    assert test_names(cls) == {rule.test_name for rule in rules}


def test_identity_processor_has_every_publisher_and_whitebox_test() -> None:
    """The JVM kit checks its delegation by reflection; here the rule sets are inherited, and this checks it."""
    processor = test_names(IdentityProcessorVerification)
    assert test_names(PublisherVerification) <= processor
    assert test_names(SubscriberWhiteboxVerification) <= processor
    assert len(processor - test_names(PublisherVerification) - test_names(SubscriberWhiteboxVerification)) == 3


@pytest.mark.parametrize("rule", PUBLISHER_RULES + WHITEBOX_RULES + BLACKBOX_RULES, ids=lambda r: r.name[:60])
def test_kind_matches_the_name_prefix(rule: Rule) -> None:
    assert rule.name.startswith(rule.kind.value + "_")


def test_the_one_unprefixed_processor_test_is_required() -> None:
    rule = rule_for("test_mustImmediatelyPassOnOnErrorEventsReceivedFromItsUpstreamToItsDownstream")
    assert rule.kind is Kind.REQUIRED and rule.rule == "4.2"


@pytest.mark.parametrize("cls", [cls for cls, _ in CLASSES], ids=lambda c: c.__name__)
def test_base_classes_are_collectable_only_through_subclasses(cls: type) -> None:
    assert not cls.__name__.startswith("Test")
    assert "__init__" not in vars(cls) and all("__init__" not in vars(base) for base in cls.__mro__[:-1]), (
        "pytest does not collect test classes that define __init__"
    )
