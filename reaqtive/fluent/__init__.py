"""The fluent facade: one mixin per operator family; :class:`reaqtive.fluent.query.Query` combines them.

Each method is one typed line delegating to the operator's builder in :mod:`reaqtive.operators` (which checks
the arguments, holds the operator's docstring and returns the call that ``pipe`` turns into a node); it never
runs anything. ``tests/test_operator_units.py`` checks the facade against the operator registry.
"""
