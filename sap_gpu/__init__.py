"""sap_gpu: the sap_ref time step batched over num_worlds worlds in NVIDIA Warp.

Same stage files as ``sap_ref`` (counterparts in docs/pipeline.md), plus ``workspace`` (every
buffer of a step, allocated once), ``contact_problem`` and ``contact_solve_fused`` (stage 3's
shared functions, and its loop in one block of threads per world), ``blocked_cholesky``
(batched, masked, multi-RHS tile Cholesky), ``launch`` (block sizes), ``arrays`` (device
data) and ``observables`` (what a step leaves besides the state: contact forces, body wrenches
and accelerations, per-world statistics and failure flags, and the per-world reset). Runs on
Warp's ``"cpu"`` device too, which is how CI tests it. Importing it changes no Warp setting:
Warp's own messages (e.g. one line per module it loads, at its default log level) are the
application's to silence (``wp.config.log_level = wp.LOG_WARNING``).
"""

from sap_common._version import __version__ as __version__

from .arrays import (
    ContactSlots,
    GpuModel,
    clear_contact,
    contact_slots,
    contacts,
    control,
    state,
    to_device,
    to_host,
    write_contact,
    write_contact_pair,
    write_contact_point,
)
from .collision import CollisionPipeline, pair_material
from .parameters import WorldParameters, world_view
from .solver import SolverSAP, estimate_memory

__all__ = ["SolverSAP", "CollisionPipeline", "WorldParameters", "world_view", "GpuModel", "to_device", "to_host",
           "state", "control", "contacts", "estimate_memory",
           "write_contact", "clear_contact", "ContactSlots", "contact_slots", "write_contact_point",
           "write_contact_pair", "pair_material"]
