"""The fluent query API, one mixin per operator family; :class:`reaqtive.query.Query` combines them.

Each method validates its arguments (so a bad argument fails where the query is written) and returns a new
:class:`~reaqtive.query.Query` node; it never runs anything. The running stages live in
:mod:`reaqtive.operators`, registered under the same operator names.
"""
