"""ModelBuilder: assemble one world's bodies, joints and shapes, then ``finalize()``.

Every method checks its arguments at once and raises ``ValueError`` naming the argument and
the valid range, so a mistake is reported where it was made; ``finalize()`` builds the frozen
:class:`~sap_common.model.SapModel`, which validates the whole model again.

Example (a pendulum swinging about world y, with a ground plane)::

    b = ModelBuilder()
    link = b.add_body(mass=1.0, com=(0, 0, -0.5), inertia=rod_inertia(1.0, 1.0, axis=2))
    b.add_joint_revolute(-1, link, parent_xform=transform((0, 0, 1)), axis=(0, 1, 0))
    b.add_ground_plane()
    model = b.replicate(16).finalize()
"""

from __future__ import annotations

import math

import numpy as np

from . import geometry, spatial
from .kinematics import forward_kinematics
from .model import ConstraintType, JointType, SapModel, ShapeType, check_inertia, coupler_joint_ok

__all__ = [
    "ModelBuilder",
    "DEFAULT_LIMIT_KE",
    "DEFAULT_LIMIT_KD",
    "solid_sphere_inertia",
    "solid_box_inertia",
    "solid_capsule_inertia",
    "rod_inertia",
]

# Drake's joint-limit constraint uses k = 1e12 and τ = h (docs/formulation.md § Limits). A model cannot know
# h, so the default damping gives τ = kd/ke = 1 ms, Drake's τ at its default 1 ms step.
DEFAULT_LIMIT_KE = 1e12
DEFAULT_LIMIT_KD = 1e12 * 1e-3

_INF = math.inf


def solid_sphere_inertia(mass: float, radius: float) -> np.ndarray:
    """Inertia of a uniform solid sphere about its centre."""
    return np.eye(3) * (0.4 * mass * radius**2)


def solid_box_inertia(mass: float, hx: float, hy: float, hz: float) -> np.ndarray:
    """Inertia of a uniform box with half extents (hx, hy, hz) about its centre."""
    return np.diag([mass * (hy**2 + hz**2) / 3.0, mass * (hx**2 + hz**2) / 3.0, mass * (hx**2 + hy**2) / 3.0])


def solid_capsule_inertia(mass: float, radius: float, half_length: float) -> np.ndarray:
    """Inertia of a uniform solid capsule (axis z) about its centre."""
    r, h = radius, 2.0 * half_length
    v_cyl, v_sph = math.pi * r * r * h, 4.0 / 3.0 * math.pi * r**3
    m_cyl, m_hemis = mass * v_cyl / (v_cyl + v_sph), mass * v_sph / (v_cyl + v_sph)
    izz = m_cyl * r * r / 2.0 + m_hemis * 2.0 * r * r / 5.0
    # Each hemisphere: own inertia 83/320 m r² about its centre of mass, which sits
    # h/2 + 3r/8 from the capsule centre.
    ixx = m_cyl * (r * r / 4.0 + h * h / 12.0) + m_hemis * (
        83.0 / 320.0 * r * r + (h / 2.0 + 3.0 * r / 8.0) ** 2
    )
    return np.diag([ixx, ixx, izz])


def rod_inertia(mass: float, length: float, axis: int = 2, thin: float = 1e-3) -> np.ndarray:
    """Inertia of a thin uniform rod along ``axis`` about its centre (``thin`` on the axis)."""
    d = np.full(3, mass * length**2 / 12.0)
    d[axis] = thin
    return np.diag(d)


def _vec(arg: str, value, n: int, where: str) -> np.ndarray:
    a = np.asarray(value, dtype=np.float64)
    if a.ndim == 0:
        a = np.full(n, float(a))
    if a.shape != (n,):
        raise ValueError(f"{where}: {arg} must be a scalar or a sequence of {n}, got shape {a.shape}")
    return a


def _finite(arg: str, a, where: str) -> None:
    if not np.all(np.isfinite(a)):
        raise ValueError(f"{where}: {arg} must be finite, got {np.asarray(a).tolist()}")


def _nonneg(arg: str, a, where: str) -> None:
    a = np.asarray(a, dtype=np.float64)
    if not np.all(np.isfinite(a) & (a >= 0.0)):
        raise ValueError(f"{where}: {arg} must be finite and >= 0, got {a.tolist()}")


def _xform(arg: str, X, where: str) -> np.ndarray:
    if X is None:
        return spatial.transform_identity()
    X = np.asarray(X, dtype=np.float64)
    if X.shape != (7,):
        raise ValueError(f"{where}: {arg} must be a transform [x, y, z, qx, qy, qz, qw], got shape {X.shape}")
    _finite(arg, X, where)
    if not np.linalg.norm(X[3:]) > 0.0:
        raise ValueError(f"{where}: {arg} quaternion (entries 3:7, xyzw) must be non-zero")
    return np.concatenate([X[:3], spatial.quat_normalize(X[3:])])


class ModelBuilder:
    """Accumulates one world's description; :meth:`finalize` returns a frozen SapModel."""

    def __init__(self, gravity=(0.0, 0.0, -9.81)):
        g = np.asarray(gravity, dtype=np.float64)
        if g.shape != (3,) or not np.all(np.isfinite(g)):
            raise ValueError(f"gravity: must be a finite 3-vector, got {gravity!r}")
        self.gravity = g
        self.num_worlds = 1
        self._bodies: list[dict] = []
        self._joints: list[dict] = []
        self._shapes: list[dict] = []
        self._filter_pairs: list[tuple[int, int]] = []
        self._body_joint: dict[int, int] = {}
        self._meshes: list[np.ndarray] = []  # hull points (V, 3) per mesh
        self._hfields: list[np.ndarray] = []  # heights (nrow, ncol) per height field
        self._constraints: list[dict] = []

    # ------------------------------------------------------------------ sizes

    @property
    def body_count(self) -> int:
        return len(self._bodies)

    @property
    def joint_count(self) -> int:
        return len(self._joints)

    @property
    def shape_count(self) -> int:
        return len(self._shapes)

    @property
    def constraint_count(self) -> int:
        return len(self._constraints)

    @property
    def coord_count(self) -> int:
        """nq of the joints added so far (the next joint's ``joint_q_start``)."""
        return sum(len(j["q0"]) for j in self._joints)

    @property
    def dof_count(self) -> int:
        """nv of the joints added so far (the next joint's ``joint_qd_start``)."""
        return sum(len(j["qd0"]) for j in self._joints)

    # ------------------------------------------------------------------ bodies

    def add_body(self, mass: float, com=(0.0, 0.0, 0.0), inertia=None, name: str | None = None,
                 kinematic: bool = False) -> int:
        """Add a rigid body; returns its index.

        Args:
            mass: [kg], finite, ≥ 0.
            com: centre of mass in the body frame [m].
            inertia: about the COM in body axes [kg·m²]: a 3×3 matrix or its diagonal (3,).
                Must be symmetric positive definite (zero allowed only with zero mass).
            name: unique name (default ``body_<index>``).
            kinematic: True for a kinematic body (``SapModel.body_kinematic``): its joint velocities
                come from the state, and its whole tree, rooted at the world, must be kinematic.
        """
        name = self._name("body", name, self._bodies)
        where = f"add_body(name={name!r})"
        if isinstance(mass, bool) or not isinstance(mass, (int, float, np.integer, np.floating)):
            raise ValueError(f"{where}: mass must be a real number >= 0, got {mass!r}")
        if not (math.isfinite(mass) and mass >= 0.0):
            raise ValueError(f"{where}: mass must be finite and >= 0 kg, got {mass}")
        com = _vec("com", com, 3, where)
        _finite("com", com, where)
        if inertia is None:
            raise ValueError(f"{where}: inertia is required (3x3 about the COM, or its diagonal)")
        I = np.asarray(inertia, dtype=np.float64)
        if I.shape == (3,):
            I = np.diag(I)
        if I.shape != (3, 3):
            raise ValueError(f"{where}: inertia must be 3x3 or a diagonal (3,), got shape {I.shape}")
        check_inertia(f"{where}: inertia", float(mass), I)
        if not isinstance(kinematic, (bool, np.bool_)):
            raise ValueError(f"{where}: kinematic must be True or False, got {kinematic!r}")
        self._bodies.append(dict(mass=float(mass), com=com, inertia=I, name=name, kinematic=bool(kinematic)))
        return len(self._bodies) - 1

    # ------------------------------------------------------------------ joints

    def add_joint_revolute(self, parent: int, child: int, parent_xform=None, child_xform=None,
                           axis=(0.0, 0.0, 1.0), *, limit_lower=-_INF, limit_upper=_INF,
                           limit_ke=DEFAULT_LIMIT_KE, limit_kd=DEFAULT_LIMIT_KD, target_ke=0.0,
                           target_kd=0.0, effort_limit=_INF, armature=0.0, damping=0.0,
                           q0=0.0, qd0=0.0, name: str | None = None) -> int:
        """Hinge: θ [rad] about ``axis`` (joint frame F = M at θ = 0). Returns the joint index."""
        return self._add_axis_joint(JointType.REVOLUTE, parent, child, parent_xform, child_xform,
                                    [], [axis], locals())

    def add_joint_prismatic(self, parent: int, child: int, parent_xform=None, child_xform=None,
                            axis=(1.0, 0.0, 0.0), *, limit_lower=-_INF, limit_upper=_INF,
                            limit_ke=DEFAULT_LIMIT_KE, limit_kd=DEFAULT_LIMIT_KD, target_ke=0.0,
                            target_kd=0.0, effort_limit=_INF, armature=0.0, damping=0.0,
                            q0=0.0, qd0=0.0, name: str | None = None) -> int:
        """Slider: d [m] along ``axis``. Returns the joint index."""
        return self._add_axis_joint(JointType.PRISMATIC, parent, child, parent_xform, child_xform,
                                    [axis], [], locals())

    def add_joint_d6(self, parent: int, child: int, parent_xform=None, child_xform=None, *,
                     linear_axes=(), angular_axes=(), limit_lower=-_INF, limit_upper=_INF,
                     limit_ke=DEFAULT_LIMIT_KE, limit_kd=DEFAULT_LIMIT_KD, target_ke=0.0,
                     target_kd=0.0, effort_limit=_INF, armature=0.0, damping=0.0, q0=0.0,
                     qd0=0.0, name: str | None = None) -> int:
        """Generic joint: translations along ``linear_axes``, then rotations about
        ``angular_axes`` applied in sequence. Per-DOF arguments take a scalar or one value per
        axis (linear first). Returns the joint index."""
        if len(linear_axes) > 3 or len(angular_axes) > 3 or len(linear_axes) + len(angular_axes) == 0:
            raise ValueError(
                f"add_joint_d6(name={name!r}): linear_axes and angular_axes take 0-3 axes each, "
                f"at least one in all; got {len(linear_axes)} and {len(angular_axes)}"
            )
        return self._add_axis_joint(JointType.D6, parent, child, parent_xform, child_xform,
                                    list(linear_axes), list(angular_axes), locals())

    def _add_axis_joint(self, jt, parent, child, parent_xform, child_xform, lin, ang, args):
        name = self._name("joint", args["name"], self._joints)
        where = f"add_joint_{jt.name.lower()}(name={name!r})"
        n = len(lin) + len(ang)
        axes = []
        for i, a in enumerate(lin + ang):
            a = np.asarray(a, dtype=np.float64)
            if a.shape != (3,) or not np.all(np.isfinite(a)) or not np.linalg.norm(a) > 0.0:
                raise ValueError(f"{where}: axis {i} must be a non-zero finite 3-vector, got {np.asarray(a).tolist()}")
            axes.append(a / np.linalg.norm(a))
        for kind, group in (("linear", axes[:len(lin)]), ("angular", axes[len(lin):])):
            if len(group) > 1 and np.linalg.matrix_rank(np.array(group), tol=1e-6) < len(group):
                raise ValueError(f"{where}: the {kind} axes must be linearly independent")
        v = {k: _vec(k, args[k], n, where) for k in (
            "limit_lower", "limit_upper", "limit_ke", "limit_kd", "target_ke", "target_kd",
            "effort_limit", "armature", "damping", "q0", "qd0")}
        for k in ("limit_ke", "limit_kd", "target_ke", "target_kd", "armature", "damping"):
            _nonneg(k, v[k], where)
        self._check_limits(v["limit_lower"], v["limit_upper"], where)
        if not np.all(v["effort_limit"] > 0.0):
            raise ValueError(f"{where}: effort_limit must be > 0 (inf = no limit), got {v['effort_limit'].tolist()}")
        _finite("q0", v["q0"], where)
        _finite("qd0", v["qd0"], where)
        return self._add_joint(jt, parent, child, parent_xform, child_xform, name, where,
                               dof_dim=(len(lin), len(ang)), axis=np.array(axes).reshape(n, 3),
                               q0=v.pop("q0"), qd0=v.pop("qd0"), **v)

    def add_joint_ball(self, parent: int, child: int, parent_xform=None, child_xform=None, *,
                       armature=0.0, damping=0.0, q0=(0.0, 0.0, 0.0, 1.0), qd0=(0.0, 0.0, 0.0),
                       name: str | None = None) -> int:
        """Spherical joint: q = q_FM ``[x,y,z,w]``, qd = ω_FM in F. Returns the joint index."""
        name = self._name("joint", name, self._joints)
        where = f"add_joint_ball(name={name!r})"
        armature, damping = _vec("armature", armature, 3, where), _vec("damping", damping, 3, where)
        _nonneg("armature", armature, where)
        _nonneg("damping", damping, where)
        q0 = self._quat("q0", q0, where)
        qd0 = _vec("qd0", qd0, 3, where)
        _finite("qd0", qd0, where)
        return self._add_joint(JointType.BALL, parent, child, parent_xform, child_xform, name, where,
                               dof_dim=(0, 3), armature=armature, damping=damping, q0=q0, qd0=qd0)

    def add_joint_fixed(self, parent: int, child: int, parent_xform=None, child_xform=None, *,
                        name: str | None = None) -> int:
        """Weld: X_FM = identity. Returns the joint index."""
        name = self._name("joint", name, self._joints)
        return self._add_joint(JointType.FIXED, parent, child, parent_xform, child_xform, name,
                               f"add_joint_fixed(name={name!r})", dof_dim=(0, 0))

    def add_joint_free(self, parent: int, child: int, *, armature=0.0, damping=0.0,
                       q0=(0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0), qd0=(0.0,) * 6,
                       name: str | None = None) -> int:
        """Floating body: q = ``[p_WO, q_WB]`` of the child origin; ``parent`` must be −1.

        ``qd0`` is public ``[v_C, ω]``; ``armature``/``damping`` take a scalar or six values
        in SAP order ``[ω, v_O]``. Returns the joint index.
        """
        name = self._name("joint", name, self._joints)
        where = f"add_joint_free(name={name!r})"
        if parent != -1:
            raise ValueError(
                f"{where}: parent must be -1 (a FREE joint connects a body to the world); "
                "use add_joint_distance for a floating body tied to another body"
            )
        return self._add_floating(JointType.FREE, parent, child, None, None, name, where, armature,
                                  damping, q0, qd0, -_INF, _INF, DEFAULT_LIMIT_KE, DEFAULT_LIMIT_KD)

    def add_joint_distance(self, parent: int, child: int, parent_xform=None, child_xform=None, *,
                           limit_lower=0.0, limit_upper=_INF, limit_ke=DEFAULT_LIMIT_KE,
                           limit_kd=DEFAULT_LIMIT_KD, armature=0.0, damping=0.0,
                           q0=(0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0), qd0=(0.0,) * 6,
                           name: str | None = None) -> int:
        """Floating child (coordinates as FREE) whose anchor distance is limited.

        The anchors are the origins of ``parent_xform`` (on the parent, or the world) and
        ``child_xform`` (on the child); ``limit_lower ≤ |p_child − p_parent| ≤ limit_upper``.
        Returns the joint index.
        """
        name = self._name("joint", name, self._joints)
        where = f"add_joint_distance(name={name!r})"
        if not limit_lower >= 0.0:
            raise ValueError(f"{where}: limit_lower (a distance) must be >= 0 m, got {limit_lower}")
        return self._add_floating(JointType.DISTANCE, parent, child, parent_xform, child_xform, name,
                                  where, armature, damping, q0, qd0, limit_lower, limit_upper,
                                  limit_ke, limit_kd)

    def _add_floating(self, jt, parent, child, parent_xform, child_xform, name, where, armature,
                      damping, q0, qd0, lo, hi, lke, lkd):
        armature, damping = _vec("armature", armature, 6, where), _vec("damping", damping, 6, where)
        _nonneg("armature", armature, where)
        _nonneg("damping", damping, where)
        q0 = np.asarray(q0, dtype=np.float64)
        if q0.shape != (7,):
            raise ValueError(f"{where}: q0 must be [x, y, z, qx, qy, qz, qw], got shape {q0.shape}")
        _finite("q0", q0[:3], where)
        q0 = np.concatenate([q0[:3], self._quat("q0 quaternion", q0[3:], where)])
        qd0 = _vec("qd0", qd0, 6, where)
        _finite("qd0", qd0, where)
        _nonneg("limit_ke", lke, where)
        _nonneg("limit_kd", lkd, where)
        self._check_limits(np.array([lo]), np.array([hi]), where)
        inf6 = np.full(6, _INF)
        lower, upper = -inf6.copy(), inf6.copy()
        lower[0], upper[0] = lo, hi  # distance limits live in the first DOF's slot
        return self._add_joint(jt, parent, child, parent_xform, child_xform, name, where,
                               dof_dim=(3, 3), armature=armature, damping=damping, q0=q0, qd0=qd0,
                               limit_lower=lower, limit_upper=upper, limit_ke=np.full(6, float(lke)),
                               limit_kd=np.full(6, float(lkd)))

    @staticmethod
    def _check_limits(lo, hi, where):
        if np.any(np.isnan(lo)) or np.any(np.isnan(hi)):
            raise ValueError(f"{where}: limit_lower/limit_upper must not be NaN (use ±inf for no limit)")
        if np.any(lo > hi):
            raise ValueError(f"{where}: limit_lower {lo.tolist()} must be <= limit_upper {hi.tolist()}")

    @staticmethod
    def _quat(arg, q, where):
        q = np.asarray(q, dtype=np.float64)
        if q.shape != (4,) or not np.all(np.isfinite(q)) or not np.linalg.norm(q) > 0.0:
            raise ValueError(f"{where}: {arg} must be a non-zero finite quaternion [x, y, z, w], got {q.tolist()}")
        return spatial.quat_normalize(q)

    def _add_joint(self, jt, parent, child, parent_xform, child_xform, name, where, *, dof_dim,
                   axis=None, **dofs):
        B = len(self._bodies)
        if isinstance(parent, bool) or not isinstance(parent, (int, np.integer)) or not -1 <= parent < B:
            raise ValueError(f"{where}: parent must be -1 (world) or a body index in [0, {B}), got {parent!r}")
        if isinstance(child, bool) or not isinstance(child, (int, np.integer)) or not 0 <= child < B:
            raise ValueError(f"{where}: child must be a body index in [0, {B}), got {child!r}")
        parent, child = int(parent), int(child)
        if parent == child:
            raise ValueError(f"{where}: parent and child must differ (body {child})")
        if child in self._body_joint:
            other = self._joints[self._body_joint[child]]["name"]
            raise ValueError(f"{where}: child body {child} already has a parent joint ({other!r})")
        if jt not in (JointType.FREE, JointType.DISTANCE):
            # Walk up from the parent: reaching the child would close a loop.
            p = parent
            while p >= 0:
                if p == child:
                    raise ValueError(f"{where}: joining body {parent} -> {child} would create a cycle")
                j = self._body_joint.get(p)
                if j is None or self._joints[j]["type"] in (JointType.FREE, JointType.DISTANCE):
                    break
                p = self._joints[j]["parent"]
        n = dof_dim[0] + dof_dim[1] if jt not in (JointType.BALL, JointType.FREE, JointType.DISTANCE) else (
            3 if jt == JointType.BALL else 6)
        z, inf = np.zeros(n), np.full(n, _INF)
        rec = dict(
            type=jt, parent=parent, child=child, name=name, dof_dim=dof_dim,
            X_p=_xform("parent_xform", parent_xform, where), X_c=_xform("child_xform", child_xform, where),
            axis=np.zeros((n, 3)) if axis is None else axis,
            armature=z, damping=z, target_ke=z, target_kd=z, effort_limit=inf,
            limit_lower=-inf, limit_upper=inf, limit_ke=np.full(n, DEFAULT_LIMIT_KE),
            limit_kd=np.full(n, DEFAULT_LIMIT_KD), q0=np.zeros(0), qd0=z,
        )
        rec.update({k: np.asarray(v, dtype=np.float64).reshape(-1) for k, v in dofs.items()})
        self._joints.append(rec)
        self._body_joint[child] = len(self._joints) - 1
        return len(self._joints) - 1

    # ------------------------------------------------------------------ shapes
    # Every add_shape_* takes the material keywords (None or absent = the solver's fallback):
    # mu (friction), ke (point-contact stiffness [N/m], inf = rigid), tau (dissipation time scale
    # τ_d [s], read by the "sap" contact approximation), hcd (Hunt–Crossley dissipation d [s/m],
    # read by "lagged" and "similar"), and margin, collision_group, contype, conaffinity, name; and
    # the geometry keyword rounding (radius [m] of the ball swept over the shape, default 0:
    # SapModel.shape_rounding; not for planes and height fields).

    def add_shape_plane(self, body: int = -1, xform=None, **material) -> int:
        """Half-space z ≤ 0 of the shape frame (outward normal +z); world-attached only."""
        return self._add_shape(ShapeType.PLANE, body, xform, (0.0, 0.0, 0.0), material)

    def add_ground_plane(self, height: float = 0.0, **material) -> int:
        """The half-space z ≤ ``height`` on the world."""
        return self.add_shape_plane(-1, spatial.transform((0.0, 0.0, height)), **material)

    def add_shape_sphere(self, body: int, xform=None, radius: float = 0.5, **material) -> int:
        """Sphere of ``radius`` [m] centred at the shape frame origin."""
        return self._add_shape(ShapeType.SPHERE, body, xform, (radius, 0.0, 0.0), material)

    def add_shape_capsule(self, body: int, xform=None, radius: float = 0.05, half_length: float = 0.5,
                          **material) -> int:
        """Capsule: segment of ``±half_length`` along the shape frame's z axis, inflated by ``radius``."""
        return self._add_shape(ShapeType.CAPSULE, body, xform, (radius, half_length, 0.0), material)

    def add_shape_box(self, body: int, xform=None, hx: float = 0.5, hy: float = 0.5, hz: float = 0.5,
                      **material) -> int:
        """Box with half extents (hx, hy, hz) centred at the shape frame origin."""
        return self._add_shape(ShapeType.BOX, body, xform, (hx, hy, hz), material)

    def add_shape_cylinder(self, body: int, xform=None, radius: float = 0.05, half_length: float = 0.1,
                           **material) -> int:
        """Cylinder of ``radius`` with flat caps at ±``half_length`` along the shape frame's z axis."""
        return self._add_shape(ShapeType.CYLINDER, body, xform, (radius, half_length, 0.0), material)

    def add_shape_ellipsoid(self, body: int, xform=None, a: float = 0.1, b: float = 0.1, c: float = 0.1,
                            **material) -> int:
        """Ellipsoid with semi-axes (a, b, c) [m] along the shape frame's x, y, z axes."""
        return self._add_shape(ShapeType.ELLIPSOID, body, xform, (a, b, c), material)

    def add_shape_convex_mesh(self, body: int, xform=None, vertices=None, scale=(1.0, 1.0, 1.0), **material) -> int:
        """The convex hull of ``vertices`` (n, 3) [m] in the shape frame, each scaled by ``scale``.

        A non-convex mesh collides as its hull (as in MuJoCo and Drake); only the hull's extreme
        points are kept, in the given order (:func:`sap_common.geometry.convex_hull`)."""
        name = material.get("name", f"shape_{len(self._shapes)}")
        where = f"add_shape_convex_mesh(name={name!r})"
        sc = _vec("scale", scale, 3, where)
        if not np.all(np.isfinite(sc) & (sc > 0)):
            raise ValueError(f"{where}: scale must be finite and > 0, got {sc.tolist()}")
        if vertices is None:
            raise ValueError(f"{where}: vertices is required (an (n, 3) array of points)")
        hull = geometry.convex_hull(np.asarray(vertices, dtype=np.float64) * sc if np.ndim(vertices) == 2
                                    else np.asarray(vertices, dtype=np.float64), f"{where}: vertices")
        s = self._add_shape(ShapeType.CONVEX_MESH, body, xform, (0.0, 0.0, 0.0), material)
        self._shapes[s]["source"] = len(self._meshes)
        self._meshes.append(hull.vertices)
        return s

    def add_shape_heightfield(self, heights=None, xform=None, hx: float = 1.0, hy: float = 1.0, base: float = 0.1,
                              **material) -> int:
        """A height field on the world: ``heights`` (rows, columns) [m] over x ∈ [−hx, hx] (columns)
        and y ∈ [−hy, hy] (rows) of the shape frame, solid down to z = −``base``
        (:mod:`sap_common.geometry` has the grid and its triangles)."""
        name = material.get("name", f"shape_{len(self._shapes)}")
        where = f"add_shape_heightfield(name={name!r})"
        h = np.asarray(heights, dtype=np.float64) if heights is not None else None
        if h is None or h.ndim != 2 or h.shape[0] < 2 or h.shape[1] < 2:
            raise ValueError(f"{where}: heights must be a (rows, columns) array with at least 2 of each, "
                             f"got {None if h is None else h.shape}")
        _finite("heights", h, where)
        if not (base > 0 and np.min(h) > -base):
            raise ValueError(f"{where}: base must be > 0 and reach below the lowest height {np.min(h)} "
                             f"(solid from z = -base), got {base}")
        s = self._add_shape(ShapeType.HEIGHTFIELD, -1, xform, (hx, hy, base), material)
        self._shapes[s]["source"] = len(self._hfields)
        self._hfields.append(h.copy())
        return s

    _MATERIAL_KEYS = ("mu", "ke", "tau", "hcd", "margin", "collision_group", "contype", "conaffinity", "name",
                      "rounding")

    def _add_shape(self, st, body, xform, size, material):
        unknown = sorted(set(material) - set(self._MATERIAL_KEYS))
        name = self._name("shape", material.get("name"), self._shapes)
        where = f"add_shape_{st.name.lower()}(name={name!r})"
        if unknown:
            raise ValueError(f"{where}: unknown argument(s) {', '.join(unknown)}; "
                             f"valid: {', '.join(self._MATERIAL_KEYS)}")
        B = len(self._bodies)
        if isinstance(body, bool) or not isinstance(body, (int, np.integer)) or not -1 <= body < B:
            raise ValueError(f"{where}: body must be -1 (world) or a body index in [0, {B}), got {body!r}")
        if st == ShapeType.PLANE and body != -1:
            raise ValueError(f"{where}: body must be -1: planes (half-spaces) attach to the world only")
        size = np.asarray(size, dtype=np.float64)
        _finite("size", size, where)
        if st == ShapeType.SPHERE and not size[0] > 0:
            raise ValueError(f"{where}: radius must be > 0 m, got {size[0]}")
        if st == ShapeType.CAPSULE and not (size[0] > 0 and size[1] >= 0):
            raise ValueError(f"{where}: radius must be > 0 m and half_length >= 0 m, got {size[:2].tolist()}")
        if st == ShapeType.BOX and not np.all(size > 0):
            raise ValueError(f"{where}: hx, hy, hz must be > 0 m, got {size.tolist()}")
        if st == ShapeType.CYLINDER and not (size[0] > 0 and size[1] > 0):
            raise ValueError(f"{where}: radius and half_length must be > 0 m, got {size[:2].tolist()}")
        if st == ShapeType.ELLIPSOID and not np.all(size > 0):
            raise ValueError(f"{where}: a, b, c must be > 0 m, got {size.tolist()}")
        if st == ShapeType.HEIGHTFIELD and not (size[0] > 0 and size[1] > 0):
            raise ValueError(f"{where}: hx, hy must be > 0 m, got {size[:2].tolist()}")
        mu, ke, tau = material.get("mu"), material.get("ke"), material.get("tau")
        if mu is not None and not (math.isfinite(mu) and mu >= 0):
            raise ValueError(f"{where}: mu must be finite and >= 0 (None = solver fallback_mu), got {mu}")
        if ke is not None and not ke > 0:
            raise ValueError(f"{where}: ke must be > 0 N/m, inf = rigid (None = solver fallback_stiffness), got {ke}")
        if tau is not None and not (math.isfinite(tau) and tau >= 0):
            raise ValueError(f"{where}: tau must be finite and >= 0 s (None = solver contact_tau_d), got {tau}")
        hcd = material.get("hcd")
        if hcd is not None and not (isinstance(hcd, (int, float, np.integer, np.floating)) and math.isfinite(hcd)
                                    and hcd >= 0):
            raise ValueError(f"{where}: hcd must be finite and >= 0 s/m (None = solver fallback_hc_dissipation), "
                             f"got {hcd!r}")
        margin = material.get("margin", 0.0)
        if not (math.isfinite(margin) and margin >= 0):
            raise ValueError(f"{where}: margin must be finite and >= 0 m, got {margin}")
        rounding = material.get("rounding", 0.0)
        if isinstance(rounding, bool) or not isinstance(rounding, (int, float, np.integer, np.floating)) or not (
                math.isfinite(rounding) and rounding >= 0):
            raise ValueError(f"{where}: rounding must be a finite radius >= 0 m, got {rounding!r}")
        if rounding > 0 and st in (ShapeType.PLANE, ShapeType.HEIGHTFIELD):
            raise ValueError(f"{where}: rounding must be 0 for a {st.name.lower()}; rounded shapes are spheres, "
                             f"capsules, boxes, cylinders, ellipsoids and convex meshes, got {rounding!r}")
        group = material.get("collision_group", 0)
        if isinstance(group, bool) or not isinstance(group, (int, np.integer)) or group < -1:
            raise ValueError(f"{where}: collision_group must be an integer >= -1 (-1 collides with all), got {group!r}")
        masks = {}
        for k in ("contype", "conaffinity"):
            m = material.get(k, 1)
            if isinstance(m, bool) or not isinstance(m, (int, np.integer)) or not 0 <= m < 2**32:
                raise ValueError(f"{where}: {k} must be a 32-bit unsigned bitmask, got {m!r}")
            masks[k] = int(m)
        nan = math.nan
        self._shapes.append(dict(
            type=st, body=int(body), X=_xform("xform", xform, where), size=size,
            margin=float(margin), mu=nan if mu is None else float(mu), ke=nan if ke is None else float(ke),
            tau=nan if tau is None else float(tau), hcd=nan if hcd is None else float(hcd), group=int(group),
            name=name, source=-1, rounding=float(rounding), **masks,
        ))
        return len(self._shapes) - 1

    def add_collision_filter_pair(self, shape_a: int, shape_b: int) -> None:
        """Never report contacts between these two shapes."""
        S = len(self._shapes)
        for arg, s in (("shape_a", shape_a), ("shape_b", shape_b)):
            if isinstance(s, bool) or not isinstance(s, (int, np.integer)) or not 0 <= s < S:
                raise ValueError(f"add_collision_filter_pair: {arg} must be a shape index in [0, {S}), got {s!r}")
        if shape_a == shape_b:
            raise ValueError("add_collision_filter_pair: shape_a and shape_b must differ")
        self._filter_pairs.append((int(shape_a), int(shape_b)))

    # ------------------------------------------------------------------ holonomic constraints
    # docs/formulation.md § Holonomic constraints. Bodies are indices (−1 = the world), joints
    # indices; the model checks the whole again at finalize() (bodies not both welded to the
    # world, coupler joints single-DOF).

    def add_coupler(self, joint0: int, joint1: int, gear_ratio: float = 1.0, offset: float = 0.0, *,
                    name: str | None = None) -> int:
        """Couple two single-DOF joints: q₀ = ρ·q₁ + Δq (``gear_ratio`` ρ, ``offset`` Δq [m or rad]),
        one near-rigid row (Drake's ``AddCouplerConstraint``). Returns the constraint index."""
        name = self._name("constraint", name, self._constraints)
        where = f"add_coupler(name={name!r})"
        J = len(self._joints)
        for arg, j in (("joint0", joint0), ("joint1", joint1)):
            if isinstance(j, bool) or not isinstance(j, (int, np.integer)) or not 0 <= j < J:
                raise ValueError(f"{where}: {arg} must be a joint index in [0, {J}), got {j!r}")
            rec = self._joints[j]
            if not coupler_joint_ok(rec["type"], rec["dof_dim"]):
                raise ValueError(f"{where}: {arg} {rec['name']!r} is a {rec['type'].name} joint with {len(rec['qd0'])} "
                                 "DOFs; a coupler needs single-DOF joints (prismatic, revolute, a one-axis D6)")
        if joint0 == joint1:
            raise ValueError(f"{where}: joint0 and joint1 must differ (joint {joint0})")
        for arg, v in (("gear_ratio", gear_ratio), ("offset", offset)):
            if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)) or not math.isfinite(v):
                raise ValueError(f"{where}: {arg} must be a finite number, got {v!r}")
        return self._add_constraint(ConstraintType.COUPLER, name, joint0=int(joint0), joint1=int(joint1),
                                    gear_ratio=float(gear_ratio), offset=float(offset))

    def add_distance(self, body_a: int, p_ap, body_b: int, p_bq, distance: float, stiffness: float = _INF,
                     damping: float = 0.0, *, name: str | None = None) -> int:
        """Keep point P of body A (``p_ap`` in A) and point Q of body B (``p_bq`` in B) ``distance``
        apart [m], with ``stiffness`` k [N/m] (inf: rigid, near-rigid regularization) and
        ``damping`` c [N·s/m] (Drake's ``AddDistanceConstraint``). Returns the constraint index."""
        name = self._name("constraint", name, self._constraints)
        where = f"add_distance(name={name!r})"
        self._check_bodies(where, body_a, body_b)
        p_ap, p_bq = self._point("p_ap", p_ap, where), self._point("p_bq", p_bq, where)
        for arg, v in (("distance", distance), ("stiffness", stiffness), ("damping", damping)):
            if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)):
                raise ValueError(f"{where}: {arg} must be a number, got {v!r}")
        if not (math.isfinite(distance) and distance > 0.0):
            raise ValueError(f"{where}: distance must be finite and > 0 m, got {distance}")
        if not stiffness > 0.0:
            raise ValueError(f"{where}: stiffness must be > 0 N/m (inf = rigid), got {stiffness}")
        if not (math.isfinite(damping) and damping >= 0.0):
            raise ValueError(f"{where}: damping must be finite and >= 0 N·s/m, got {damping}")
        return self._add_constraint(ConstraintType.DISTANCE, name, body_a=int(body_a), body_b=int(body_b),
                                    X_a=spatial.transform(p_ap), X_b=spatial.transform(p_bq), length=float(distance),
                                    stiffness=float(stiffness), damping=float(damping))

    def add_ball(self, body_a: int, p_ap, body_b: int, p_bq=None, *, name: str | None = None) -> int:
        """Make point P of body A (``p_ap`` in A) coincide with point Q of body B (``p_bq`` in B),
        three near-rigid rows (Drake's ``AddBallConstraint``). ``p_bq=None`` takes the point of B
        that coincides with P at the initial state (``joint_q_init``), as Drake does. Returns the
        constraint index."""
        name = self._name("constraint", name, self._constraints)
        where = f"add_ball(name={name!r})"
        self._check_bodies(where, body_a, body_b)
        p_ap = self._point("p_ap", p_ap, where)
        X_b = None if p_bq is None else spatial.transform(self._point("p_bq", p_bq, where))
        return self._add_constraint(ConstraintType.BALL, name, body_a=int(body_a), body_b=int(body_b),
                                    X_a=spatial.transform(p_ap), X_b=X_b)

    def add_weld(self, body_a: int, X_ap, body_b: int, X_bq, *, name: str | None = None) -> int:
        """Make frame P of body A (``X_ap``, a transform [p, quat xyzw] in A) coincide with frame Q of
        body B (``X_bq`` in B), six near-rigid rows (Drake's ``AddWeldConstraint``). Returns the
        constraint index."""
        name = self._name("constraint", name, self._constraints)
        where = f"add_weld(name={name!r})"
        self._check_bodies(where, body_a, body_b)
        return self._add_constraint(ConstraintType.WELD, name, body_a=int(body_a), body_b=int(body_b),
                                    X_a=_xform("X_ap", X_ap, where), X_b=_xform("X_bq", X_bq, where))

    def add_axis_alignment(self, body_a: int, X_ap, body_b: int, X_bq, axis=(0.0, 0.0, 1.0), *,
                           name: str | None = None) -> int:
        """Keep the unit ``axis`` of frame P (on A) parallel to the same axis of frame Q (on B): two
        near-rigid rows; with :meth:`add_ball` at the frames' origins it is a revolute joint that
        closes a loop (not a Drake constraint, docs/formulation.md § Holonomic constraints). Returns the
        constraint index."""
        name = self._name("constraint", name, self._constraints)
        where = f"add_axis_alignment(name={name!r})"
        self._check_bodies(where, body_a, body_b)
        a = np.asarray(axis, dtype=np.float64)
        if a.shape != (3,) or not np.all(np.isfinite(a)) or not np.linalg.norm(a) > 0.0:
            raise ValueError(f"{where}: axis must be a non-zero finite 3-vector, got {np.asarray(axis).tolist()}")
        return self._add_constraint(ConstraintType.AXIS_ALIGN, name, body_a=int(body_a), body_b=int(body_b),
                                    X_a=_xform("X_ap", X_ap, where), X_b=_xform("X_bq", X_bq, where),
                                    axis=a / np.linalg.norm(a))

    def _check_bodies(self, where: str, body_a, body_b) -> None:
        B = len(self._bodies)
        for arg, b in (("body_a", body_a), ("body_b", body_b)):
            if isinstance(b, bool) or not isinstance(b, (int, np.integer)) or not -1 <= b < B:
                raise ValueError(f"{where}: {arg} must be -1 (world) or a body index in [0, {B}), got {b!r}")
        if body_a == body_b:
            raise ValueError(f"{where}: body_a and body_b must differ (body {body_a})")

    @staticmethod
    def _point(arg: str, p, where: str) -> np.ndarray:
        p = np.asarray(p, dtype=np.float64)
        if p.shape != (3,) or not np.all(np.isfinite(p)):
            raise ValueError(f"{where}: {arg} must be a finite 3-vector [m], got {np.asarray(p).tolist()}")
        return p

    def _add_constraint(self, ct: ConstraintType, name: str, **fields) -> int:
        rec = dict(type=ct, name=name, body_a=-1, body_b=-1, X_a=spatial.transform_identity(),
                   X_b=spatial.transform_identity(), axis=np.zeros(3), joint0=-1, joint1=-1, gear_ratio=1.0,
                   offset=0.0, length=0.0, stiffness=_INF, damping=0.0)
        rec.update(fields)
        self._constraints.append(rec)
        return len(self._constraints) - 1

    # ------------------------------------------------------------------ finish

    def replicate(self, num_worlds: int) -> "ModelBuilder":
        """Simulate ``num_worlds`` copies of this world (returns self, for chaining)."""
        if isinstance(num_worlds, bool) or not isinstance(num_worlds, (int, np.integer)) or num_worlds < 1:
            raise ValueError(f"replicate: num_worlds must be an integer >= 1, got {num_worlds!r}")
        self.num_worlds = int(num_worlds)
        return self

    def finalize(self) -> SapModel:
        """The frozen, validated model."""
        bodies, joints, shapes, cons = self._bodies, self._joints, self._shapes, self._constraints
        cat = lambda key, n=0: (np.concatenate([j[key] for j in joints]) if joints else np.zeros(n))  # noqa: E731
        return SapModel(
            num_worlds=self.num_worlds,
            body_mass=np.array([b["mass"] for b in bodies]),
            body_com=np.array([b["com"] for b in bodies]).reshape(-1, 3),
            body_inertia=np.array([b["inertia"] for b in bodies]).reshape(-1, 3, 3),
            body_name=tuple(b["name"] for b in bodies),
            body_kinematic=np.array([b["kinematic"] for b in bodies], dtype=bool),
            joint_type=np.array([int(j["type"]) for j in joints], dtype=np.int32),
            joint_parent=np.array([j["parent"] for j in joints], dtype=np.int32),
            joint_child=np.array([j["child"] for j in joints], dtype=np.int32),
            joint_X_p=np.array([j["X_p"] for j in joints]).reshape(-1, 7),
            joint_X_c=np.array([j["X_c"] for j in joints]).reshape(-1, 7),
            joint_dof_dim=np.array([j["dof_dim"] for j in joints], dtype=np.int32).reshape(-1, 2),
            joint_name=tuple(j["name"] for j in joints),
            joint_axis=(np.concatenate([j["axis"] for j in joints]) if joints else np.zeros((0, 3))),
            joint_armature=cat("armature"),
            joint_damping=cat("damping"),
            joint_target_ke=cat("target_ke"),
            joint_target_kd=cat("target_kd"),
            joint_effort_limit=cat("effort_limit"),
            joint_limit_lower=cat("limit_lower"),
            joint_limit_upper=cat("limit_upper"),
            joint_limit_ke=cat("limit_ke"),
            joint_limit_kd=cat("limit_kd"),
            joint_q_init=cat("q0"),
            joint_qd_init=cat("qd0"),
            shape_type=np.array([int(s["type"]) for s in shapes], dtype=np.int32),
            shape_body=np.array([s["body"] for s in shapes], dtype=np.int32),
            shape_transform=np.array([s["X"] for s in shapes]).reshape(-1, 7),
            shape_size=np.array([s["size"] for s in shapes]).reshape(-1, 3),
            shape_margin=np.array([s["margin"] for s in shapes]),
            shape_material_mu=np.array([s["mu"] for s in shapes]),
            shape_material_ke=np.array([s["ke"] for s in shapes]),
            shape_material_tau=np.array([s["tau"] for s in shapes]),
            shape_collision_group=np.array([s["group"] for s in shapes], dtype=np.int32),
            shape_contype=np.array([s["contype"] for s in shapes], dtype=np.int64),
            shape_conaffinity=np.array([s["conaffinity"] for s in shapes], dtype=np.int64),
            shape_filter_pair=np.array(self._filter_pairs, dtype=np.int32).reshape(-1, 2),
            shape_name=tuple(s["name"] for s in shapes),
            gravity=self.gravity,
            shape_source=np.array([s["source"] for s in shapes], dtype=np.int32),
            mesh_vertex=np.concatenate(self._meshes) if self._meshes else np.zeros((0, 3)),
            mesh_vertex_start=np.concatenate([[0], np.cumsum([len(v) for v in self._meshes])]).astype(np.int32),
            hfield_height=np.concatenate([h.ravel() for h in self._hfields]) if self._hfields else np.zeros(0),
            hfield_start=np.concatenate([[0], np.cumsum([h.size for h in self._hfields])]).astype(np.int32),
            hfield_shape=np.array([h.shape for h in self._hfields], dtype=np.int32).reshape(-1, 2),
            shape_material_hcd=np.array([s["hcd"] for s in shapes]),
            shape_rounding=np.array([s["rounding"] for s in shapes]),
            constraint_type=np.array([int(c["type"]) for c in cons], dtype=np.int32),
            constraint_name=tuple(c["name"] for c in cons),
            constraint_body_a=np.array([c["body_a"] for c in cons], dtype=np.int32),
            constraint_body_b=np.array([c["body_b"] for c in cons], dtype=np.int32),
            constraint_X_a=np.array([c["X_a"] for c in cons]).reshape(-1, 7),
            constraint_X_b=np.array([self._ball_anchor(c) if c["X_b"] is None else c["X_b"] for c in cons]).reshape(
                -1, 7),
            constraint_axis=np.array([c["axis"] for c in cons]).reshape(-1, 3),
            constraint_joint0=np.array([c["joint0"] for c in cons], dtype=np.int32),
            constraint_joint1=np.array([c["joint1"] for c in cons], dtype=np.int32),
            constraint_gear_ratio=np.array([c["gear_ratio"] for c in cons]),
            constraint_offset=np.array([c["offset"] for c in cons]),
            constraint_length=np.array([c["length"] for c in cons]),
            constraint_stiffness=np.array([c["stiffness"] for c in cons]),
            constraint_damping=np.array([c["damping"] for c in cons]),
        )

    def _ball_anchor(self, c: dict) -> np.ndarray:
        """X_BQ of a ball constraint added without ``p_bq``: the point of B at P's world position in
        the initial state (the joints' ``q0``), identity rotation."""
        poses = self._initial_poses()
        X_WA = spatial.transform_identity() if c["body_a"] < 0 else poses[c["body_a"]]
        p_WP = spatial.transform_point(X_WA, c["X_a"][:3])
        if c["body_b"] < 0:
            return spatial.transform(p_WP)
        return spatial.transform(spatial.transform_point(spatial.transform_inverse(poses[c["body_b"]]), p_WP))

    def _initial_poses(self) -> np.ndarray:
        """Body poses of the joints' initial coordinates (a probe model without constraints)."""
        saved = self._constraints
        self._constraints = []
        try:
            probe = self.finalize().replicate(1)
        finally:
            self._constraints = saved
        return forward_kinematics(probe, probe.joint_q_init[None, :])[0]

    @staticmethod
    def _name(kind: str, name, existing: list) -> str:
        if name is None:
            name = f"{kind}_{len(existing)}"
        if not isinstance(name, str) or not name:
            raise ValueError(f"add_{kind}: name must be a non-empty string, got {name!r}")
        if any(e["name"] == name for e in existing):
            raise ValueError(f"add_{kind}: name {name!r} is already used by another {kind}")
        return name
