"""The core layer: what every other part of reaqtive builds on, and which imports none of them (but for the
real-time scheduler that ``Expression.run`` makes, on first use, for a standalone query).

Bottom up: the Reactive Streams interfaces (:mod:`~reaqtive.core.streams`), the scheduler interfaces
(:mod:`~reaqtive.core.scheduler_interface`), the base errors (:mod:`~reaqtive.core.errors`) and the error policy
protocol; subscription handles, subscribers, subscribables and subjects; the operator context; the operator base;
the tree walks (:mod:`~reaqtive.core.visitors`); the operator registry (:mod:`~reaqtive.core.binding`) and the
argument checks; the expression node (:mod:`~reaqtive.core.expression`). The operators, the fluent ``Query``,
the state layer and the hosts sit above it (``docs/code-map.md``). Users import from :mod:`reaqtive`.
"""
