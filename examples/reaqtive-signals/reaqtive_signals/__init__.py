"""reaqtive-signals: signal operators for reaqtive, in the namespace ``signals``.

Importing this package registers its operators (``signals:clamp``, ``signals:ewma``); the package also declares
itself in the entry point group ``reaqtive.operators``, so an engine that recovers a stored query naming one of
them imports it on its own. Queries chain the operators with :meth:`~reaqtive.Query.pipe`:

>>> from reaqtive import from_iterable
>>> from reaqtive_signals import clamp, ewma
>>> from_iterable([4, 30, 8]).pipe(clamp(0, 10), ewma(0.5)).run(print)  # doctest: +ELLIPSIS
4.0
7.0
7.5
<...>
"""

from reaqtive_signals.averages import Ewma, EwmaArgs, ewma
from reaqtive_signals.bounds import Clamp, ClampArgs, clamp

__version__ = "0.2.0"

__all__ = ["Clamp", "ClampArgs", "Ewma", "EwmaArgs", "clamp", "ewma"]
