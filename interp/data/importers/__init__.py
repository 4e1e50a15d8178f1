"""Importers: agent runs as frameworks log them -> the trajectory format (``interp import``).

One module per format (:mod:`.openai`, :mod:`.anthropic`, :mod:`.swe_agent`, :mod:`.tau2`, :mod:`.atif`,
:mod:`.claude_code`, :mod:`.codex` and :mod:`.openhands` (session files read whole, :mod:`.session`),
:mod:`.gemini`,
:mod:`.mapping` for a JSON field map or a Python hook), the text rules they
share (:mod:`.common`), input reading (:mod:`.reader`) and the registry with
the import driver (:mod:`.registry`). ``docs/reference/importers.md`` lists, per importer,
the fields it maps and what it drops. Pure data-layer code: no model, no torch.
"""
