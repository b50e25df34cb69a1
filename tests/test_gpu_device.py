"""sap_gpu.device.get_device: every entry point that takes a device gives one clear ValueError for a
device this machine lacks, before Warp is asked (so Warp prints nothing), and accepts a valid one."""

from __future__ import annotations

import pytest
import warp as wp

import sap_gpu
from sap_common import scenes
from sap_common.state import SapContacts
from sap_gpu.arrays import GpuModel
from sap_gpu.device import available_devices, get_device

MODEL = scenes.get("sphere_drop", num_worlds=2).sap_model
HAS_CUDA = any(a.startswith("cuda") for a in available_devices())
# Devices this machine does not have: a CUDA ordinal no machine has, a name Warp does not know,
# and, on a machine without CUDA, plain "cuda" and "cuda:0" (the reported cases).
MISSING = ["cuda:99", "tpu"] + ([] if HAS_CUDA else ["cuda", "cuda:0"])

ENTRY_POINTS = {
    "SolverSAP": lambda d: sap_gpu.SolverSAP(MODEL, max_rigid_contact=2, device=d),
    "CollisionPipeline": lambda d: sap_gpu.CollisionPipeline(MODEL, 2, device=d),
    "GpuModel": lambda d: GpuModel(MODEL, d),
    "to_device": lambda d: sap_gpu.to_device(MODEL.state(), d),
    "state": lambda d: sap_gpu.state(MODEL, d),
    "control": lambda d: sap_gpu.control(MODEL, d),
    "contacts": lambda d: sap_gpu.contacts(2, 3, d),
}


@pytest.mark.parametrize("entry", sorted(ENTRY_POINTS))
@pytest.mark.parametrize("name", MISSING)
def test_a_missing_device_is_one_clear_value_error_and_warp_prints_nothing(capfd, entry, name):
    wp.init()
    capfd.readouterr()
    why = "no CUDA device here" if name.startswith("cuda") and not HAS_CUDA else "no such Warp device here"
    with pytest.raises(ValueError, match=rf"^device '{name}': {why}; available: {', '.join(available_devices())}$"):
        ENTRY_POINTS[entry](name)
    out, err = capfd.readouterr()
    assert out == "" and err == "", f"Warp printed: {out + err!r}"


@pytest.mark.parametrize("entry", sorted(ENTRY_POINTS))
def test_a_valid_device_is_accepted_by_name_object_and_default(device, entry):
    for d in (str(device), device, None):
        ENTRY_POINTS[entry](d)
    assert get_device(str(device)) == device
    assert get_device(None) == wp.get_device()


def test_not_a_device_at_all_is_named():
    with pytest.raises(ValueError, match=r"^device: expected None, a device name or a wp.Device, got int 3"):
        get_device(3)


def test_the_command_line_tools_use_the_same_check():
    from sap_tools.cli import warp_device

    with pytest.raises(ValueError, match=r"^--device 'cuda:99': no (CUDA|such Warp) device here; available: "):
        warp_device("cuda:99")


def test_contacts_helper_still_checks_its_sizes(device):
    with pytest.raises(ValueError, match=r"max_rigid_contact: must be an integer >= 0"):
        sap_gpu.contacts(2, -1, device)
    assert isinstance(sap_gpu.contacts(2, 3, device), SapContacts)
