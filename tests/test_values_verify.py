"""Value tests of bundle/verify.py (issue 40): every check's one line, word for word, on a bundle edited and resealed
as a forger with write access would, and the boundaries of its limits: MAX_FILES entries pass the count (one more is
refused), a file of READ_LIMIT bytes passes the size (one byte more is refused), a file of exactly the writer's cap
passes (one byte over is refused), a verdict at the window's first or last sample or with its onset at its time
passes, and created_t equal to the newest sample passes."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from servewatch import __version__
from servewatch.bundle import layout, verify as V
from servewatch.bundle.verify import Verified, verify_bundle
from servewatch.errors import BundleInvalid
from servewatch.timeline.samples import HealthSample

try:
    from tests.sinks_synthetic import stall_window, synthetic_recompute, synthetic_stall_bundle
except ModuleNotFoundError:
    from sinks_synthetic import stall_window, synthetic_recompute, synthetic_stall_bundle


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    path = synthetic_stall_bundle(tmp_path_factory.mktemp("bundles"))
    return path


@pytest.fixture
def copy(bundle, tmp_path):
    target = tmp_path / "b"                 # a free name: the directory-name check does not apply
    shutil.copytree(bundle, target)
    return target


def reseal(path):
    hashes = {name: layout.sha256((path / name).read_bytes()) for name in os.listdir(path) if name != "manifest.json"}
    (path / "manifest.json").write_bytes(layout.manifest_bytes(hashes))


def incident(path):
    return json.loads((path / "incident.json").read_bytes())


def rewrite(path, name, document):
    (path / name).write_bytes(layout.encode(document))
    reseal(path)


def edit_incident(path, change):
    doc = incident(path)
    change(doc)
    rewrite(path, "incident.json", doc)


def fails(path, recompute=synthetic_recompute) -> str:
    with pytest.raises(BundleInvalid) as err:
        verify_bundle(path, recompute)
    return str(err.value)


# --- the OK line ----------------------------------------------------------------------------------------------

def test_the_ok_line(bundle):
    result = verify_bundle(bundle, synthetic_recompute)
    files = incident(bundle)["window"]["files"]
    assert result.files_hashed == len(files) + 2
    n = sum(incident(bundle)["window"]["samples"].values())
    assert (len(result.samples), result.verdicts_checked, result.verdicts_not_stored) == (n, 1, 0)
    assert result.line() == (f"OK {bundle.name}: {len(files) + 2} files hashed, {n} samples, 1 verdict(s) recomputed "
                             f"and matched")
    more = Verified(bundle, result.incident, result.samples, 1, 2)
    assert more.line() == (f"OK {bundle.name}: {len(files) + 2} files hashed, {n} samples, 1 verdict(s) recomputed "
                           f"and matched; 2 more verdict(s) follow but were not stored")
    assert V.load_bundle(bundle) == (result.incident, result.samples)


def test_verdicts_implied_but_not_stored_are_counted(bundle):
    def twice(samples, config):
        found = list(synthetic_recompute(samples, config))
        return found + [found[0].__class__(found[0].name, found[0].t, found[0].onset - 1.0, found[0].why)] * 2
    result = verify_bundle(bundle, twice)
    assert (result.verdicts_checked, result.verdicts_not_stored) == (1, 2)


# --- files ----------------------------------------------------------------------------------------------------

def test_not_a_directory(tmp_path):
    assert fails(tmp_path / "nope") == "not a bundle directory"
    (tmp_path / "file").write_text("x")
    assert fails(tmp_path / "file") == "not a bundle directory"


def test_max_files_under_at_and_over(tmp_path):
    for n, line in ((V.MAX_FILES - 1, "manifest.json missing"), (V.MAX_FILES, "manifest.json missing"),
                    (V.MAX_FILES + 1, f"{V.MAX_FILES + 1} entries: more than a bundle can hold ({V.MAX_FILES})")):
        d = tmp_path / f"d{n}"
        d.mkdir()
        for i in range(n):
            (d / f"f{i:03d}").write_bytes(b"")
        assert fails(d) == line, n


def test_read_limit_at_and_over(tmp_path):
    d = tmp_path / "big"
    d.mkdir()
    (d / "big.bin").write_bytes(b"\0" * V.READ_LIMIT)
    assert fails(d) == "manifest.json missing"                    # read whole: the size passes
    (d / "big.bin").write_bytes(b"\0" * (V.READ_LIMIT + 1))
    assert fails(d) == f"big.bin: larger than {V.READ_LIMIT} bytes"
    assert V.READ_LIMIT == 16 * 2**20


def test_entries_that_are_not_regular_files(copy, tmp_path):
    (copy / "sub").mkdir()
    assert fails(copy) == "sub: unexpected entry (bundles hold regular files only)"
    (copy / "sub").rmdir()
    (tmp_path / "elsewhere").write_bytes((copy / "samples-000.json").read_bytes())
    (copy / "samples-000.json").unlink()
    (copy / "samples-000.json").symlink_to(tmp_path / "elsewhere")
    assert fails(copy) == "samples-000.json: unexpected entry (bundles hold regular files only)"


def test_an_unreadable_bundle_is_one_line(copy, monkeypatch):
    def denied(*args, **kwargs):
        raise PermissionError(13, "Permission denied")
    monkeypatch.setattr("builtins.open", denied)
    assert fails(copy) == "cannot read the bundle: Permission denied"

    def bare(*args, **kwargs):
        raise OSError("no strerror")
    monkeypatch.setattr("builtins.open", bare)
    assert fails(copy) == "cannot read the bundle: no strerror"


# --- manifest -----------------------------------------------------------------------------------------------

def test_manifest_checks(copy):
    original = (copy / "manifest.json").read_bytes()
    (copy / "manifest.json").write_bytes(original.replace(b'"sha256"', b'"sha257"', 1))
    assert fails(copy) == "manifest.json: its own SHA-256 does not match (manifest altered)"
    (copy / "manifest.json").write_bytes(original)

    (copy / "extra.json").write_bytes(b"{}")
    assert fails(copy) == "extra.json: file not listed in the manifest"
    (copy / "extra.json").unlink()

    hashes = {name: layout.sha256((copy / name).read_bytes()) for name in os.listdir(copy) if name != "manifest.json"}
    (copy / "manifest.json").write_bytes(layout.manifest_bytes({**hashes, "samples-009.json": "0" * 64}))
    assert fails(copy) == "samples-009.json: listed in the manifest but missing"

    (copy / "manifest.json").write_bytes(layout.manifest_bytes({**hashes, "samples-001.json": "0" * 64}))
    assert fails(copy) == "samples-001.json: SHA-256 does not match the manifest"


def test_a_manifest_without_its_digest_or_not_an_object(copy):
    document = json.loads((copy / "manifest.json").read_bytes())
    document.pop("manifest_sha256")
    (copy / "manifest.json").write_bytes(layout.encode(document))
    assert fails(copy) == "manifest.json: its own SHA-256 does not match (manifest altered)"
    (copy / "manifest.json").write_bytes(b"[1]")
    assert fails(copy) == "manifest.json: not a JSON object"


def _sealed_manifest(document: dict, spaced: bool = False) -> bytes:
    """A manifest whose own digest is right for exactly these bytes (a forger's), from `document`."""
    draft = layout.encode({**document, "manifest_sha256": layout.DIGEST_PLACEHOLDER})
    if spaced:
        draft = draft.replace(b'{"', b'{ "', 1)
    return draft.replace(layout._digest_field(layout.DIGEST_PLACEHOLDER), layout._digest_field(layout.sha256(draft)))


def test_a_non_canonical_manifest(copy):
    document = json.loads((copy / "manifest.json").read_bytes())
    (copy / "manifest.json").write_bytes(_sealed_manifest(document, spaced=True))
    assert fails(copy) == "manifest.json: not in canonical encoding"
    (copy / "manifest.json").write_bytes(_sealed_manifest(document))
    verify_bundle(copy, synthetic_recompute)


def test_a_manifest_outside_its_schema(copy):
    document = json.loads((copy / "manifest.json").read_bytes())
    (copy / "manifest.json").write_bytes(_sealed_manifest({**document, "extra": 1}))
    assert fails(copy) == ("manifest.json: schema violation at (root): Additional properties are not allowed ('extra' "
                           "was unexpected)")


# --- documents -------------------------------------------------------------------------------------------------

def test_incident_missing_or_not_canonical(copy):
    (copy / "incident.json").unlink()
    reseal(copy)
    assert fails(copy) == "incident.json missing"


def test_a_non_canonical_document(copy):
    original = (copy / "incident.json").read_bytes()
    (copy / "incident.json").write_bytes(json.dumps(incident(copy), indent=1).encode())
    reseal(copy)
    assert fails(copy) == "incident.json: not in canonical encoding"
    (copy / "incident.json").write_bytes(original)
    (copy / "samples-001.json").write_bytes((copy / "samples-001.json").read_bytes() + b" ")
    reseal(copy)
    assert fails(copy) == "samples-001.json: not in canonical encoding"


def test_schema_violation_says_where(copy):
    edit_incident(copy, lambda d: d["target"].__setitem__("prompt", "hello"))
    line = fails(copy)
    assert line == ("incident.json: schema violation at target: Additional properties are not allowed ('prompt' was "
                    "unexpected)")
    long = "p" * 200
    edit_incident(copy, lambda d: (d["target"].pop("prompt"), d["target"].__setitem__(long, 1)))
    message = f"Additional properties are not allowed ('{long}' was unexpected)"
    assert fails(copy) == f"incident.json: schema violation at target: {message[:160]}"
    edit_incident(copy, lambda d: (d["target"].pop(long), d["window"]["thinned"].__setitem__("method", 7)))
    assert fails(copy).startswith("incident.json: schema violation at window/thinned/method: 7 is not ")
    edit_incident(copy, lambda d: (d["window"]["thinned"].__setitem__("method", None), d.__setitem__("extra", 1)))
    assert fails(copy) == ("incident.json: schema violation at (root): Additional properties are not allowed ('extra' "
                           "was unexpected)")


def test_json_errors(copy):
    data = (copy / "incident.json").read_bytes()
    (copy / "incident.json").write_bytes(data.replace(b'"keep":4', b'"keep":1e999', 1))
    reseal(copy)
    assert fails(copy) == "incident.json: not valid JSON (number out of range 1e999)"
    (copy / "incident.json").write_bytes(data.replace(b'"keep":4', b'"keep":NaN', 1))
    reseal(copy)
    assert fails(copy) == "incident.json: not valid JSON (non-standard constant NaN)"
    (copy / "incident.json").write_bytes(data.replace(b'"keep":4', b'"keep":-Infinity', 1))
    reseal(copy)
    assert fails(copy) == "incident.json: not valid JSON (non-standard constant -Infinity)"
    (copy / "incident.json").write_bytes(data.replace(b'{"schema":', b'{"schema":"x","schema":', 1))
    reseal(copy)
    assert fails(copy) == "incident.json: not valid JSON (duplicate key 'schema')"
    (copy / "incident.json").write_bytes(b"\xff")
    reseal(copy)
    assert fails(copy).startswith("incident.json: not valid JSON ('utf-8' codec can't decode byte 0xff")
    (copy / "incident.json").write_bytes(b"[" * 100_000)
    reseal(copy)
    assert fails(copy).startswith("incident.json: not valid JSON (")


def test_parse_helpers():
    assert V._finite_float("1.5") == 1.5
    assert V._finite_float("1e308") == 1e308
    for text in ("1e999", "-1e999"):
        with pytest.raises(ValueError, match=f"number out of range {text}"):
            V._finite_float(text)
    with pytest.raises(ValueError) as err:
        V._finite_float("1" * 400 + "e999")
    assert str(err.value) == "number out of range " + "1" * 20
    assert V._no_duplicates([("a", 1), ("b", 2)]) == {"a": 1, "b": 2}
    with pytest.raises(ValueError, match="duplicate key 'a'"):
        V._no_duplicates([("a", 1), ("a", 1)])
    with pytest.raises(ValueError, match="non-standard constant Infinity"):
        V._no_constants("Infinity")
    key = "k" * 300
    with pytest.raises(BundleInvalid) as err:
        V._parse(('{"%s": 1, "%s": 2}' % (key, key)).encode(), "n.json")
    assert str(err.value) == "n.json: not valid JSON (" + f"duplicate key {key!r}"[:120] + ")"


# --- samples files ---------------------------------------------------------------------------------------------

def test_window_files_in_order(copy):
    files = incident(copy)["window"]["files"]
    edit_incident(copy, lambda d: d["window"].__setitem__("files", list(reversed(files))))
    assert fails(copy) == f"incident.json: window.files {list(reversed(files))} should be {files}"


def test_the_manifest_and_the_window_name_the_same_files(copy):
    files = incident(copy)["window"]["files"]
    last = files[-1]
    (copy / last).unlink()
    edit_incident(copy, lambda d: d["window"].__setitem__("files", files))
    hashes = {name: layout.sha256((copy / name).read_bytes()) for name in os.listdir(copy) if name != "manifest.json"}
    (copy / "manifest.json").write_bytes(layout.manifest_bytes(hashes))
    assert fails(copy) == "manifest.json: file set differs from incident.json window.files"


def test_the_file_cap_at_and_over(copy):
    sizes = {name: len((copy / name).read_bytes()) for name in os.listdir(copy) if name != "manifest.json"}
    largest = max(sizes, key=lambda n: (sizes[n], n))
    # the largest file exactly at the cap: passes (incident.json's own size does not change: same digit count)
    cap = sizes[largest]
    assert len(str(cap)) == len(str(incident(copy)["writer"]["max_file_bytes"]))
    edit_incident(copy, lambda d: d["writer"].__setitem__("max_file_bytes", cap))
    assert len((copy / "incident.json").read_bytes()) <= cap
    verify_bundle(copy, synthetic_recompute)
    edit_incident(copy, lambda d: d["writer"].__setitem__("max_file_bytes", cap - 1))
    assert fails(copy) == f"{largest}: {cap} bytes, over the bundle's cap of {cap - 1}"


def test_the_manifest_is_not_capped(copy):
    size = len((copy / "manifest.json").read_bytes())
    others = max(len((copy / n).read_bytes()) for n in os.listdir(copy) if n != "manifest.json")
    assert size < others            # the fixture cannot say more: the manifest is smaller than the samples files
    edit_incident(copy, lambda d: d["writer"].__setitem__("max_file_bytes", others))
    verify_bundle(copy, synthetic_recompute)


def test_parts_numbered_in_order(copy):
    files = incident(copy)["window"]["files"]
    doc = json.loads((copy / files[1]).read_bytes())
    doc["part"] = 2
    rewrite(copy, files[1], doc)
    assert fails(copy) == f"{files[1]}: part 2/{len(files)}, expected 1/{len(files)}"
    doc["part"], doc["parts"] = 1, len(files) + 1
    rewrite(copy, files[1], doc)
    assert fails(copy) == f"{files[1]}: part 1/{len(files) + 1}, expected 1/{len(files)}"


# --- identity --------------------------------------------------------------------------------------------------

def _samples_edit(copy, change):
    """Apply change(list of all sample dicts) and write them back into the same files (same split)."""
    files = incident(copy)["window"]["files"]
    docs = [json.loads((copy / n).read_bytes()) for n in files]
    flat = [s for d in docs for s in d["samples"]]
    change(flat)
    i = 0
    for name, doc in zip(files, docs):
        n = len(doc["samples"])
        doc["samples"] = flat[i:i + n]
        i += n
        (copy / name).write_bytes(layout.encode(doc))
    reseal(copy)


def test_samples_in_time_order(copy):
    def swap(flat):
        flat[0], flat[1] = flat[1], flat[0]
    _samples_edit(copy, swap)
    assert fails(copy) == "samples: not in time order"


def test_equal_times_are_in_order(copy):
    def same(flat):
        flat[1]["t"] = flat[0]["t"]
    _samples_edit(copy, same)
    assert "not in time order" not in fails_or_ok(copy)


def test_counts_must_agree(copy):
    window = incident(copy)["window"]
    counts = dict(window["samples"])
    edit_incident(copy, lambda d: d["window"]["samples"].__setitem__("health", counts["health"] + 1))
    wrong = {**counts, "health": counts["health"] + 1}
    assert fails(copy) == f"incident.json: window.samples {wrong} but the files hold {counts}"


def test_the_window_span_must_be_the_samples(copy):
    w = incident(copy)["window"]
    start, end = w["start_t"], w["end_t"]
    edit_incident(copy, lambda d: d["window"].__setitem__("start_t", start - 1))
    assert fails(copy) == f"incident.json: window {start - 1}..{end} but the samples span {start}..{end}"
    edit_incident(copy, lambda d: (d["window"].__setitem__("start_t", start), d["window"].__setitem__("end_t", end + 1)))
    assert fails(copy) == f"incident.json: window {start}..{end + 1} but the samples span {start}..{end}"


def test_the_thinning_record(copy):
    thinned = incident(copy)["window"]["thinned"]
    n = thinned["samples_after"]
    assert thinned == {"applied": False, "samples_before": n, "samples_after": n, "method": None}
    line = "incident.json: thinning record inconsistent with the stored samples"
    for change in ({"samples_after": n - 1}, {"applied": True}, {"samples_before": n - 1},
                   {"method": "uniform"}, {"samples_before": n + 1}):
        copy_ = copy
        edit_incident(copy_, lambda d: d["window"]["thinned"].update({**thinned, **change}))
        got = fails(copy_)
        assert got == line or got.startswith("incident.json: schema violation"), (change, got)
    # thinned for real: applied, a method, more before than after: consistent
    edit_incident(copy, lambda d: d["window"]["thinned"].update(
        {"applied": True, "samples_before": n + 1, "samples_after": n, "method": "uniform"}))
    got = fails(copy)
    assert got != line


def test_created_t_at_and_before_the_newest_sample(copy):
    end = incident(copy)["window"]["end_t"]
    edit_incident(copy, lambda d: d.__setitem__("created_t", end))
    assert "created_t" not in fails_or_ok(copy)
    edit_incident(copy, lambda d: d.__setitem__("created_t", end - 0.25))
    assert fails(copy) == f"incident.json: created_t {end - 0.25} precedes the newest sample {end}"


def fails_or_ok(path) -> str:
    try:
        verify_bundle(path, synthetic_recompute)
    except BundleInvalid as err:
        return str(err)
    return "ok"


def test_a_verdict_s_onset_and_time(copy):
    v = incident(copy)["verdicts"][0]
    label = f"verdict {v['name']} at t={v['t']}"

    def onset(value):
        def change(d):
            d["verdicts"][0]["onset"] = value
            d["trigger"]["onset"] = value
        return change
    edit_incident(copy, onset(v["t"] + 0.25))
    assert fails(copy) == f"{label}: onset {v['t'] + 0.25} after its time"
    edit_incident(copy, onset(v["t"]))                      # at its time: no complaint about the onset
    assert fails_or_ok(copy).endswith("does not follow from the stored samples (recomputed: "
                                      f"onset={v['onset']} t={v['t']})")


def test_a_verdict_inside_the_window_under_at_and_over(copy):
    w = incident(copy)["window"]
    v = incident(copy)["verdicts"][0]
    for t, inside in ((w["end_t"], True), (w["end_t"] + 0.25, False), (w["start_t"], True), (w["start_t"] - 0.25, False)):
        def change(d, t=t):
            d["verdicts"][0]["t"] = t
            d["verdicts"][0]["onset"] = min(d["verdicts"][0]["onset"], t)
            d["trigger"]["onset"] = d["verdicts"][0]["onset"]
        edit_incident(copy, change)
        line = fails_or_ok(copy)
        assert (line == f"verdict {v['name']} at t={t}: outside the stored window") is (not inside), (t, line)


def test_evidence_must_be_a_stored_sample(copy):
    v = incident(copy)["verdicts"][0]
    edit_incident(copy, lambda d: d["verdicts"][0]["evidence"][0].__setitem__("t", 1.0))
    assert fails(copy) == (f"verdict {v['name']} at t={v['t']}: evidence {v['evidence'][0]['source']}@1.0 is not a "
                           f"stored sample")
    # the right time but another source
    edit_incident(copy, lambda d: d["verdicts"][0]["evidence"][0].update({"t": v["evidence"][0]["t"], "source": "gpu"}))
    assert fails(copy) == (f"verdict {v['name']} at t={v['t']}: evidence gpu@{v['evidence'][0]['t']} is not a stored "
                           f"sample")


def test_the_trigger_must_be_a_stored_verdict(copy):
    trigger = incident(copy)["trigger"]
    edit_incident(copy, lambda d: d["trigger"].__setitem__("onset", trigger["onset"] - 1))
    assert fails(copy) == f"incident.json: trigger {trigger['verdict']} is not among the stored verdicts"


def test_an_on_demand_trigger_is_the_window_end(copy):
    end = incident(copy)["window"]["end_t"]

    def on_demand(onset):
        def change(d):
            d["trigger"] = {"verdict": layout.ON_DEMAND, "onset": onset}
        return change
    edit_incident(copy, on_demand(end - 0.25))
    assert fails(copy) == "incident.json: on-demand trigger onset is not the window end"
    edit_incident(copy, on_demand(end))
    assert "trigger" not in fails_or_ok(copy)


def test_duplicate_verdicts(copy):
    edit_incident(copy, lambda d: d["verdicts"].append(dict(d["verdicts"][0])))
    assert fails(copy) == "incident.json: duplicate verdicts"


def test_a_non_finite_time():
    with pytest.raises(BundleInvalid) as err:
        V._t("NaN")
    assert str(err.value) == "non-finite time 'NaN'"
    assert V._t(3) == 3.0 and isinstance(V._t(3), float)


def test_the_directory_name(bundle, tmp_path):
    inc = incident(bundle)
    V._check_name(inc, "anything")               # a free name
    V._check_name(inc, bundle.name)
    V._check_name(inc, bundle.name + "-2")       # the writer's suffix for a second bundle of the same second
    parts = bundle.name.split("-")
    wrong = "-".join(parts[:-1] + ["00000000" if parts[-1] != "00000000" else "11111111"])
    with pytest.raises(BundleInvalid) as err:
        V._check_name(inc, wrong)
    assert str(err.value) == f"directory name {wrong} does not match incident.json (expected {bundle.name})"


# --- recomputation ---------------------------------------------------------------------------------------------

def test_a_verdict_that_does_not_follow(copy, monkeypatch):
    v = incident(copy)["verdicts"][0]
    assert fails(copy, lambda samples, config: []) == (
        f"verdict {v['name']} at t={v['t']} does not follow from the stored samples (the detectors do not fire)")

    def shifted(samples, config):
        (found,) = synthetic_recompute(samples, config)
        return [found.__class__(found.name, found.t, found.onset - 1.0, found.why, found.evidence, found.details)]
    assert fails(copy, shifted) == (f"verdict {v['name']} at t={v['t']} does not follow from the stored samples "
                                    f"(recomputed: onset={v['onset'] - 1.0} t={v['t']})")
    edit_incident(copy, lambda d: d.__setitem__("servewatch_version", "0.0.1"))
    assert fails(copy, lambda samples, config: []) == (
        f"verdict {v['name']} at t={v['t']} does not follow from the stored samples (the detectors do not fire); "
        f"bundle written by servewatch 0.0.1, this is {__version__}")


def test_a_recomputation_that_raises(bundle):
    def broken(samples, config):
        raise RuntimeError("boom\n  with   spaces " + "x" * 300)
    line = fails(bundle, broken)
    assert line == "recomputation failed: RuntimeError: boom with spaces " + "x" * (160 - len("boom with spaces "))

    def invalid(samples, config):
        raise BundleInvalid("stored config: unknown field 'x'")
    assert fails(bundle, invalid) == "stored config: unknown field 'x'"


def test_the_recomputation_gets_the_stored_config(bundle):
    seen = []

    def spy(samples, config):
        seen.append((len(samples), config, type(samples[0])))
        return synthetic_recompute(samples, config)
    verify_bundle(bundle, spy)
    n = sum(incident(bundle)["window"]["samples"].values())
    assert seen == [(n, {"min_stall_s": 3.0}, HealthSample)]


def test_an_unexpected_error_is_one_line(bundle, monkeypatch):
    def explode(*args, **kwargs):
        raise KeyError("sur\n   prise " + "y" * 300)
    monkeypatch.setattr(V, "_check_identity", explode)
    line = fails(bundle)
    assert line.startswith("unexpected KeyError: 'sur\\n")
    assert len(line) == len("unexpected KeyError: ") + 160


def test_describe_and_key():
    from servewatch.detectors.verdict import Verdict
    assert V._describe(Verdict("x", 2.5, 1.25, "w")) == "onset=1.25 t=2.5"
    assert V._key({"b": 1, "a": 2}) == '{"a": 2, "b": 1}'
    with pytest.raises(ValueError):
        V._key({"a": float("nan")})


# --- recompute.py ----------------------------------------------------------------------------------------------

def test_config_from_dict_values():
    import dataclasses as dc

    from servewatch.bundle.recompute import config_from_dict

    @dc.dataclass(frozen=True)
    class Config:
        floor_s: float = 3.0
        kinds: tuple = ("itl",)
        edges: tuple = (1.0,)
        name: str = "x"
        on: bool = True
        limit: float | None = None

    assert config_from_dict(Config, {}) == Config()
    assert config_from_dict(Config, {"floor_s": 2.5, "edges": [1.0, "+Inf", "-Inf"], "kinds": ["itl", "ttft"],
                                     "name": "y", "on": False, "limit": None}) == \
        Config(2.5, ("itl", "ttft"), (1.0, float("inf"), float("-inf")), "y", False, None)
    assert config_from_dict(Config, {"floor_s": "+Inf"}).floor_s == float("inf")
    nan = config_from_dict(Config, {"floor_s": "NaN", "edges": ["NaN"]})
    assert nan.floor_s != nan.floor_s and nan.edges[0] != nan.edges[0]
    assert config_from_dict(Config, {"floor_s": 4}).floor_s == 4.0
    assert config_from_dict(Config, {"retired_one": 1, "floor_s": 1.0}, retired=frozenset({"retired_one"})) == \
        Config(floor_s=1.0)
    with pytest.raises(BundleInvalid) as err:
        config_from_dict(Config, {"zz": 1, "aa": 2})
    assert str(err.value) == "detector_config: unknown field 'aa' (bundle from another version?)"
    assert config_from_dict(dict, {"a": 1}) == {"a": 1}          # not a dataclass: the fields as given


def test_detectors_recompute_uses_the_stored_config():
    from servewatch.bundle.recompute import detectors_recompute
    from servewatch.detectors import DetectorConfig, run_detectors
    from servewatch.detectors.config import RETIRED
    from servewatch.timeline.window import Window

    window = stall_window(n=24, stalled_from=12)
    samples = [*window.health, *window.metrics, *window.process]
    samples.sort(key=lambda s: s.t)
    stored = {**DetectorConfig(stall_floor_s=1.0).to_dict(), **{name: 1 for name in RETIRED}}
    got = detectors_recompute(samples, stored)
    assert list(got) == run_detectors(Window.from_samples(samples), DetectorConfig(stall_floor_s=1.0))
    assert any(v.name == "alive_health_ok_no_progress" for v in got)
    assert list(detectors_recompute(samples, {})) == run_detectors(Window.from_samples(samples), DetectorConfig())


def test_an_on_demand_trigger_is_the_newest_sample_not_the_creation(copy):
    end = incident(copy)["window"]["end_t"]

    def on_demand(onset):
        def change(d):
            d["created_t"] = end + 1.0
            d["trigger"] = {"verdict": layout.ON_DEMAND, "onset": onset}
        return change
    edit_incident(copy, on_demand(end))
    verify_bundle(copy, synthetic_recompute)
    edit_incident(copy, on_demand(end + 1.0))
    assert fails(copy) == "incident.json: on-demand trigger onset is not the window end"


def _empty_incident(created=5.0, onset=5.0):
    from servewatch.kinds import SOURCE_KINDS
    return {"created_t": created, "trigger": {"verdict": layout.ON_DEMAND, "onset": onset},
            "incident_id": "0" * 32, "verdicts": [],
            "window": {"samples": {k: 0 for k in SOURCE_KINDS}, "start_t": None, "end_t": None,
                       "thinned": {"applied": False, "samples_before": 0, "samples_after": 0, "method": None}}}


def test_a_bundle_without_samples_is_judged_by_its_creation_time():
    V._check_identity(_empty_incident(), [], "b")                     # no sample: no span, the trigger at creation
    with pytest.raises(BundleInvalid) as err:
        V._check_identity(_empty_incident(onset=4.0), [], "b")
    assert str(err.value) == "incident.json: on-demand trigger onset is not the window end"


def test_samples_that_do_not_decode(bundle, monkeypatch):
    from servewatch.bundle import serialize

    def bad(d):
        raise serialize.DecodeError("health sample without a time")
    monkeypatch.setattr(serialize, "sample_from_dict", bad)
    assert fails(bundle) == "samples: health sample without a time"


def test_read_files_reads_at_most_one_byte_over_the_limit(copy, monkeypatch):
    import builtins
    asked = []
    real_open = builtins.open

    class Recording:
        def __init__(self, f):
            self.f = f

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

        def read(self, n=-1):
            asked.append(n)
            return self.f.read(n)

    monkeypatch.setattr(builtins, "open", lambda path, mode="r", *a, **k: Recording(real_open(path, mode, *a, **k)))
    V._read_files(copy)
    assert asked and set(asked) == {V.READ_LIMIT + 1}


def test_the_directory_name_is_stamped_in_utc(bundle, monkeypatch):
    import time
    monkeypatch.setenv("TZ", "Asia/Tokyo")
    time.tzset()
    try:
        V._check_name(incident(bundle), bundle.name)        # UTC whatever the machine's zone
    finally:
        monkeypatch.undo()
        time.tzset()


def test_config_from_dict_refuses_what_is_no_number_and_reads_minus_inf():
    import dataclasses as dc

    from servewatch.bundle import serialize
    from servewatch.bundle.recompute import config_from_dict

    @dc.dataclass(frozen=True)
    class Config:
        floor_s: float = 3.0

    assert config_from_dict(Config, {"floor_s": "-Inf"}).floor_s == float("-inf")
    with pytest.raises(serialize.DecodeError) as err:
        config_from_dict(Config, {"floor_s": {"a": 1}})
    assert str(err.value) == "not a number: {'a': 1}"


def test_detectors_recompute_without_the_detectors(monkeypatch):
    import sys

    from servewatch.bundle.recompute import detectors_recompute
    monkeypatch.setitem(sys.modules, "servewatch.detectors.config", None)
    with pytest.raises(BundleInvalid) as err:
        detectors_recompute([], {})
    assert str(err.value).startswith("cannot recompute verdicts: detectors unavailable (")


# --- the recorder's own sampling gaps (issue 50): a verdict concluded across one is noted, and verify checks it ------

def test_a_verdict_across_a_stored_gap_must_carry_its_note(copy):
    from servewatch.bundle.recompute import with_gaps
    from servewatch.detectors.starved import GAP_DETAIL

    [stored] = incident(copy)["verdicts"]
    gap = {"start_t": stored["onset"] + 0.25, "end_t": stored["onset"] + 2.0}     # inside [onset, t]: 1.75 s

    def add_gap(doc):
        doc["window"]["recorder"] = {"interval_s": 0.5, "threshold_s": 1.25, "gaps": [gap]}
    edit_incident(copy, add_gap)
    assert fails(copy) == (f"verdict {stored['name']} at t={stored['t']} does not follow from the stored samples "
                           f"(recomputed: onset={stored['onset']} t={stored['t']})")

    def add_note(doc):
        [v] = doc["verdicts"]
        v["why"] += "; concluded across a 1.8 s gap in the recorder's own sampling"
        v["details"][GAP_DETAIL] = 1.75
    edit_incident(copy, add_note)
    assert verify_bundle(copy, synthetic_recompute).verdicts_checked == 1
    # the note follows from the stored gaps alone: none stored, none made; a gap outside the verdict, none either
    assert with_gaps(synthetic_recompute, None) is synthetic_recompute
    assert with_gaps(synthetic_recompute, {"interval_s": 0.5, "threshold_s": 1.25, "gaps": []}) is synthetic_recompute
    far = {"interval_s": 0.5, "threshold_s": 1.25, "gaps": [{"start_t": stored["t"] + 1.0, "end_t": stored["t"] + 3.0}]}
    samples = [V.serialize.sample_from_dict(d) for d in verify_bundle(copy, synthetic_recompute).samples]
    assert all(GAP_DETAIL not in v.details for v in with_gaps(synthetic_recompute, far)(samples, {"min_stall_s": 3.0}))


def _instance_dicts():
    from servewatch.bundle import serialize

    made = []
    for name, ts in (("p1", (3.0, 1.0)), ("d1", (2.0, 4.0, 5.0))):
        for t in ts:
            made.append({**serialize.sample_to_dict(HealthSample(t=t, status=200, latency_s=0.01, error=None)),
                         "instance": name})
    return made


def test_stored_samples_of_a_deployment_are_each_instance_s_own_window_in_its_order():
    from servewatch.bundle.recompute import stored_samples
    from servewatch.timeline.window import InstanceWindow, Window

    got = stored_samples(_instance_dicts(), (("d1", "decode"), ("p1", "prefill"), ("x9", "decode")))
    assert got == Window(instances=(
        InstanceWindow("d1", "decode", Window(health=tuple(
            HealthSample(t=t, status=200, latency_s=0.01, error=None) for t in (2.0, 4.0, 5.0)))),
        InstanceWindow("p1", "prefill", Window(health=tuple(
            HealthSample(t=t, status=200, latency_s=0.01, error=None) for t in (1.0, 3.0)))),
        InstanceWindow("x9", "decode", Window())))
    # without a deployment: the samples as stored, in their order, one list
    assert stored_samples(_instance_dicts()) == [HealthSample(t=t, status=200, latency_s=0.01, error=None)
                                                 for t in (3.0, 1.0, 2.0, 4.0, 5.0)]


def test_detectors_recompute_of_a_deployment_judges_its_window_as_given():
    from servewatch.bundle.recompute import detectors_recompute, stored_samples
    from servewatch.detectors import DetectorConfig, run_detectors

    window = stored_samples(_instance_dicts(), (("p1", "prefill"), ("d1", "decode")))
    assert list(detectors_recompute(window, {})) == list(run_detectors(window, DetectorConfig()))


def test_deployment_of_lists_each_instance_in_order():
    assert V.deployment_of({"target": {"deployment": [{"name": "h:1", "role": "prefill", "x": 1},
                                                      {"name": "h:2", "role": "decode"}]}}) == \
        (("h:1", "prefill"), ("h:2", "decode"))
    assert V.deployment_of({"target": {}}) == ()
    assert V.deployment_of({}) == ()


def test_the_deployment_checks_word_for_word():
    pair = {"target": {"deployment": [{"name": "h:1", "role": "prefill"}, {"name": "h:2", "role": "decode"}]}}
    ok = [{"source": "health", "t": 1.0, "instance": "h:1", "role": "prefill"},
          {"source": "metrics", "t": 2.0, "instance": "h:2", "role": "decode"}]
    assert V._check_deployment(pair, ok) is None
    assert V._check_deployment({"target": {}}, [{"source": "health", "t": 1.0}]) is None

    def says(incident, samples):
        with pytest.raises(BundleInvalid) as err:
            V._check_deployment(incident, samples)
        return str(err.value)

    twice = {"target": {"deployment": [{"name": "h:1", "role": "prefill"}, {"name": "h:1", "role": "decode"}]}}
    assert says(twice, ok) == "incident.json: target.deployment lists an instance twice"
    assert says({"target": {}}, [{"source": "health", "t": 1.0, "instance": "h:1"}]) == \
        "samples: a health sample names instance h:1, but the target is not a deployment"
    assert says({"target": {}}, [{"source": "health", "t": 0.5}, {"source": "gpu", "t": 1.0, "instance": "h:1"}]) == \
        "samples: a gpu sample names instance h:1, but the target is not a deployment"      # every sample is read
    assert says(pair, [{"source": "metrics", "t": 3.5, "instance": "h:9", "role": "decode"}]) == \
        "samples: a metrics sample at t=3.5 names no instance of the deployment"
    assert says(pair, [{"source": "metrics", "t": 3.5, "role": "decode"}]) == \
        "samples: a metrics sample at t=3.5 names no instance of the deployment"
    assert says(pair, [{"source": "health", "t": 1.0, "instance": "h:1", "role": "decode"}]) == \
        "samples: a health sample of h:1 says role decode, the deployment says prefill"
    assert says(pair, [{"source": "health", "t": 1.0, "instance": "h:2"}]) == \
        "samples: a health sample of h:2 names no role, the deployment says decode"


def test_a_verdict_stored_without_its_action_is_compared_without_it(copy):
    doc = incident(copy)
    assert all("action" in v for v in doc["verdicts"])
    edit_incident(copy, lambda d: [v.pop("action") for v in d["verdicts"]])
    assert verify_bundle(copy, synthetic_recompute).verdicts_checked == 1
    # with its action stored, a wrong one does not follow
    edit_incident(copy, lambda d: [v.update(action="info") for v in d["verdicts"]])
    assert "does not follow from the stored samples" in fails(copy)


def test_a_kind_added_after_the_bundle_was_written_may_be_absent_from_its_counts(copy):
    edit_incident(copy, lambda d: d["window"]["samples"].pop("slots"))
    assert verify_bundle(copy, synthetic_recompute).verdicts_checked == 1
    # a count that is there must agree
    edit_incident(copy, lambda d: d["window"]["samples"].update(probe=1))
    assert fails(copy).startswith("incident.json: window.samples {")


def test_a_deployment_s_recomputation_is_given_each_instance_s_window():
    from servewatch.bundle.recompute import stored_samples

    deployment = [{"name": "p1", "role": "prefill"}, {"name": "d1", "role": "decode"}]
    doc = {"target": {"deployment": deployment}, "window": {}, "detector_config": {}, "verdicts": []}
    given = []
    assert V._check_recomputation(doc, _instance_dicts(), lambda s, c: given.append(s) or []) == (0, 0)
    assert given == [stored_samples(_instance_dicts(), (("p1", "prefill"), ("d1", "decode")))]
    assert len(given[0].instances) == 2 and len(given[0].instance("d1").window.health) == 3
