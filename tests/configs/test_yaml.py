"""The YAML reader against PyYAML's safe_load, which accelerate (commands/config/config_args.py) and axolotl
(cli/config.py) read their files with: the same values, and a 422-style error naming the line for what its guard
refuses (anchors, aliases, tags, deep nesting, duplicate keys), over libyaml's parser and PyYAML's own."""

from __future__ import annotations

import datetime
import math
from pathlib import Path

import pytest
import yaml  # type: ignore[import-untyped]
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.configs import yaml as reader
from app.core import DomainError
from tests.budget import examples
from tests.cpu import least_cpu_s

SAMPLES = Path(__file__).parent / "samples"
CPU_LIMIT_S = 0.1  # as tests/test_bounded_work.py
MB = 1 << 20


class PurePython(reader._Guard, yaml.SafeLoader):
    """The guard over PyYAML's pure-Python parser, what the reader uses where libyaml is not bundled."""


@pytest.fixture(params=["libyaml", "python"], autouse=True)
def loader(request, monkeypatch):
    """Each test over both parsers: they word some errors differently, but refuse and read the same."""
    if request.param == "libyaml":
        if not getattr(yaml, "__with_libyaml__", False):
            pytest.skip("this PyYAML has no libyaml")
        assert issubclass(reader._Loader, yaml.CSafeLoader)
    else:
        monkeypatch.setattr(reader, "_Loader", PurePython)
    return request.param


def same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if isinstance(a, dict) and isinstance(b, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


@pytest.mark.parametrize("path", sorted(SAMPLES.glob("*.yaml")), ids=lambda p: p.name)
def test_sample_files_read_as_pyyaml_reads_them(path):
    text = path.read_text()
    assert same(reader.loads(text), yaml.safe_load(text))


@pytest.mark.parametrize("text, value", [
    # YAML 1.1 as PyYAML resolves it (yaml/resolver.py, Resolver.add_implicit_resolver).
    ("a: yes", {"a": True}), ("a: No", {"a": False}), ("a: on", {"a": True}), ("a: OFF", {"a": False}),
    ("a: ~", {"a": None}), ("a:", {"a": None}), ("a: null", {"a": None}),
    ("a: 2e-5", {"a": "2e-5"}), ("a: 2.0e-5", {"a": 2.0e-5}), ("a: 0.0002", {"a": 0.0002}), ("a: .5", {"a": 0.5}),
    ("a: 010", {"a": 8}), ("a: 0x1F", {"a": 31}), ("a: 1_000", {"a": 1000}), ("a: -3", {"a": -3}),
    ("a: 'no'", {"a": "no"}), ('a: "a\\tb"', {"a": "a\tb"}), ("a: 'it''s'", {"a": "it's"}),
    ("a: b # note", {"a": "b"}), ("a: b#c", {"a": "b#c"}), ("a: http://x.y/z", {"a": "http://x.y/z"}),
    ("a: <|end_of_text|>", {"a": "<|end_of_text|>"}), ("a: {}", {"a": {}}), ("a: []", {"a": []}),
    ("a: [1, 'two', {b: 3}]", {"a": [1, "two", {"b": 3}]}), ("a: [1,\n  2]", {"a": [1, 2]}),
    ("a:\n- 1\n- 2", {"a": [1, 2]}), ("- a: 1\n  b: 2\n- c", [{"a": 1, "b": 2}, "c"]), ("- - 1\n  - 2", [[1, 2]]),
    ("a: |\n  x\n   y\n\nb: 1", {"a": "x\n y\n", "b": 1}), ("a: >-\n  x\n  y", {"a": "x y"}),
    ("---\na: 1\n...\n", {"a": 1}), ("", None), ("# nothing\n", None),
    # What the former hand-written reader refused and PyYAML reads: a plain scalar folded over lines, a directive,
    # an explicit scalar key, sexagesimal numbers and dates.
    ("a: x\n  y", {"a": "x y"}), ("%YAML 1.1\n---\na: 1", {"a": 1}), ("? a\n: b", {"a": "b"}),
    ("a: 1:20", {"a": 80}), ("a: 2024-01-02", {"a": datetime.date(2024, 1, 2)}),
    ("a: 'x\n  y'", {"a": "x y"}), ("a: [1,\n\n 2]", {"a": [1, 2]}),
])
def test_scalars_and_collections(text, value):
    assert same(reader.loads(text), value)
    assert same(yaml.safe_load(text), value)


@pytest.mark.parametrize("text, words", [
    ("a: &x 1\nb: *x", "line 1: anchors and aliases (&, *) are not read"),
    ("a: 1\nb: *x", "line 2: anchors and aliases"),
    ("- &a [1]", "line 1: anchors and aliases"),
    ("a: !!str 1", "line 1: tags (tag:yaml.org,2002:str) are not read"),
    ("a: 1\nb: !!python/object/apply:os.system ['echo']", "line 2: tags (tag:yaml.org,2002:python/object/apply"),
    ("a: !foo 1", "line 1: tags (!foo)"),
    ("a: ! x", "line 1: tags (!)"),
    ("a: !!map {}", "line 1: tags"),
    ("a: 1\na: 2", "line 2: duplicate key 'a'"),
    ("a:\n  b: 1\n  c: 2\n  b: 3", "line 4: duplicate key 'b'"),
    ("a: {b: 1, b: 2}", "line 1: duplicate key 'b'"),
    ("- x: 1\n  y: 2\n  x: 3", "line 3: duplicate key 'x'"),
    ("a: 1\n'a': 2", "line 2: duplicate key 'a'"),
    ("a: 1\n---\nb: 2", "line 2: only one YAML document"),
    ("? [a]\n: b", "line 1: a key must be a name, not a list or a mapping"),
    ("{[a]: 1}", "line 1: a key must be a name"),
    ("? \n: b", "line 1: a key is empty"),
    ("a: 2024-13-45", "line 1: '2024-13-45' reads as a date but cannot be one"),
    ("a: 1\nb: " + "9" * 4301, "line 2: '" + "9" * 40 + "...' reads as an integer but cannot be one"),
    ("<<: {a: 1}", "line 1: could not determine a constructor"),
    # Errors of PyYAML's parser, with its line; libyaml and PyYAML word them differently.
    ("a:\n\tb: 1", "line 2: "),
    ("a: 'x", "line 1: while scanning a quoted scalar"),
    ("a: [1, 2", "while parsing a flow sequence"),
    ("a: b: c", "line 1: mapping values are not allowed"),
    ("a: 1\n  b: 2", "line 2: mapping values are not allowed"),
    ("a:\n  b: 1\n c: 2", "line 3: while parsing a block mapping"),
    (":", "line 1: "),  # PyYAML's composer reads a null key here; its parser and libyaml's refuse it
    ("a: 1\n: 2", "line 2: "),
    ("a: \x01", "line 1: "),
    ("a: 1\nb: \ud800", "line 2: "),
])
def test_refusals_name_the_line(text, words):
    with pytest.raises(DomainError) as error:
        reader.loads(text, "text")
    assert error.value.field == "text"
    assert words in error.value.message


def test_a_tab_that_indents_is_named():
    with pytest.raises(DomainError, match="line 2: .*a tab cannot indent YAML, use spaces"):
        reader.loads("a:\n\tb: 1")


def test_keys_keep_their_text():
    """PyYAML reads `1:` as the integer 1 and `true:` as True; a config's keys are names, so they stay text."""
    assert reader.loads("1: a\ntrue: b\nnull: c\n0x10: d") == {"1": "a", "true": "b", "null": "c", "0x10": "d"}
    with pytest.raises(DomainError, match="line 2: duplicate key '1'"):
        reader.loads("1: a\n'1': b")


def _nested(levels: int, style: str) -> str:
    if style == "block mapping":
        return "".join(f"{'  ' * i}k{i}:\n" for i in range(levels - 1)) + "  " * (levels - 1) + "v: 1"
    if style == "block sequence":
        return "".join(f"{'  ' * i}-\n" for i in range(levels - 1)) + "  " * (levels - 1) + "- 1"
    if style == "flow":
        return "a: " + "[" * (levels - 1) + "]" * (levels - 1)
    return "- " * levels + "x"  # compact sequences, all on one line


@pytest.mark.parametrize("style", ["block mapping", "block sequence", "flow", "compact"])
def test_nesting_is_bounded(style):
    """Lists and mappings nest at most MAX_DEPTH deep (the document's own mapping or list is the first level)."""
    value = reader.loads(_nested(reader.MAX_DEPTH, style))
    assert value == yaml.safe_load(_nested(reader.MAX_DEPTH, style))
    with pytest.raises(DomainError, match=f"line [0-9]+: nests deeper than {reader.MAX_DEPTH} levels"):
        reader.loads(_nested(reader.MAX_DEPTH + 1, style))


def _laughs() -> str:
    lines = ["a: &a [x, x, x, x, x, x, x, x, x]"]
    lines += [f"{b}: &{b} [{', '.join(['*' + a] * 9)}]" for a, b in zip("abcdefgh", "bcdefghi", strict=True)]
    return "\n".join(lines)


@pytest.mark.parametrize("name, text, words", [
    ("nine levels of aliases", _laughs(), "line 1: anchors"),
    ("1 MB of brackets", "a: " + "[" * (MB - 3), "line 1: "),
    ("1 MB of braces", "a: " + "{a: " * (MB // 4 - 1), "nests deeper"),
    ("1 MB of compact sequences", "- " * (MB // 2), "nests deeper"),
    ("1,400 levels of indentation", "".join(" " * i + f"k{i}:\n" for i in range(1400)), "line 33: nests deeper"),
    ("a python tag", "a: !!python/object/apply:os.system ['echo']\n", "line 1: tags"),
    ("an integer of 4,301 digits", "a: " + "9" * 4301, "line 1: "),
    ("262,144 documents", "---\n" * (MB // 4), "line 2: only one YAML document"),
])
def test_hostile_texts_are_refused_quickly(name, text, words, loader):
    if loader == "python" and name == "1 MB of brackets":
        pytest.skip("PyYAML's pure-Python scanner looks up to 1,024 characters ahead for a key, each step over every "
                    "open bracket: 0.3 s whatever the size")
    assert len(text.encode()) <= MB
    def refused() -> DomainError:
        with pytest.raises(DomainError) as error:
            reader.loads(text)
        return error.value

    cpu_s, error = least_cpu_s(refused, CPU_LIMIT_S)
    assert cpu_s < CPU_LIMIT_S, name
    assert words in error.message


@pytest.mark.parametrize("path", sorted(SAMPLES.glob("*.yaml")), ids=lambda p: p.name)
def test_each_line_of_a_real_config_reads_as_pyyaml_reads_it(path):
    """Each sample cut after each of its lines (what a paste cut short holds) reads as safe_load reads it, or both
    refuse it."""
    lines = path.read_text().splitlines(keepends=True)
    for end in range(1, len(lines) + 1):
        text = "".join(lines[:end])
        try:
            expected = yaml.safe_load(text)
        except yaml.YAMLError:
            with pytest.raises(DomainError):
                reader.loads(text)
            continue
        assert same(reader.loads(text), expected), text


# Keys and values as configs have them: names, numbers, switches, paths, strings that need quoting.
keys = st.from_regex(r"[a-z][a-z0-9_]{0,12}", fullmatch=True)
texts = st.one_of(st.from_regex(r"[A-Za-z0-9_./-]{1,20}", fullmatch=True),
                  st.sampled_from(["yes", "no", "on", "null", "~", "010", "2e-5", "a: b", "#x", "x #y", "'q'",
                                   '"d"', "<|end|>", " lead", "trail ", "", "-", "- x", "[a]", "{a}", "é ü"]))
scalars = st.one_of(st.none(), st.booleans(), st.integers(-10**12, 10**12),
                    st.floats(allow_nan=False, allow_infinity=False, width=64), texts)
documents = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                          st.dictionaries(keys, inner, max_size=5)), max_leaves=25)


@given(data=st.dictionaries(keys, documents, min_size=1, max_size=6), flow=st.sampled_from([False, None, True]),
       indent=st.sampled_from([2, 4]))
@settings(max_examples=examples(150), deadline=None, suppress_health_check=list(HealthCheck))  # per parser
def test_what_pyyaml_writes_reads_back_the_same(data, flow, indent):
    text = yaml.safe_dump(data, default_flow_style=flow, indent=indent, sort_keys=False, allow_unicode=True,
                          width=10**6)
    assert same(reader.loads(text), yaml.safe_load(text)), text
