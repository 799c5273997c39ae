"""Format versions (docs/xir-format.md, Versions): files of the vendor's toolchain
(`icraft_xir_version` "3.6.2" or "3.6.2.82") load under the vendor's rules (fields this reader
does not know are skipped and logged), a newer or older vendor major is refused, this project's
1.0 files still load strictly, and what the writer writes carries a vendor-form version with
our own revision in the `xir_format` tag."""

from __future__ import annotations

import copy
import json
import logging
import re
from pathlib import Path

import pytest
from test_xir_serialize import assert_same, build_all_ops, build_conv2d_example

import xir
from xir.network import FORMAT_TAG, FORMAT_VERSION, VENDOR_XIR_VERSION
from xir.serialize import load_network, network_from_dict, network_to_dict, save_network

DATA = Path(__file__).resolve().parents[2] / "data"
EXAMPLE = DATA / "conv2d_example.json"
LEGACY = DATA / "conv2d_example_v1_0.json"  # written by this project before revision 1.1
RAW = DATA / "conv2d_example.raw"


def vendorize(obj: dict, version: str) -> dict:
    """`obj` as the vendor's toolchain would write it: its version, no `xir_format` tag, and
    fields this reader does not know on the network, every op and every value (the vendor's
    aliasing fields `real`/`fake_from`, a build id, an attribute of a newer compiler)."""
    out = copy.deepcopy(obj)
    out["icraft_xir_version"] = version
    out["tags"].pop(FORMAT_TAG, None)
    out["icraft_build"] = "3.33.1-b82"

    def values(op: dict) -> list[dict]:
        vs = list(op["inputs"]) + list(op["outputs"]) + list(op.get("params", []))
        return vs + ([op["instr"]] if op.get("instr") else [])

    for op in out["ops"]:
        op["vendor_schedule_hint"] = 3
        for v in values(op):
            v["real"] = True
            v["fake_from"] = -1
            v["dtype"]["vendor_align"] = 64
    return out


@pytest.mark.parametrize("version", ["3.6.2", "3.6.2.82", "3.0.0", "3.41.7.1205"])
def test_vendor_file_loads_under_vendor_rules(version, caplog):
    obj = vendorize(json.loads(EXAMPLE.read_text()), version)
    obj["params_md5"] = obj["params_md5"].upper()
    with caplog.at_level(logging.INFO, logger="xir.serialize.json"):
        net = network_from_dict(obj, file="vendor.json")
    net.loadParamsFromFile(RAW)
    assert net.icraft_xir_version == version and FORMAT_TAG not in net.tags
    assert_same(build_conv2d_example(), net)
    note = " ".join(r.getMessage() for r in caplog.records)
    assert f"vendor format {version}" in note
    for key in ("icraft_build", "vendor_schedule_hint", "real", "fake_from", "vendor_align"):
        assert key in note  # every skipped field is reported


def test_vendor_rules_on_every_op_type():
    net = build_all_ops()
    obj = vendorize(network_to_dict(net), "3.6.2.82")
    back = network_from_dict(obj)
    assert [op.op_type for op in back.ops] == [op.op_type for op in net.ops]
    assert network_to_dict(back)["ops"] == network_to_dict(net)["ops"]


def test_vendor_op_this_reader_lacks_is_refused_by_name():
    obj = vendorize(json.loads(EXAMPLE.read_text()), "3.6.2")
    obj["ops"][2]["_type_key"] = "icraft::xir::YoloPostProcess"
    with pytest.raises(xir.UnknownTypeKeyError, match="YoloPostProcess.*vendor's toolchain") \
            as info:
        network_from_dict(obj, file="vendor.json")
    assert info.value.file == "vendor.json" and info.value.op_id == obj["ops"][2]["op_id"]


def test_vendor_file_still_gets_every_other_check():
    obj = vendorize(json.loads(EXAMPLE.read_text()), "3.6.2")
    obj["ops"][1]["stride_height"] = "1"  # a known field with a wrong type
    with pytest.raises(xir.FieldTypeError, match="stride_height"):
        network_from_dict(obj)
    obj = vendorize(json.loads(EXAMPLE.read_text()), "3.6.2")
    del obj["ops"][1]["inputs"][1]["dtype"]
    with pytest.raises(xir.MissingFieldError, match="dtype"):
        network_from_dict(obj)


@pytest.mark.parametrize("version,match", [
    ("4.0.0", "vendor format version 4.0.0 is newer than this reader"),
    ("4.1.2.7", "newer than this reader"),
    ("2.9.1", "older than this reader"),
    ("3.6", "format version 3.6 is newer than this reader"),  # MAJOR.MINOR: ours, major 3
    ("3.6.2.82.1", "is not a version"),
    ("v3.6.2", "is not a version"),
    ("", "is not a version"),
])
def test_other_versions_are_refused(version, match):
    obj = vendorize(json.loads(EXAMPLE.read_text()), version)
    with pytest.raises(xir.FieldTypeError, match=match) as info:
        network_from_dict(obj, file="v.json")
    assert info.value.field == "icraft_xir_version"


def test_our_1_0_files_still_load_strictly():
    net = load_network(LEGACY, RAW)
    assert net.icraft_xir_version == "1.0" and FORMAT_TAG not in net.tags
    assert_same(build_conv2d_example(), net)
    obj = json.loads(LEGACY.read_text())
    obj["ops"][1]["stride_heigth"] = 2  # a typo: a 1.0 file is read strictly
    with pytest.raises(xir.FieldTypeError, match="stride_heigth"):
        network_from_dict(obj)


def test_what_we_write_carries_a_vendor_version_and_our_revision(tmp_path):
    net = build_all_ops()
    save_network(net, tmp_path / "n.json")
    obj = json.loads((tmp_path / "n.json").read_text())
    assert re.fullmatch(r"3\.[0-9]+\.[0-9]+", obj["icraft_xir_version"])
    assert obj["icraft_xir_version"] == VENDOR_XIR_VERSION
    assert obj["tags"][FORMAT_TAG] == FORMAT_VERSION and obj["tags"]["origin"] == "test"
    back = load_network(tmp_path / "n.json")
    assert FORMAT_TAG not in back.tags and back.tags == net.tags
    assert_same(net, back)
    obj["ops"][1]["stride_heigth"] = 2  # our own file: strict, typos are caught
    with pytest.raises(xir.FieldTypeError, match="stride_heigth"):
        network_from_dict(obj)
    obj["tags"][FORMAT_TAG] = 11
    with pytest.raises(xir.FieldTypeError, match="revision 11") as info:
        network_from_dict(obj)
    assert info.value.field == f"tags.{FORMAT_TAG}"


def test_vendor_file_round_trips_through_our_writer(tmp_path):
    obj = vendorize(json.loads(EXAMPLE.read_text()), "3.6.2.82")
    (tmp_path / "v.json").write_text(json.dumps(obj))
    (tmp_path / "v.raw").write_bytes(RAW.read_bytes())
    net = load_network(tmp_path / "v.json")
    save_network(net, tmp_path / "ours.json")
    again = load_network(tmp_path / "ours.json")
    written = json.loads((tmp_path / "ours.json").read_text())
    assert written["icraft_xir_version"] == VENDOR_XIR_VERSION
    assert written["tags"] == {FORMAT_TAG: FORMAT_VERSION}
    assert all("real" not in v for op in written["ops"] for v in op["inputs"])  # not carried
    assert_same(net, again)
    assert (tmp_path / "ours.raw").read_bytes() == RAW.read_bytes()
