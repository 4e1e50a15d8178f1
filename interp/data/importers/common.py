"""What every importer shares: the run context, problems with a field path, and the text rules.

An importer is a function ``convert(record, ctx) -> dict`` from one run as the
framework wrote it (a parsed JSON value) to one trajectory record (the shape of
``docs/reference/importers.md``). It raises :class:`RunProblem` naming the field of the
*input* record (``messages[3].tool_calls[0].function.arguments``) when the run
cannot be converted, and counts what it leaves out in ``ctx.dropped`` (shown in
the import summary). The text rules below are the one home of choices that
several formats share:

* content given as a list of parts keeps the text parts, joined with ``"\\n"``
  (:data:`PART_JOIN`); other parts (images, audio, documents) are dropped and counted;
* several reasoning pieces of one turn (thinking blocks, ``reasoning_content``
  and ``<think>`` sections) are joined with ``"\\n\\n"``, so each stays a
  reasoning block of its own;
* tool-call arguments given as a JSON string are parsed; the result must be a
  JSON object (an empty string is ``{}``);
* ``<think>...</think>`` sections are cut out of message text (:func:`split_think`);
* provider reasoning fields are read in one place (:func:`provider_reasoning`):
  ``reasoning_content``, ``reasoning``, ``reasoning_details``, ``thinking_blocks``
  (top level or in ``raw_data``, as tau2-bench and LiteLLM write them);
* nothing is lost silently: every field of a message that the format does not
  map is counted by its path (``messages[].timestamp``), a field the format
  does not know at all is counted as ``(unknown)`` and, when it holds text, is
  a problem under ``--strict`` (:meth:`RunContext.unmapped`); a ``null``
  turned into an empty text is counted too (:meth:`RunContext.null`).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

PART_JOIN = "\n"  # between the text parts of one content list
TEXT_PARTS = ("text", "input_text", "output_text")  # part types that hold text (the last two: OpenAI Responses)
REASONING_JOIN = "\n\n"  # between reasoning pieces of one turn: each stays a block
DEFAULT_PARAMETERS: dict[str, Any] = {"type": "object", "properties": {}}
ID_FIELDS = ("task_id", "instance_id", "id")  # a run's own id, first found wins
# content blocks that carry a turn's calls and results in Anthropic's format (read by that importer only): met by
# another format, the run is refused (its calls would be lost); thinking blocks are counted, a problem under --strict
TURN_PARTS = frozenset({"tool_use", "tool_result"})
# content parts that hold media, not text the trajectory could keep (their data may be a base64 or URL string)
MEDIA_PARTS = frozenset({"image", "image_url", "input_image", "audio", "input_audio", "file", "input_file",
                         "document", "video", "video_url"})


class RunProblem(ValueError):
    """One run cannot be converted: ``where`` is the field path in the input record."""

    def __init__(self, where: str, message: str):
        self.where, self.message = where, message
        super().__init__(f"{where}: {message}")


@dataclass
class RunContext:
    """Where a run comes from, the defaults for what it lacks, and what its conversion dropped."""

    file: str
    line: int
    stem: str  # the input file's name without suffix: default task id (with the line for multi-run files)
    single: bool = False  # the file holds this one run (a .traj file): the task id is the stem alone
    domain: str | None = None  # --domain: overrides the run's own and the format's default
    id_from: str | None = None  # --id-from: dotted path of the run's field that is its task id
    dropped: Counter = field(default_factory=Counter)
    dropped_text: Counter = field(default_factory=Counter)  # dropped fields that held text (problems under strict)

    def task_id(self, record: object) -> str:
        """The run's ``--id-from`` field, else its own id (``task_id``, ``instance_id`` or ``id``), else one made
        from the file and line."""
        if self.id_from is not None:
            value: Any = record
            for key in self.id_from.split("."):
                value = value.get(key) if isinstance(value, Mapping) else None
            if not isinstance(value, (str, int)) or isinstance(value, bool) or not str(value):
                raise RunProblem(self.id_from, "--id-from: the run has no such field holding a string or integer")
            return str(value)
        if isinstance(record, Mapping):
            for key in ID_FIELDS:
                if isinstance(record.get(key), (str, int)) and str(record[key]):
                    return str(record[key])
        return self.stem if self.single else f"{self.stem}-{self.line}"

    def domain_of(self, record: object, default: str) -> str:
        """``--domain``, else the run's ``domain`` field, else the format's default."""
        if self.domain:
            return self.domain
        own = record.get("domain") if isinstance(record, Mapping) else None
        return own if isinstance(own, str) and own else default

    def drop(self, what: str, n: int = 1) -> None:
        """Count something the trajectory format does not keep (listed in the summary)."""
        self.dropped[what] += n

    def unmapped(self, obj: Mapping[str, Any], where: str, used: frozenset[str] | set[str],
                 known: frozenset[str] | set[str]) -> None:
        """Count every field of ``obj`` (at input path ``where``) outside ``used``: by path when the format
        documents dropping it (``known``), as ``(unknown)`` otherwise (remembered when it holds text)."""
        for key, value in obj.items():
            if key in used or value is None or value == "" or value == [] or value == {}:
                continue
            path = f"{field_pattern(where)}.{key}"
            if key in known:
                self.drop(path)
            else:
                self.drop(f"{path} (unknown)")
                if holds_text(value):
                    self.dropped_text[path] += 1

    def drop_part(self, part: Mapping[str, Any], where: str) -> None:
        """Count a content part the format does not keep (``{type} content parts``); one that is not media
        (:data:`MEDIA_PARTS`) and holds text, such as a ``thinking`` block read as the wrong format, is also
        remembered as a lost text (a problem under ``--strict``); a block of Anthropic's calls or results
        (:data:`TURN_PARTS`) refuses the run."""
        kind = part.get("type", "untyped")
        if kind in TURN_PARTS:
            raise RunProblem(where, f"a {kind!r} content part: a block of Anthropic's turn structure, which this "
                                    "format does not read (its calls or results would be lost); import "
                                    "with anthropic or auto")
        self.drop(f"{kind} content parts")
        if kind not in MEDIA_PARTS and holds_text(part):
            self.dropped_text[f"{field_pattern(where)} ({kind} part)"] += 1

    def null(self, where: str) -> None:
        """Count a ``null`` the trajectory keeps as an empty text (a tool result, a text action)."""
        self.drop(f"{field_pattern(where)}: null as \"\"")


def object_at(value: object, key: str) -> dict[str, Any]:
    """``value[key]`` when ``value`` is an object holding an object there, else an empty one."""
    inner = value.get(key) if isinstance(value, Mapping) else None
    return dict(inner) if isinstance(inner, Mapping) else {}


def field_pattern(where: str) -> str:
    """A field path with its list indices elided (``messages[3].content`` -> ``messages[].content``)."""
    return re.sub(r"\[\d+\]", "[]", where)


def holds_text(value: object) -> bool:
    """Whether a JSON value holds a non-blank string anywhere inside it."""
    if isinstance(value, str):
        return bool(value.strip())
    if isinstance(value, Mapping):
        return any(holds_text(v) for v in value.values())
    if isinstance(value, list):
        return any(holds_text(v) for v in value)
    return False


REASONING_KEYS = ("reasoning_content", "reasoning", "reasoning_details", "thinking_blocks")


def _response_message(msg: Mapping[str, Any]) -> Mapping[str, Any]:
    """The message of the raw provider response mini-swe-agent keeps in ``extra.response`` (empty when absent)."""
    extra = msg.get("extra")
    response = extra.get("response") if isinstance(extra, Mapping) else None
    choices = response.get("choices") if isinstance(response, Mapping) else None
    first = choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], Mapping) else {}
    message = first.get("message")
    return message if isinstance(message, Mapping) else {}


def provider_reasoning(msg: Mapping[str, Any], where: str, ctx: RunContext) -> tuple[str, set[str]]:
    """``(reasoning, keys read)``: a message's provider reasoning field, the first present of
    :data:`REASONING_KEYS` (``thinking_blocks`` also inside ``raw_data``); encrypted pieces are counted."""
    raw = object_at(msg, "raw_data")
    response = _response_message(msg)
    for key in REASONING_KEYS:
        value, at = msg.get(key), f"{where}.{key}"
        if value is None and key == "thinking_blocks":
            value, at = raw.get(key), f"{where}.raw_data.{key}"
        if value is None and response.get(key) is not None:  # kept only in the raw response (mini-swe-agent)
            value, at = response[key], f"{where}.extra.response.choices[0].message.{key}"
        if value is None or value == [] or value == "":
            continue
        if isinstance(value, str):
            return value, {key}
        expect(value, list, at, "a string or a list of reasoning parts")
        pieces = []
        for i, part in enumerate(value):
            expect(part, dict, f"{at}[{i}]", "a reasoning part object")
            text = part.get("thinking", part.get("text", part.get("summary")))
            if isinstance(text, str):
                pieces.append(text)
            else:  # redacted_thinking, reasoning.encrypted: no readable text
                ctx.drop(f"{field_pattern(at)}[] ({part.get('type', 'untyped')}, no text)")
        return join_reasoning(pieces), {key}
    return "", set()


def expect(value: object, kind: type | tuple[type, ...], where: str,
           what: str) -> Any:  # Any: ``value``, of the type ``kind`` checked at run time
    """``value`` if it has type ``kind``; a :class:`RunProblem` naming ``where`` otherwise."""
    if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
        raise RunProblem(where, f"expected {what}, got {_json_type(value)}")
    return value


def _json_type(value: Any) -> str:
    names = {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null"}
    return names.get(type(value), "a number" if isinstance(value, (int, float)) else type(value).__name__)


def text_of(content: str | list[Any] | None, where: str, ctx: RunContext) -> str:
    """Text of a message content: a string as is, a list of parts as its text parts joined (others dropped)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    expect(content, list, where, "a string or a list of content parts")
    texts = []
    for i, part in enumerate(content):
        if isinstance(part, str):
            texts.append(part)
            continue
        expect(part, dict, f"{where}[{i}]", "a content part object")
        if part.get("type") in TEXT_PARTS or ("type" not in part and "text" in part):
            texts.append(expect(part.get("text"), str, f"{where}[{i}].text", "a string"))
        else:
            ctx.drop_part(part, f"{where}[{i}]")
    return PART_JOIN.join(texts)


def parse_arguments(raw: Any,  # Any: a JSON value (a string to parse, an object, or a wrong one refused)
                    where: str) -> dict[str, Any]:
    """Tool-call arguments as an object: a JSON string is parsed (``""`` is ``{}``), an object is kept."""
    if raw is None:
        return {}
    if isinstance(raw, str):
        if not raw.strip():
            return {}
        try:
            raw = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise RunProblem(where, f"invalid JSON arguments: {exc.msg} at character {exc.pos + 1} "
                                    f"of {raw[:60]!r}{'...' if len(raw) > 60 else ''}") from None
    if not isinstance(raw, dict):
        raise RunProblem(where, f"arguments must be a JSON object, got {_json_type(raw)}")
    return raw


THINK = re.compile(r"<think>\n?(.*?)\n?</think>\n*", re.DOTALL)


def split_think(text: str) -> tuple[str, str]:
    """``(reasoning, rest)``: the ``<think>`` sections of ``text`` and the text without them.

    One newline inside each tag and the newlines after ``</think>`` are template
    formatting and go; the rest is verbatim. A leading section without
    ``<think>`` (templates that open it in the generation prompt) ends at the
    first ``</think>``; an unclosed ``<think>`` (a cut-off turn) runs to the end.
    """
    if "</think>" in text and "<think>" not in text.split("</think>", 1)[0]:
        head, text = text.split("</think>", 1)
        text = "<think>" + head + "</think>" + text
    if "<think>" in text and "</think>" not in text.rsplit("<think>", 1)[1]:
        text += "</think>"
    pieces = [m.group(1) for m in THINK.finditer(text)]
    return REASONING_JOIN.join(p for p in pieces if p.strip()), THINK.sub("", text)


def join_reasoning(pieces: list[str]) -> str:
    """Reasoning pieces of one turn joined so each stays a block; blank pieces left out."""
    return REASONING_JOIN.join(p for p in pieces if p and p.strip())


def tool_spec(name: object, description: object, parameters: object, where: str) -> dict[str, Any]:
    """One declared tool in the trajectory shape ``{name, description, parameters}``."""
    return {"name": expect(name, str, f"{where}.name", "a tool name string"),
            "description": description if isinstance(description, str) else "",
            "parameters": parameters if isinstance(parameters, dict) else dict(DEFAULT_PARAMETERS)}


def outcome_of(record: object) -> dict[str, Any]:
    """``{reward, success}`` from the run's ``outcome`` object or its top-level ``reward``/``success``."""
    if not isinstance(record, Mapping):
        return {}
    src: Mapping[str, Any] = object_at(record, "outcome") if isinstance(record.get("outcome"), Mapping) else record
    out = {}
    if isinstance(src.get("reward"), (int, float)) and not isinstance(src.get("reward"), bool):
        out["reward"] = src["reward"]
    if isinstance(src.get("success"), bool):
        out["success"] = src["success"]
    return out


def call_action(calls: list[dict[str, Any]]) -> dict[str, Any]:
    """The step action for tool calls: ``{"tool", "arguments"}`` for one, ``{"calls": [...]}`` for several."""
    return calls[0] if len(calls) == 1 else {"calls": calls}


def observation_of(results: list[str | None], where: str) -> str | list[str] | None:
    """The step observation for the results of its calls (None: no result recorded).

    One call: its result or null; several: one string per call, or null when no
    call has a result (a run cut off after the turn). Some but not all answered
    is an error naming the first unanswered call.
    """
    if len(results) == 1:
        return results[0]
    if all(r is None for r in results):
        return None
    missing = [i for i, r in enumerate(results) if r is None]
    if missing:
        raise RunProblem(where, f"no result for parallel call {missing[0]} of {len(results)} "
                                f"(the others have results)")
    return [r for r in results if r is not None]


def metadata_of(record: object, used: set[str]) -> dict[str, Any]:
    """The run's top-level fields the importer did not map, kept under ``metadata`` (passed through)."""
    if not isinstance(record, Mapping):
        return {}
    return {k: v for k, v in record.items() if k not in used}


@dataclass
class _Call:
    id: str | None
    call: dict[str, Any]
    result: str | None = None
    is_error: bool = False


@dataclass
class _Step:
    reasoning: str
    calls: list[_Call]
    text: str | None
    extra: dict[str, Any]
    reply: str | None = None  # the user's answer to a text action
    where: str = ""
    step_observation: str | None = None  # one result for the whole step, not per call (ATIF of Terminus-2)


class ChatSteps:
    """Builds steps from a chat: each assistant turn is one step, tool results and user replies attach to it.

    The rules both chat formats follow (documented per format in ``docs/reference/importers.md``):

    * user text before the first assistant turn is the task (several pieces joined with ``"\\n\\n"``);
      a text-only assistant turn before it (a greeting) is dropped and counted;
    * an assistant turn is one step: its tool calls (several: one parallel
      ``{"calls": [...]}`` action), or its text as a ``{"text"}`` action;
    * a tool result answers the call with its id among the calls still open in
      the latest step (in order when the result carries no id);
    * user text after a text action is that step's observation (the user's
      reply); after tool calls it is dropped and counted.
    """

    def __init__(self, ctx: RunContext):
        self.ctx = ctx
        self.task: list[str] = []
        self.steps: list[_Step] = []
        self.final_text: str | None = None  # a final answer the log writes apart from the turns (mini-swe-agent)

    def user_text(self, text: str) -> None:
        """Text from the user (or the environment speaking as the user)."""
        if not self.steps:
            if text.strip():
                self.task.append(text)
        elif self.steps[-1].text is not None and self.steps[-1].reply is None:
            self.steps[-1].reply = text
        elif text.strip():
            self.ctx.drop("user messages after tool results or a user reply")

    def assistant(self, reasoning: str, text: str, calls: list[tuple[str | None, dict[str, Any]]], where: str,
                  extra: dict[str, Any] | None = None) -> None:
        """One assistant turn: reasoning, visible text and tool calls ``[(id, {"tool", "arguments"})]``.

        With tool calls and no reasoning, the visible text is the step's reasoning
        (the thought a ReAct agent writes before acting); with both, the text is
        kept in the step's ``assistant_text`` field (passed through, not rendered).
        A turn of text alone before any user text (an agent's greeting, as
        tau2-bench opens every chat) precedes the task, so it cannot be a step:
        it is dropped and counted.
        """
        if not self.task and not self.steps and not calls:
            self.ctx.drop("assistant turns before the task (a greeting)")
            return
        extra = dict(extra or {})
        if calls and not reasoning.strip():
            reasoning, text = text, ""
        if calls and text.strip():
            extra["assistant_text"] = text
        self.steps.append(_Step(reasoning=reasoning, calls=[_Call(i, c) for i, c in calls],
                                text=None if calls else text, extra=extra, where=where))

    def step_result(self, result: str) -> None:
        """One result for all the calls of the latest step (a terminal screen after a batch of keystrokes): the
        step's observation, marked ``observation_scope: "step"`` (it answers no call of its own)."""
        self.steps[-1].step_observation = result

    def tool_result(self, call_id: str | None, result: str, where: str, is_error: bool = False) -> None:
        """The result of an open call of the latest step."""
        open_calls = [c for c in self.steps[-1].calls if c.result is None] if self.steps else []
        match = next((c for c in open_calls if call_id is not None and c.id == call_id), None)
        if match is None and call_id is None and open_calls:
            match = open_calls[0]
        if match is None:
            ids = ", ".join(repr(c.id) for c in open_calls) or "none"
            raise RunProblem(where, f"tool result for call id {call_id!r} answers no open call of the preceding "
                                    f"assistant turn (open: {ids})")
        match.result, match.is_error = result, is_error

    def trajectory(self, where: str) -> dict[str, Any]:
        """Task and steps in the trajectory shape (the caller adds the other fields)."""
        if not self.steps:
            raise RunProblem(where, "no assistant turn: a trajectory needs at least one step")
        if not self.task:
            raise RunProblem(where, "no user text before the first assistant turn (the task)")
        if all(not s.calls and not (s.text or "").strip() and not s.reasoning.strip() for s in self.steps):
            raise RunProblem(where, f"every one of the {len(self.steps)} assistant turns converted to an empty step "
                                    "(no reasoning, call or text reached the output; the dropped parts are counted): "
                                    "is the format right?")
        steps = []
        for s in self.steps:
            action: dict[str, Any]
            observation: str | list[str] | None
            if s.calls and s.step_observation is not None:
                action, observation = call_action([c.call for c in s.calls]), s.step_observation
                s.extra["observation_scope"] = "step"
            elif s.calls:
                action = call_action([c.call for c in s.calls])
                observation = observation_of([c.result for c in s.calls], s.where)
                errors = [c.is_error for c in s.calls]
                if any(errors):
                    s.extra["is_error"] = errors[0] if len(errors) == 1 else errors
            else:
                action, observation = {"text": s.text}, s.reply
            steps.append({"reasoning": s.reasoning, "action": action, "observation": observation, **s.extra})
        last = self.steps[-1]
        return {"task": REASONING_JOIN.join(self.task), "steps": steps,
                "final_answer": last.text if last.text is not None else self.final_text}
