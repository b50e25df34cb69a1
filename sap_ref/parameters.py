"""WorldParameters: per-world values of the model's physical parameters, on the host (NumPy).

One ``(num_worlds, *shape)`` float64 array per field of
:data:`~sap_common.parameters.PARAMETER_FIELDS` (masses, COMs, inertias, joint gains and limits,
shape materials and margins, gravity), starting at the model's values. ``set(name, values,
world_mask=None)`` checks the candidate with the model's rules (:func:`sap_common.parameters.check_worlds`)
and writes nothing when it fails. World ``w`` of a batch then steps as the one-world model
``model.replace(num_worlds=1, **params.world_fields(w))`` does, bit for bit: ``SolverSAP`` and
``CollisionPipeline`` given ``parameters=`` run each world as that model (docs/scaling.md
§ Per-world parameters).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from sap_common.model import SapModel
from sap_common.parameters import (
    PARAMETER_FIELDS,
    check_name,
    check_worlds,
    host_values,
    symmetrized,
    world_mask,
)
from sap_common.state import (
    MemoryEstimate,
    available_host_memory,
    check_memory,
    host_nbytes,
    keep_stamp,
    probe_memory,
)

from .arrays import check_host_device

__all__ = ["WorldParameters", "world_slice", "write_world", "parameters_memory"]


class WorldParameters:
    """Per-world values of the fields of :data:`~sap_common.parameters.PARAMETER_FIELDS` of ``model``.

    World ``w`` steps as ``model.replace(num_worlds=1, **params.world_fields(w))`` does (what
    :meth:`world_model` returns), when this object is passed as ``parameters=`` to
    :class:`~sap_ref.SolverSAP` and :class:`~sap_ref.CollisionPipeline` of the same model.

    Args:
        model: the batch's model (its ``num_worlds`` worlds share its topology, geometry and shape pairs).
        device: None or ``"cpu"`` (the host; accepted so that sap_ref and sap_gpu are called alike).

    Attributes:
        model / num_worlds: the model and its world count.
        forbid_rigid: True once a solver with a Hunt–Crossley approximation reads these parameters
            (``discrete_contact_approximation`` ``lagged`` or ``similar``): an infinite
            ``shape_material_ke`` on a shape of a candidate pair is then refused. Setting it True
            checks every world's current values first (``ValueError`` naming the world and shape).
    """

    def __init__(self, model: SapModel, device=None):
        check_host_device(device)
        if not isinstance(model, SapModel):
            raise ValueError(f"model: expected a SapModel, got {type(model).__name__}")
        # Refused before anything is allocated when the values would not fit (docs/scaling.md § Memory).
        check_memory(parameters_memory(model), available_host_memory, "sap_ref.WorldParameters")
        self._allocate(model, model.num_worlds)
        self._models: dict[int, tuple[int, SapModel]] = {}  # world -> (version, one-world model)
        self._forbid_rigid = False

    def _allocate(self, model: SapModel, W: int) -> None:
        """The values of ``W`` worlds (the model's) and the write counts."""
        self.model = model
        self.num_worlds = W
        self._values = {name: np.broadcast_to(np.asarray(getattr(model, name), dtype=np.float64),
                                              (W, *np.shape(getattr(model, name)))).copy()
                        for name in PARAMETER_FIELDS}
        self._version = np.zeros(W, dtype=np.int64)

    @property
    def forbid_rigid(self) -> bool:
        return self._forbid_rigid

    @forbid_rigid.setter
    def forbid_rigid(self, value) -> None:
        if value and not self._forbid_rigid:
            self.check_rigid()
        self._forbid_rigid = bool(value)

    def check_rigid(self) -> None:
        """``ValueError`` if a world's shape of a candidate pair is rigid (``shape_material_ke`` = inf;
        a Hunt–Crossley solver's check of the current values); then :attr:`forbid_rigid` holds for
        later writes (sap_gpu's method of the same name)."""
        check_worlds(self.model, self._values, np.arange(self.num_worlds), ["shape_material_ke"], True)
        self._forbid_rigid = True

    @property
    def version(self) -> np.ndarray:
        """Per world, how many ``set`` calls have written it, (num_worlds,) int64 (a copy)."""
        return self._version.copy()

    def set(self, name: str, values, world_mask=None) -> None:
        """Field ``name`` of the worlds of ``world_mask`` ((num_worlds,) bool or integer array,
        nonzero = write; None: every world) from host ``values``: one world's value (the model's
        shape, every masked world gets it) or one per world ``(num_worlds, *shape)`` (the masked
        rows are read), float64. Checked with the model's rules before anything is written
        (``ValueError`` naming the field, the world and the element); ``body_inertia`` is stored
        symmetrized, as the model stores it."""
        check_name(name)
        vals = host_values(self.model, name, values)
        mask = _world_mask(world_mask, self.num_worlds)
        worlds = np.flatnonzero(mask)
        candidate = dict(self._values)
        candidate[name] = self._values[name].copy()
        candidate[name][mask] = vals[mask]
        check_worlds(self.model, candidate, worlds, [name], self._forbid_rigid)
        self._values[name][mask] = symmetrized(vals[mask]) if name == "body_inertia" else vals[mask]
        self._version[mask] += 1

    def get(self, name: str) -> np.ndarray:
        """A copy of every world's value of field ``name``, (num_worlds, *shape) float64."""
        return self._values[check_name(name)].copy()

    def world_fields(self, w: int) -> dict:
        """World ``w``'s value of every field, by name (copies): ``model.replace(num_worlds=1, **fields)``
        is the one-world model world ``w`` steps as."""
        w = self._world(w)
        return {name: self._values[name][w].copy() for name in PARAMETER_FIELDS}

    def world_model(self, w: int) -> SapModel:
        """``model.replace(num_worlds=1, **world_fields(w))``, built once until world ``w`` is next written."""
        w = self._world(w)
        cached = self._models.get(w)
        if cached is None or cached[0] != self._version[w]:
            cached = (int(self._version[w]), self.model.replace(num_worlds=1, **self.world_fields(w)))
            self._models[w] = cached
        return cached[1]

    def _world(self, w) -> int:
        if isinstance(w, bool) or not isinstance(w, (int, np.integer)) or not 0 <= w < self.num_worlds:
            raise ValueError(f"w: expected a world index in [0, {self.num_worlds}), got {w!r}")
        return int(w)


_world_mask = world_mask  # the module-level name, shadowed by set()'s argument


def world_slice(obj, w: int):
    """A one-world copy of world ``w`` of a SapState/SapControl/SapContacts (arrays ``[w:w+1]``; the
    order flags and the collision pipeline's stamp kept): what a one-world solver or pipeline of
    :meth:`WorldParameters.world_model` reads and writes."""
    return keep_stamp(obj, dataclasses.replace(
        obj, **{f.name: np.array(getattr(obj, f.name)[w:w + 1]) for f in dataclasses.fields(obj)
                if isinstance(getattr(obj, f.name), np.ndarray)}))


def write_world(obj, one, w: int) -> None:
    """Write the one-world copy ``one`` back into world ``w`` of ``obj`` (every array field)."""
    for f in dataclasses.fields(obj):
        if isinstance(getattr(obj, f.name), np.ndarray):
            getattr(obj, f.name)[w] = getattr(one, f.name)[0]


def parameters_memory(model: SapModel) -> MemoryEstimate:
    """The host arrays a :class:`WorldParameters` of ``model`` allocates, measured on 1 and 2 worlds
    (``sap_common.state.probe_memory``): the part ``parameters`` of a MemoryEstimate."""

    def measure(W):
        probe = WorldParameters.__new__(WorldParameters)
        probe._allocate(model, W)
        return host_nbytes(probe, skip=(SapModel,))

    return probe_memory("parameters", model, measure, key="sap_ref")
