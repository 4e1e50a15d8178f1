"""Public signatures say what they take: at most ``LIMIT`` use a bare ``Any``, each justified on its line.

A public function (its name, and every part of its module's path but
``__init__.py``, not starting with ``_``) whose parameter or return annotation
is exactly ``Any`` counts once. Such an annotation needs a ``# Any: why``
comment on its own line (parsed JSON of any shape, an opaque pass-through, ...);
everything else has a real type: the ``Sensor`` protocol, ``Tokens``
(``interp.sensor.api``), ``JsonValue`` (``interp.schema``), ``object`` for a
value only passed on or inspected, torch / numpy / pandas / transformers types.
"""

from __future__ import annotations

import ast
import io
import tokenize
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("interp", "probes", "patching")
LIMIT = 20


def bare_any(source: str, name: str = "<source>") -> tuple[list[str], list[str]]:
    """``(signatures, unjustified)``: each public function of ``source`` with a bare ``Any`` annotation, and each
    such annotation whose line has no ``# Any: why`` comment (``name:line: function(parameter)``)."""
    comments = {tok.start[0]: tok.string for tok in tokenize.generate_tokens(io.StringIO(source).readline)
                if tok.type == tokenize.COMMENT}
    found, unjustified = [], []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) or node.name.startswith("_"):
            continue
        a = node.args
        named = [(p.arg, p.annotation) for p in [*a.posonlyargs, *a.args, *a.kwonlyargs]]
        named += [(f"*{p.arg}", p.annotation) for p in (a.vararg,) if p] + [(f"**{p.arg}", p.annotation)
                                                                           for p in (a.kwarg,) if p]
        named.append(("return", node.returns))
        bare = [(what, ann) for what, ann in named if ann is not None and ast.unparse(ann) in ("Any", "typing.Any")]
        if bare:
            found.append(f"{name}:{node.lineno}: {node.name}")
        unjustified += [f"{name}:{ann.lineno}: {node.name}({what})" for what, ann in bare
                        if "Any:" not in comments.get(ann.end_lineno or ann.lineno, "")]
    return found, unjustified


def public_modules() -> list[Path]:
    """Source files of the packages outside private modules and folders."""
    return sorted(p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")
                  if not any(part.startswith("_") and part != "__init__.py" for part in p.relative_to(ROOT).parts))


def test_bare_any_in_public_signatures_is_rare_and_justified():
    found, unjustified = [], []
    for path in public_modules():
        f, u = bare_any(path.read_text(encoding="utf-8"), str(path.relative_to(ROOT)))
        found += f
        unjustified += u
    assert len(found) <= LIMIT, f"{len(found)} public signatures with a bare Any (limit {LIMIT}):\n" + "\n".join(found)
    assert not unjustified, "bare Any without a `# Any: why` comment on its line:\n" + "\n".join(unjustified)


PLANTED = '''
from typing import Any


def read(path: str) -> Any:
    """A planted bare Any, unjustified."""


def write(doc: Any,  # Any: a planted one, justified
          keys: dict[str, Any]) -> None:
    """One justified, one nested (not bare)."""


async def serve(**options: Any) -> None:
    """Keyword arguments count too."""


def _private(x: Any) -> Any:
    """Not public: not counted."""


class Thing:
    def method(self, x: typing.Any) -> None:
        """A public method with typing.Any."""
'''


def test_the_counter_finds_planted_bare_any():
    found, unjustified = bare_any(PLANTED, "planted.py")
    assert sorted(f.split(": ")[1] for f in found) == ["method", "read", "serve", "write"]
    assert sorted(u.split(": ")[1] for u in unjustified) == ["method(x)", "read(return)", "serve(**options)"]
    assert "planted.py:5: read(return)" in unjustified
