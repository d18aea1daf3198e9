"""A file a person hands servewatch is read in one place (servewatch/textfile.py, issue 51 item 6): serve's config,
a drill plan, an SLO file and a --detectors file refuse a missing, oversized or non-UTF-8 file in the same words,
each behind its own flag or file name, and a YAML text that does not parse with its line."""

from __future__ import annotations

import pytest

from servewatch.cli import main
from servewatch.derive.slo import SloInvalid, load_slo
from servewatch.detectors.settings import from_toml
from servewatch.drill.plan import PlanError, load_plan
from servewatch.errors import ServewatchError
from servewatch.serve.document import DocumentError, read_document
from servewatch.textfile import TextFileError, read_text, yaml_value


@pytest.fixture
def files(tmp_path):
    (tmp_path / "garbage").write_bytes(b"\xff\xfe\x00binary")
    (tmp_path / "big").write_text("x" * 101)
    (tmp_path / "good").write_text("a: 1\n")
    return tmp_path


def test_read_text_words_each_failure(files):
    assert read_text(str(files / "good")) == "a: 1\n"
    assert read_text(str(files / "big"), max_bytes=101) == "x" * 101          # at the bound: read whole
    for name, max_bytes, words in (("missing", 100, "cannot be read (No such file or directory)"),
                                   ("big", 100, "larger than 100 bytes"), ("garbage", 100, "not UTF-8 text"),
                                   (".", 100, "cannot be read (Is a directory)")):
        with pytest.raises(TextFileError) as refused:
            read_text(str(files / name), max_bytes=max_bytes)
        assert str(refused.value) == words


def test_yaml_value_names_the_line():
    assert yaml_value("a: [1, 2]\n") == {"a": [1, 2]}
    with pytest.raises(TextFileError) as bad:
        yaml_value("a: 1\nb: [1\n")
    assert (bad.value.line, bad.value.problem) == (3, "expected ',' or ']', but got '<stream end>'")
    assert str(bad.value) == "not valid YAML (expected ',' or ']', but got '<stream end>')"


def test_every_reader_says_the_same_reason_behind_its_own_name(files, capsys):
    missing, garbage = str(files / "missing"), str(files / "garbage")
    for path, reason in ((missing, "cannot be read (No such file or directory)"), (garbage, "not UTF-8 text")):
        with pytest.raises(DocumentError) as document:
            read_document(path)
        assert str(document.value) == f"{path}: {reason}"
        with pytest.raises(PlanError) as plan:
            load_plan(path)
        assert str(plan.value) == f"plan {path}: {reason}"
        with pytest.raises(ServewatchError) as detectors:
            from_toml(path)
        assert str(detectors.value) == f"--detectors {path}: {reason}"
        assert main(["rules", "--slo", path]) == 2
        assert capsys.readouterr().err.strip().endswith(f"--slo {path}: {reason}")


def test_a_yaml_file_that_does_not_parse_is_said_with_its_line(files):
    (files / "plan.yaml").write_text("name: x\nsteps: [1\n")
    with pytest.raises(PlanError) as plan:
        load_plan(str(files / "plan.yaml"))
    assert str(plan.value) == "plan plan.yaml: not valid YAML at line 3"
    with pytest.raises(SloInvalid) as slo:
        load_slo("service: chat\nobjectives: [1\n", "slo.yaml")
    assert str(slo.value) == "slo.yaml: line 3 not valid YAML (expected ',' or ']', but got '<stream end>')"
