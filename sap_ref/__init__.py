"""sap_ref: the readable single-world NumPy/SciPy reference of Drake's SAP time step.

One world at a time, float64 unless a precision knob says otherwise (docs/design.md § Layout). Its stages
(kinematics, dynamics, free motion, collision, contact Jacobians, constraints, the Newton
solve, line searches, integration) are one module each (docs/pipeline.md);
the model, conventions and configuration it runs on live in ``sap_common``.

The top level has ``sap_gpu``'s names (``SolverSAP``, ``CollisionPipeline``, ``state``,
``control``, ``contacts``, ``to_device``, ``to_host``, ``estimate_memory``) with the same
arguments, so switching backends is one import; ``device`` here can only be the host (None or ``"cpu"``).
"""

from sap_common._version import __version__ as __version__

from .arrays import clear_contact, contacts, control, state, to_device, to_host, write_contact
from .collision import CollisionPipeline
from .parameters import WorldParameters
from .solver import SolverSAP, estimate_memory

__all__ = ["SolverSAP", "CollisionPipeline", "WorldParameters", "to_device", "to_host", "state", "control", "contacts",
           "write_contact", "clear_contact", "estimate_memory"]
