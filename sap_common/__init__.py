"""What sap_ref and sap_gpu share: model, conventions, configuration, scenes (NumPy only).

See docs/design.md § Layout. Nothing here imports Warp.
"""

from ._version import __version__ as __version__
from .builder import ModelBuilder
from .config import PRESETS, SapConfig
from .model import JointType, SapModel, ShapeType
from .state import SapContacts, SapControl, SapState

__all__ = [
    "ModelBuilder",
    "PRESETS",
    "SapConfig",
    "JointType",
    "SapModel",
    "ShapeType",
    "SapContacts",
    "SapControl",
    "SapState",
]
