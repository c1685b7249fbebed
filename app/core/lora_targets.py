"""LoRA targets given as one string, as peft 0.21 takes them: ``all-linear`` (any case), or a regular expression that
peft full-matches against the qualified name of each of the model's modules (peft/tuners/tuners_utils.py,
`check_target_module_exists`: ``re.fullmatch(target_modules, key)`` through peft/utils/other.py,
`match_target_against_key`; a list instead matches a name exactly or as its ``.``-suffix).

The names are the model's module tree as transformers 5.24 builds it (``model.layers.3.self_attn.q_proj``; the family's
`ModulePaths`). Adapters are modelled alike in every layer, so an expression must select the same linear modules in
each layer; one that selects anything else is refused too: peft refuses a container, a norm or an activation ("Target
module ... is not supported"), and would wrap an embedding or the output layer, whose adapters are not modelled.

The expression is untrusted, and Python's matcher backtracks: it is parsed with the standard library's own parser and
refused before any match when it refers back to a group, repeats a group that holds alternatives or repeats, or could
take more than `MATCH_BUDGET` steps over the model's names. A step bound for one name: the product of the
alternatives' counts, times the ways the repeats can share the name's characters (at most the product of their
ranges, and at most C(n + k, k) for k repeats over n characters).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from math import comb, prod
from re import _constants as sre
from re import _parser
from typing import Any, Final

from app.core.errors import DomainError
from app.core.families import ModulePaths

FIELD: Final = "finetuning.target_modules"
ALL_LINEAR: Final = "all-linear"
MAX_PATTERN_CHARS: Final = 256
# Steps an expression may take over one model's names: the step bound for a name (module docstring) plus a name's
# own cost, about 20 steps (a call of fullmatch against a step of a backtracking match), times the names.
MATCH_BUDGET: Final = 1_000_000
NAME_STEPS: Final = 20

_NAME: Final = re.compile(r"[\w.-]+")
_REPEATS: Final = (sre.MAX_REPEAT, sre.MIN_REPEAT, sre.POSSESSIVE_REPEAT)
_CHARACTERS: Final = (sre.LITERAL, sre.NOT_LITERAL, sre.ANY, sre.IN)


@dataclass(frozen=True)
class Shape:
    """What bounds an expression's backtracking: the product of its alternatives' counts, the ranges (least, most)
    of its repeats, and its look-arounds, each bounded on its own: one ahead of any choice runs once (a full match
    starts at the first character only), any other wherever the match reaches it."""

    alternatives: int
    repeats: tuple[tuple[int, int], ...]
    lookarounds: tuple[Shape, ...] = ()
    leading: tuple[Shape, ...] = ()

    def steps(self, length: int) -> int:
        """The bound on the paths a match against a name of `length` characters can try."""
        ranges = [max(0, min(most, length) - least) + 1 for least, most in self.repeats]
        line = self.alternatives * min(prod(ranges), comb(length + len(ranges), len(ranges)))
        once = sum(look.steps(length) for look in self.leading)
        return line * prod(look.steps(length) for look in self.lookarounds) + once


def is_all_linear(target_modules: str | tuple[str, ...]) -> bool:
    if isinstance(target_modules, str):
        return target_modules.lower() == ALL_LINEAR
    return ALL_LINEAR in target_modules


def targets_from_text(text: str) -> str | list[str]:
    """Targets typed as text (the page, the command line): module names separated by commas or spaces are a list
    (``q_proj, v_proj`` or ``all-linear``); anything else is a regular expression."""
    names = [name for name in re.split(r"[,\s]+", text.strip()) if name]
    if names and all(_NAME.fullmatch(name) for name in names):
        return list(dict.fromkeys(ALL_LINEAR if name.lower() == ALL_LINEAR else name for name in names))
    return text.strip()


def pattern_shape(pattern: str) -> Shape:
    """Parse the expression within its bounds, naming what is refused."""
    if len(pattern) > MAX_PATTERN_CHARS:
        raise DomainError(FIELD, f"a regular expression of at most {MAX_PATTERN_CHARS} characters, got {len(pattern)}")
    try:
        parsed = _parser.parse(pattern)
        re.compile(pattern)
    except (re.error, RecursionError, OverflowError) as error:
        raise DomainError(FIELD, f"is not a regular expression: {error}") from None
    return _walk(list(parsed), top=True)


def _walk(items: list[tuple[Any, Any]], *, top: bool = False) -> Shape:
    """The shape of a parsed sequence: its alternatives and repeats counted as if in one line (which only raises the
    bound), its look-arounds apart."""
    alternatives, repeats = 1, []
    lookarounds: list[Shape] = []
    leading: list[Shape] = []
    for op, value in items:
        inner: list[Any] = []
        if op in (sre.GROUPREF, sre.GROUPREF_EXISTS):
            raise DomainError(FIELD, "back-references to a group are not accepted in a regular expression")
        if op is sre.BRANCH:
            alternatives *= len(value[1])
            inner = value[1]
        elif op in _REPEATS:
            least, most, body = value
            _repeatable(body)
            repeats.append((least, most))
        elif op is sre.SUBPATTERN:
            inner = [value[3]]
        elif op is sre.ATOMIC_GROUP:
            inner = [value]
        elif op in (sre.ASSERT, sre.ASSERT_NOT):
            ahead = top and alternatives == 1 and not repeats and not lookarounds
            (leading if ahead else lookarounds).append(_walk(list(value[1])))
        for sequence in inner:
            shape = _walk(list(sequence))
            alternatives *= shape.alternatives
            repeats += shape.repeats
            lookarounds += shape.lookarounds
    return Shape(alternatives, tuple(repeats), tuple(lookarounds), tuple(leading))


def _repeatable(body: Any) -> None:
    """A repeated part is characters only (no repeat, alternative or look-around inside it), at least one."""
    ops = list(_ops(list(body)))
    if any(op not in _CHARACTERS and op is not sre.AT for op in ops):
        raise DomainError(FIELD, "a repeated group may not hold repeats, alternatives or look-arounds (they can "
                                 "take exponential time); use a character class such as [qv]_proj")
    if not any(op in _CHARACTERS for op in ops):
        raise DomainError(FIELD, "a repeated part must match at least one character")


def _ops(items: list[tuple[Any, Any]]) -> Any:
    for op, value in items:
        if op is sre.SUBPATTERN:
            yield from _ops(list(value[3]))
        else:
            yield op


@dataclass(frozen=True)
class Selection:
    """The layer modules an expression adapts (the same in every layer), by their internal keys (``attn.q``), or why
    it is refused."""

    keys: frozenset[str]
    refusal: str = ""


def select(pattern: str, paths: ModulePaths, modules: tuple[tuple[str, str], ...], layers: int) -> frozenset[str]:
    """The internal keys of the layer modules `pattern` selects, given each one's path in a layer
    (``("attn.q", "self_attn.q_proj")``); refused, naming why, unless it selects the same ones in every layer."""
    selection = _selection(pattern, paths, modules, layers)
    if selection.refusal:
        raise DomainError(FIELD, selection.refusal)
    return selection.keys


@lru_cache(maxsize=64)
def _selection(pattern: str, paths: ModulePaths, modules: tuple[tuple[str, str], ...], layers: int) -> Selection:
    shape = pattern_shape(pattern)
    inner = list(dict.fromkeys([*(path.rsplit(".", 1)[0] for _, path in modules if "." in path), *paths.within]))
    per_layer = len(modules) + len(inner) + 1
    others = _others(paths)
    count = layers * per_layer + len(others)
    longest = max((len(f"{paths.layers}.{layers - 1}.{path}") for path in (*(path for _, path in modules), *inner)),
                  default=0)
    steps = count * (shape.steps(max(longest, *map(len, others))) + NAME_STEPS)
    if steps > MATCH_BUDGET:
        return Selection(frozenset(), f"the expression could take {steps:,} steps over this model's {count:,} module "
                                      f"names, more than the {MATCH_BUDGET:,} allowed: fewer repeats (.*) or "
                                      "alternatives, or name the modules as a list")
    compiled = re.compile(pattern)
    wrong = [name for name in others if compiled.fullmatch(name)]
    first: frozenset[str] | None = None
    for index in range(layers):
        prefix = f"{paths.layers}.{index}"
        wrong += [name for name in (prefix, *(f"{prefix}.{path}" for path in inner)) if compiled.fullmatch(name)]
        if wrong:
            return Selection(frozenset(), f"matches {wrong[0]!r}, which is not one of the layers' linear modules: "
                                          "peft refuses a container, a norm or an activation, and adapters on the "
                                          "embeddings or the output layer are not modelled")
        keys = frozenset(key for key, path in modules if compiled.fullmatch(f"{prefix}.{path}"))
        if first is not None and keys != first:
            return Selection(frozenset(), f"selects {_listed(keys, modules)} in layer {index} but "
                                          f"{_listed(first, modules)} in layer 0: adapters on some layers only are "
                                          "not modelled; select the same modules in every layer")
        first = keys
    if not first:
        example = f"{paths.layers}.0.{modules[0][1]}" if modules else paths.layers
        return Selection(frozenset(), f"matches no linear module of this model (its names read like {example!r})")
    return Selection(first)


def _others(paths: ModulePaths) -> tuple[str, ...]:
    """The names outside the layers: the containers above the layers' list, the list, and the modules beside it."""
    parts = paths.layers.split(".")
    return (*(".".join(parts[:end]) for end in range(1, len(parts) + 1)), *paths.outside)


def _listed(keys: frozenset[str], modules: tuple[tuple[str, str], ...]) -> str:
    named = [path for key, path in modules if key in keys]
    return ", ".join(named) if named else "nothing"
