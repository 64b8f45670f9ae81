"""harness.io.jsonl_lines is the one JSONL reader: every bad line named PATH:LINE (not UTF-8 included), a torn
last line left out only when asked, gzip by the name; no other module parses JSON lines by hand."""

import gzip
import re
from pathlib import Path

import pytest

from harness.io import jsonl_lines, read_json_rows, read_jsonl

ROOT = Path(__file__).resolve().parents[2]


def test_lines_are_numbered_and_blank_lines_skipped(tmp_path):
    p = tmp_path / "a.jsonl"
    p.write_bytes(b'{"a": 1}\n\n[2]\n"x"\r\n')
    assert jsonl_lines(p) == [(1, {"a": 1}), (3, [2]), (4, "x")]


def test_a_line_that_is_not_utf8_is_named_by_file_and_line(tmp_path):
    p = tmp_path / "a.jsonl"
    p.write_bytes(b'{"a": 1}\n{"b": "\xff"}\n{"c": 3}\n')
    with pytest.raises(ValueError, match=re.escape(f"{p}:2: not UTF-8 text (byte 0xff at column 8)")):
        jsonl_lines(p)
    bad = []
    assert jsonl_lines(p, on_bad=lambda ln, why: bad.append((ln, why))) == [(1, {"a": 1}), (3, {"c": 3})]
    assert bad == [(2, "not UTF-8 text (byte 0xff at column 8)")]


def test_a_torn_last_line_is_left_out_only_when_asked(tmp_path):
    p = tmp_path / "m.jsonl"
    p.write_text('{"step": 1}\n{"step": 2, "x"')
    with pytest.raises(ValueError, match=re.escape(f"{p}:2: not valid JSON")):
        jsonl_lines(p)
    assert jsonl_lines(p, torn_tail=True) == [(1, {"step": 1})]
    assert read_jsonl(p) == [{"step": 1}]
    p.write_text('{"step": 1}\n{"step": 2, "x"\n{"step": 3}\n')  # torn in the middle: an error all the same
    with pytest.raises(ValueError, match=re.escape(f"{p}:2: not valid JSON")):
        read_jsonl(p)


def test_gzip_and_json_list_files(tmp_path):
    gz = tmp_path / "s.jsonl.gz"
    gz.write_bytes(gzip.compress(b'{"q": 1}\n{"q": 2}\n'))
    assert read_json_rows(gz) == [{"q": 1}, {"q": 2}]
    js = tmp_path / "s.json"
    js.write_text('[{"q": 1}]')
    assert read_json_rows(js) == [{"q": 1}]
    cut = tmp_path / "cut.jsonl.gz"
    cut.write_bytes(gzip.compress(b'{"q": 1}\n')[:-6])
    with pytest.raises(ValueError, match=re.escape(f"{cut}: cannot read")):
        jsonl_lines(cut)


def test_a_directory_or_missing_file_is_one_error_naming_it(tmp_path):
    with pytest.raises(ValueError, match=re.escape(f"{tmp_path}: is a directory")):
        jsonl_lines(tmp_path)
    with pytest.raises(ValueError, match=re.escape(f"{tmp_path / 'no.jsonl'}: cannot read")):
        jsonl_lines(tmp_path / "no.jsonl")


# json.loads of a line outside harness/io.py: a JSONL reader of its own. The exceptions parse other things.
HAND_PARSED = re.compile(r"json\.loads\((line|ln|raw_line)\)")
NOT_FILES = {"evals/code_grader.py"}  # LiveCodeBench stdin cases: one JSON value a line of a test's input text


def test_no_module_reads_jsonl_by_hand():
    found = [
        str(p.relative_to(ROOT))
        for folder in ("harness", "evals", "methods", "baselines")
        for p in (ROOT / folder).rglob("*.py")
        if HAND_PARSED.search(p.read_text()) and str(p.relative_to(ROOT)) not in {"harness/io.py", *NOT_FILES}
    ]
    assert found == []
