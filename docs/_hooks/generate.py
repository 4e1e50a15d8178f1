"""MkDocs hooks: the reference pages are generated from the code at every build, never copied into docs/.

Generated (``on_files``), each from its one home:

- ``reference/cli.md``: every command of the live typer app (``interp.pipelines.cli.app``), its usage, help and
  every option with its default and help (options of a config come from its declared fields, ``interp.params``);
  each command and option gets an anchor (``#interp-patch``, ``#interp-patch--max-tokens``), so a guide that links
  an option that no longer exists fails the strict build;
- ``reference/api/*.md``: one page per public module of ``interp``, ``probes`` and ``patching`` (mkdocstrings
  renders the docstrings), with an index;
- ``reference/schemas.md``: every result file's schema, ``schema_table`` of each writer's ``*FIELDS`` declaration;
- ``reference/numbers.md``: the reference study's numbers, from ``interp.reporting.reference``;
- ``reference/guideline.md``: the labelling guideline, from ``interp/annotation/guideline.md``;
- ``tutorials/*.md``: the notebooks with their committed outputs (markdown, code, text, PNGs; plotly JSON is
  skipped, the PNG beside it is shown).

``on_config`` appends every ``guides/*.md`` page the nav does not name yet to its "Guides" section, so a new
guide needs no nav edit to be reachable (the lead may still place it by hand).
"""

from __future__ import annotations

import base64
import importlib
import inspect
import json
import pkgutil
import re
import sys
from pathlib import Path
from typing import Any

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("interp", "probes", "patching")
DECLARED = re.compile(r"^([A-Z_]*FIELDS)(?:: [^=]+)? = \([^\n]*\n\s+Field\(", re.M)
GUIDES = "Guides"


def _ensure_path() -> None:
    """This checkout first on sys.path, so the pages describe the code being built."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))


def _escape(text: str) -> str:
    """Markdown-safe text: ``<`` and ``>`` outside code spans escaped, so ``<path>`` is shown, not parsed."""
    parts = text.split("`")
    return "`".join(p if i % 2 else p.replace("<", "&lt;").replace(">", "&gt;") for i, p in enumerate(parts))


def anchor(path: tuple[str, ...], option: str = "") -> str:
    """The anchor of a command (``interp gate train`` -> ``interp-gate-train``) or of one of its options
    (``--max-k`` -> ``interp-drsr--max-k``)."""
    return "-".join(path) + (f"--{option.lstrip('-')}" if option else "")


def commands(group: Any, path: tuple[str, ...] = ("interp",)) -> list[tuple[tuple[str, ...], Any]]:  # Any: a click command of typer's
    """Every leaf command of the app, depth first in ``interp --help``'s order, with its full name."""
    found = []
    for name in group.list_commands(None) if hasattr(group, "list_commands") else []:
        command = group.get_command(None, name)
        if command is None or command.hidden:
            continue
        if hasattr(command, "commands"):
            found += commands(command, (*path, name))
        else:
            found.append(((*path, name), command))
    return found


def cli_page() -> str:
    """The CLI reference: every command, its help, usage and options with default and help (typer's own records)."""
    _ensure_path()
    import typer

    from interp.pipelines.cli import app

    root = typer.main.get_command(app)
    lines = ["# Command line reference", "",
             "Generated at build time from the live `interp` app (`interp.pipelines.cli`): every command with its",
             "options, their defaults and help as `interp COMMAND --help` prints them. Options of an analysis's",
             "settings are generated from its declared config (`interp.params`, `config_options`), so this page",
             "and `--help` cannot disagree. Errors are one line naming the option (exit 2).", ""]
    lines += ["| command | what it does |", "|---|---|"]
    found = commands(root)
    for path, command in found:
        short = _escape((command.help or "").strip().split("\n")[0]).replace("|", "\\|")
        lines.append(f"| [`{' '.join(path)}`](#{anchor(path)}) | {short} |")
    lines.append("")
    for path, command in found:
        name = " ".join(path)
        lines += [f"## `{name}` {{#{anchor(path)}}}", ""]
        if command.help:
            lines += [_escape(inspect.cleandoc(command.help)), ""]
        ctx = command.make_context(path[-1], [], resilient_parsing=True)
        usage = command.get_usage(ctx).replace(f"Usage: {path[-1]}", f"Usage: {name}", 1)
        lines += ["```text", usage, "```", ""]
        for param in command.params:
            if param.hidden or param.name == "help":
                continue
            if param.param_type_name == "argument":
                metavar = (param.metavar or param.name or "").upper()
                state = "required" if param.required else f"default: `{param.default!r}`"
                help_text = _escape(getattr(param, "help", None) or "")
                lines.append(f"- `{metavar}`{{: #{anchor(path, param.name or '')} }} (argument, {state}): {help_text}")
                continue
            record = param.get_help_record(ctx)
            if record is None:
                continue
            opts, help_text = record
            lines.append(f"- `{opts}`{{: #{anchor(path, param.opts[0])} }}: {_escape(help_text)}")
        lines.append("")
    return "\n".join(lines)


def public_modules() -> list[str]:
    """Every module of the packages whose dotted name has no part starting with ``_`` (``__init__`` excepted)."""
    _ensure_path()
    found = []
    for package in PACKAGES:
        found.append(package)
        module = importlib.import_module(package)
        for info in pkgutil.walk_packages(module.__path__, prefix=f"{package}."):
            if not any(part.startswith("_") for part in info.name.split(".")):
                found.append(info.name)
    return sorted(found)


def api_pages() -> dict[str, str]:
    """``reference/api/<module>.md`` for every public module (a mkdocstrings block each) and the index."""
    modules = public_modules()
    pages = {f"reference/api/{m}.md": f"# `{m}`\n\n::: {m}\n" for m in modules}
    index = ["# API reference", "",
             "Generated from the docstrings at build time (mkdocstrings): one page per module of the three packages.",
             "The public names of `interp` itself are listed on [`interp`](interp.md); `import interp` is light, names",
             "resolve on first use.", ""]
    for package in PACKAGES:
        index += [f"## `{package}`", ""]
        for m in modules:
            if m == package or m.startswith(package + "."):
                doc = (importlib.import_module(m).__doc__ or "").strip().split("\n")[0]
                index.append(f"- [`{m}`]({m}.md): {_escape(doc)}")
        index.append("")
    pages["reference/api/index.md"] = "\n".join(index)
    return pages


def declarations() -> list[tuple[str, str]]:
    """(module, name) of every ``*FIELDS = (Field(...), ...)`` declaration in the packages (what the writers own)."""
    found = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            module = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
            found += [(module, name) for name in DECLARED.findall(path.read_text(encoding="utf-8"))]
    return found


def schemas_page() -> str:
    """Every result file's schema: the registry's files first (by analysis), then every other declaration."""
    _ensure_path()
    from interp.reporting.analyses import ANALYSES
    from interp.schema import schema_table

    from interp.pipelines.stages import STEPS

    lines = ["# Result files and their schemas", "",
             "Generated at build time from the registry of analyses (`interp.reporting.analyses.ANALYSES`), the demo's",
             "steps (`interp.pipelines.stages.STEPS`) and the `Field` declarations beside each writer",
             "(`interp.schema`); the same table is in the writer's module docstring and embedded as each file's",
             "`\"schema\"` entry, and readers check it on load. Shapes, dtypes and units are explained in",
             "[`interp.schema`](api/interp.schema.md).", "", "## Files of each analysis", "",
             "| analysis | file | fields declared in | figures | demo step (`interp.pipelines.stages`) |",
             "|---|---|---|---|---|"]
    for a in ANALYSES:
        steps = ", ".join(f"`{st.name}`: {st.title}" for st in STEPS if st.done == a.path())
        figures = ", ".join(f"`{fig.name}`" for fig in a.figures) or "-"
        for f in a.files:
            module, _, name = f.schema.partition(":")
            lines.append(f"| {a.title} | `{a.folder}/{f.name}` | [`{module}.{name}`](#{module.replace('.', '')}"
                         f"{name.lower()}) | {figures} | {steps or '-'} |")
    lines.append("")
    for module, name in declarations():
        fields = getattr(importlib.import_module(module), name)
        doc = (importlib.import_module(module).__doc__ or "").strip().split("\n")[0]
        lines += [f"## `{module}.{name}` {{#{module.replace('.', '')}{name.lower()}}}", "",
                  f"Written by [`{module}`](api/{module}.md): {_escape(doc)}", "", schema_table(fields), ""]
    return "\n".join(lines)


def _value(value: object) -> str:
    """A reference value as inline code (JSON where it is JSON, else its repr)."""
    try:
        text = json.dumps(value, default=list)
    except TypeError:
        text = repr(value)
    return "`" + text.replace("`", "'") + "`"


def numbers_page() -> str:
    """The reference study's numbers, every public constant of ``interp.reporting.reference`` as it is in code."""
    _ensure_path()
    from interp.reporting import reference

    lines = ["# The reference study's numbers", "",
             "Generated at build time from `interp/reporting/reference.py`, the one place they are written; every",
             "figure and table marks them as the reference's.", "", _escape(inspect.cleandoc(reference.__doc__ or "")),
             "", "| name | value |", "|---|---|"]
    departures: dict[str, str] = {}
    for name, value in vars(reference).items():
        if name.isupper() and not name.startswith("_"):
            if name == "DEPARTURES" and isinstance(value, dict):
                departures = value
                continue
            lines.append(f"| `{name}` | {_value(value).replace('|', '&#124;')} |")
    if departures:
        lines += ["", "## Departures from the reference study", "",
                  "Where the toolkit departs from DRSR, each with its reason (`DEPARTURES`):", ""]
        lines += [f"- **{key}**: {_escape(text)}" for key, text in departures.items()]
    return "\n".join(lines) + "\n"


def _source(cell: dict[str, Any]) -> str:  # Any: a notebook cell as JSON
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else str(src)


def notebook_pages(notebooks: Path) -> dict[str, str | bytes]:
    """``tutorials/<stem>.md`` per notebook with its committed outputs; PNG outputs as files beside the page."""
    pages: dict[str, str | bytes] = {}
    index = ["# Tutorials", "",
             "The notebooks under `notebooks/`, shown with the outputs committed with them (executed with SmolLM2 by",
             "`make notebooks`; the test suite executes them on the tiny model). Interactive figures are shown as the",
             "PNG committed beside each.", ""]
    for path in sorted(notebooks.glob("*.ipynb")):
        nb = json.loads(path.read_text(encoding="utf-8"))
        stem = path.stem
        out: list[str] = []
        title = stem
        for i, cell in enumerate(nb["cells"]):
            source = _source(cell)
            if cell["cell_type"] == "markdown":
                if title == stem and source.lstrip().startswith("# "):
                    title = source.lstrip().split("\n")[0][2:].strip()
                out += [_notebook_markdown(source), ""]
                continue
            if cell["cell_type"] != "code":
                continue
            out += ["```py", source, "```", ""]
            for j, output in enumerate(cell.get("outputs", [])):
                out += _output(output, f"{stem}-{i}-{j}", stem, pages) + [""]
        out.append(f"*Generated from `notebooks/{path.name}` and its committed outputs.*")
        pages[f"tutorials/{stem}.md"] = "\n".join(out)
        index.append(f"- [{_escape(title)}]({stem}.md) (`notebooks/{path.name}`)")
    pages["tutorials/index.md"] = "\n".join(index) + "\n"
    return pages


def _notebook_markdown(source: str) -> str:
    """A notebook's markdown cell with links into the repository made plain code (they are not site pages)."""
    return re.sub(r"\[([^\]]+)\]\((?!https?://|#)([^)]+)\)", r"\1 (`\2`)", source)


def _output(output: dict[str, Any], name: str, stem: str, pages: dict[str, str | bytes]) -> list[str]:  # Any: JSON
    """One cell output as Markdown: a PNG, HTML, Markdown or plain text, in that order of preference."""
    if output["output_type"] == "stream":
        return ["```text", _source({"source": output.get("text", "")}).rstrip("\n"), "```"]
    if output["output_type"] == "error":
        return ["```text", f"{output.get('ename')}: {output.get('evalue')}", "```"]
    data = output.get("data", {})
    if "image/png" in data:
        pages[f"tutorials/{name}.png"] = base64.b64decode(_source({"source": data["image/png"]}))
        return [f"![output]({name}.png)"]
    if "text/html" in data:
        return ['<div class="nb-output" markdown="0">', _source({"source": data["text/html"]}), "</div>"]
    if "text/markdown" in data:
        return [_notebook_markdown(_source({"source": data["text/markdown"]}))]
    if "text/plain" in data:
        return ["```text", _source({"source": data["text/plain"]}).rstrip("\n"), "```"]
    return []


def guideline_page() -> str:
    """The labelling guideline of G and y, from its one home (``interp/annotation/guideline.md``)."""
    _ensure_path()
    from interp.annotation.guideline import guideline_markdown

    text = guideline_markdown()
    note = ("\n\n*Generated from `interp/annotation/guideline.md`, the file the labelling page, the judge's rubric "
            "and the rule labelers read.*\n")
    title, _, rest = text.partition("\n")
    return title + note + rest


def generated(config: MkDocsConfig) -> dict[str, str | bytes]:
    """Every generated page by its path under the site's docs."""
    pages: dict[str, str | bytes] = {"reference/cli.md": cli_page(), "reference/schemas.md": schemas_page(),
                                     "reference/numbers.md": numbers_page(), "reference/guideline.md": guideline_page()}
    pages.update(api_pages())
    pages.update(notebook_pages(ROOT / "notebooks"))
    return pages


def on_config(config: MkDocsConfig) -> MkDocsConfig:
    """Every ``docs/guides/*.md`` the nav does not name is appended to its Guides section."""
    nav = config.nav
    if not nav:
        return config
    section = next((item for item in nav if isinstance(item, dict) and GUIDES in item), None)
    if section is None:
        return config
    named = set(_nav_pages(nav))
    for path in sorted((Path(config.docs_dir) / "guides").glob("*.md")):
        uri = f"guides/{path.name}"
        if uri not in named:
            section[GUIDES].append(uri)
    return config


def _nav_pages(nav: Any) -> list[str]:  # Any: mkdocs' nav as loaded from YAML
    """Every page path the nav names, at any depth."""
    if isinstance(nav, str):
        return [nav]
    if isinstance(nav, list):
        return [p for item in nav for p in _nav_pages(item)]
    if isinstance(nav, dict):
        return [p for value in nav.values() for p in _nav_pages(value)]
    return []


def on_files(files: Files, config: MkDocsConfig) -> Files:
    """Add the generated pages (they exist only in the built site)."""
    for uri, content in generated(config).items():
        files.append(File.generated(config, uri, content=content))
    return files
