"""`verify` fails closed: every single-byte mutation, every consistent forgery that changes a verdict."""

from __future__ import annotations

import dataclasses
import json
import os
import random
import shutil

import pytest

from servewatch.cli import main
from servewatch.errors import BundleInvalid
from servewatch.bundle import layout, serialize, verify
from servewatch.bundle.verify import config_from_dict, verify_bundle
try:  # tests/ imported as a package or as a plain directory
    from tests.sinks_synthetic import (stall_window, synthetic_recompute, synthetic_stall_bundle,
                                       synthetic_stall_verdicts)
except ModuleNotFoundError:
    from sinks_synthetic import (stall_window, synthetic_recompute, synthetic_stall_bundle,
                                 synthetic_stall_verdicts)

MUTATIONS = 1200


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    path = synthetic_stall_bundle(tmp_path_factory.mktemp("bundles"))
    assert len(json.loads((path / "incident.json").read_bytes())["window"]["files"]) >= 2
    return path


@pytest.fixture
def copy(bundle, tmp_path):
    target = tmp_path / bundle.name
    shutil.copytree(bundle, target)
    return target


def reseal(path):
    """Recompute every hash after an edit, as a forger with write access would."""
    hashes = {name: layout.sha256((path / name).read_bytes()) for name in os.listdir(path) if name != "manifest.json"}
    (path / "manifest.json").write_bytes(layout.manifest_bytes(hashes))


def rewrite(path, name, document):
    (path / name).write_bytes(layout.encode(document))
    reseal(path)


def test_valid_bundle_verifies(bundle):
    result = verify_bundle(bundle, synthetic_recompute)
    assert result.verdicts_checked == 1
    assert result.line().startswith(f"OK {bundle.name}:")


def test_every_random_single_byte_mutation_is_rejected(bundle, tmp_path):
    work = tmp_path / bundle.name
    shutil.copytree(bundle, work)
    names = sorted(os.listdir(work))
    originals = {name: (work / name).read_bytes() for name in names}
    rng = random.Random(20261129)
    rejected = {name: 0 for name in names}
    for _ in range(MUTATIONS):
        name = rng.choice(names)            # uniform over files, so the small manifest gets its share
        data = bytearray(originals[name])
        position = rng.randrange(len(data))
        data[position] ^= rng.randrange(1, 256)
        (work / name).write_bytes(bytes(data))
        with pytest.raises(BundleInvalid):
            verify_bundle(work, synthetic_recompute)
        rejected[name] += 1
        (work / name).write_bytes(originals[name])
    assert sum(rejected.values()) == MUTATIONS
    assert min(rejected.values()) >= MUTATIONS // (2 * len(names)), rejected
    verify_bundle(work, synthetic_recompute)   # restored: accepted again


def test_json_valid_mutations_are_rejected(copy):
    manifest = (copy / "manifest.json").read_bytes()
    incident = (copy / "incident.json").read_bytes()
    cases = [
        ("manifest.json", manifest.replace(b'{"schema"', b'{ "schema"', 1)),              # whitespace
        ("manifest.json", manifest[:-1] + b" \n"),                                         # trailing space
        ("incident.json", incident.replace(b'"keep":4', b'"keep":5', 1)),                  # a digit
        ("incident.json", incident.replace(b"health 200", b"health 201", 1)),              # inside a string
        ("incident.json", incident.replace(b"\n", b"\r", 1)),                              # the newline
    ]
    for name, mutated in cases:
        assert mutated != (copy / name).read_bytes()
        original = (copy / name).read_bytes()
        (copy / name).write_bytes(mutated)
        with pytest.raises(BundleInvalid):
            verify_bundle(copy, synthetic_recompute)
        (copy / name).write_bytes(original)


def test_forged_samples_with_recomputed_hashes_fail_recomputation(copy):
    """Edit the stored samples so tokens keep moving: the stall no longer follows."""
    incident = json.loads((copy / "incident.json").read_bytes())
    for name in incident["window"]["files"]:
        document = json.loads((copy / name).read_bytes())
        for sample in document["samples"]:
            if sample["source"] == "metrics":
                counters = sample["engines"][0]["counters"]
                counters["generation_tokens"] = round(sample["t"] - 1_800_000_000.0, 2) * 1000.0
        rewrite(copy, name, document)
    with pytest.raises(BundleInvalid, match="alive_health_ok_no_progress .* does not follow from the stored samples"):
        verify_bundle(copy, synthetic_recompute)


def test_forged_verdict_with_recomputed_hashes_is_rejected(copy):
    incident = json.loads((copy / "incident.json").read_bytes())
    incident["verdicts"][0]["onset"] = incident["verdicts"][0]["onset"] - 0.5
    incident["trigger"]["onset"] = incident["verdicts"][0]["onset"]
    rewrite(copy, "incident.json", incident)
    with pytest.raises(BundleInvalid, match="does not follow"):
        verify_bundle(copy, synthetic_recompute)


def test_non_canonical_encoding_is_rejected_even_when_resealed(copy):
    incident = json.loads((copy / "incident.json").read_bytes())
    (copy / "incident.json").write_bytes(json.dumps(incident, indent=1).encode())
    reseal(copy)
    with pytest.raises(BundleInvalid, match="canonical"):
        verify_bundle(copy, synthetic_recompute)


def test_evidence_must_point_at_a_stored_sample(copy):
    incident = json.loads((copy / "incident.json").read_bytes())
    incident["verdicts"][0]["evidence"][0]["t"] = 1.0
    rewrite(copy, "incident.json", incident)
    with pytest.raises(BundleInvalid, match="not a stored sample"):
        verify_bundle(copy, synthetic_recompute)


def test_counts_and_times_must_agree(copy):
    incident = json.loads((copy / "incident.json").read_bytes())
    incident["window"]["samples"]["health"] += 1
    rewrite(copy, "incident.json", incident)
    with pytest.raises(BundleInvalid, match="window.samples"):
        verify_bundle(copy, synthetic_recompute)


def test_schema_is_closed(copy):
    incident = json.loads((copy / "incident.json").read_bytes())
    incident["target"]["prompt"] = "hello"
    rewrite(copy, "incident.json", incident)
    with pytest.raises(BundleInvalid, match="schema violation"):
        verify_bundle(copy, synthetic_recompute)


def test_extra_missing_and_linked_files_are_rejected(copy, tmp_path):
    (copy / "notes.txt").write_text("hi")
    with pytest.raises(BundleInvalid, match="notes.txt"):
        verify_bundle(copy, synthetic_recompute)
    (copy / "notes.txt").unlink()
    saved = (copy / "samples-001.json").read_bytes()
    (copy / "samples-001.json").unlink()
    with pytest.raises(BundleInvalid, match="samples-001.json"):
        verify_bundle(copy, synthetic_recompute)
    (tmp_path / "elsewhere.json").write_bytes(saved)
    (copy / "samples-001.json").symlink_to(tmp_path / "elsewhere.json")
    with pytest.raises(BundleInvalid, match="unexpected entry"):
        verify_bundle(copy, synthetic_recompute)


def test_duplicate_keys_are_rejected(copy):
    data = (copy / "incident.json").read_bytes()
    (copy / "incident.json").write_bytes(data.replace(b'{"schema":', b'{"keep":1,"schema":', 1)
                                         .replace(b'"keep":1,', b'"schema":"x",', 1))
    reseal(copy)
    with pytest.raises(BundleInvalid, match="duplicate key"):
        verify_bundle(copy, synthetic_recompute)


def test_detector_failure_fails_closed(bundle):
    def broken(samples, config):
        raise RuntimeError("boom")

    with pytest.raises(BundleInvalid, match="recomputation failed: RuntimeError: boom"):
        verify_bundle(bundle, broken)


def test_config_from_dict_rejects_unknown_fields():
    @dataclasses.dataclass(frozen=True)
    class Config:
        floor_s: float = 3.0
        buckets: tuple = (1.0,)

    assert config_from_dict(Config, {"floor_s": 2.5, "buckets": [1.0, "+Inf"]}) == Config(2.5, (1.0, float("inf")))
    with pytest.raises(BundleInvalid, match="unknown field 'surprise'"):
        config_from_dict(Config, {"surprise": 1})


def test_cli_exit_codes_and_one_line(bundle, copy, capsys, monkeypatch):
    monkeypatch.setattr(verify, "detectors_recompute", synthetic_recompute)
    assert main(["verify", str(bundle)]) == 0
    out, err = capsys.readouterr()
    assert out.startswith("OK ") and err == ""
    data = bytearray((copy / "samples-000.json").read_bytes())
    data[100] ^= 0x01
    (copy / "samples-000.json").write_bytes(bytes(data))
    assert main(["verify", str(copy)]) == 1
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1
    assert err.startswith(f"servewatch verify: {copy}: samples-000.json: SHA-256 does not match")
    assert main(["verify", str(copy / "nope")]) == 2            # a path that is not there: bad input
    assert capsys.readouterr().err == f"servewatch verify: {copy / 'nope'}: no such file or directory\n"


def test_stored_verdict_dicts_use_the_same_normalisation():
    window = stall_window()
    verdict = synthetic_stall_verdicts(window)[0]
    stored = json.loads(layout.encode(serialize.verdict_to_dict(verdict)))
    assert serialize.verdict_to_dict(serialize.verdict_from_dict(stored)) == stored


def test_shipped_schemas_are_closed_everywhere():
    from importlib import resources

    def walk(node, where):
        if isinstance(node, list):
            for i, x in enumerate(node):
                walk(x, f"{where}[{i}]")
            return
        if not isinstance(node, dict):
            return
        if "properties" in node or "patternProperties" in node:
            discriminated = "allOf" in node and all("then" in branch for branch in node["allOf"])
            if discriminated:
                assert all(b["then"].get("additionalProperties") is False for b in node["allOf"]), where
            else:
                assert node.get("additionalProperties") is False, where
        for key, value in node.items():
            if key != "if":          # a discriminator's condition, not a data contract
                walk(value, f"{where}/{key}")

    for name in ("incident", "samples", "manifest"):
        text = resources.files("servewatch.bundle").joinpath("schema", f"{name}.schema.json").read_text()
        walk(json.loads(text), name)


def test_bundle_directory_name_must_match_its_incident(bundle, tmp_path):
    renamed = tmp_path / "my-incident"          # a free name is fine
    shutil.copytree(bundle, renamed)
    verify_bundle(renamed, synthetic_recompute)
    parts = bundle.name.split("-")
    parts[-1] = "00000000" if parts[-1] != "00000000" else "11111111"
    wrong = tmp_path / "-".join(parts)          # the writer's pattern, another incident's id
    shutil.copytree(bundle, wrong)
    with pytest.raises(BundleInvalid, match="does not match incident.json"):
        verify_bundle(wrong, synthetic_recompute)


def test_out_of_range_numbers_and_odd_bundles_fail_in_one_line(copy, tmp_path):
    incident = (copy / "incident.json").read_bytes()
    (copy / "incident.json").write_bytes(incident.replace(b'"keep":4', b'"keep":1e999', 1))
    reseal(copy)
    with pytest.raises(BundleInvalid, match="out of range"):
        verify_bundle(copy, synthetic_recompute)
    crowded = tmp_path / "crowded"
    crowded.mkdir()
    for i in range(70):
        (crowded / f"f{i}").write_text("x")
    with pytest.raises(BundleInvalid, match="more than a bundle can hold"):
        verify_bundle(crowded, synthetic_recompute)


def test_an_unexpected_error_is_still_one_line(bundle, monkeypatch):
    def explode(*args, **kwargs):
        raise KeyError("surprise")

    monkeypatch.setattr(verify, "_check_identity", explode)
    with pytest.raises(BundleInvalid, match="unexpected KeyError"):
        verify_bundle(bundle, synthetic_recompute)


def test_cli_checks_several_bundles_and_fails_if_any_fails(bundle, copy, capsys, monkeypatch):
    monkeypatch.setattr(verify, "detectors_recompute", synthetic_recompute)
    assert main(["verify", str(bundle), str(bundle)]) == 0
    assert capsys.readouterr().out.count("OK ") == 2
    (copy / "incident.json").write_bytes((copy / "incident.json").read_bytes() + b" ")
    assert main(["verify", str(bundle), str(copy)]) == 1
    out, err = capsys.readouterr()
    assert out.count("OK ") == 1
    assert err.count("\n") == 1 and err.startswith(f"servewatch verify: {copy}: incident.json: SHA-256")


def test_cli_json_is_one_object_per_bundle_and_fails_if_any_fails(bundle, copy, capsys, monkeypatch):
    monkeypatch.setattr(verify, "detectors_recompute", synthetic_recompute)
    data = bytearray((copy / "samples-000.json").read_bytes())
    data[100] ^= 0x01
    (copy / "samples-000.json").write_bytes(bytes(data))
    assert main(["verify", "--json", str(bundle), str(copy)]) == 1
    out, err = capsys.readouterr()
    good, bad = [json.loads(line) for line in out.splitlines()]
    incident = json.loads((bundle / "incident.json").read_bytes())
    assert good == {"bundle": str(bundle), "ok": True, "incident_id": incident["incident_id"],
                    "trigger": incident["trigger"]["verdict"], "files_hashed": len(incident["window"]["files"]) + 2,
                    "samples": len(verify_bundle(bundle, synthetic_recompute).samples), "verdicts_checked": 1,
                    "verdicts_not_stored": 0}
    assert bad["ok"] is False and bad["error"].startswith("samples-000.json: SHA-256 does not match")
    assert err == ""
    assert main(["verify", "--json", str(bundle)]) == 0
