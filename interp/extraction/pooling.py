"""Named pooling rules: which token positions of a rendered prompt a feature averages over.

A rule maps a :class:`~interp.data.render.Rendered` prompt to the positions it
pools (a mean over them; ``last`` is the single boundary token). Add a rule by
adding a function to ``RULES`` (or a parametrised prefix to ``PARAM_RULES``);
:func:`parse_pooling` is the one parser of rule names (``ExtractConfig`` validates with it).

| rule                     | positions                                              |
|--------------------------|--------------------------------------------------------|
| ``last``                 | the boundary token (last token of the prompt)          |
| ``mean_last:N``          | the last N tokens                                      |
| ``mean_latest_step``     | tokens of step b (its reasoning, action, observation)  |
| ``mean_reasoning``       | every reasoning-block token still present              |
| ``mean_generation_prompt`` | the trailing template glue that opens the next turn  |

**Empty scope.** A rule that selects no token yields the zero vector and a
pooled count of 0 (``pool_count.<rule>`` in the store's manifest), never NaN
and never an error: ``mean_reasoning`` when no reasoning token is in the
render (every block deleted, or steps 1..b all acted without reasoning; a
step without reasoning adds no token), ``mean_latest_step`` when step b
rendered no piece of its own (an empty text action without reasoning or
observation). The row stays in the store; an analysis that must not read the
zero vector as a feature drops rows with ``pool_count.<rule> == 0``.
"""

from __future__ import annotations

from collections.abc import Callable

from interp.data.render import Rendered


def _last(r: Rendered) -> list[int]:
    return [r.n_tokens - 1]


def _latest_step(r: Rendered) -> list[int]:
    return [i for s in r.spans(step=r.boundary) for i in range(s.start, s.end)] if r.boundary else []


def _reasoning(r: Rendered) -> list[int]:
    return [i for s in r.spans("reasoning_block") for i in range(s.start, s.end)]


def _generation_prompt(r: Rendered) -> list[int]:
    return list(range(r.generation_prompt_start(), r.n_tokens))


def _mean_last(n: int) -> Callable[[Rendered], list[int]]:
    if n < 1:
        raise ValueError(f"mean_last:N needs N >= 1, got {n}")
    return lambda r: list(range(max(0, r.n_tokens - n), r.n_tokens))


RULES: dict[str, Callable[[Rendered], list[int]]] = {
    "last": _last,
    "mean_latest_step": _latest_step,
    "mean_reasoning": _reasoning,
    "mean_generation_prompt": _generation_prompt,
}
PARAM_RULES: dict[str, Callable[[int], Callable[[Rendered], list[int]]]] = {"mean_last": _mean_last}


def parse_pooling(rule: str) -> Callable[[Rendered], list[int]]:
    """The position function of ``rule`` (see the module table); ValueError naming the known rules."""
    name, _, arg = rule.partition(":") if isinstance(rule, str) else ("", "", "")
    if name in RULES and not arg:
        return RULES[name]
    if name in PARAM_RULES and arg.isdigit():
        return PARAM_RULES[name](int(arg))
    known = list(RULES) + [f"{p}:N" for p in PARAM_RULES]
    raise ValueError(f"unknown pooling rule {rule!r}; known: {', '.join(known)}")


def pooling_positions(rule: str, rendered: Rendered) -> list[int]:
    """Positions that ``rule`` pools in ``rendered`` (see the module table)."""
    return parse_pooling(rule)(rendered)
