"""User documents are read within bounds: no YAML aliases, nesting and size capped, bad values located."""

from __future__ import annotations

import tracemalloc
from itertools import pairwise

import pytest
import yaml

from kpl_lab.documents import MAX_DEPTH, MAX_YAML_CHARS, DocumentError, depth, load_json, load_yaml

LOL = '["lol","lol","lol","lol","lol","lol","lol","lol","lol"]'
# nine levels of nine aliases each: 9^9 (387 million) strings once expanded
LAUGHS = f"a: &a {LOL}\n" + "".join(
    f"{b}: &{b} [{','.join(['*' + a] * 9)}]\n" for a, b in pairwise("abcdefghi")
)


def nested(levels: int) -> str:
    return "[" * levels + "]" * levels


def refused(text: str) -> DocumentError:
    with pytest.raises(DocumentError) as error:
        load_yaml(text)
    return error.value


def test_billion_laughs_is_refused_at_its_first_anchor_with_little_memory():
    tracemalloc.start()
    try:
        error = refused(LAUGHS)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20, f"{peak:,} bytes"
    assert error.problem.startswith("anchor &a: anchors and aliases are not accepted")
    assert (error.problem_mark.line, error.problem_mark.column) == (0, 3)
    assert isinstance(error, yaml.YAMLError) and isinstance(error, ValueError)  # callers' handlers see it


def test_aliases_and_merge_keys_are_refused_where_they_are():
    assert refused("a: 1\nb: *a\n").problem.startswith("alias *a: ")
    error = refused("base: {x: 1}\nother:\n  <<: *base\n")
    assert error.problem.startswith("alias *base: ") and error.problem_mark.line == 2


def test_nesting_is_capped_in_yaml():
    assert depth(load_yaml(nested(MAX_DEPTH))) == MAX_DEPTH
    error = refused(nested(2048))  # 2 KB of "[": a RecursionError without the cap
    assert error.problem == f"lists and mappings nest deeper than {MAX_DEPTH} levels"
    assert (error.problem_mark.line, error.problem_mark.column) == (0, MAX_DEPTH)
    block = "".join("  " * level + f"k{level}:\n" for level in range(MAX_DEPTH + 1)) + "  " * 65 + "x: 1\n"
    assert refused(block).problem_mark.line == MAX_DEPTH


def test_size_is_capped():
    assert load_yaml("a: 1\n" + "#" * (MAX_YAML_CHARS - 10)) == {"a": 1}
    error = refused("a: 1\n" + "#" * MAX_YAML_CHARS)
    assert error.problem == f"the document has {MAX_YAML_CHARS + 5:,} characters; at most 131,072 are read"


@pytest.mark.parametrize(
    ("text", "message", "line"),
    [
        ("a: 1\nwhen: 2024-13-01\n", "cannot read the value '2024-13-01': month must be in 1..12", 1),
        (
            "big: " + "9" * 5000,
            "cannot read the value '9999999999999999999999999999999999999999'…: Exceeds",
            0,
        ),
        ("x: !!float nope\n", "cannot read the value 'nope': could not convert", 0),
    ],
)
def test_values_that_cannot_be_built_are_refused_where_they_are(text, message, line):
    error = refused(text)
    assert error.problem.startswith(message) and error.problem_mark.line == line


def test_plain_documents_read_as_before():
    text = "a: [1, 2.5, {b: null}]\nc: 2024-01-02\nd: yes\n"
    assert load_yaml(text) == yaml.safe_load(text)
    assert load_yaml("") is None


def test_json_nesting_is_capped():
    assert depth(load_json(nested(MAX_DEPTH))) == MAX_DEPTH
    for text in (nested(MAX_DEPTH + 1), "[" * 100_000, '{"a": ' * 5000):  # the last one a RecursionError
        with pytest.raises(
            DocumentError, match=f"JSON lists and objects nest deeper than {MAX_DEPTH} levels"
        ):
            load_json(text)
    assert load_json('{"a": [1, {"b": NaN}]}', parse_constant=str) == {"a": [1, {"b": "NaN"}]}
