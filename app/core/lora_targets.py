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
take more than `MATCH_BUDGET` steps over the model's names. A step bound for one name: the matcher tries each line
through the expression (one choice at each alternative) in turn, and along a line the ways its repeats can share the
name's characters (at most the product of their ranges, and at most C(n + k, k) for k repeats over n characters); the
bound is the sum over the lines, so that ``.*mlp\\.(gate|up)_proj|.*attn\\.[qv]_proj`` counts three lines of one repeat.
"""

from __future__ import annotations

import importlib
import re
from dataclasses import dataclass
from functools import lru_cache
from math import comb, prod
from typing import Any, Final

from app.core.errors import DomainError
from app.core.families import ModulePaths

# The standard library's own parser of expressions and its opcodes (re._parser, re._constants since Python 3.11), which
# have no type stubs.
_parser: Any = importlib.import_module("re._parser")
sre: Any = importlib.import_module("re._constants")

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


# Beyond this many distinct lines (by their repeats), lines are counted together with every repeat of any of them,
# which only raises the bound.
MAX_LINE_KINDS: Final = 1_000

Lines = dict[tuple[tuple[int, int], ...], int]  # the repeats' ranges along a line: how many lines have them


@dataclass(frozen=True)
class Shape:
    """What bounds an expression's backtracking: its lines (one choice at each alternative) counted by the ranges
    (least, most) of the repeats along them, and its look-arounds, each bounded on its own: one ahead of any choice
    runs once (a full match starts at the first character only), any other wherever the match reaches it."""

    lines: tuple[tuple[tuple[tuple[int, int], ...], int], ...]
    lookarounds: tuple[Shape, ...] = ()
    leading: tuple[Shape, ...] = ()

    def steps(self, length: int) -> int:
        """The bound on the paths a match against a name of `length` characters can try."""
        line = sum(count * _repeat_ways(repeats, length) for repeats, count in self.lines)
        once = sum(look.steps(length) for look in self.leading)
        return line * prod(look.steps(length) for look in self.lookarounds) + once


def _repeat_ways(repeats: tuple[tuple[int, int], ...], length: int) -> int:
    """The ways repeats in one line can share `length` characters."""
    ranges = [max(0, min(most, length) - least) + 1 for least, most in repeats]
    return min(prod(ranges), comb(length + len(ranges), len(ranges)))


def _then(before: Lines, after: Lines) -> Lines:
    """The lines of one part followed by another's."""
    out: Lines = {}
    for first, count in before.items():
        for second, more in after.items():
            key = tuple(sorted(first + second))
            out[key] = out.get(key, 0) + count * more
    return _capped(out)


def _either(branches: list[Lines]) -> Lines:
    """The lines of alternatives: each branch's, side by side."""
    out: Lines = {}
    for lines in branches:
        for key, count in lines.items():
            out[key] = out.get(key, 0) + count
    return _capped(out)


def _capped(lines: Lines) -> Lines:
    """At most MAX_LINE_KINDS kinds of line: past that, every line counted with the repeats of all of them (each range
    as often as the line that has it most often: no more repeats than the expression holds)."""
    if len(lines) <= MAX_LINE_KINDS:
        return lines
    most: dict[tuple[int, int], int] = {}
    for key in lines:
        for repeat in set(key):
            most[repeat] = max(most.get(repeat, 0), key.count(repeat))
    return {tuple(sorted(repeat for repeat, times in most.items() for _ in range(times))): sum(lines.values())}


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
    """The shape of a parsed sequence: its lines, its look-arounds apart."""
    lines: Lines = {(): 1}
    lookarounds: list[Shape] = []
    leading: list[Shape] = []
    for op, value in items:
        if op in (sre.GROUPREF, sre.GROUPREF_EXISTS):
            raise DomainError(FIELD, "back-references to a group are not accepted in a regular expression")
        parts: list[Shape] = []
        if op is sre.BRANCH:
            parts = [_walk(list(branch)) for branch in value[1]]
            lines = _then(lines, _either([dict(part.lines) for part in parts]))
        elif op in _REPEATS:
            least, most, body = value
            _repeatable(body)
            lines = _then(lines, {((least, most),): 1})
        elif op in (sre.SUBPATTERN, sre.ATOMIC_GROUP):
            parts = [_walk(list(value[3] if op is sre.SUBPATTERN else value))]
            lines = _then(lines, dict(parts[0].lines))
        elif op in (sre.ASSERT, sre.ASSERT_NOT):
            ahead = top and lines == {(): 1} and not lookarounds
            (leading if ahead else lookarounds).append(_walk(list(value[1])))
        for part in parts:
            lookarounds += part.lookarounds
    return Shape(tuple(lines.items()), tuple(lookarounds), tuple(leading))


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
