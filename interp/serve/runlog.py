"""The proxy's run log, and paired live runs read from two of them (amplification decomposition, cost).

A run log is a folder (``interp serve --log-dir``):

- ``serve.json``: the proxy's settings (``SERVE_FIELDS``), written at start;
- ``requests.jsonl``: one line per request of an edited API (chat completions, Messages, Responses;
  ``REQUEST_FIELDS``), appended when its answer is complete (two for an edited request refused and retried);
- ``sessions/<session stem>.json``: per agent run (session), the trajectory as the model saw it at the run's
  latest request (the history as sent, after the policy, in the trajectory format of ``docs/reference/data-formats.md``, its
  ``task_id`` the session id), rewritten at every request of the run.

``REQUEST_FIELDS`` (one JSON object per line of ``requests.jsonl``):

| name | shape | dtype | units | meaning |
|---|---|---|---|---|
| ``session`` | ``[]`` | str | - | the agent run: the X-Interp-Session header, else sha256 of the request's messages up to its first user message |
| ``request`` | ``[]`` | int | - | 1-based index of the request within its session |
| ``time`` | ``[]`` | float | s | Unix time the request arrived |
| ``policy`` | ``[]`` | str | - | the policy, as written (interp serve --policy) |
| ``api`` | ``[]`` | str | - | the request's API: chat (/v1/chat/completions), messages (/v1/messages), responses (/v1/responses) |
| ``provider`` | ``[]`` | str | - | the upstream kind whose rules applied to the edit (interp.serve.providers: --provider, or the API's own) |
| ``attempt`` | ``[]`` | int | - | 1; 2 for the unedited retry of an edited request the upstream refused (HTTP 400/422; attempt 1's line comes first) |
| ``stream`` | ``[]`` | bool | - | the request asked for a streamed (SSE) answer |
| ``status`` | ``[]`` | int | - | HTTP status returned to the agent: the upstream's, 502 when it could not be reached, 504 on its timeout |
| ``n_messages`` | ``[]`` | int | messages | messages received from the agent |
| ``n_steps`` | ``[]`` | int | steps | completed steps of the history (assistant turns; 0 before the first) |
| ``edited`` | ``[]`` | bool | - | the messages sent upstream differ from those received |
| ``failure`` | ``[]`` | str or null | - | why the request was forwarded unedited although the policy should have run: a body that is not a JSON object, chat-template control tokens in the history (--allow-control-tokens), a mapping, sensor, policy or write-back error, a Responses request's previous_response_id, the retry of a refused edit; null when none |
| ``coarsened`` | ``[n]`` | str | - | each edit the provider's rules coarsened (a signed block or reasoning item dropped whole, a required field kept whole); empty when none |
| ``prompt_tokens`` | ``[]`` | int or null | tokens | usage.prompt_tokens as the upstream reported it (null: no usage reported, e.g. a stream without stream_options.include_usage) |
| ``cached_tokens`` | ``[]`` | int or null | tokens | usage.prompt_tokens_details.cached_tokens (cache reads), as reported |
| ``cache_write_tokens`` | ``[]`` | int or null | tokens | cache writes where the upstream reports them (usage.cache_creation_input_tokens or prompt_tokens_details.cache_write_tokens); null otherwise |
| ``completion_tokens`` | ``[]`` | int or null | tokens | usage.completion_tokens, as reported |
| ``removed_tokens`` | ``[]`` | int or null | tokens | the policy's direct removal in this request, measured as removed_measure says (0 when the request went up unedited; opaque fields: signatures, redacted or encrypted reasoning, never counted); null: unknown (edited, no tokenizer) |
| ``removed_measure`` | ``[]`` | str | - | how removed_tokens was measured: template (chat completions: the tokenizer's chat template render of the messages received minus of those sent: the upstream's own terms when it is the upstream's template and tokenizer), strings (tokens of the strings changed: Messages content blocks and Responses input items, whose upstream template is not public, or a template that failed or is absent), unedited (nothing removed) or unknown (no tokenizer) |
| ``edit_log`` | ``{...}`` | object or null | - | the policy's EditLog of this request (interp.data.conditions.EditLog.to_json); null when it did not run |
| ``sensor_seconds`` | ``[]`` | float | s | time in the sensor's forwards for this request (ICLR scoring) |
| ``proxy_seconds`` | ``[]`` | float | s | the proxy's added latency: from the request's arrival to its forwarding upstream (mapping, policy, sensor, write-back) |
| ``upstream_seconds`` | ``[]`` | float | s | from forwarding to the answer's last byte |
| ``cache_bytes`` | ``[]`` | int | bytes | KV-cache snapshots the session's sensor holds after the request |
| ``sessions`` | ``[]`` | int | - | sessions held by the proxy after the request |
| ``lag`` | ``[]`` | int | steps | --decide async: steps of this request whose decision was not ready (left whole; scored in the background, applied from a later request); 0 when every decision was ready |
| ``evicted`` | ``[n_evicted]`` | str | - | sessions whose KV-cache snapshots were dropped after this request to keep --memory-budget (least recently used first; their decisions are kept) |

**Paired runs** (:func:`paired_document`, ``interp tokens --trajectories RUNLOG_A --paired RUNLOG_B``): run A
without the policy (``full``), run B with it, the same tasks matched by session. **A task is a session**: the
``X-Interp-Session`` header the agent sends (``interp study`` sets it to the task id, Inspect's recipe to
sample id and epoch), else the hash of the opening messages (equal in both runs; repeated runs of one task
then share one session). A session in both runs that never got past its first request (``n_steps`` 0
throughout: a client's title or probe request) is ``stray``, not a task. Per task, with T the tokens a run sent
and received as the upstream reported them (prompt + completion over its answered requests), n its requests
and D the direct removal of run B (``removed_tokens`` summed; a request forwarded unedited removes 0), the
decomposition of
``interp.accounting.tokens.decomposition`` with T_B_full = T_B + D, and the amplification factor and saving
ratio with task-bootstrap CIs; and each run's cost under a price table (USD per million tokens:
``uncached_input``, ``cache_read``, ``cache_write``, ``output``): uncached input = prompt - cached - cache
writes.

**Honest removal.** D must be in the upstream's terms, or the decomposition invents a context change to cancel
a removal the model never saw. The proxy measures each edited request's removal by rendering the messages
received and sent with its tokenizer's chat template (``removed_measure`` ``template``: exact when
``--tokenizer`` is the upstream's model, whose template also drops what the upstream drops, e.g.
``reasoning_content`` a template never renders), else by the message strings (``strings``); without a
tokenizer it is ``unknown``. The decomposition is withheld (``refused``, with ``flags``) when a task has an
edited request of unknown removal, or a **phantom removal**: the first request of run B that removed tokens
was billed the very prompt tokens of run A's same request although every earlier request agreed (a
deterministic agent's runs are identical up to the first edit, so the bill must drop by the removal).
``paired.json`` (``PAIRED_FIELDS``):

| name | shape | dtype | units | meaning |
|---|---|---|---|---|
| ``schema`` | ``{...}`` | object | - | this table: {field: {shape, dtype, units, doc}} |
| ``policy`` | ``[]`` | str | - | the policy of the compressed run (its run log's) |
| ``measure`` | ``[]`` | str | - | what T counts: prompt + completion tokens as the upstream reported them |
| ``removed_measure`` | ``[n_measures]`` | str | - | how the compressed run's removals were measured (removed_measure of REQUEST_FIELDS: template, strings) |
| ``n_tasks`` | ``[]`` | int | - | agent runs paired: sessions in both runs with a completed step |
| ``unmatched`` | ``[n_unmatched]`` | str | - | sessions in one run only (left out) |
| ``stray`` | ``[n_stray]`` | str | - | sessions in both runs but never past their first request (n_steps 0 throughout: a client's one-off request, no history to edit): not tasks, left out |
| ``totals`` | ``{...}`` | object | tokens | {total_change, direct_change, request_count_change, context_change} summed over tasks (interp.accounting.tokens.decomposition) |
| ``flags`` | ``[n_flags] of {session, kind, detail}`` | object | - | tasks whose decomposition premise fails: unknown_removal (edited requests logged without a tokenizer), phantom_removal (a removal billed as if nothing was removed) |
| ``refused`` | ``[]`` | str or null | - | why amplification and saving ratio are withheld (any flag); null when they stand |
| ``amplification`` | ``[]`` | float or null | - | abs(total change) / direct removal (null: nothing removed, or refused) |
| ``amplification_ci`` | ``[2]`` | float or null | - | task-bootstrap percentile 95 % CI |
| ``saving_ratio`` | ``[]`` | float or null | - | -total change / direct removal |
| ``saving_ratio_ci`` | ``[2]`` | float or null | - | task-bootstrap percentile 95 % CI |
| ``n_boot`` | ``[]`` | int | - | bootstrap resamples |
| ``per_task`` | ``[n_tasks] of {session, base_tokens, base_requests, compressed_tokens, compressed_requests, removed_tokens, total_change, direct_change, request_count_change, context_change, amplification}`` | object | tokens | one row per matched session |
| ``prices`` | ``{...}`` | object or null | USD / 1M tokens | the price table given (null: none) |
| ``cost`` | ``{...}`` | object or null | tokens; USD | {base, compressed}: each {uncached_input_tokens, cache_read_tokens, cache_write_tokens, output_tokens, cost_usd} over the matched sessions (null: no price table) |
| ``config`` | ``{...}`` | object | - | the frozen config of the analysis that made this file: dataclasses.asdict, tuples as lists (interp.record.config_from builds it back) |
| ``provenance`` | ``{...}`` | object | - | what ran (interp.record): model, revision, dtype (resolved), device, seeds, package, version, inputs (name -> sha256) |

``serve.json`` (``SERVE_FIELDS``):

| name | shape | dtype | units | meaning |
|---|---|---|---|---|
| ``schema`` | ``{...}`` | object | - | REQUEST_FIELDS: {field: {shape, dtype, units, doc}} of requests.jsonl |
| ``policy`` | ``[]`` | str | - | the policy, as written |
| ``upstream`` | ``[]`` | str | - | the upstream base URL |
| ``provider`` | ``[]`` | str | - | the upstream kind whose rules limit the edits (interp serve --provider: auto or a kind of interp.serve.providers) |
| ``model`` | ``[]`` | str or null | - | the sensor model (null: none loaded) |
| ``max_sessions`` | ``[]`` | int | - | sessions held at most (least recently used dropped first) |
| ``session_ttl`` | ``[]`` | float | s | a session unused this long is dropped |
| ``started`` | ``[]`` | float | s | Unix time the proxy started |
| ``decide`` | ``[]`` | str | - | sync (a request waits for its decisions) or async (decided while the tool runs, applied one request later) |
| ``memory_budget`` | ``[]`` | int or null | bytes | KV-cache snapshots held over all sessions at most (null: no budget) |
"""

from __future__ import annotations

import json
import re
import threading
from collections import Counter
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TYPE_CHECKING

import numpy as np

from interp.accounting.tokens import _ratio_ci, decomposition
from interp.data.render import _split_tokens
from interp.io import atomic_write_json, read_json, safe_stem
from interp.params import N_BOOT
from interp.record import RECORD_FIELDS, record
from interp.schema import Field, schema_dict

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

REQUEST_FIELDS = (
    Field("session", "[]", "str", "-", "the agent run: the X-Interp-Session header, else sha256 of the request's "
          "messages up to its first user message"),
    Field("request", "[]", "int", "-", "1-based index of the request within its session"),
    Field("time", "[]", "float", "s", "Unix time the request arrived"),
    Field("policy", "[]", "str", "-", "the policy, as written (interp serve --policy)"),
    Field("api", "[]", "str", "-", "the request's API: chat (/v1/chat/completions), messages (/v1/messages), "
          "responses (/v1/responses)"),
    Field("provider", "[]", "str", "-", "the upstream kind whose rules applied to the edit (interp.serve.providers: "
          "--provider, or the API's own)"),
    Field("attempt", "[]", "int", "-", "1; 2 for the unedited retry of an edited request the upstream refused "
          "(HTTP 400/422; attempt 1's line comes first)"),
    Field("stream", "[]", "bool", "-", "the request asked for a streamed (SSE) answer"),
    Field("status", "[]", "int", "-", "HTTP status returned to the agent: the upstream's, 502 when it could not "
          "be reached, 504 on its timeout"),
    Field("n_messages", "[]", "int", "messages", "messages received from the agent"),
    Field("n_steps", "[]", "int", "steps", "completed steps of the history (assistant turns; 0 before the first)"),
    Field("edited", "[]", "bool", "-", "the messages sent upstream differ from those received"),
    Field("failure", "[]", "str or null", "-", "why the request was forwarded unedited although the policy should "
          "have run: a body that is not a JSON object, chat-template control tokens in the history "
          "(--allow-control-tokens), a mapping, sensor, policy or write-back error, a Responses request's "
          "previous_response_id, the retry of a refused edit; null when none"),
    Field("coarsened", "[n]", "str", "-", "each edit the provider's rules coarsened (a signed block or reasoning "
          "item dropped whole, a required field kept whole); empty when none"),
    Field("prompt_tokens", "[]", "int or null", "tokens", "usage.prompt_tokens as the upstream reported it (null: "
          "no usage reported, e.g. a stream without stream_options.include_usage)"),
    Field("cached_tokens", "[]", "int or null", "tokens",
          "usage.prompt_tokens_details.cached_tokens (cache reads), as reported"),
    Field("cache_write_tokens", "[]", "int or null", "tokens", "cache writes where the upstream reports them "
          "(usage.cache_creation_input_tokens or prompt_tokens_details.cache_write_tokens); null otherwise"),
    Field("completion_tokens", "[]", "int or null", "tokens", "usage.completion_tokens, as reported"),
    Field("removed_tokens", "[]", "int or null", "tokens", "the policy's direct removal in this request, measured "
          "as removed_measure says (0 when the request went up unedited; opaque fields: signatures, redacted or "
          "encrypted reasoning, never counted); null: unknown (edited, no tokenizer)"),
    Field("removed_measure", "[]", "str", "-", "how removed_tokens was measured: template (chat completions: the "
          "tokenizer's chat template render of the messages received minus of those sent: the upstream's own terms "
          "when it is the upstream's template and tokenizer), strings (tokens of the strings changed: Messages "
          "content blocks and Responses input items, whose upstream template is not public, or a template that "
          "failed or is absent), unedited (nothing removed) or unknown (no tokenizer)"),
    Field("edit_log", "{...}", "object or null", "-", "the policy's EditLog of this request "
          "(interp.data.conditions.EditLog.to_json); null when it did not run"),
    Field("sensor_seconds", "[]", "float", "s", "time in the sensor's forwards for this request (ICLR scoring)"),
    Field("proxy_seconds", "[]", "float", "s", "the proxy's added latency: from the request's arrival to its "
          "forwarding upstream (mapping, policy, sensor, write-back)"),
    Field("upstream_seconds", "[]", "float", "s", "from forwarding to the answer's last byte"),
    Field("cache_bytes", "[]", "int", "bytes", "KV-cache snapshots the session's sensor holds after the request"),
    Field("sessions", "[]", "int", "-", "sessions held by the proxy after the request"),
    Field("lag", "[]", "int", "steps", "--decide async: steps of this request whose decision was not ready (left "
          "whole; scored in the background, applied from a later request); 0 when every decision was ready"),
    Field("evicted", "[n_evicted]", "str", "-", "sessions whose KV-cache snapshots were dropped after this request "
          "to keep --memory-budget (least recently used first; their decisions are kept)"),
)
SERVE_FIELDS = (
    Field("schema", "{...}", "object", "-", "REQUEST_FIELDS: {field: {shape, dtype, units, doc}} of requests.jsonl"),
    Field("policy", "[]", "str", "-", "the policy, as written"),
    Field("upstream", "[]", "str", "-", "the upstream base URL"),
    Field("provider", "[]", "str", "-", "the upstream kind whose rules limit the edits (interp serve --provider: "
          "auto or a kind of interp.serve.providers)"),
    Field("model", "[]", "str or null", "-", "the sensor model (null: none loaded)"),
    Field("max_sessions", "[]", "int", "-", "sessions held at most (least recently used dropped first)"),
    Field("session_ttl", "[]", "float", "s", "a session unused this long is dropped"),
    Field("started", "[]", "float", "s", "Unix time the proxy started"),
    Field("decide", "[]", "str", "-", "sync (a request waits for its decisions) or async (decided while the tool "
          "runs, applied one request later)"),
    Field("memory_budget", "[]", "int or null", "bytes", "KV-cache snapshots held over all sessions at most (null: "
          "no budget)"),
)
PAIRED_FIELDS = (
    Field("schema", "{...}", "object", "-", "this table: {field: {shape, dtype, units, doc}}"),
    Field("policy", "[]", "str", "-", "the policy of the compressed run (its run log's)"),
    Field("measure", "[]", "str", "-", "what T counts: prompt + completion tokens as the upstream reported them"),
    Field("removed_measure", "[n_measures]", "str", "-", "how the compressed run's removals were measured "
          "(removed_measure of REQUEST_FIELDS: template, strings)"),
    Field("n_tasks", "[]", "int", "-", "agent runs paired: sessions in both runs with a completed step"),
    Field("unmatched", "[n_unmatched]", "str", "-", "sessions in one run only (left out)"),
    Field("stray", "[n_stray]", "str", "-", "sessions in both runs but never past their first request (n_steps 0 "
          "throughout: a client's one-off request, no history to edit): not tasks, left out"),
    Field("totals", "{...}", "object", "tokens", "{total_change, direct_change, request_count_change, "
          "context_change} summed over tasks (interp.accounting.tokens.decomposition)"),
    Field("flags", "[n_flags] of {session, kind, detail}", "object", "-", "tasks whose decomposition premise "
          "fails: unknown_removal (edited requests logged without a tokenizer), phantom_removal (a removal billed "
          "as if nothing was removed)"),
    Field("refused", "[]", "str or null", "-", "why amplification and saving ratio are withheld (any flag); null "
          "when they stand"),
    Field("amplification", "[]", "float or null", "-", "abs(total change) / direct removal (null: nothing removed, "
          "or refused)"),
    Field("amplification_ci", "[2]", "float or null", "-", "task-bootstrap percentile 95 % CI"),
    Field("saving_ratio", "[]", "float or null", "-", "-total change / direct removal"),
    Field("saving_ratio_ci", "[2]", "float or null", "-", "task-bootstrap percentile 95 % CI"),
    Field("n_boot", "[]", "int", "-", "bootstrap resamples"),
    Field("per_task", "[n_tasks] of {session, base_tokens, base_requests, compressed_tokens, compressed_requests, "
          "removed_tokens, total_change, direct_change, request_count_change, context_change, amplification}",
          "object", "tokens", "one row per matched session"),
    Field("prices", "{...}", "object or null", "USD / 1M tokens", "the price table given (null: none)"),
    Field("cost", "{...}", "object or null", "tokens; USD", "{base, compressed}: each {uncached_input_tokens, "
          "cache_read_tokens, cache_write_tokens, output_tokens, cost_usd} over the matched sessions (null: no "
          "price table)"),
    *RECORD_FIELDS,
)
PRICE_KEYS = ("uncached_input", "cache_read", "cache_write", "output")


class RunLog:
    """Writes a run log folder (module docstring); thread-safe appends."""

    def __init__(self, folder: Path, settings: Mapping[str, Any]):
        self.folder = Path(folder)
        (self.folder / "sessions").mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        atomic_write_json(self.folder / "serve.json", {"schema": schema_dict(REQUEST_FIELDS), **settings})

    def request(self, row: Mapping[str, Any]) -> None:
        """Append one ``REQUEST_FIELDS`` row to ``requests.jsonl``."""
        missing = [f.name for f in REQUEST_FIELDS if f.name not in row]
        if missing:
            raise ValueError(f"run log row lacks {', '.join(missing)}")
        line = json.dumps({f.name: row[f.name] for f in REQUEST_FIELDS}, ensure_ascii=False) + "\n"
        with self._lock, open(self.folder / "requests.jsonl", "a", encoding="utf-8") as fh:
            fh.write(line)

    def trajectory(self, session: str, record: Mapping[str, Any]) -> None:
        """Rewrite the session's trajectory as the model saw it at its latest request."""
        atomic_write_json(self.folder / "sessions" / f"{safe_stem(session)}.json", dict(record))


def is_run_log(path: Path) -> bool:
    """Whether ``path`` is a run log folder of ``interp serve``."""
    return Path(path).is_dir() and (Path(path) / "requests.jsonl").is_file()


def _legacy_defaults(row: Mapping[str, Any]) -> dict[str, Any]:
    """The values of the fields a run log written before they existed lacks, as that proxy behaved: chat
    completions only, no provider rules (any edit), one attempt, nothing coarsened, synchronous decisions (no lag),
    no memory budget (nothing evicted); removed_tokens counted from the message strings (null without a
    tokenizer)."""
    return {"api": "chat", "provider": "openai-chat", "attempt": 1, "coarsened": [], "lag": 0, "evicted": [],
            "removed_measure": ("unedited" if not row.get("edited") else
                                "unknown" if row.get("removed_tokens") is None else "strings")}


def read_requests(folder: Path) -> list[dict[str, Any]]:
    """The rows of a run log's ``requests.jsonl``, checked: a bad line is a ValueError naming file, line and field."""
    path = Path(folder) / "requests.jsonl"
    rows = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}:{n}: not JSON ({exc.msg})") from None
        if not isinstance(row, dict):
            raise ValueError(f"{path}:{n}: expected a JSON object")
        for name, value in _legacy_defaults(row).items():
            row.setdefault(name, value)
        for f in REQUEST_FIELDS:
            value = row.get(f.name)
            if f.name not in row or (value is None and not f.nullable):
                raise ValueError(f"{path}:{n}: {f.name}: missing or null")
            if f.kind == "int" and value is not None and (isinstance(value, bool) or not isinstance(value, int)):
                raise ValueError(f"{path}:{n}: {f.name}: expected an integer, got {value!r}")
        rows.append(row)
    if not rows:
        raise ValueError(f"{path}: no requests")
    return rows


def read_prices(path: Path) -> dict[str, float]:
    """A price table (JSON: USD per million tokens for each of ``PRICE_KEYS``), checked."""
    doc = read_json(Path(path))
    if not isinstance(doc, dict):
        raise ValueError(f"{path}: a price table is a JSON object with {', '.join(PRICE_KEYS)}")
    for key in PRICE_KEYS:
        value = doc.get(key)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise ValueError(f"{path}: {key}: expected a price >= 0 (USD per million tokens), got {value!r}")
    unknown = sorted(set(doc) - set(PRICE_KEYS))
    if unknown:
        raise ValueError(f"{path}: {unknown[0]}: unknown key; expected {', '.join(PRICE_KEYS)}")
    return {k: float(doc[k]) for k in PRICE_KEYS}


def answered(rows: list[dict[str, Any]], where: Path) -> list[dict[str, Any]]:
    """The requests the upstream answered (status 200), each with its usage (a ValueError naming one without)."""
    ok = [r for r in rows if r["status"] == 200]
    for r in ok:
        if r["prompt_tokens"] is None or r["completion_tokens"] is None:
            raise ValueError(f"{where}: session {r['session']} request {r['request']}: no usage reported (ask "
                             "streamed answers with stream_options.include_usage)")
    return ok


def rendered_removal(tokenizer: PreTrainedTokenizerBase,  # its chat template renders both message lists
                     count: Callable[[str], int], received: list[Any], sent: list[Any]) -> int:
    """Tokens of ``received`` minus ``sent``, each rendered by the tokenizer's own chat template with the
    generation prompt (tools left out: equal on both sides): what an upstream serving that template and tokenizer
    bills less. The tokenizer splits its input at its special tokens first (``interp.data.render``'s rule), so
    the pieces between them that both renders share cancel and only the differing ones are counted (``count``:
    the session's memory of counted texts); a request costs its edited pieces, not the history."""
    texts = [str(tokenizer.apply_chat_template(m, tokenize=False, add_generation_prompt=True))
             for m in (received, sent)]
    decoder = getattr(tokenizer, "added_tokens_decoder", {})
    specials = sorted({decoder[i].content for i in _split_tokens(tokenizer)}, key=len, reverse=True)
    if not specials:
        return count(texts[0]) - count(texts[1])
    pattern = re.compile("(" + "|".join(map(re.escape, specials)) + ")")
    a, b = (Counter(piece for piece in pattern.split(t) if piece) for t in texts)
    special = set(specials)

    def size(piece: str) -> int:
        return 1 if piece in special else count(piece)

    return sum(size(p) * k for p, k in (a - b).items()) - sum(size(p) * k for p, k in (b - a).items())


def direct_removal(tokenizer: PreTrainedTokenizerBase | None,  # its chat template renders both; None: unknown
                   count: Callable[[str], int] | None, received: list[Any], sent: list[Any],
                   opaque: tuple[str, ...] = (), render: bool = True) -> tuple[int | None, str]:
    """(removed tokens, ``removed_measure``) of one request: 0 when nothing changed; with ``render`` (chat
    completions) the chat-template render's tokens of the messages received minus of those sent
    (:func:`rendered_removal`); else, or when the template cannot render them, the tokens of the strings removed
    minus those added, those under an ``opaque`` key (signatures, encrypted reasoning: not text the model reads)
    left out; None (unknown) without a tokenizer."""
    if received == sent:
        return 0, "unedited"
    if tokenizer is None:
        return None, "unknown"
    counter = count or (lambda text: len(tokenizer(text, add_special_tokens=False)["input_ids"]))
    if render and getattr(tokenizer, "chat_template", None):
        try:
            return rendered_removal(tokenizer, counter, received, sent), "template"
        except Exception:  # noqa: BLE001  a template refusing the agent's message shapes: the strings instead
            pass
    kept, added = {id(m) for m in sent}, {id(m) for m in received}
    return (sum(counter(s) for m in received if id(m) not in kept for s in _strings(m, opaque))
            - sum(counter(s) for m in sent if id(m) not in added for s in _strings(m, opaque))), "strings"


def _strings(value: Any, opaque: tuple[str, ...] = ()) -> list[str]:
    """The strings inside a JSON value (a message's texts), those under an ``opaque`` key left out."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for k, v in value.items() if k not in opaque for s in _strings(v, opaque)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v, opaque)]
    return []


def _removed(row: Mapping[str, Any]) -> int | None:
    """A row's direct removal: 0 for a request forwarded unedited (whatever was logged), None when unknown."""
    if not row["edited"]:
        return 0
    return row["removed_tokens"]


def premise_flags(a_rows: list[dict[str, Any]], b_rows: list[dict[str, Any]], session: str) -> list[dict[str, Any]]:
    """Why one task's decomposition cannot be trusted (``flags`` of ``PAIRED_FIELDS``): an edited request of
    unknown removal; or a phantom removal: the first request of run B that removed tokens was billed exactly the
    prompt tokens of run A's same request although every earlier request agreed (the upstream did not see the
    removal, e.g. it drops ``reasoning_content`` before templating)."""
    flags = []
    unknown = [r["request"] for r in b_rows if _removed(r) is None]
    if unknown:
        flags.append({"session": session, "kind": "unknown_removal",
                      "detail": f"requests {unknown[:5]} were edited but logged without a tokenizer (removed_tokens "
                                "null): run interp serve with --tokenizer (the upstream's model)"})
    for k, r in enumerate(b_rows):
        removed = _removed(r)
        if not removed:
            continue
        agreed = k < len(a_rows) and all(a_rows[j]["prompt_tokens"] == b_rows[j]["prompt_tokens"] for j in range(k))
        if agreed and a_rows[k]["prompt_tokens"] == r["prompt_tokens"]:
            flags.append({"session": session, "kind": "phantom_removal",
                          "detail": f"request {r['request']} removed {removed} tokens but was billed the same "
                                    f"{r['prompt_tokens']} prompt tokens as the run without the policy: the upstream "
                                    "never saw the removal (measure it with --tokenizer of the upstream's model)"})
        break
    return flags


def token_kinds(rows: list[dict[str, Any]]) -> dict[str, float]:
    """Token sums by billing kind over answered requests: uncached input (prompt - cache read - cache write),
    cache read, cache write, output."""
    cached = sum(r["cached_tokens"] or 0 for r in rows)
    written = sum(r["cache_write_tokens"] or 0 for r in rows)
    prompt = sum(r["prompt_tokens"] for r in rows)
    return {"uncached_input": float(prompt - cached - written), "cache_read": float(cached),
            "cache_write": float(written), "output": float(sum(r["completion_tokens"] for r in rows))}


def run_cost(rows: list[dict[str, Any]], prices: Mapping[str, float]) -> dict[str, float]:
    """Token sums of answered requests (:func:`token_kinds`) and their cost (USD) under ``prices`` (per million
    tokens)."""
    tokens = token_kinds(rows)
    return {**{f"{k}_tokens": v for k, v in tokens.items()},
            "cost_usd": sum(tokens[k] * prices[k] for k in PRICE_KEYS) / 1e6}


def _tasks(rows: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """A run's requests by session, each session's in request order."""
    by: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by.setdefault(r["session"], []).append(r)
    return {s: sorted(rs, key=lambda r: r["request"]) for s, rs in by.items()}


def paired_document(base: Path, compressed: Path, prices: Mapping[str, float] | None = None, *, n_boot: int,
                    seed: int = 0) -> dict[str, Any]:
    """Paired live runs (module docstring): per task and in total, the decomposition of the token change, the
    amplification factor and saving ratio with task-bootstrap CIs (null, with ``refused`` saying why, when a
    task's premise fails: ``premise_flags``), and each run's cost under ``prices``."""
    a_rows, b_rows = answered(read_requests(base), base), answered(read_requests(compressed), compressed)
    b_policy = {r["policy"] for r in b_rows}
    a_by, b_by = _tasks(a_rows), _tasks(b_rows)
    both = [s for s in a_by if s in b_by]
    stray = sorted(s for s in both if all(r["n_steps"] == 0 for r in a_by[s] + b_by[s]))
    matched = [s for s in both if s not in stray]
    if not matched:
        raise ValueError(f"paired runs: no agent run (a session with a completed step) is in both {base} and "
                         f"{compressed}")
    per_task, flags = [], []
    sums = dict.fromkeys(("total_change", "direct_change", "request_count_change", "context_change"), 0.0)
    for s in matched:
        t_a = sum(r["prompt_tokens"] + r["completion_tokens"] for r in a_by[s])
        t_b = sum(r["prompt_tokens"] + r["completion_tokens"] for r in b_by[s])
        mine = premise_flags(a_by[s], b_by[s], s)
        flags += mine
        d = sum(_removed(r) or 0 for r in b_by[s])
        parts = decomposition(t_a, len(a_by[s]), t_b, t_b + d, len(b_by[s]))
        per_task.append({"session": s, "base_tokens": t_a, "base_requests": len(a_by[s]), "compressed_tokens": t_b,
                         "compressed_requests": len(b_by[s]), "removed_tokens": d,
                         **{k: float(v) for k, v in parts.items()},
                         "amplification": abs(float(parts["total_change"])) / d if d > 0 and not mine else None})
        sums = {k: sums[k] + float(parts[k]) for k in sums}
    total = np.array([r["total_change"] for r in per_task])
    removal = np.array([float(r["removed_tokens"]) for r in per_task])
    groups = np.array([r["session"] for r in per_task])
    removed = float(removal.sum())
    kinds = sorted({f["kind"] for f in flags})
    refused = (f"the decomposition's premise does not hold ({', '.join(kinds)} in {len({f['session'] for f in flags})}"
               " task(s)): the direct removal is not what the upstream billed" if flags else None)
    ok = refused is None and removed > 0
    doc: dict[str, Any] = {
        "policy": ",".join(sorted(b_policy)), "measure": "prompt + completion tokens as the upstream reported them",
        "removed_measure": sorted({r["removed_measure"] for r in b_rows
                                   if r["edited"] and r["removed_tokens"] is not None}),
        "n_tasks": len(per_task), "unmatched": sorted(set(a_by) ^ set(b_by)), "stray": stray, "totals": sums,
        "flags": flags, "refused": refused,
        "amplification": abs(sums["total_change"]) / removed if ok else None,
        "amplification_ci": _ratio_ci(total, removal, groups, n_boot, seed, None) if ok else None,
        "saving_ratio": -sums["total_change"] / removed if ok else None,
        "saving_ratio_ci": _ratio_ci(total, removal, groups, n_boot, seed, -1.0) if ok else None, "n_boot": n_boot,
        "per_task": per_task, "prices": dict(prices) if prices else None, "cost": None}
    if prices:
        keep = set(matched)
        doc["cost"] = {"base": run_cost([r for r in a_rows if r["session"] in keep], prices),
                       "compressed": run_cost([r for r in b_rows if r["session"] in keep], prices)}
    return doc


def write_paired(base: Path, compressed: Path, out: Path, prices: Mapping[str, float] | None = None, *,
                 config: object, prices_file: Path | None = None) -> dict[str, Any]:
    """:func:`paired_document` written to ``out/paired.json`` (``PAIRED_FIELDS``) with its record (``config``:
    the command's; the two request logs and the price table hashed as inputs); the document."""
    doc = paired_document(base, compressed, prices, n_boot=N_BOOT)
    doc.update(record(config, inputs={"base": Path(base) / "requests.jsonl",
                                      "compressed": Path(compressed) / "requests.jsonl", "prices": prices_file}))
    Path(out).mkdir(parents=True, exist_ok=True)
    atomic_write_json(Path(out) / "paired.json", {"schema": schema_dict(PAIRED_FIELDS), **doc})
    return doc


def paired_line(doc: Mapping[str, Any]) -> str:
    """The summary of a paired document: the decomposition, and the amplification or why it is withheld."""
    t = doc["totals"]
    amp = ("-" if doc["amplification"] is None else f"{doc['amplification']:.2f} {doc['amplification_ci']}")
    line = (f"paired live runs ({doc['policy']}, {doc['n_tasks']} tasks): total change {t['total_change']:+,.0f} = "
            f"direct {t['direct_change']:+,.0f} + requests {t['request_count_change']:+,.0f} + context "
            f"{t['context_change']:+,.0f}; amplification {amp}")
    if doc["refused"]:
        line += f"\nREFUSED: {doc['refused']}; " + "; ".join(f"{f['session']}: {f['detail']}" for f in doc["flags"][:3])
    if doc["stray"]:
        line += f"\n{len(doc['stray'])} one-request session(s) in both runs not paired as tasks (stray)"
    return line

