"""sap_gpu: the sap_ref time step batched over num_worlds worlds in NVIDIA Warp.

Same stage files and function names as ``sap_ref`` (docs/design.md § Layout), plus ``blocked_cholesky``
(batched, masked, multi-RHS tile Cholesky), ``fused_newton`` (stage 3 in one block of threads
per world), ``launch`` (block sizes) and ``arrays`` (device data). Runs on Warp's ``"cpu"``
device too, which is how CI tests it.
"""

import warp as wp

# Warp's per-module "Module … load on device" lines are INFO; keep warnings and errors. Set
# wp.config.log_level = wp.LOG_INFO after importing sap_gpu to see them again.
if wp.config.log_level < wp.LOG_WARNING:
    wp.config.log_level = wp.LOG_WARNING

from .arrays import GpuModel, contacts, control, state, to_device, to_host  # noqa: E402
from .collision import CollisionPipeline  # noqa: E402
from .solver import SolverSAP  # noqa: E402

__all__ = ["SolverSAP", "CollisionPipeline", "GpuModel", "to_device", "to_host", "state", "control", "contacts"]
