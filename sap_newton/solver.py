"""``SolverSAP`` for Newton: this project's SAP time step behind Newton's solver interface.

A Newton program switches to SAP by changing the line that builds its solver::

    solver = newton.solvers.SolverMuJoCo(model)          # before
    solver = sap_newton.SolverSAP(model)                 # after
    ...
    solver.step(state_0, state_1, control, contacts, dt)  # unchanged

Each step reads Newton's ``State``/``Control`` (and ``Contacts``), runs one
:class:`sap_gpu.SolverSAP` per group of identical worlds on the model's device, and writes
``joint_q``, ``joint_qd``, ``body_q`` and ``body_qd`` of ``state_out`` — so Newton's viewers,
sensors and selection API see the SAP simulation. Everything is allocated at construction; a
step launches Warp kernels only (no host synchronization), like ``sap_gpu``.

Contacts (``collision=``):

* ``"newton"`` (default): ``step`` takes the ``newton.Contacts`` the program fills with its own
  ``CollisionPipeline``, converted per world (:mod:`sap_newton.transfer`); a step given
  ``contacts=None`` on a model with candidate shape pairs runs this project's collision instead
  (as Newton's MuJoCo solver collides by itself when it is given no contacts; with
  ``fallback_collision=False`` it has no contact), and one without candidate pairs has no contact;
* ``"sap"``: the solver runs this project's collision (:class:`sap_gpu.CollisionPipeline`) on the
  poses of ``state_in.joint_q``; ``step``'s ``contacts`` must then be ``None``.

Contact slots per world (``max_rigid_contact=None``): :func:`default_max_rigid_contact`, the most
contacts the world's candidate pairs can give at once, so that no contact of Newton's examples is
dropped.

Newton's solver contract (``newton.solvers.SolverBase``, docs/newton.md § Solver contract):
``reset(state, world_mask, flags)`` with Newton's mask (``(world_count + 1,)`` bool, the last entry
for global entities), the observables API (``CONTACT_F``, ``BODY_QDD`` and the solver's own
``BODY_CONTACT_F`` and ``WORLD_STATUS``), ``notify_model_changed(flags)``, and per-world failure
flags on the device (:attr:`SolverSAP.world_status`, ``world_failed``, ``any_failed``) that a
caller can read without a host synchronization.
"""

from __future__ import annotations

import dataclasses

import newton
import numpy as np
import warp as wp

import sap_gpu
from sap_common.collision_rules import pair_capacity
from sap_common.config import SapConfig
from sap_common.model import ShapeType

from .convert import ParameterGather, ShapeGeometry, convert_model
from .transfer import Transfer

__all__ = ["SolverSAP", "COLLISION_SOURCES", "MAX_RIGID_CONTACT_MIN", "NEWTON_PAIR_CONTACTS",
           "NEWTON_MANIFOLD_CONTACTS", "NEWTON_MESH_PAIR_CONTACTS", "NEIGHBORS_PER_SHAPE", "default_max_rigid_contact",
           "CACHED_MODEL_FLAGS",
           "PARAMETER_MODEL_FLAGS", "TOPOLOGY_MODEL_FLAGS"]

wp.set_module_options({"enable_backward": False})

COLLISION_SOURCES = ("newton", "sap")
# Default contact slots per world (default_max_rigid_contact): never fewer than this.
MAX_RIGID_CONTACT_MIN = 8
# The most contacts Newton 1.8's narrow phase writes for one pair of these shape types
# (newton/_src/geometry/narrow_phase.py): its primitive routines (a sphere against a plane, sphere,
# capsule, cylinder or box, a plane against an ellipsoid: one point; a capsule against a plane or a
# capsule: two; a box or a cylinder on a plane: four) ...
_S, _P, _C, _B, _CY, _E = (ShapeType.SPHERE, ShapeType.PLANE, ShapeType.CAPSULE, ShapeType.BOX, ShapeType.CYLINDER,
                           ShapeType.ELLIPSOID)
NEWTON_PAIR_CONTACTS = {frozenset(k): n for k, n in (
    ((_P, _S), 1), ((_S,), 1), ((_S, _C), 1), ((_S, _CY), 1), ((_S, _B), 1), ((_P, _E), 1),
    ((_P, _C), 2), ((_C,), 2), ((_P, _B), 4), ((_P, _CY), 4))}
# ... and every other pair: a GJK/MPR manifold of four points plus the deepest one (multicontact.py),
# the per-pair budget Newton sizes its MuJoCo solver's contact rows with (collide.py,
# _RIGID_CONTACTS_PER_PRIMITIVE_PAIR).
NEWTON_MANIFOLD_CONTACTS = 5
# ... except a pair with a triangle mesh (MESH) or a height field (HFIELD): Newton collides it triangle by
# triangle and its contact reduction keeps at most this many contacts per shape pair (the hard limit of
# contact_reduction.py, MAX_CONTACTS_PER_PAIR, above its 20 normal bins × 7 slots + 100 voxel slots + 7).
NEWTON_MESH_PAIR_CONTACTS = 255
_NEWTON_MESH_TYPES = (int(newton.GeoType.MESH), int(newton.GeoType.HFIELD))


# A moving shape touches at most this many others at once: the neighbour budget Newton sizes its
# CollisionPipeline's contact buffer with (collide.py, _RIGID_CONTACT_MAX_NEIGHBORS_PER_SHAPE).
NEIGHBORS_PER_SHAPE = 20


def default_max_rigid_contact(sap_model, collision: str = "newton", newton_shape_type=None) -> int:
    """The contact slots per world ``SolverSAP`` gives a group of worlds with template ``sap_model``
    when ``max_rigid_contact`` is None: the most contacts the world's candidate shape pairs can give at
    once, at least :data:`MAX_RIGID_CONTACT_MIN`.

    A pair gives at most n contacts: with ``collision="sap"`` what this project's narrow phase keeps
    (``sap_common.collision_rules.MAX_CONTACTS_PER_PAIR``: 8 for a box on a box or a plane, 4 with a
    cylinder, 2 for capsules, 1 with a sphere, …); with ``"newton"`` the larger of that and what
    Newton's narrow phase writes (:data:`NEWTON_PAIR_CONTACTS`; a pair with a Newton MESH or HFIELD
    :data:`NEWTON_MESH_PAIR_CONTACTS`; else :data:`NEWTON_MANIFOLD_CONTACTS`), since a step given no
    Newton contacts runs this project's collision. ``newton_shape_type``: the Newton ``GeoType`` of each
    template shape, (S,) (a MESH and a CONVEX_MESH are both SAP convex meshes, but Newton collides them
    differently); None: every SAP height field counts as a Newton HFIELD, no convex mesh as a MESH. The
    slots are the sum of n
    over the pairs with a static shape (a plane, the world's boxes), plus over the pairs of moving
    shapes the smaller of the sum of n and a neighbour bound: each moving shape touching at most
    :data:`NEIGHBORS_PER_SHAPE` others at once with its largest n (Newton's own bound on the contacts
    of a scene), which only bounds worlds of many shapes that can all touch each other.
    """
    P = len(sap_model.shape_pair)
    if P == 0:
        return MAX_RIGID_CONTACT_MIN
    pairs = np.asarray(sap_model.shape_pair, np.int64).reshape(P, 2)
    caps = pair_capacity(sap_model)
    if collision == "newton":
        kinds = [ShapeType(int(t)) for t in sap_model.shape_type]
        mesh_path = np.asarray([k == ShapeType.HEIGHTFIELD for k in kinds], bool)
        if newton_shape_type is not None:
            mesh_path = np.isin(np.asarray(newton_shape_type, np.int64).reshape(len(kinds)), _NEWTON_MESH_TYPES)
        newton_caps = np.array([NEWTON_MESH_PAIR_CONTACTS if mesh_path[a] or mesh_path[b] else
                                NEWTON_PAIR_CONTACTS.get(frozenset((kinds[a], kinds[b])), NEWTON_MANIFOLD_CONTACTS)
                                for a, b in pairs])
        caps = np.maximum(caps, newton_caps)
    static = (np.asarray(sap_model.shape_body)[pairs] < 0).any(axis=1)
    moving = pairs[~static]
    total = int(caps[static].sum())
    if len(moving):
        S = int(sap_model.shape_count)
        degree = np.bincount(moving.ravel(), minlength=S)
        largest = np.zeros(S, np.int64)
        np.maximum.at(largest, moving[:, 0], caps[~static])
        np.maximum.at(largest, moving[:, 1], caps[~static])
        neighbours = (np.minimum(degree, NEIGHBORS_PER_SHAPE) * largest).sum()
        total += min(int(caps[~static].sum()), int(-(-neighbours // 2)))
    return max(total, MAX_RIGID_CONTACT_MIN)

# The model properties the SAP solvers cache (converted into SapModel templates at construction).
# Those that can only change values of the per-world parameters (sap_common.parameters): masses,
# COMs and inertias; gains and drive modes, limits, effort limits, armature and damping; friction,
# contact stiffness and damping, gaps (and the shapes' geometry, which SHAPE_PROPERTIES covers too and
# notify_model_changed tells apart on the device); gravity. With per-world parameters a change of
# these is copied into the solvers' arrays in place (SolverSAP.notify_model_changed).
PARAMETER_MODEL_FLAGS = int(newton.ModelFlags.BODY_INERTIAL_PROPERTIES | newton.ModelFlags.JOINT_DOF_PROPERTIES
                            | newton.ModelFlags.JOINT_DOF_FORCE_PROPERTIES
                            | newton.ModelFlags.JOINT_DOF_INERTIAL_PROPERTIES | newton.ModelFlags.SHAPE_PROPERTIES
                            | newton.ModelFlags.MODEL_PROPERTIES)
# Those that change what the templates are built from beyond those values: joints (frames, axes,
# coordinates), body flags (SapModel.body_kinematic), reference poses, shape types and sources,
# and the constraints (mimic coefficients, which become couplers): a change of these rebuilds.
TOPOLOGY_MODEL_FLAGS = int(newton.ModelFlags.JOINT_PROPERTIES | newton.ModelFlags.BODY_PROPERTIES
                           | newton.ModelFlags.JOINT_REFERENCE_POSE_PROPERTIES
                           | newton.ModelFlags.SHAPE_TYPE_AND_SOURCE | newton.ModelFlags.CONSTRAINT_PROPERTIES)
# Every category SAP caches; the others (tendons and actuators, which the conversion refuses or does
# not read) need no work.
CACHED_MODEL_FLAGS = PARAMETER_MODEL_FLAGS | TOPOLOGY_MODEL_FLAGS
# The families of per-world fields (convert.ParameterGather.FAMILIES) each parameter category re-reads.
_FAMILY_FLAGS = {"body": int(newton.ModelFlags.BODY_INERTIAL_PROPERTIES),
                 "dof": int(newton.ModelFlags.JOINT_DOF_PROPERTIES | newton.ModelFlags.JOINT_DOF_FORCE_PROPERTIES
                            | newton.ModelFlags.JOINT_DOF_INERTIAL_PROPERTIES),
                 "shape": int(newton.ModelFlags.SHAPE_PROPERTIES),
                 "gravity": int(newton.ModelFlags.MODEL_PROPERTIES)}


def _flag_bits(flags, kind, also: str = "") -> int:
    """``flags`` as an int of ``kind``'s bits (``newton.StateFlags``, ``newton.ModelFlags``), else
    ``ValueError`` naming the argument, the bits that are none of ``kind``'s and the valid names."""
    name = f"newton.{kind.__name__}"
    if isinstance(flags, bool) or not isinstance(flags, (int, np.integer)) or int(flags) < 0:
        raise ValueError(f"flags: expected {name} bits (an int >= 0){' ' + also if also else ''}, got {flags!r}")
    bits = [m for m in kind if int(m) and not int(m) & (int(m) - 1)]  # the single-bit members
    unknown = int(flags) & ~sum(int(m) for m in bits)
    if unknown:
        valid = ", ".join(f"{m.name} ({int(m)})" for m in bits)
        raise ValueError(f"flags: {int(flags)} sets bits that are not {name} bits ({unknown:#x}); valid: {valid}")
    return int(flags)


# ---------------------------------------------------------------------------------- kernels


@wp.func
def _selected(world: int, mask: wp.array(dtype=wp.bool), use_mask: int) -> bool:
    """Newton's mask convention: entry ``world`` for a world, the last entry for world −1."""
    if use_mask == 0:
        return True
    if world < 0:
        return mask[mask.shape[0] - 1]
    return mask[world]


@wp.kernel
def _group_mask(worlds: wp.array(dtype=int), mask: wp.array(dtype=wp.bool), out: wp.array(dtype=wp.bool)):
    i = wp.tid()
    out[i] = mask[worlds[i]]


@wp.kernel
def _reset_joints(worlds: wp.array(dtype=int), mask: wp.array(dtype=wp.bool), use_mask: int,
                  index: wp.array2d(dtype=int), defaults: wp.array(dtype=wp.float32),
                  value: wp.array(dtype=wp.float32)):
    w, i = wp.tid()
    if _selected(worlds[w], mask, use_mask):
        k = index[w, i]
        value[k] = defaults[k]


@wp.kernel
def _clear_body_f(worlds: wp.array(dtype=int), mask: wp.array(dtype=wp.bool), use_mask: int,
                  body_index: wp.array2d(dtype=int), body_f: wp.array(dtype=wp.spatial_vectorf)):
    w, b = wp.tid()
    if _selected(worlds[w], mask, use_mask):
        body_f[body_index[w, b]] = wp.spatial_vectorf()


@wp.kernel
def _articulation_mask(articulation_world: wp.array(dtype=wp.int32), mask: wp.array(dtype=wp.bool), use_mask: int,
                       out: wp.array(dtype=wp.bool)):
    a = wp.tid()
    out[a] = _selected(articulation_world[a], mask, use_mask)


@wp.kernel
def _publish_status(worlds: wp.array(dtype=int), status: wp.array(dtype=wp.int32), failed: wp.array(dtype=wp.int32),
                    world_status: wp.array(dtype=wp.int32), world_failed: wp.array(dtype=wp.int32)):
    i = wp.tid()
    world_status[worlds[i]] = status[i]
    world_failed[worlds[i]] = failed[i]


@wp.kernel
def _any(flags: wp.array(dtype=wp.int32), out: wp.array(dtype=wp.int32)):
    i = wp.tid()
    if flags[i] != 0:
        out[0] = 1  # every writer writes 1


@wp.kernel
def _contact_f(group: int, contact_count: wp.array(dtype=wp.int32), row_map: wp.array(dtype=wp.vec3i),
               force: wp.array2d(dtype=wp.vec3d), contact_f: wp.array(dtype=wp.spatial_vectorf)):
    """Newton's CONTACT_F row k: the force on shape 0's body (−the SAP force on body 1), no moment
    (a point contact has no torsional friction); rows not routed to a slot are left at zero."""
    k = wp.tid()
    if k >= contact_count[0]:
        return
    r = row_map[k]
    if r[0] != group:
        return
    F = force[r[1], r[2]]
    contact_f[k] = wp.spatial_vectorf(-wp.float32(F[0]), -wp.float32(F[1]), -wp.float32(F[2]), wp.float32(0.0),
                                      wp.float32(0.0), wp.float32(0.0))


@wp.kernel
def _body_contact_f(body_com: wp.array2d(dtype=wp.vec3d), body_index: wp.array2d(dtype=int),
                    body_q: wp.array2d(dtype=wp.transformd), force: wp.array2d(dtype=wp.vec3d),
                    torque: wp.array2d(dtype=wp.vec3d), out: wp.array(dtype=wp.spatial_vectorf)):
    """Newton's wrench convention (``State.body_f``): (f, τ about the COM), world frame; SAP gives the
    moment about the origin: τ_C = τ_O − r × f with r = R·com at the step's start pose."""
    w, b = wp.tid()
    X = body_q[w, b]
    f = force[w, b]
    r = wp.quat_rotate(wp.transform_get_rotation(X), body_com[w, b])
    t = torque[w, b] - wp.cross(r, f)
    out[body_index[w, b]] = wp.spatial_vectorf(wp.float32(f[0]), wp.float32(f[1]), wp.float32(f[2]),
                                               wp.float32(t[0]), wp.float32(t[1]), wp.float32(t[2]))


@wp.kernel
def _body_qdd(body_index: wp.array2d(dtype=int), acc: wp.array2d(dtype=wp.spatial_vectord),
              out: wp.array(dtype=wp.spatial_vectorf)):
    w, b = wp.tid()
    out[body_index[w, b]] = wp.spatial_vectorf(acc[w, b])


@wp.func
def _same(a: wp.float64, b: wp.float64) -> bool:
    return a == b or (wp.isnan(a) and wp.isnan(b))  # NaN (an unset material) equals NaN, as np.array_equal's


@wp.kernel
def _differs_f64(values: wp.array2d(dtype=wp.float64), rebuild: wp.array(dtype=wp.int32)):
    """``rebuild[0] = 1`` where a world's value is not world 0's."""
    w, i = wp.tid()
    if not _same(values[w, i], values[0, i]):
        rebuild[0] = 1


@wp.kernel
def _differs_vec3(values: wp.array2d(dtype=wp.vec3d), rebuild: wp.array(dtype=wp.int32)):
    w, i = wp.tid()
    a = values[w, i]
    b = values[0, i]
    for c in range(3):
        if not _same(a[c], b[c]):
            rebuild[0] = 1


@wp.kernel
def _differs_mat33(values: wp.array2d(dtype=wp.mat33d), rebuild: wp.array(dtype=wp.int32)):
    w, i = wp.tid()
    a = values[w, i]
    b = values[0, i]
    for r in range(3):
        for c in range(3):
            if not _same(a[r, c], b[r, c]):
                rebuild[0] = 1


@wp.kernel
def _differs_gravity(values: wp.array(dtype=wp.vec3d), rebuild: wp.array(dtype=wp.int32)):
    w = wp.tid()
    a = values[w]
    b = values[0]
    for c in range(3):
        if not _same(a[c], b[c]):
            rebuild[0] = 1


_DIFFERS = {wp.float64: _differs_f64, wp.vec3d: _differs_vec3, wp.mat33d: _differs_mat33}


class _ObservableKind(newton.solvers.SolverBase.ObservableKind):
    """Newton's observable names, and SAP's own."""

    BODY_CONTACT_F = "body_contact_f"
    """Net contact wrench on each body [N, N·m]: (f, τ about the COM), world frame, (body_count,)."""

    WORLD_STATUS = "world_status"
    """The last step's ``StepStatus`` bits of each world, (world_count,) int32."""


@dataclasses.dataclass(eq=False)
class _Observables(newton.solvers.SolverBase.Observables):
    """Newton's observable arrays plus SAP's (allocated by ``SolverSAP.observables``)."""

    body_contact_f: wp.array | None = newton.solvers.SolverBase.Observables.field(  # noqa: RUF009
        dtype=wp.spatial_vector, frequency=newton.Model.AttributeFrequency.BODY, kind=_ObservableKind.BODY_CONTACT_F)
    world_status: wp.array | None = newton.solvers.SolverBase.Observables.field(  # noqa: RUF009
        dtype=wp.int32, frequency=newton.Model.AttributeFrequency.WORLD, kind=_ObservableKind.WORLD_STATUS)


class _GroupUpdate:
    """One group's side of an in-place parameter update: the re-derived values (``gather.values``),
    a per-world ``sap_gpu.WorldParameters`` of the group's template that checks them (``candidate``:
    its device rules, before anything the solvers read is written), and the parameters objects the
    group's kernels read."""

    def __init__(self, group, model, solver, pipeline, options):
        d = model.device
        self.gather = ParameterGather(group, model, d, options["contact_material"], options["joint_limits"])
        self.params = solver.parameters  # per world, or the solver's shared one row
        self.candidate = sap_gpu.WorldParameters(group.sap_model, device=d)
        self.candidate.forbid_rigid = solver.config.discrete_contact_approximation != "sap"
        # A collision pipeline of a group of equal worlds reads a shared instance of its own, whose
        # pair materials and margins it combines once, when it is built (sap_gpu has no call that
        # combines them again): a change of the shapes' values rebuilds there (_ParameterUpdate.apply);
        # the other fields are written into its one row too, to keep it the group's values.
        self.pipeline_params = pipeline.parameters if pipeline is not None and pipeline.parameters.shared else None
        # With collision="newton" a group of equal worlds gives the pipeline it runs on a step without
        # Newton contacts per-world parameters of its own (combined at every collide): the shape
        # fields are written there too (a group with per-world parameters shares the solver's).
        self.fallback_params = None
        if pipeline is not None and not pipeline.parameters.shared and pipeline.parameters is not solver.parameters:
            self.fallback_params = pipeline.parameters


class _ParameterUpdate:
    """What :meth:`SolverSAP.notify_model_changed` needs to copy new parameter values into the built
    solvers: the geometry the shapes were converted with (copied at the build), the one-entry device
    flag that says a rebuild is needed instead, and per group a :class:`_GroupUpdate`."""

    def __init__(self, solver):
        model = solver.model
        self.rebuild = wp.zeros(1, dtype=wp.int32, device=model.device)
        self.geometry = ShapeGeometry(model, solver.transfer.shape_local)  # as converted: taken now
        pipelines = solver.pipelines or [None] * len(solver.solvers)
        self._parts = list(zip(solver.conversion.groups, solver.solvers, pipelines))
        self._options = solver._options
        self._groups = None  # made by the first in-place update: a solver never notified pays nothing

    def apply(self, model, transfer, families) -> bool:
        """Re-derive the fields of ``families`` from ``model`` and write them in place; False (nothing
        written) when the change needs a rebuild. One host readback of the rebuild flag, and with
        ``"body"`` of the new masses and inertias (their inverses are NumPy's, as a new solver's)."""
        d, rebuild = model.device, self.rebuild
        if "shape" in families and any(p is not None and p.parameters.shared for _, _, p in self._parts):
            return False
        if self._groups is None:
            self._groups = [_GroupUpdate(group, model, s, p, self._options) for group, s, p in self._parts]
        rebuild.zero_()
        if "shape" in families:
            self.geometry.moved(model, rebuild)
        names = [n for f in families for n in ParameterGather.FAMILIES[f]]
        for g, G in enumerate(self._groups):
            G.gather.gather(model, families, rebuild)
            values = G.gather.values
            # Storage of one row for every world (a group built from equal worlds, or a table of the
            # transfer kept once): the new values must be the same in every world, else a rebuild.
            if G.params.shared:
                uniform = names
            else:
                rows = transfer.table_rows(g)
                uniform = [n for n in names if (n == "body_com" and rows["body_com"] == 1)
                           or (n == "shape_margin" and rows["shape_margin"] == 1)
                           or (n in ("shape_material_mu", "shape_material_ke", "shape_material_tau")
                               and rows["materials"] == 1)]
            for name in uniform:
                a = values[name]
                if name == "gravity":
                    wp.launch(_differs_gravity, dim=a.shape[0], device=d, inputs=[a], outputs=[rebuild])
                else:
                    wp.launch(_DIFFERS[a.dtype], dim=a.shape, device=d, inputs=[a], outputs=[rebuild])
            # The device rules of a WorldParameters device write, on the candidate: a world they
            # refuse is rebuilt, which raises the conversion's ValueError naming the value and leaves
            # the solver as it was. (The rules of one family read that family's fields only, and the
            # candidate's others hold values that passed them.)
            for name in names:
                G.candidate.set(name, values[name])
            wp.launch(_any, dim=G.candidate.num_worlds, device=d, inputs=[G.candidate.invalid], outputs=[rebuild])
        if rebuild.numpy()[0]:
            return False
        for g, G in enumerate(self._groups):
            values, inverse = G.gather.values, None
            if "body" in families:
                B = G.params.model.body_count
                inverse = _inverse_inertia(values["body_mass"].numpy()[:, :B], values["body_inertia"].numpy()[:, :B],
                                           values["body_inertia"].shape, d)
            if G.params.shared:
                for params in (G.params, G.pipeline_params):
                    if params is not None:
                        _write_shared(params, values, names, inverse)
            else:  # WorldParameters' device write (and its check: every world valid), then NumPy's inverses
                for name in names:
                    G.params.set(name, values[name])
                if inverse is not None:
                    wp.copy(G.params.array("body_inertia_inv"), inverse)
            shape = "shape" in families
            if shape and G.fallback_params is not None:  # the pipeline reads the shapes' fields only
                for name in ParameterGather.FAMILIES["shape"]:
                    G.fallback_params.set(name, values[name])
            transfer.update_parameters(
                g, body_com=values["body_com"] if "body" in families else None,
                shape_margin=values["shape_margin"] if shape else None,
                materials=(values["shape_material_mu"], values["shape_material_ke"], values["shape_material_tau"],
                           G.params.array("shape_material_hcd")) if shape else None)
        return True


def _inverse_inertia(mass: np.ndarray, inertia: np.ndarray, shape, device) -> wp.array:
    """Each body's inverse inertia, zero for a massless body, from (Wg, B) masses and inertias, as a
    (Wg, …) device array of ``shape``: NumPy's, as every ``sap_gpu.WorldParameters`` built from host
    values holds them (a batched ``np.linalg.inv`` solves each matrix as a single call does; Warp's
    3×3 inverse differs from it in the last bits)."""
    out = np.zeros((*shape, 3, 3))
    massive = mass > 0.0
    if np.any(massive):
        out[:, :mass.shape[1]][massive] = np.linalg.inv(inertia[massive])
    return wp.array(out, dtype=wp.mat33d, device=device)


def _write_shared(params, values: dict, names, inverse) -> None:
    """Device copies of world 0's new values into the one row every world of a shared
    ``sap_gpu.WorldParameters`` reads (behind :meth:`~sap_gpu.WorldParameters.array`'s
    world-stride-0 views), in place. Such an instance stands for its template's values and takes no
    ``set``; sap_newton's template values are read nowhere else in the step, so the row the kernels
    read is the group's values (checked equal in every world by the caller)."""
    for name in names:
        wp.copy(_row(params.array(name)), values[name][:1])
    if inverse is not None:
        wp.copy(_row(params.array("body_inertia_inv")), inverse[:1])


def _row(view: wp.array) -> wp.array:
    """The one row behind a world-stride-0 view ``(num_worlds, …)``, as a ``(1, …)`` array."""
    inner = view.strides[1:]
    row = int(np.prod(view.shape[1:], dtype=np.int64)) * wp.types.type_size_in_bytes(view.dtype)
    return wp.array(ptr=view.ptr, shape=(1, *view.shape[1:]), strides=(row, *inner), dtype=view.dtype,
                    device=view.device)


class SolverSAP(newton.solvers.SolverBase):
    """Drake's SAP contact solver (this project's ``sap_gpu``) as a Newton solver.

    Args:
        model: the finalized ``newton.Model`` (all its worlds; see :mod:`sap_newton.convert` for
            what is mapped and what is refused).
        max_rigid_contact: contact slots per world (default: :func:`default_max_rigid_contact`, the
            most contacts the world's candidate shape pairs can give).
        contact_preset_variant: ``"approx32"`` (default), ``"approx64"`` or ``"drake"``.
        collision: ``"newton"`` (step takes Newton contacts; given ``contacts=None`` on a model
            with candidate shape pairs, the solver collides) or ``"sap"`` (the solver collides).
        fallback_collision: with ``collision="newton"``, whether a step given ``contacts=None`` runs
            this project's collision (True, default: its pipeline is built with the solver, with
            the memory of its per-pair scratch) or has no contact (False: nothing is built).
        contact_material, joint_limits, skip_unsupported_shapes, per_world_parameters: model
            conversion options (:func:`sap_newton.convert_model`). With ``per_world_parameters``
            (default) worlds that differ only in masses, gains, limits, friction or gravity run in
            one SAP solver that reads them per world (``sap_gpu.WorldParameters``), and
            :meth:`notify_model_changed` copies a change of those values in place.
        **overrides: any :class:`~sap_common.config.SapConfig` knob (line search, tolerances, …).

    After :meth:`step`, :meth:`diagnostics` gives per-world status bits (``StepStatus``),
    Newton iterations and dropped contacts, indexed by Newton world; :attr:`world_status`,
    :attr:`world_failed` (since the world's last reset) and :attr:`any_failed` hold the same on
    the device. Observables (``solver.observables(kinds, contacts=...)``, passed to ``step``):
    ``CONTACT_F`` (with ``collision="newton"``: the force on shape 0's body of each Newton contact
    row, no moment), ``BODY_QDD`` (each body's acceleration over the step, ``(a_COM, α)``),
    ``BODY_CONTACT_F`` (the net contact wrench on each body, ``(f, τ about the COM)``) and
    ``WORLD_STATUS``.
    """

    ObservableKind = _ObservableKind
    Observables = _Observables
    SUPPORTED_OBSERVABLES = frozenset({_ObservableKind.CONTACT_F, _ObservableKind.BODY_QDD,
                                       _ObservableKind.BODY_CONTACT_F, _ObservableKind.WORLD_STATUS})

    def __init__(self, model, *, max_rigid_contact: int | None = None, contact_preset_variant: str = "approx32",
                 collision: str = "newton", fallback_collision: bool = True, contact_material: str = "newton",
                 joint_limits: str = "newton", skip_unsupported_shapes: bool = False, per_world_parameters: bool = True,
                 **overrides):
        if not isinstance(model, newton.Model):
            raise ValueError(f"model: expected a newton.Model, got {type(model).__name__}")
        if collision not in COLLISION_SOURCES:
            raise ValueError(f"collision: must be one of {', '.join(map(repr, COLLISION_SOURCES))}, "
                             f"got {collision!r}")
        if not isinstance(fallback_collision, (bool, np.bool_)):
            raise ValueError(f"fallback_collision: must be True or False, got {fallback_collision!r}")
        if max_rigid_contact is not None and (isinstance(max_rigid_contact, bool) or not isinstance(
                max_rigid_contact, (int, np.integer)) or max_rigid_contact < 0):
            raise ValueError(f"max_rigid_contact: must be an integer >= 0 or None, got {max_rigid_contact!r}")
        super().__init__(model)
        self.collision = collision
        self._options = dict(max_rigid_contact=max_rigid_contact, contact_preset_variant=contact_preset_variant,
                             fallback_collision=bool(fallback_collision),
                             contact_material=contact_material, joint_limits=joint_limits,
                             skip_unsupported_shapes=skip_unsupported_shapes,
                             per_world_parameters=per_world_parameters, overrides=dict(overrides))
        # Validate the configuration once, before converting (a bad knob is named first).
        self.config = SapConfig.from_preset(contact_preset_variant, max_rigid_contact=max_rigid_contact or 0,
                                            **overrides)
        # Per Newton world, on the model's device, kept across notify_model_changed (graphs and
        # callers may hold them): the last step's status bits, the failure flag since the world's
        # last reset (StepStatus bits of sap_common.state.FAILURE_BITS), and whether any world failed.
        d, W = model.device, int(model.world_count)
        self.world_status = wp.zeros(W, dtype=wp.int32, device=d)
        self.world_failed = wp.zeros(W, dtype=wp.int32, device=d)
        self.any_failed = wp.zeros(1, dtype=wp.int32, device=d)
        A = int(model.articulation_count or 0)
        self._articulation_mask = wp.zeros(max(A, 1), dtype=wp.bool, device=d)
        self._no_mask = wp.zeros(1, dtype=wp.bool, device=d)
        self._build()

    def _build(self) -> None:
        o, model = self._options, self.model
        self.conversion = conv = convert_model(model, contact_material=o["contact_material"],
                                               joint_limits=o["joint_limits"],
                                               skip_unsupported_shapes=o["skip_unsupported_shapes"],
                                               per_world_parameters=o["per_world_parameters"])
        d = model.device
        self.solvers, self.pipelines, self.parameters = [], [], []
        # collision="newton": a step given no Newton contacts runs this project's collision where the
        # model has candidate pairs (a pipeline per group), as Newton's MuJoCo solver collides by
        # itself; built here, so that such a step allocates nothing either.
        fallback = self.collision == "newton" and o["fallback_collision"] and any(
            len(g.sap_model.shape_pair) for g in conv.groups)
        newton_types = model.shape_type.numpy()
        for g in conv.groups:
            C = o["max_rigid_contact"]
            if C is None:
                C = default_max_rigid_contact(g.sap_model, self.collision, newton_types[g.shape_index[0]])
            params = None  # the group's worlds differ in physical parameters: one solver reads them per world
            if g.parameters:
                params = sap_gpu.WorldParameters(g.sap_model, device=d)
                for name, values in g.parameters.items():
                    params.set(name, values)
            self.parameters.append(params)
            self.solvers.append(sap_gpu.SolverSAP(g.sap_model, max_rigid_contact=C,
                                                  contact_preset_variant=o["contact_preset_variant"], device=d,
                                                  parameters=params, **o["overrides"]))
            if self.collision == "sap":
                self.pipelines.append(sap_gpu.CollisionPipeline(g.sap_model, C, self.solvers[-1].config, device=d,
                                                                parameters=params))
            elif fallback:
                # Per-world parameters, so that notify_model_changed writes a change of the shapes' values
                # in place (a shared instance combines its pair materials once, when it is built).
                own = params
                if own is None:
                    own = sap_gpu.WorldParameters(g.sap_model, device=d)
                    own.forbid_rigid = self.solvers[-1].config.discrete_contact_approximation != "sap"
                self.pipelines.append(sap_gpu.CollisionPipeline(g.sap_model, C, self.solvers[-1].config, device=d,
                                                                parameters=own))
        self.transfer = Transfer(conv, int(model.body_count), int(model.joint_coord_count),
                                 int(model.joint_dof_count), int(model.shape_count), d, self.solvers[0].config)
        self.sap_state_in, self.sap_state_out = self.transfer.states(), self.transfer.states()
        self.sap_control = self.transfer.controls()
        self.sap_contacts = [sap_gpu.contacts(g.sap_model.num_worlds, s.config.max_rigid_contact, d)
                             for g, s in zip(conv.groups, self.solvers)]
        self._group_worlds = [wp.array(np.asarray(g.worlds, np.int32), dtype=int, device=d) for g in conv.groups]
        self._group_masks = [wp.zeros(g.sap_model.num_worlds, dtype=wp.bool, device=d) for g in conv.groups]
        self._contacts_used = False
        self._model_control = model.control(clone_variables=False)
        # notify_model_changed's in-place path (per-world parameters only): its arrays, made here.
        self._update = _ParameterUpdate(self) if o["per_world_parameters"] else None
        self._publish_status()

    # ------------------------------------------------------------------ Newton interface

    @property
    def supported_observables(self) -> frozenset:
        """:attr:`SUPPORTED_OBSERVABLES`, less ``CONTACT_F`` with ``collision="sap"`` (its contacts are
        this project's, in no Newton ``Contacts`` container whose rows CONTACT_F could follow)."""
        if self.collision == "sap":
            return self.SUPPORTED_OBSERVABLES - {self.ObservableKind.CONTACT_F}
        return self.SUPPORTED_OBSERVABLES

    def observables(self, kinds, *, contacts=None, requires_grad=None):
        """Newton's allocator, plus the map from Newton contact rows to SAP slots that ``CONTACT_F``
        needs (sized by ``contacts``; allocated here, never in :meth:`step`)."""
        obs = super().observables(kinds, contacts=contacts, requires_grad=requires_grad)
        if obs.is_requested(self.ObservableKind.CONTACT_F):
            obs._sap_row_map = wp.full(max(obs.contact_f.shape[0], 1), wp.vec3i(-1, -1, -1), dtype=wp.vec3i,
                                       device=self.model.device)
        return obs

    def step(self, state_in, state_out, control, contacts, dt: float, *, observables=None) -> None:
        """Advance every world by ``dt``: Newton ``state_in`` → ``state_out`` (may be the same object).

        ``control=None`` uses the model's control values (Newton's convention); ``contacts`` is a
        ``newton.Contacts`` or ``None`` with ``collision="newton"`` (None: the solver runs this
        project's collision where the model has candidate shape pairs, as Newton's MuJoCo solver
        collides when given no contacts; no contact where it has none), and must be ``None`` with
        ``collision="sap"``. ``observables``: a container from :meth:`observables`; its requested
        arrays are written after the step.
        """
        self.validate_observables(observables, contacts)
        if isinstance(dt, bool) or not isinstance(dt, (int, float, np.integer, np.floating)) or not (
                np.isfinite(dt) and dt > 0):
            raise ValueError(f"dt: must be a finite time step > 0 s, got {dt!r}")
        control = self._model_control if control is None else control
        self.transfer.check_state(state_in, "state_in")
        self.transfer.check_state(state_out, "state_out")
        self.transfer.check_control(control)
        if self.collision == "sap" and contacts is not None:
            raise ValueError("contacts: must be None with collision='sap' (the solver runs its own collision); "
                             "pass Newton contacts with collision='newton'")
        if contacts is not None:
            if not isinstance(contacts, newton.Contacts):
                raise ValueError(f"contacts: expected a newton.Contacts or None, got {type(contacts).__name__}")
            if contacts.device != self.model.device:
                raise ValueError(f"contacts: on device {contacts.device}, the model is on {self.model.device}")
            self._require_unreduced_contacts(contacts)
        kinds = observables.kinds if observables is not None else frozenset()
        row_map = None
        if self.ObservableKind.CONTACT_F in kinds and contacts is not None:
            row_map = observables._sap_row_map
            row_map.fill_(wp.vec3i(-1, -1, -1))
        self._contacts_used = self.collision == "sap" or contacts is not None or bool(self.pipelines)
        for g, solver in enumerate(self.solvers):
            s_in, s_out = self.sap_state_in[g], self.sap_state_out[g]
            self.transfer.state_to_sap(g, state_in, s_in)
            # Poses from joint_q (the reduced coordinates are what the step integrates).
            solver.body_poses(s_in.joint_q, s_in.body_q)
            self.transfer.control_to_sap(g, control, self.sap_control[g])
            sap_contacts = None
            if self.pipelines and contacts is None:  # collision="sap", or no Newton contacts given
                sap_contacts = self.sap_contacts[g]
                self.pipelines[g].collide(s_in, sap_contacts)
            elif contacts is not None:
                sap_contacts = self.sap_contacts[g]
                self.transfer.contacts_to_sap(g, contacts, s_in.body_q, sap_contacts, row_map)
            solver.step(s_in, s_out, self.sap_control[g], sap_contacts, dt)
            self.transfer.state_from_sap(g, s_out, state_out)
        self._publish_status()
        if kinds:
            self._write_observables(observables, contacts, row_map)

    def _write_observables(self, obs, contacts, row_map) -> None:
        """Launch: the requested observables from each group's ``sap_gpu`` observables."""
        K, d = self.ObservableKind, self.model.device
        if K.CONTACT_F in obs.kinds:
            obs.contact_f.zero_()
            if row_map is not None and contacts.rigid_contact_max > 0:
                for g, solver in enumerate(self.solvers):
                    wp.launch(_contact_f, dim=contacts.rigid_contact_max, device=d,
                              inputs=[g, contacts.rigid_contact_count, row_map, solver.observables.contact_force],
                              outputs=[obs.contact_f])
            if contacts is not None and contacts.force is not None and contacts.force.ptr != obs.contact_f.ptr:
                wp.copy(contacts.force, obs.contact_f, count=min(contacts.force.shape[0], obs.contact_f.shape[0]))
        for g, (solver, maps) in enumerate(zip(self.solvers, self.transfer.groups)):
            dim = maps.body_index.shape
            if dim[0] * dim[1] == 0:
                continue
            if K.BODY_QDD in obs.kinds:
                wp.launch(_body_qdd, dim=dim, device=d, inputs=[maps.body_index, solver.observables.body_acceleration],
                          outputs=[obs.body_qdd])
            if K.BODY_CONTACT_F in obs.kinds:
                wp.launch(_body_contact_f, dim=dim, device=d,
                          inputs=[maps.body_com, maps.body_index, self.sap_state_in[g].body_q,
                                  solver.observables.body_contact_force, solver.observables.body_contact_torque],
                          outputs=[obs.body_contact_f])
        if K.WORLD_STATUS in obs.kinds:
            wp.copy(obs.world_status, self.world_status)

    def _publish_status(self) -> None:
        """Launch: each group's last status and failure flags into the per-Newton-world arrays."""
        d = self.model.device
        for solver, worlds in zip(self.solvers, self._group_worlds):
            wp.launch(_publish_status, dim=worlds.shape[0], device=d,
                      inputs=[worlds, solver.last_status, solver.world_statistics.failed],
                      outputs=[self.world_status, self.world_failed])
        self.any_failed.zero_()
        wp.launch(_any, dim=self.world_failed.shape[0], device=d, inputs=[self.world_failed],
                  outputs=[self.any_failed])

    def reset(self, state, world_mask=None, flags=None) -> None:
        """Newton's reset: clear the SAP solver state of the selected worlds and reset the requested
        entries of ``state`` there.

        Args:
            state: the Newton ``State`` to reset in place (``ValueError`` for None, as Newton's MuJoCo
                solver).
            world_mask: Newton's mask, ``wp.bool`` of shape ``(world_count + 1,)`` on the model's
                device: entry w selects world w, the last entry the global entities (world −1:
                SAP simulates none, so it selects nothing here); None: every world.
            flags: ``newton.StateFlags`` bits of ``state`` to reset (None: all): ``JOINT_Q`` /
                ``JOINT_QD`` to the model's ``joint_q`` / ``joint_qd``, ``BODY_Q`` / ``BODY_QD`` by
                forward kinematics of the (reset) joint coordinates of the selected articulations,
                ``BODY_F`` to zero. Particle and ``JOINT_F`` bits (``Control.joint_f``, no state of
                SAP's) have nothing to reset here.

        The solver state of the selected worlds is always cleared: the last step's status and
        iterations, the observables and the per-world statistics (``world_failed`` back to 0;
        ``any_failed`` recounted). Launches only: no allocation and no host synchronization, so a
        reset can sit in a captured CUDA graph with the mask array filled before each replay.
        """
        if state is None:
            raise ValueError("state: required (the Newton State to reset); Newton's mask selects its worlds")
        W = int(self.model.world_count)
        if world_mask is not None and not (isinstance(world_mask, wp.array) and world_mask.dtype == wp.bool
                                           and world_mask.ndim == 1 and world_mask.shape[0] == W + 1
                                           and world_mask.device == self.model.device):
            what = (f"{wp.types.type_repr(world_mask.dtype)} {tuple(world_mask.shape)} on {world_mask.device}"
                    if isinstance(world_mask, wp.array) else type(world_mask).__name__)
            raise ValueError(f"world_mask: expected Newton's mask, a wp.bool array shaped ({W + 1},) (world_count + 1: "
                             f"the last entry selects global entities) on {self.model.device}, or None; got {what}")
        mask = self._normalize_reset_world_mask(world_mask)
        if flags is None:
            flags = int(newton.StateFlags.ALL)
        flags = _flag_bits(flags, newton.StateFlags, "or None")
        self.transfer.check_state(state, "state")
        d, use = self.model.device, int(mask is not None)
        m = self._no_mask if mask is None else mask
        F = newton.StateFlags
        for g, (solver, worlds, maps) in enumerate(zip(self.solvers, self._group_worlds, self.transfer.groups)):
            group_mask = None
            if mask is not None:
                group_mask = self._group_masks[g]
                wp.launch(_group_mask, dim=worlds.shape[0], device=d, inputs=[worlds, mask], outputs=[group_mask])
            solver.reset(None, group_mask)
            for bit, index, default, value in ((F.JOINT_Q, maps.coord_index, self.model.joint_q, state.joint_q),
                                               (F.JOINT_QD, maps.dof_index, self.model.joint_qd, state.joint_qd)):
                if flags & int(bit) and index.shape[0] * index.shape[1]:
                    wp.launch(_reset_joints, dim=index.shape, device=d, inputs=[worlds, m, use, index, default],
                              outputs=[value])
            if flags & int(F.BODY_F) and maps.body_index.shape[0] * maps.body_index.shape[1]:
                wp.launch(_clear_body_f, dim=maps.body_index.shape, device=d, inputs=[worlds, m, use,
                                                                                     maps.body_index],
                          outputs=[state.body_f])
        if flags & int(F.BODY_Q | F.BODY_QD) and int(self.model.articulation_count or 0) > 0:
            wp.launch(_articulation_mask, dim=int(self.model.articulation_count), device=d,
                      inputs=[self.model.articulation_world, m, use], outputs=[self._articulation_mask])
            newton.eval_fk(self.model, state.joint_q, state.joint_qd, state, mask=self._articulation_mask)
        self._publish_status()

    def notify_model_changed(self, flags) -> None:
        """Re-read the Newton model after a change of the categories in ``flags`` (``newton.ModelFlags``).

        * **Parameter categories** (:data:`PARAMETER_MODEL_FLAGS`): ``BODY_INERTIAL_PROPERTIES``
          (masses, COMs, inertias), ``JOINT_DOF_PROPERTIES``, ``JOINT_DOF_FORCE_PROPERTIES`` and
          ``JOINT_DOF_INERTIAL_PROPERTIES`` (gains and drive modes, limits and their stiffness and
          damping, effort limits, armature, damping), ``SHAPE_PROPERTIES`` (friction, stiffness ke
          and damping kd, gap) and ``MODEL_PROPERTIES`` (gravity). With ``per_world_parameters``
          (default) they are copied in place: kernels re-derive each group's per-world parameters
          from the model's device arrays with the conversion's operations, and device copies write
          them into the arrays the solvers read (the group's ``sap_gpu.WorldParameters``, or the
          one row of a group whose worlds are equal), with what derives from them (inverse
          inertias, the pair materials of Newton's contacts, margins, COMs). No solver, state or
          array is replaced, so graphs captured before stay valid and replay with the new values,
          and the per-world statistics carry on. The values are a new ``SolverSAP``'s of the
          changed model, bit for bit.
        * A parameter change that is more than new values **rebuilds** instead: a drive, limit or
          mass that appears or disappears (which rows exist is the template's), a drive mode that
          adds or drops a velocity target, a shape whose pose, scale or surface margin changed
          (``SHAPE_PROPERTIES`` covers geometry too), worlds that now differ where the solver keeps
          one row for all (a group built from equal worlds; its COMs, margins or materials), a
          ``SHAPE_PROPERTIES`` change with ``collision="sap"`` while a group of equal worlds has a
          pipeline (which combines their pair materials once, when it is built), or a value the
          device check of a ``WorldParameters`` device write refuses (the rebuild then raises the
          conversion's ``ValueError`` naming it, and the solver is left as it was).
        * **Topology and geometry categories** (:data:`TOPOLOGY_MODEL_FLAGS`: joints, body flags,
          reference poses, shape types and sources, constraints), and any category of
          :data:`CACHED_MODEL_FLAGS` with ``per_world_parameters=False``, rebuild the SAP solvers
          from the model (host work, allocates: graphs captured before must be captured again,
          and the per-world statistics restart). The other categories need no work.

        Host cost of the in-place path: a handful of launches and one readback of a device flag
        (whether a rebuild is needed), plus with ``BODY_INERTIAL_PROPERTIES`` a readback of the new
        masses and inertias, whose inverses are computed by NumPy as a new solver's are (Warp's 3×3
        inverse differs in the last bits). So a notify synchronizes with the device: call it
        between steps, not inside a captured graph. It checks the device rules only: the host
        checks of a build (an inertia's triangle inequality, the mass-matrix check) are not
        repeated. :attr:`conversion` keeps describing the last build (its templates, ``parameters``
        and notes of dropped features are those of then). :attr:`world_status`, :attr:`world_failed`,
        :attr:`any_failed` and observable containers stay valid either way. ``ValueError`` for flags
        that are not an int >= 0.
        """
        flags = _flag_bits(flags, newton.ModelFlags)
        if not flags & CACHED_MODEL_FLAGS:
            return
        if flags & TOPOLOGY_MODEL_FLAGS or self._update is None:
            self._build()
            return
        families = [f for f, bits in _FAMILY_FLAGS.items() if flags & bits]
        if not self._update.apply(self.model, self.transfer, families):
            self._build()

    # ------------------------------------------------------------------ diagnostics

    def diagnostics(self) -> dict:
        """NumPy arrays over Newton worlds: ``status`` (StepStatus bits), ``newton_iterations``,
        ``line_search_iterations``, ``truncated_contact_count`` of the last step, ``contact_count``
        (contacts the last step saw per world) and ``failed`` (1 where a step failed since the
        world's last reset)."""
        W = self.conversion.world_count
        out = {k: np.zeros(W, np.int64) for k in ("status", "newton_iterations", "line_search_iterations",
                                                  "truncated_contact_count", "contact_count")}
        for g, solver, contacts in zip(self.conversion.groups, self.solvers, self.sap_contacts):
            diag = solver.diagnostics()
            for k in ("status", "newton_iterations", "line_search_iterations", "truncated_contact_count"):
                out[k][g.worlds] = diag[k]
            if self._contacts_used:
                out["contact_count"][g.worlds] = contacts.count.numpy()
        out["failed"] = self.world_failed.numpy().astype(np.int64)
        return out
