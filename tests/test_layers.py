"""The package's layers point one way: data <- sensor <- extraction <- analyses <- reporting <- pipelines.

Every ``import`` in the source (module level, inside functions and under
``TYPE_CHECKING``) is read from the syntax tree and checked against the rank
of its layer; analyses do not import each other. A new module outside the
table fails here until it is given a layer.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[1]
# (module prefix, rank); the longest matching prefix wins
LAYERS = (
    ("interp", 0), ("interp.io", 0), ("interp.stats", 0), ("interp.schema", 0), ("interp.record", 0),
    ("interp.progress", 0),
    ("interp.data", 1),
    ("interp.sensor", 2),
    ("interp.extraction", 3),
    ("interp.externalization", 4), ("interp.continuations", 4), ("interp.accounting", 4), ("probes", 4), ("patching", 4),
    # annotation reads the labelers' rules and evidence (analyses) for the labelling page: beside reporting
    ("interp.reporting", 5), ("interp.annotation", 5),
    # the live proxy applies the conditions with the extraction scorer and reads runs for the accounting
    ("interp.serve", 5),
    ("interp.pipelines", 6), ("interp.__main__", 6),
)
ANALYSES = ("interp.externalization", "interp.continuations", "interp.accounting", "probes", "patching")


def layer(module: str) -> tuple[str, int] | None:
    """The (prefix, rank) of ``module``'s layer, or None for a third-party module."""
    matches = [(p, r) for p, r in LAYERS if module == p or module.startswith(p + ".")]
    return max(matches, key=lambda m: len(m[0])) if matches else None


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(module: str, source: str, is_package: bool = False) -> list[str]:
    """Absolute names of every module ``source`` (the text of ``module``) imports, relative imports resolved."""
    names = []
    package = module if is_package else module.rsplit(".", 1)[0]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else []))
            names += [f"{base}.{a.name}" for a in node.names] if base in {p for p, _ in LAYERS} else [base]
    return names


SOURCES = sorted(p for pkg in ("interp", "probes", "patching") for p in (ROOT / pkg).rglob("*.py"))


def test_every_module_has_a_layer():
    assert SOURCES and all(layer(module_name(p)) for p in SOURCES)


def check_imports(module: str, source: str, is_package: bool = False) -> None:
    """Assert that ``module`` imports nothing above its layer and no other analysis."""
    me, rank = layer(module)
    for name in imports(module, source, is_package):
        other = layer(name)
        if other is None or name == "interp":
            continue
        assert other[1] <= rank, f"{module} (layer {me}) imports {name} (layer {other[0]}, above it)"
        if rank == 4 and other[1] == 4:
            mine, theirs = (next(a for a in ANALYSES if n == a or n.startswith(a + ".")) for n in (module, name))
            assert mine == theirs, f"{module} imports another analysis, {name}"


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_imports_point_down_the_layers(path):
    check_imports(module_name(path), path.read_text(), path.name == "__init__.py")


@pytest.mark.parametrize("module, source, message", [
    ("interp.data.x", "from patching.kl_repair import summarize", "imports patching.kl_repair"),
    ("interp.externalization.risk", "from interp.reporting import reference", "imports interp.reporting"),
    ("interp.sensor.forward", "def f():\n    from ..extraction import store", "imports interp.extraction.store"),
    ("patching.harm", "from probes.stats import task_bootstrap", "another analysis, probes.stats"),
])
def test_the_checker_sees_a_wrong_import(module, source, message):
    with pytest.raises(AssertionError, match=message):
        check_imports(module, source)
