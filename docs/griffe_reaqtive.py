"""A Griffe extension that lets the API reference read reaqtive's docstrings as they are written.

The docstrings are written for ``help()`` and doctest, in reStructuredText habits; the reference renders them as
Markdown. Where the two differ, this extension bridges them when the package is loaded (nothing is imported):

* roles such as ``:class:`Query``` and ``:meth:`~Engine.subscribe``` become links to the reference: the name is
  resolved in the scope of the object whose docstring it is, as Python would, and marked optional, so a name the
  reference does not render (a private helper, the standard library) stays code instead of failing the build;
* ``docs/engine.md`` becomes a link to that page (mkdocs.yml reads ``/engine.md`` as a path in docs/);
* doctest examples (``>>>`` lines and their output) become code blocks, instead of nested block quotes;
* the fluent methods of ``Query``, one line each that pipes the operator's builder, have no docstring of their
  own: as at run time (``reaqtive.fluent.query``), they show the builder's; and a module-level name bound to a
  documented function (``from_iterable = Query.from_iterable``) shows that function's; and, as ``help()`` does,
  a method without a docstring shows the one of the method it overrides (``Query.pipe``: the type checker's
  declaration in the facade, ``Expression.pipe`` at run time).

mkdocs.yml loads it (``extensions:`` of the python handler); mkdocs does not publish it (``exclude_docs``).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from html import escape
from typing import Any

from griffe import (
    Alias,
    AliasResolutionError,
    Class,
    CyclicAliasError,
    Docstring,
    Extension,
    GriffeLoader,
    Module,
    NameResolutionError,
    Object,
)

DOCS_PAGE = re.compile(r"``docs/(?P<page>[\w-]+\.md)``")
ROLE = re.compile(r":(?:py:)?(?:class|func|meth|mod|attr|exc|data|obj|const):`(?P<target>[^`]+)`")
# a fluent method's body: ``return self.pipe(module.builder(...))``, ``return _query(module.builder(...))``
PIPED_BUILDER = re.compile(r"return [\w.]+\(\s*(?P<module>\w+)\.(?P<builder>\w+)\(")


class ReaqtiveDocstrings(Extension):
    """See the module's docstring."""

    def on_package(self, *, pkg: Module, loader: GriffeLoader, **kwargs: Any) -> None:
        if pkg.name != "reaqtive":
            return
        objects = list(_walk(pkg))
        for obj in objects:  # first borrow the builders' docstrings, then convert every docstring once
            _adopt_builder_docstring(obj, loader)
        for obj in objects:
            if isinstance(obj, Class):
                _inherit_docstrings(obj)
        for obj in objects:
            _adopt_bound_docstring(obj, loader)
        for obj in objects:
            if obj.docstring is not None:
                obj.docstring.value = _markdown(obj.docstring.value, obj, loader)


def _walk(obj: Object) -> Iterator[Object]:
    yield obj
    for member in obj.members.values():
        if not isinstance(member, Alias):
            yield from _walk(member)


def _adopt_builder_docstring(obj: Object, loader: GriffeLoader) -> None:
    if obj.docstring is not None or not obj.is_function or not obj.path.startswith("reaqtive.fluent."):
        return
    match = PIPED_BUILDER.search("\n".join(obj.lines))
    if match is None or not obj.module.imports.get(match["module"], "").startswith("reaqtive.operators."):
        return
    module_path = obj.module.imports[match["module"]]
    try:
        builder = loader.modules_collection[f"{module_path}.{match['builder']}"]
    except KeyError:
        return
    if builder.docstring is not None:
        obj.docstring = Docstring(builder.docstring.value, parent=obj)


def _inherit_docstrings(cls: Class) -> None:
    try:
        mro = cls.mro()
    except (ValueError, AliasResolutionError, CyclicAliasError):
        return
    for name, member in cls.all_members.items():
        try:
            if not member.is_function or member.docstring is not None:
                continue
            source = next((base.members[name] for base in mro if base.members.get(name, member).docstring), None)
        except (AliasResolutionError, CyclicAliasError):
            continue
        if source is not None and source.docstring is not None:
            target = member.final_target if isinstance(member, Alias) else member
            target.docstring = Docstring(source.docstring.value, parent=target)


def _adopt_bound_docstring(obj: Object, loader: GriffeLoader) -> None:
    if obj.docstring is not None or not obj.is_attribute or obj.parent is None or obj.parent.is_class:
        return
    value = str(getattr(obj, "value", "") or "")
    if not re.fullmatch(r"\w+(\.\w+)*", value):
        return
    try:
        bound = loader.modules_collection[_resolve(value, obj.parent)]
    except (KeyError, AliasResolutionError, CyclicAliasError):
        return
    if bound.is_function and bound.docstring is not None:
        obj.docstring = Docstring(bound.docstring.value, parent=obj)


def _markdown(text: str, scope: Object, loader: GriffeLoader) -> str:
    text = DOCS_PAGE.sub(r"[docs/\g<page>](/\g<page>)", _fence_doctests(_literal_blocks(text)))
    return ROLE.sub(lambda match: _link(match["target"], scope, loader), text)


def _link(target: str, scope: Object, loader: GriffeLoader) -> str:
    """An optional autoref to ``target`` as seen from ``scope``: a link when the reference renders it."""
    shown = target
    if "<" in target and target.endswith(">"):  # :role:`text <target>`
        shown, target = (part.strip() for part in target[:-1].split("<", 1))
    elif target.startswith("~"):
        target = target[1:]
        shown = target.rsplit(".", 1)[-1]
    target = target.removesuffix("()")
    identifier = _canonical(_resolve(target, scope), loader)
    return f'<autoref identifier="{escape(identifier)}" optional><code>{escape(shown)}</code></autoref>'


def _resolve(target: str, scope: Object) -> str:
    if target.startswith("reaqtive.") or target == "reaqtive":
        return target
    first, _, rest = target.lstrip(".").partition(".")
    try:
        resolved = scope.resolve(first)
    except NameResolutionError:
        return target
    return f"{resolved}.{rest}" if rest else resolved


def _canonical(path: str, loader: GriffeLoader) -> str:
    """Where ``path`` is defined: every page that renders an object registers that path for it, whichever name
    (``reaqtive.Engine``, ``reaqtive.engine.Engine``) the page shows it under."""
    try:
        return str(loader.modules_collection[path].canonical_path)
    except (KeyError, AliasResolutionError, CyclicAliasError):
        return path


def _literal_blocks(text: str) -> str:
    """reST's ``paragraph::`` before an indented block: the block is already code in Markdown, drop one colon."""
    return re.sub(r"::\n(?=\n[ \t]+\S)", ":\n", text)


def _fence_doctests(text: str) -> str:
    """Put each run of doctest lines (prompts and their output, up to a blank line) in a ``pycon`` fence."""
    out: list[str] = []
    in_example = False
    fence_indent = ""
    for line in text.split("\n"):
        stripped = line.lstrip()
        if not in_example and stripped.startswith(">>>"):
            in_example = True
            fence_indent = line[: len(line) - len(stripped)]
            out.append(f"{fence_indent}```pycon")
        elif in_example and not stripped:
            out.append(f"{fence_indent}```")
            in_example = False
        out.append(line)
    if in_example:
        out.append(f"{fence_indent}```")
    return "\n".join(out)
