"""The YAML subset reader against PyYAML's safe_load, which accelerate (commands/config/config_args.py) and axolotl
(cli/config.py) read their files with: same values for what it reads, a 422-style error naming the line for what it
refuses."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.configs import yaml as subset
from app.core import DomainError

yaml = pytest.importorskip("yaml")
SAMPLES = Path(__file__).parent / "samples"


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
    assert same(subset.loads(text), yaml.safe_load(text))


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
])
def test_scalars_and_collections(text, value):
    assert same(subset.loads(text), value)
    assert same(yaml.safe_load(text), value)


@pytest.mark.parametrize("text, words", [
    ("a: &x 1\nb: *x", "line 1: anchors and aliases"),
    ("a: !!str 1", "line 1: tags"),
    ("a: 1\na: 2", "line 2: duplicate key 'a'"),
    ("a: 1\n---\nb: 2", "line 2: only one YAML document"),
    ("a:\n\tb: 1", "line 2: tabs"),
    ("a: 'x", "line 1: a quoted string is not closed"),
    ("a: [1, 2", "line 1: a flow collection"),
    ("a: b: c", "line 1: a mapping cannot start"),
    ("a: x\n  y", "line 2: a value continued on the next line"),
    ("a: 1\n  b: 2", "line 2: a value continued"),
    ("a:\n  b: 1\n c: 2", "line 3: unexpected indentation"),
    ("%YAML 1.2\n---\na: 1", "directives"),
    ("? a\n: b", "line 1"),
    # An empty key, which PyYAML reads as null (schemathesis sent ':' to /api/v1/import and got a 500).
    (":", "line 1: a key is empty"),
    ("a: 1\n: 2", "line 2: a key is empty"),
])
def test_refusals_name_the_line(text, words):
    with pytest.raises(DomainError) as error:
        subset.loads(text, "text")
    assert error.value.field == "text"
    assert words in error.value.message


def test_nesting_is_bounded():
    deep = "".join(f"{'  ' * i}k{i}:\n" for i in range(subset.MAX_DEPTH + 3)) + "  " * (subset.MAX_DEPTH + 3) + "v: 1"
    with pytest.raises(DomainError, match="nests deeper"):
        subset.loads(deep)
    with pytest.raises(DomainError, match="nests deeper"):
        subset.loads("a: " + "[" * 40 + "]" * 40)


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
@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
def test_what_pyyaml_writes_reads_back_the_same(data, flow, indent):
    text = yaml.safe_dump(data, default_flow_style=flow, indent=indent, sort_keys=False, allow_unicode=True,
                          width=10**6)
    try:
        mine = subset.loads(text)
    except DomainError as error:
        # The subset refuses plain scalars folded over lines and multi-line quoted strings, which configs do not use.
        assert "continued on the next line" in error.message or "not closed" in error.message, (text, error)
        return
    assert same(mine, yaml.safe_load(text)), text
