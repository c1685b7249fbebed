"""A strict subset of YAML, enough for accelerate's and axolotl's configuration files.

Both frameworks read their files with PyYAML's ``safe_load`` (YAML 1.1), so scalars resolve as it
resolves them: ``yes``/``no``/``on``/``off`` are booleans, ``~`` and an empty value are null, a float
needs a dot (``2e-5`` stays a string, ``2.0e-5`` is a float), ``010`` is octal.

Read: block mappings and sequences (a sequence may sit at its key's indentation), flow sequences and
mappings (``[a, b]``, ``{}``, across lines too), plain, single- and double-quoted scalars, literal and
folded block scalars (``|``, ``>``, with ``-``/``+``), comments, one ``---`` document start and a
closing ``...``. Refused with the line it is on: anchors and aliases, tags, complex keys, directives,
tabs in indentation, a second document, duplicate keys, plain scalars continued on the next line,
nesting deeper than `MAX_DEPTH`.

Nothing here is evaluated: a value is only ever a string, a number, a boolean, null, a list or a dict.
"""

from __future__ import annotations

import re
from typing import Any, Final

from app.core import DomainError

MAX_DEPTH: Final = 32

_NULL = re.compile(r"^(?:~|null|Null|NULL|)$")
_BOOL_TRUE = frozenset("yes Yes YES true True TRUE on On ON".split())
_BOOL_FALSE = frozenset("no No NO false False FALSE off Off OFF".split())
_INT_DEC = re.compile(r"^[-+]?(?:0|[1-9][0-9_]*)$")
_INT_OCT = re.compile(r"^[-+]?0[0-7_]+$")
_INT_HEX = re.compile(r"^[-+]?0x[0-9a-fA-F_]+$")
_INT_BIN = re.compile(r"^[-+]?0b[01_]+$")
# PyYAML's float resolver (yaml/resolver.py): digits before the dot, or (unsigned) a digit right after it.
_FLOAT = re.compile(r"^(?:[-+]?[0-9][0-9_]*\.[0-9_]*(?:[eE][-+][0-9]+)?|\.[0-9][0-9_]*(?:[eE][-+][0-9]+)?)$")
_INF = re.compile(r"^[-+]?\.(?:inf|Inf|INF)$")
_NAN = re.compile(r"^\.(?:nan|NaN|NAN)$")
_ESCAPES: Final = {"0": "\0", "a": "\a", "b": "\b", "t": "\t", "\t": "\t", "n": "\n", "v": "\v", "f": "\f",
                   "r": "\r", "e": "\x1b", " ": " ", '"': '"', "/": "/", "\\": "\\", "N": "\x85", "_": "\xa0",
                   "L": "\u2028", "P": "\u2029"}
_HEX_ESCAPES: Final = {"x": 2, "u": 4, "U": 8}
_MAX_NUMBER_CHARS: Final = 40


class YamlError(Exception):
    def __init__(self, line: int, message: str) -> None:
        super().__init__(f"line {line}: {message}")
        self.line = line


def loads(text: str, field: str = "text") -> Any:
    """The value a YAML text holds, or DomainError at `field` saying which line is wrong and why."""
    try:
        return _Parser(text).document()
    except YamlError as error:
        raise DomainError(field, f"is not YAML trainmem reads: {error}") from None


def resolve_plain(text: str) -> Any:
    """A plain (unquoted) scalar as PyYAML's safe_load resolves it."""
    if _NULL.match(text):
        return None
    if text in _BOOL_TRUE:
        return True
    if text in _BOOL_FALSE:
        return False
    if len(text) <= _MAX_NUMBER_CHARS:
        bare = text.replace("_", "")
        if _INT_DEC.match(text):
            return int(bare)
        if _INT_HEX.match(text):
            return int(bare, 16)
        if _INT_BIN.match(text):
            return int(bare, 2)
        if _INT_OCT.match(text):
            return int(bare, 8)
        if _FLOAT.match(text) and any(c.isdigit() for c in text):
            return float(bare)
        if _INF.match(text):
            return float("-inf") if text.startswith("-") else float("inf")
        if _NAN.match(text):
            return float("nan")
    return text


class _Line:
    __slots__ = ("number", "indent", "text")

    def __init__(self, number: int, indent: int, text: str) -> None:
        self.number, self.indent, self.text = number, indent, text


def _content_lines(raw: list[str]) -> list[_Line]:
    lines = []
    for number, line in enumerate(raw, start=1):
        stripped = line.lstrip(" ")
        if not stripped.strip() or stripped.startswith("#"):
            continue
        if stripped[0] == "\t":
            if stripped.lstrip(" \t").startswith("#"):
                continue
            raise YamlError(number, "tabs cannot indent YAML; use spaces")
        lines.append(_Line(number, len(line) - len(stripped), stripped.rstrip()))
    return lines


def _is_sequence_item(text: str) -> bool:
    return text == "-" or text.startswith(("- ", "-\t"))


def _strip_comment(text: str) -> str:
    """Text up to a comment (a '#' at the start or after whitespace), for a plain scalar."""
    match = re.search(r"(?:^|[ \t])#", text)
    return (text[: match.start()] if match else text).rstrip()


def _key_split(text: str) -> tuple[str, int] | None:
    """Where a block mapping entry's key ends: (key text, index after the ':'), or None if not an entry."""
    if text[0] in "\"'":
        end = _quoted_end(text, 0)
        if end is None:
            return None
        rest = text[end:].lstrip(" ")
        if rest.startswith(":") and (len(rest) == 1 or rest[1] in " \t"):
            return text[:end], len(text) - len(rest) + 1
        return None
    if text[0] in "[{#":
        return None
    for match in re.finditer(r":(?=[ \t]|$)", text):
        key = text[: match.start()]
        if re.search(r"[ \t]#", key):
            return None  # the colon is inside a comment
        return key.rstrip(), match.end()
    return None


def _quoted_end(text: str, start: int) -> int | None:
    """Index just past the closing quote of the quoted scalar opening at `start`, or None if unclosed."""
    quote = text[start]
    i = start + 1
    while i < len(text):
        c = text[i]
        if quote == "'" and c == "'":
            if i + 1 < len(text) and text[i + 1] == "'":
                i += 2
                continue
            return i + 1
        if quote == '"':
            if c == "\\":
                i += 2
                continue
            if c == '"':
                return i + 1
        i += 1
    return None


def _unquote(text: str, line: int) -> str:
    body = text[1:-1]
    if text[0] == "'":
        return body.replace("''", "'")
    out, i = [], 0
    while i < len(body):
        c = body[i]
        if c != "\\":
            out.append(c)
            i += 1
            continue
        if i + 1 >= len(body):
            raise YamlError(line, "a backslash ends the double-quoted string")
        code = body[i + 1]
        if code in _ESCAPES:
            out.append(_ESCAPES[code])
            i += 2
        elif code in _HEX_ESCAPES:
            width = _HEX_ESCAPES[code]
            digits = body[i + 2: i + 2 + width]
            if len(digits) != width or not all(d in "0123456789abcdefABCDEF" for d in digits):
                raise YamlError(line, f"bad escape \\{code}{digits}")
            out.append(chr(int(digits, 16)))
            i += 2 + width
        else:
            raise YamlError(line, f"unknown escape \\{code}")
    return "".join(out)


class _Parser:
    def __init__(self, text: str) -> None:
        if text.startswith("\ufeff"):
            text = text[1:]
        self.raw = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
        self.lines = _content_lines(self.raw)
        self.i = 0

    # --- document -------------------------------------------------------------------------------------

    def document(self) -> Any:
        lines = self.lines
        if lines and lines[0].text.startswith("%"):
            raise YamlError(lines[0].number, "directives (%YAML, %TAG) are not read")
        if lines and lines[0].indent == 0 and (lines[0].text == "---" or lines[0].text.startswith("--- ")):
            first = lines[0]
            rest = first.text[3:].strip()
            if rest and not rest.startswith("#"):
                raise YamlError(first.number, "put the document's content on the line after '---'")
            self.i = 1
        end = len(lines)
        for index in range(self.i, len(lines)):
            line = lines[index]
            if line.indent == 0 and (line.text == "---" or line.text.startswith("--- ")):
                raise YamlError(line.number, "only one YAML document is read")
            if line.indent == 0 and (line.text == "..." or line.text.startswith("... ")):
                end = index
                break
        self.lines = lines[:end]
        if self.i >= len(self.lines):
            return None
        value = self.node(self.lines[self.i].indent, 0)
        if self.i < len(self.lines):
            line = self.lines[self.i]
            raise YamlError(line.number, "unexpected indentation")
        return value

    # --- block nodes ------------------------------------------------------------------------------------

    def node(self, indent: int, depth: int) -> Any:
        if depth > MAX_DEPTH:
            raise YamlError(self.lines[self.i].number, f"nests deeper than {MAX_DEPTH} levels")
        line = self.lines[self.i]
        if _is_sequence_item(line.text):
            return self.sequence(line.indent, depth)
        if _key_split(line.text) is not None:
            return self.mapping(line.indent, depth)
        self.i += 1
        value = self.inline(line.text, line, depth)
        self.no_continuation(line)
        return value

    def no_continuation(self, line: _Line) -> None:
        if self.i < len(self.lines) and self.lines[self.i].indent > line.indent:
            nxt = self.lines[self.i]
            raise YamlError(nxt.number, "a value continued on the next line is not read; put it on one line "
                            "or quote it")

    def mapping(self, indent: int, depth: int) -> dict[str, Any]:
        result: dict[str, Any] = {}
        while self.i < len(self.lines):
            line = self.lines[self.i]
            if line.indent < indent:
                break
            if line.indent > indent:
                raise YamlError(line.number, "unexpected indentation")
            if _is_sequence_item(line.text):
                raise YamlError(line.number, "a list item where a key was expected")
            split = _key_split(line.text)
            if split is None:
                raise YamlError(line.number, "expected 'key: value'")
            key_text, after = split
            key = self.key(key_text, line)
            if key in result:
                raise YamlError(line.number, f"duplicate key {key!r}")
            rest = line.text[after:].strip()
            self.i += 1
            result[key] = self.value_after_indicator(rest, line, indent, depth, allow_same_indent_sequence=True)
        return result

    def sequence(self, indent: int, depth: int) -> list[Any]:
        result: list[Any] = []
        while self.i < len(self.lines):
            line = self.lines[self.i]
            if line.indent < indent:
                break
            if line.indent > indent:
                raise YamlError(line.number, "unexpected indentation")
            if not _is_sequence_item(line.text):
                break
            rest = line.text[1:]
            stripped = rest.lstrip(" \t")
            if not stripped or stripped.startswith("#"):
                self.i += 1
                result.append(self.value_after_indicator("", line, indent, depth, allow_same_indent_sequence=False))
                continue
            # The item's content starts on this line: parse it as if it were a line of its own at its column.
            column = indent + 1 + (len(rest) - len(stripped))
            self.lines[self.i] = _Line(line.number, column, stripped)
            result.append(self.node(column, depth + 1))
        return result

    def value_after_indicator(self, rest: str, line: _Line, indent: int, depth: int, *,
                              allow_same_indent_sequence: bool) -> Any:
        """The value after 'key:' or '-': inline on the line, a block scalar, or a block on the lines below."""
        if rest and not rest.startswith("#"):
            if rest[0] in "|>":
                return self.block_scalar(rest, line, indent)
            value = self.inline(rest, line, depth)
            self.no_continuation(line)
            return value
        if self.i < len(self.lines):
            nxt = self.lines[self.i]
            if nxt.indent > indent:
                return self.node(nxt.indent, depth + 1)
            if allow_same_indent_sequence and nxt.indent == indent and _is_sequence_item(nxt.text):
                return self.sequence(indent, depth + 1)
        return None

    def key(self, text: str, line: _Line) -> str:
        if not text:  # ": value": PyYAML reads a null key, which no config's key is
            raise YamlError(line.number, "a key is empty")
        self.refuse_indicators(text, line)
        if text[0] in "\"'":
            return _unquote(text, line.number)
        if text.startswith("? ") or text == "?":
            raise YamlError(line.number, "complex keys ('? ') are not read")
        value = resolve_plain(text)
        # PyYAML keeps non-string keys (1: x, true: y); configuration keys are names, so keep the text.
        return text if not isinstance(value, str) else value

    @staticmethod
    def refuse_indicators(text: str, line: _Line) -> None:
        if text.startswith("&") or text.startswith("*"):
            raise YamlError(line.number, "anchors and aliases (&, *) are not read; write the value out")
        if text.startswith("!"):
            raise YamlError(line.number, "tags (!) are not read")
        if text.startswith(("@", "`")):
            raise YamlError(line.number, f"a plain value cannot start with {text[0]!r}; quote it")

    # --- scalars and flow collections on one line ---------------------------------------------------------

    def inline(self, text: str, line: _Line, depth: int) -> Any:
        self.refuse_indicators(text, line)
        if text[0] in "[{":
            return self.flow(text, line, depth)
        if text[0] in "\"'":
            end = _quoted_end(text, 0)
            if end is None:
                raise YamlError(line.number, "a quoted string is not closed on its line")
            trailing = text[end:].strip()
            if trailing and not trailing.startswith("#"):
                raise YamlError(line.number, f"unexpected text after the quoted string: {trailing!r}")
            return _unquote(text[:end], line.number)
        if text[0] in ",]}%?":
            raise YamlError(line.number, f"a plain value cannot start with {text[0]!r}; quote it")
        value = _strip_comment(text)
        if _key_split(value) is not None:
            raise YamlError(line.number, "a mapping cannot start on the same line as another key")
        return resolve_plain(value)

    def block_scalar(self, header: str, line: _Line, indent: int) -> str:
        match = re.fullmatch(r"([|>])([-+]?)([1-9]?)([-+]?)\s*(?:#.*)?", header)
        if not match or (match.group(2) and match.group(4)):
            raise YamlError(line.number, f"bad block scalar header {header!r}")
        style, chomp, explicit = match.group(1), match.group(2) or match.group(4), match.group(3)
        # Block scalars keep blank lines and '#' lines, so read the raw lines below the header
        # (self.raw[line.number] is the line after it: numbers count from 1).
        block_indent = indent + int(explicit) if explicit else None
        body: list[str] = []
        number = line.number
        while number < len(self.raw):
            raw = self.raw[number]
            if raw.strip() == "":
                body.append("")
                number += 1
                continue
            this_indent = len(raw) - len(raw.lstrip(" "))
            if block_indent is None:
                if this_indent <= indent:
                    break
                block_indent = this_indent
            if this_indent < block_indent:
                break
            body.append(raw[block_indent:])
            number += 1
        trailing = 0
        while body and body[-1] == "":
            body.pop()
            trailing += 1
        last = line.number + len(body)
        while self.i < len(self.lines) and self.lines[self.i].number <= last:
            self.i += 1
        if not body:
            return "\n" * trailing if chomp == "+" else ""
        text = "\n".join(body) if style == "|" else _fold(body)
        if chomp == "-":
            return text
        if chomp == "+":
            return text + "\n" * (1 + trailing)
        return text + "\n"

    def flow(self, text: str, line: _Line, depth: int) -> Any:
        # A flow collection may continue on the following lines until its brackets close: gather them first
        # (brackets counted outside quotes), then parse once.
        parts = [text]
        open_brackets = _bracket_balance(text)
        while open_brackets > 0 and self.i < len(self.lines):
            parts.append(self.lines[self.i].text)
            open_brackets += _bracket_balance(self.lines[self.i].text)
            self.i += 1
        joined = " ".join(parts)
        try:
            value, end = _Flow(joined, line.number, depth).parse()
        except _Unclosed:
            raise YamlError(line.number, "a flow collection ([...] or {...}) is not closed") from None
        trailing = joined[end:].strip()
        if trailing and not trailing.startswith("#"):
            raise YamlError(line.number, f"unexpected text after the flow collection: {trailing!r}")
        return value


def _bracket_balance(text: str) -> int:
    """Opening minus closing brackets on a line, outside quoted strings and comments."""
    balance, quote, i = 0, "", 0
    while i < len(text):
        c = text[i]
        if quote:
            if c == "\\" and quote == '"':
                i += 1
            elif c == quote:
                quote = ""
        elif c in "\"'" and (i == 0 or text[i - 1] in " ,[{:"):
            quote = c
        elif c == "#" and (i == 0 or text[i - 1] in " \t"):
            break
        elif c in "[{":
            balance += 1
        elif c in "]}":
            balance -= 1
        i += 1
    return balance


def _fold(lines: list[str]) -> str:
    """Folded block content: line breaks become spaces, a run of n blank lines n line breaks; more-indented
    lines keep their breaks."""
    out: list[str] = []
    blanks, prev_more, started = 0, False, False
    for line in lines:
        if line == "":
            blanks += 1
            continue
        more = line.startswith(" ")
        if not started:
            out.append("\n" * blanks)
        elif blanks:
            out.append("\n" * (blanks + (1 if more or prev_more else 0)))
        else:
            out.append("\n" if more or prev_more else " ")
        out.append(line)
        blanks, prev_more, started = 0, more, True
    return "".join(out)


class _Unclosed(Exception):
    pass


class _Flow:
    """A flow sequence or mapping: ``[a, "b", {c: 1}]``."""

    def __init__(self, text: str, line: int, depth: int) -> None:
        self.text, self.line, self.pos, self.depth = text, line, 0, depth

    def parse(self) -> tuple[Any, int]:
        value = self.value(self.depth)
        return value, self.pos

    def skip(self) -> None:
        while self.pos < len(self.text) and self.text[self.pos] in " \t":
            self.pos += 1
        if self.pos < len(self.text) and self.text[self.pos] == "#":
            raise YamlError(self.line, "a comment inside a flow collection is not read")

    def peek(self) -> str:
        self.skip()
        if self.pos >= len(self.text):
            raise _Unclosed()
        return self.text[self.pos]

    def value(self, depth: int) -> Any:
        if depth > MAX_DEPTH:
            raise YamlError(self.line, f"nests deeper than {MAX_DEPTH} levels")
        c = self.peek()
        if c == "[":
            return self.sequence(depth)
        if c == "{":
            return self.mapping(depth)
        return self.scalar()

    def scalar(self, *, key: bool = False) -> Any:
        c = self.peek()
        if c in "\"'":
            end = _quoted_end(self.text, self.pos)
            if end is None:
                raise _Unclosed()
            value = _unquote(self.text[self.pos:end], self.line)
            self.pos = end
            return value
        if c in "&*!":
            raise YamlError(self.line, "anchors, aliases and tags are not read")
        start = self.pos
        while self.pos < len(self.text):
            ch = self.text[self.pos]
            if ch in ",[]{}":
                break
            if ch == ":" and (self.pos + 1 == len(self.text) or self.text[self.pos + 1] in " ,]}"):
                break
            if ch == "#" and self.text[self.pos - 1] in " \t":
                break
            self.pos += 1
        text = self.text[start:self.pos].strip()
        return text if key else resolve_plain(text)

    def sequence(self, depth: int) -> list[Any]:
        self.pos += 1
        items: list[Any] = []
        while True:
            if self.peek() == "]":
                self.pos += 1
                return items
            items.append(self.value(depth + 1))
            c = self.peek()
            if c == ",":
                self.pos += 1
            elif c != "]":
                raise YamlError(self.line, f"expected ',' or ']' in a flow sequence, found {c!r}")

    def mapping(self, depth: int) -> dict[str, Any]:
        self.pos += 1
        items: dict[str, Any] = {}
        while True:
            if self.peek() == "}":
                self.pos += 1
                return items
            key = self.scalar(key=True)
            if self.peek() == ":":
                self.pos += 1
                c = self.peek()
                value = None if c in ",}" else self.value(depth + 1)
            else:
                value = None
            if key in items:
                raise YamlError(self.line, f"duplicate key {key!r}")
            items[key] = value
            c = self.peek()
            if c == ",":
                self.pos += 1
            elif c != "}":
                raise YamlError(self.line, f"expected ',' or '}}' in a flow mapping, found {c!r}")
