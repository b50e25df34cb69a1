"""sap_newton: this project's SAP solver inside Newton (optional; needs ``pip install sap[newton]``).

* :func:`convert_model` / :func:`to_sap_model`: a ``newton.Model`` (all worlds) → SapModel(s).
* :mod:`sap_newton.transfer`: Newton ``State``/``Control``/``Contacts`` ↔ SAP device data
  (Warp kernels, no host round trip).
* :class:`SolverSAP`: a ``newton.solvers.SolverBase`` — swap it in where a Newton example
  constructs its solver.

The core packages (``sap_common``, ``sap_ref``, ``sap_gpu``) never import this package or
Newton.
"""

from sap_common._version import __version__ as __version__

from .convert import NewtonConversion, WorldGroup, convert_model, to_sap_model
from .solver import SolverSAP, default_max_rigid_contact
from .transfer import Transfer

__all__ = ["NewtonConversion", "WorldGroup", "SolverSAP", "Transfer", "convert_model", "default_max_rigid_contact",
           "to_sap_model"]
