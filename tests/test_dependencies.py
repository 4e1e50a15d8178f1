"""pyproject.toml declares exactly what the code imports.

Every ``import`` is read from the syntax tree (like tests/test_layers.py) and
mapped to its distribution through the installed metadata
(``importlib.metadata.packages_distributions``):

* the library (interp, probes, patching) at module level needs a runtime
  dependency; inside a function (a guarded import of an optional feature) a
  runtime dependency or one of an extra;
* tests, benchmarks, the docs' build hooks and the notebooks' code cells need a runtime dependency or
  one of the ``dev`` extra (which includes ``notebooks``);
* every runtime dependency is imported by the library, or is in ``INDIRECT``
  with the reason it is needed without an import; every extra's entry is
  imported somewhere (or is a tool in ``TOOLS``).

A guarded import of a package that is not installed here cannot be mapped to
a distribution and is skipped (optional GPU kernels); a module-level one fails.
"""

from __future__ import annotations

import ast
import json
import re
import sys
import tomllib
from functools import cache
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[1]
FIRST_PARTY = {"interp", "probes", "patching", "tests", "_util", "conftest", "_support",
               *(p.stem for p in (Path(__file__).resolve().parents[1] / "benchmarks").glob("*.py"))}
INDIRECT = {  # runtime dependencies used without an import of their own
    "gguf": "transformers reads SmolLM2's GGUF checkpoint with it (gguf_file=...)",
    "pyarrow": "pandas' parquet engine (the store's manifest.parquet)",
    "kaleido": "plotly.io.write_images renders PNGs through it",
    "accelerate": "transformers' from_pretrained(device_map=...) loads weights straight onto the device with it",
}
TOOLS = {  # dev entries run as commands or plugins, not imported
    "pytest-xdist": "pytest -n (make test)",
    "mypy": "the type checker make test runs before pytest ([tool.mypy] in pyproject.toml)",
    "ipykernel": "the kernel nbclient starts to execute the notebooks",
    "mkdocs-material": "the documentation site's theme (mkdocs.yml: theme material)",
    "mkdocstrings": "the API reference pages from the docstrings (mkdocs.yml: plugins)",
    "mkdocstrings-python": "mkdocstrings' Python handler (mkdocs.yml: handlers python)",
}


def normalize(name: str) -> str:
    """A distribution name in PEP 503 form (lower case, runs of -_. as one -)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_name(spec: str) -> str:
    return normalize(re.match(r"[A-Za-z0-9_.-]+", spec).group(0))


@cache
def declared() -> dict[str, set[str]]:
    """{"runtime": {...}, extra: {...}} of normalized names; a self-reference ``pkg[extra]`` is expanded."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    me = normalize(project["name"])
    groups = {"runtime": set(map(requirement_name, project["dependencies"]))}
    extras = project.get("optional-dependencies", {})

    def expand(extra: str) -> set[str]:
        names = set()
        for spec in extras[extra]:
            name = requirement_name(spec)
            if name == me:
                names |= set().union(*(expand(e.strip()) for e in re.search(r"\[(.*)\]", spec).group(1).split(",")))
            else:
                names.add(name)
        return names

    groups.update({extra: expand(extra) for extra in extras})
    return groups


def top_imports(source: str) -> tuple[set[str], set[str]]:
    """(module-level, inside-a-function) absolute top-level module names imported by ``source``."""
    tree = ast.parse(source)
    guarded = {id(node) for fn in ast.walk(tree) if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef))
               for node in ast.walk(fn)}
    top, inner = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names = [node.module]
        else:
            continue
        (inner if id(node) in guarded else top).update(n.split(".")[0] for n in names)
    return top, inner


def notebook_source(path: Path) -> str:
    """The code cells of a notebook as one module (IPython magics and shell lines dropped)."""
    cells = json.loads(path.read_text())["cells"]
    code = ["".join(c["source"]) for c in cells if c["cell_type"] == "code"]
    return "\n".join(line for cell in code for line in cell.splitlines() if not line.lstrip().startswith(("%", "!")))


@cache
def installed_modules() -> dict[str, list[str]]:
    """Top-level module -> distributions providing it, from the installed metadata (read once)."""
    return packages_distributions()


def distributions(module: str) -> set[str] | None:
    """The normalized distributions providing a top-level module; empty for stdlib/first party, None if unknown."""
    if module in sys.stdlib_module_names or module in FIRST_PARTY:
        return set()
    found = installed_modules().get(module)
    return set(map(normalize, found)) if found else None


def scan(paths: list[Path]) -> dict[str, dict[str, set[str]]]:
    """{"top"|"inner": {module: {files}}} over python files and notebooks."""
    out: dict[str, dict[str, set[str]]] = {"top": {}, "inner": {}}
    for path in paths:
        source = notebook_source(path) if path.suffix == ".ipynb" else path.read_text()
        for kind, modules in zip(("top", "inner"), top_imports(source)):
            for module in modules:
                out[kind].setdefault(module, set()).add(str(path.relative_to(ROOT)))
    return out


LIBRARY = sorted(p for pkg in ("interp", "probes", "patching") for p in (ROOT / pkg).rglob("*.py"))
DEV = sorted([*(ROOT / "tests").rglob("*.py"), *(ROOT / "benchmarks").rglob("*.py"),
              *(ROOT / "notebooks").glob("*.ipynb"), *(ROOT / "notebooks").glob("*.py"),
              *(ROOT / "docs").rglob("*.py")])


def _missing(found: dict[str, set[str]], allowed: set[str], skip_unknown: bool) -> list[str]:
    bad = []
    for module, files in sorted(found.items()):
        dists = distributions(module)
        if dists is None:
            if not skip_unknown:
                bad.append(f"{module} (no installed distribution provides it; imported in {sorted(files)[0]})")
        elif dists and not dists & allowed:
            bad.append(f"{module} -> {sorted(dists)} (imported in {sorted(files)[0]})")
    return bad


def test_library_imports_are_declared():
    groups = declared()
    found = scan(LIBRARY)
    runtime, extras = groups["runtime"], set().union(*(v for k, v in groups.items() if k != "runtime"))
    bad = _missing(found["top"], runtime, skip_unknown=False)
    bad += _missing({m: f for m, f in found["inner"].items() if m not in found["top"]}, runtime | extras,
                    skip_unknown=True)
    assert not bad, "imported but not declared in pyproject.toml: " + "; ".join(bad)


def test_test_and_notebook_imports_are_in_dev():
    groups = declared()
    found = scan(DEV)
    allowed = groups["runtime"] | groups["dev"]
    bad = _missing(found["top"], allowed, skip_unknown=False) + _missing(found["inner"], allowed, skip_unknown=True)
    assert not bad, "tests/benchmarks/notebooks import what neither the runtime nor the dev extra declares: " + "; ".join(bad)


def _imported(paths: list[Path]) -> set[str]:
    found = scan(paths)
    return {d for module in {*found["top"], *found["inner"]} for d in (distributions(module) or set())}


def test_runtime_dependencies_are_imported():
    unused = declared()["runtime"] - _imported(LIBRARY) - set(INDIRECT)
    assert not unused, f"declared runtime dependencies the library never imports: {sorted(unused)}"


def test_extras_are_used():
    groups = declared()
    used = _imported(LIBRARY + DEV) | set(TOOLS)
    unused = {extra: sorted(names - used - groups["runtime"]) for extra, names in groups.items() if extra != "runtime"}
    unused = {extra: names for extra, names in unused.items() if names}
    installed = {normalize(d) for ds in installed_modules().values() for d in ds}
    unused = {extra: [n for n in names if n in installed] for extra, names in unused.items()}  # not here: unknowable
    assert not any(unused.values()), f"extras that nothing imports: {unused}"


def test_scanner_sees_guarded_and_module_level_imports():
    top, inner = top_imports("import numpy as np\nfrom scipy import stats\ndef f():\n    import ray\n")
    assert top == {"numpy", "scipy"} and inner == {"ray"}
