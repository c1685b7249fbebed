"""YAML as accelerate and axolotl read it: PyYAML's safe loader, behind a thin guard.

Both frameworks read their files with PyYAML's ``safe_load`` (YAML 1.1), so values are what it gives:
``yes``/``no``/``on``/``off`` are booleans, ``~`` and an empty value are null, a float needs a dot (``2e-5`` stays
a string), ``010`` is octal. The document is composed here from the parser's events with a stack, not by
PyYAML's recursive composer, so that each refusal comes, with its line, before anything large is built:
anchors and aliases (``&``, ``*``), explicit tags (``!!python/...``, ``!x``), nesting deeper than `MAX_DEPTH`,
a duplicate key (PyYAML would keep the last), a key that is empty or a collection, a second document.
A key that PyYAML would read as a number or a boolean keeps its text: configuration keys are names.

Nothing here is evaluated: a value is a string, a number, a boolean, null, a date, a list or a dict.
"""

from __future__ import annotations

from typing import Any, Final

import yaml  # type: ignore[import-untyped]

from app.core import DomainError

MAX_DEPTH: Final = 32  # lists and mappings inside one another, the top one included, as for JSON bodies

_Base = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's parser where the wheel bundles it
_RESOLVER: Final = yaml.resolver.Resolver()
_CONSTRUCTOR: Final = yaml.constructor.SafeConstructor()
_PLAIN: Final = (True, False)  # a ScalarEvent's `implicit` for a plain scalar
_KINDS: Final = {"tag:yaml.org,2002:int": "an integer", "tag:yaml.org,2002:float": "a float",
                 "tag:yaml.org,2002:timestamp": "a date"}


class YamlError(Exception):
    def __init__(self, line: int, message: str) -> None:
        super().__init__(f"line {line}: {message}")
        self.line = line


def loads(text: str, field: str = "text") -> Any:
    """The value a YAML text holds, or DomainError at `field` saying which line is wrong and why."""
    try:
        return _load(text)
    except YamlError as error:
        raise DomainError(field, f"is not YAML trainmem reads: {error}") from None
    except yaml.MarkedYAMLError as error:
        raise DomainError(field, f"is not YAML trainmem reads: {_describe(error, text)}") from None
    except yaml.reader.ReaderError as error:
        raise DomainError(field, f"is not YAML trainmem reads: line {_line_at(text, error.position)}: "
                                 f"{error.reason} (#x{error.character:04x})") from None
    except UnicodeEncodeError as error:  # libyaml takes UTF-8: a lone surrogate cannot be encoded
        raise DomainError(field, f"is not YAML trainmem reads: line {_line_at(text, error.start)}: "
                                 "a character that is not text") from None


def resolve_plain(text: str) -> Any:
    """A plain (unquoted) scalar as PyYAML's safe_load resolves it; DomainError if it cannot construct it."""
    try:
        return _scalar(text, _PLAIN, None)
    except YamlError as error:
        raise DomainError("text", str(error)) from None


def _load(text: str) -> Any:
    loader = _Loader(text)
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


class _Frame:
    """A list or mapping being filled; a mapping holds the key whose value is still to come (keys are text)."""

    __slots__ = ("value", "key")

    def __init__(self, value: list[Any] | dict[str, Any]) -> None:
        self.value: list[Any] | dict[str, Any] = value
        self.key: str | None = None


class _Guard:
    """The checks, over any of PyYAML's loaders: its parser's events in, a plain value out."""

    get_event: Any
    check_event: Any

    def get_single_data(self) -> Any:
        """The one document's value, composed from the parser's events without recursion."""
        self.get_event()  # StreamStartEvent
        if self.check_event(yaml.StreamEndEvent):
            return None
        self.get_event()  # DocumentStartEvent
        value = self.compose_value()
        self.get_event()  # DocumentEndEvent
        if not self.check_event(yaml.StreamEndEvent):
            raise YamlError(_line(self.get_event()), "only one YAML document is read")
        return value

    def compose_value(self) -> Any:
        stack: list[_Frame] = []
        while True:
            event = self.get_event()
            _refuse_indicators(event)
            keyless = _keyless(stack)
            if isinstance(event, yaml.SequenceStartEvent | yaml.MappingStartEvent):
                stack.append(_opened(event, keyless, len(stack)))
                continue
            if isinstance(event, yaml.CollectionEndEvent):
                value = stack.pop().value
            elif keyless is not None:
                stack[-1].key = _key(event, keyless)
                continue
            else:
                value = _scalar(event.value, event.implicit, event)
            if not stack:
                return value
            _place(stack[-1], value)


class _Loader(_Guard, _Base):  # type: ignore[misc, valid-type]
    pass


def _keyless(stack: list[_Frame]) -> dict[str, Any] | None:
    """The innermost mapping when it waits for a key, else None."""
    top = stack[-1] if stack else None
    return top.value if top is not None and isinstance(top.value, dict) and top.key is None else None


def _opened(event: yaml.Event, keyless: dict[str, Any] | None, depth: int) -> _Frame:
    """A list or mapping begun at `depth`: never a key, never deeper than MAX_DEPTH."""
    if keyless is not None:
        raise YamlError(_line(event), "a key must be a name, not a list or a mapping")
    if depth >= MAX_DEPTH:
        raise YamlError(_line(event), f"nests deeper than {MAX_DEPTH} levels")
    return _Frame([] if isinstance(event, yaml.SequenceStartEvent) else {})


def _place(frame: _Frame, value: Any) -> None:
    if isinstance(frame.value, list):
        frame.value.append(value)
    elif frame.key is not None:
        frame.value[frame.key] = value
        frame.key = None


def _refuse_indicators(event: yaml.Event) -> None:
    if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
        raise YamlError(_line(event), "anchors and aliases (&, *) are not read; write the value out")
    if getattr(event, "tag", None) is not None:
        raise YamlError(_line(event), f"tags ({event.tag}) are not read")


def _key(event: yaml.ScalarEvent, mapping: dict[str, Any]) -> str:
    if event.value == "" and event.implicit[0]:
        raise YamlError(_line(event), "a key is empty")
    value = _scalar(event.value, event.implicit, event)
    key = value if isinstance(value, str) else event.value
    if key in mapping:
        raise YamlError(_line(event), f"duplicate key {key!r}")
    return key


def _scalar(text: str, implicit: tuple[bool, bool], event: yaml.ScalarEvent | None) -> Any:
    """A scalar's value by PyYAML's implicit resolvers and safe constructors."""
    tag = _RESOLVER.resolve(yaml.ScalarNode, text, implicit)
    mark = event.start_mark if event is not None else None
    node = yaml.ScalarNode(tag, text, mark, mark)
    construct = _CONSTRUCTOR.yaml_constructors.get(tag, _CONSTRUCTOR.yaml_constructors[None])
    try:
        return construct(_CONSTRUCTOR, node)
    except yaml.constructor.ConstructorError as error:
        raise YamlError(_line(event), error.problem) from None
    except (ValueError, OverflowError) as error:  # an integer over Python's 4,300 digits, a 13th month
        shown = text if len(text) <= 40 else text[:40] + "..."
        reason = str(error).split(";")[0]  # not Python's hint to raise its digit limit
        kind = _KINDS.get(tag, tag)
        raise YamlError(_line(event), f"{shown!r} reads as {kind} but cannot be one "
                                      f"({reason}); quote it if it is text") from None


def _line(event: yaml.Event | None) -> int:
    return event.start_mark.line + 1 if event is not None and event.start_mark is not None else 1


def _line_at(text: str, position: int) -> int:
    return text.count("\n", 0, position) + 1


def _describe(error: yaml.MarkedYAMLError, text: str) -> str:
    mark = error.problem_mark or error.context_mark
    where = f"line {mark.line + 1}: " if mark is not None else ""
    context = f"{error.context}: " if error.context else ""
    lines = text.split("\n") if mark is not None and "\t" in text else []
    at_tab = mark is not None and mark.line < len(lines) and lines[mark.line][mark.column:mark.column + 1] == "\t"
    return f"{where}{context}{error.problem}" + ("; a tab cannot indent YAML, use spaces" if at_tab else "")
