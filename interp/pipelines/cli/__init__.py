"""The ``interp`` command line: option parsing and printing only; every analysis is a call to
:mod:`interp.pipelines.stages`.

One module per concern registers its commands on the shared :data:`~interp.pipelines.cli.common.app`
(``data``, ``models``, ``features``, ``causal``, ``drsr``, ``gate``, ``probing``, ``externalize``, ``annotate``,
``tokens``, ``serve``, ``study``, ``runs``); the import order below
(``COMMAND_MODULES``) is the order ``interp --help`` lists them in. A new command goes in the module of its
concern, or in a new module named in ``COMMAND_MODULES``.
"""

from __future__ import annotations

import errno
import importlib
import sys
from collections.abc import Iterator

from interp.pipelines.cli.common import PIPE_WIDTH, app, console, err

__all__ = ["app", "main"]

# each module registers its commands on `app` when imported; this order is `interp --help`'s
COMMAND_MODULES = ("data", "models", "features", "causal", "drsr", "gate", "probing", "externalize", "annotate", "tokens",
                   "serve", "study", "runs", "anchors")
for _name in COMMAND_MODULES:
    importlib.import_module(f"{__name__}.{_name}")

_KNOWN_ERRORS = (("interp.sensor.models", "ModelUnavailable"), ("interp.data.render", "RenderError"),
                 ("interp.data.trajectory", "TrajectoryError"))


def _is_input_error(exc: BaseException) -> bool:
    """Whether ``exc`` is a known input error (bad file, option, model spec) rather than a bug."""
    known = [ValueError, KeyError, FileNotFoundError]
    known += [getattr(sys.modules[mod], name) for mod, name in _KNOWN_ERRORS if mod in sys.modules]
    return isinstance(exc, tuple(known))


def _chain(exc: BaseException | None) -> Iterator[BaseException]:
    """``exc`` and the exceptions it was raised from or during, innermost last."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


def _os_error(exc: OSError) -> str:
    """``PATH: reason`` of an OS error (disk full, read-only file system, permission, a file where a folder goes)."""
    reason = exc.strerror or errno.errorcode.get(exc.errno or 0, "") or str(exc)
    if exc.filename is None:
        return f"{reason}" if exc.strerror else str(exc)
    return f"{exc.filename}: {reason}" + (f" (-> {exc.filename2})" if exc.filename2 is not None else "")


def main() -> None:
    """Console entry point, no traceback for anything but a bug: known input errors print one line and exit 2;
    OS errors print ``PATH: reason`` and exit 1; Ctrl-C says how many units of a resumable job are done, exit 130."""
    from interp.io import Interrupted

    for stream in (sys.stdout, sys.stderr):  # text the terminal's encoding cannot show prints escaped, never fails
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            reconfigure(errors="backslashreplace")
    for out in (console, err):  # a pipe or a log file gets long lines whole
        if not out.is_terminal:
            out.width = PIPE_WIDTH
    try:
        app()  # typer/click handle usage errors and exit codes themselves (Ctrl-C: exit 130)
    except SystemExit as exc:
        if exc.code != 130:
            raise
        done = next((e for e in _chain(exc) if isinstance(e, Interrupted)), None)
        err.print(str(done) if done else "interrupted; re-run to resume (finished units are kept)", markup=False)
        raise SystemExit(130) from None
    except RecursionError:
        err.print("error: input nested too deeply to read (a JSON or TOML value inside thousands of brackets)",
                  markup=False)
        raise SystemExit(2) from None
    except OSError as exc:
        if isinstance(exc, FileNotFoundError) and exc.filename is None and exc.args:
            err.print(f"error: {exc.args[0]}", markup=False, highlight=False)  # our own messages
            raise SystemExit(2) from None
        err.print(f"error: {_os_error(exc)}", markup=False, highlight=False)
        raise SystemExit(2 if isinstance(exc, (FileNotFoundError, IsADirectoryError, NotADirectoryError)) else 1) \
            from None
    except Exception as exc:
        if not _is_input_error(exc):
            raise
        err.print(f"error: {exc.args[0] if isinstance(exc, KeyError) else exc}", markup=False, highlight=False)
        raise SystemExit(2) from None
