"""Why one step of an implementation departs from a recording (``sap-validate``'s diagnosis).

Given a recorded state n (q_n, v_n) and the recorded result v_{n+1}, the causes are tried in
order, and the first that applies is the diagnosis:

1. **contact set** — the implementation's contacts at q_n are not the recording's. Each
   unmatched contact is a *tie* when |φ₀ − margin| is within round-off of the inclusion
   threshold (:func:`sap_tools.tolerances.is_contact_tie`): touching faces decided by the last bit,
   not a bug. A recording without contacts is checked the same way against the pairs whose φ₀
   lies within round-off of the threshold: if including or leaving out such a pair reproduces
   the recorded step, that tie is the cause.
2. **constraint rows** — matched contacts with different φ₀, normal, contact point, combined
   μ, k or τ_d (where the recording has them), or a Jacobian whose contact velocities J·v_{n+1}
   are not the recorded separation and slip speeds. A shape pair that Drake computes with FCL's
   MPR (:func:`drake_uses_mpr`) is judged apart: its φ₀ and normal to
   :data:`sap_tools.tolerances.DRAKE_MPR_GEOMETRY_TOL`, and its contact point — MPR's barycentric
   estimate, which lies inside both shapes but on neither surface — by whether it lies in both
   shapes. When the rows agree so and the step, re-run with the recording's contact geometry for
   those pairs, reproduces the recorded row to the one-step bar, the step is explained
   (``mpr_contact_point``): the solver is exact, the two collision queries place the point
   differently.
3. **Newton tolerance** — the recorded v_{n+1} satisfies the implementation's own stopping
   criterion ‖D̃∇ℓ‖ ≤ ε_a + ε_r·max(‖D̃Av‖, ‖D̃Jᵀγ‖) on the same problem: both are solutions of
   one strongly convex problem to within the tolerance; Newton merely stopped at another iterate.
4. **the step** — none of the above: the stage-by-stage differences (for sap_gpu first against
   sap_ref, as ``sap-compare-backends`` prints them; then against what the recording holds:
   the momentum balance of the free motion, contact forces, generalized contact forces,
   actuation, v₁, q₁), and the first stage that departs.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import numpy as np

from sap_common import spatial
from sap_common.enums import ShapeType
from sap_common.io.drake import drake_qv_to_joint
from sap_common.rows import RowKind
from sap_common.state import CONTACT_SLOT_FIELDS
from sap_ref import collision as ref_collision
from sap_ref.arrays import clear_contact, write_contact
from sap_ref.contact_solve import evaluate, stopping_criterion
from sap_ref.integration import integrate_positions
from sap_tools.tolerances import DRAKE_MPR_GEOMETRY_TOL, GEOMETRY_TOL, TOL, contact_tie_bound, is_contact_tie

__all__ = ["STAGE_RTOL", "MAX_TIE_FLIPS", "Diagnosis", "Stage", "drake_uses_mpr", "stage_table", "diagnose"]

# A derived quantity (force, impulse, momentum) of a step that matches the recording to round-off
# differs by ~1e-15 relative (measured on the Drake recordings); a bug by O(1). 1e-9 sits between
# them and below SAP's Newton tolerance (1e-6 relative), so a stage that passes is not a bug
# hidden by the tolerance.
STAGE_RTOL = 1e-9
# Near-threshold pairs whose inclusion is flipped to test a tie: all subsets up to this many
# pairs (2^k re-solves), beyond that one pair at a time.
MAX_TIE_FLIPS = 4


@dataclass
class Stage:
    """One row of a stage table: ``err`` = max |implementation − reference| over the stage's entries,
    ``scale`` = max |reference|, ``tol`` the allowed difference, ``ok`` whether it holds."""

    name: str
    err: float
    scale: float
    tol: float
    ok: bool
    note: str = ""

    def as_dict(self) -> dict:
        return {"stage": self.name, "max_abs_diff": self.err, "scale": self.scale, "tolerance": self.tol,
                "ok": self.ok, "note": self.note}


@dataclass
class Diagnosis:
    """Why step n departs.

    Attributes:
        step: the step, numbered as every report numbers them: step k goes from row k−1 to row k
            of the recording (row k is the state after step k; steps count from 1).
        cause: ``contact_set``, ``constraint_rows``, ``newton_tolerance`` or ``step``.
        tie: the contact sets differ by a φ tie only.
        explained: a tie, a different Newton iterate, or the contact point of an FCL-MPR pair with
            an otherwise exact step: no evidence of a bug.
        message: one paragraph for people.
        stages: the stage table behind the verdict.
        explanation: ``tie``, ``newton_tolerance`` or ``mpr_contact_point`` when explained, else "".
        forced_over_bar: for ``mpr_contact_point``, the step's error with the recording's contact
            geometry on its FCL-MPR pairs, in units of the one-step bar (≤ 1); else None.
    """

    step: int
    cause: str
    tie: bool
    explained: bool
    message: str
    stages: list = field(default_factory=list)
    explanation: str = ""
    forced_over_bar: float | None = None

    def __post_init__(self):
        if self.explained and not self.explanation:
            self.explanation = "tie" if self.tie else "newton_tolerance"

    def as_dict(self) -> dict:
        return {"step": self.step, "cause": self.cause, "tie": self.tie, "explained": self.explained,
                "explanation": self.explanation, "forced_over_bar": self.forced_over_bar, "message": self.message,
                "stages": [s.as_dict() for s in self.stages]}


def _stage(name, ours, ref, rtol=STAGE_RTOL, floor=1.0, note="") -> Stage:
    a, b = np.asarray(ours, np.float64), np.asarray(ref, np.float64)
    err = float(np.abs(a - b).max(initial=0.0))
    scale = float(np.abs(b).max(initial=0.0))
    tol = rtol * max(floor, scale)
    return Stage(name, err, scale, tol, err <= tol, note)


# ----------------------------------------------------------------------------- contact sets


def _recorded_contacts(traj, row: int) -> list[dict]:
    """The recording's contacts of row ``row`` (the step row−1 → row) as dicts."""
    c = traj.contacts
    out = []
    for k in range(int(c["contact_count"][row])):
        d = {"shape0": int(c["contact_shape0"][row, k]), "shape1": int(c["contact_shape1"][row, k]),
             "phi": float(c["contact_phi"][row, k]), "slot": k}
        for key in ("contact_point", "contact_normal", "contact_force", "contact_mu", "contact_ke", "contact_tau_d",
                    "contact_hcd"):
            if key in c:
                d[key[8:]] = np.asarray(c[key][row, k], np.float64)
        out.append(d)
    return out


def _match(ours, recorded: list[dict]):
    """Pair our contact slots with recorded ones: same shape pair, nearest point. Returns
    ``(pairs [(our slot, recorded index)], ours_only, recorded_only)``."""
    point = lambda k: 0.5 * (ours.x0[0, k] + ours.x1[0, k])  # noqa: E731
    rec_point = lambda r: r.get("point", None)  # noqa: E731
    left = {}
    for k in range(int(ours.count[0])):
        left.setdefault(tuple(sorted((int(ours.shape0[0, k]), int(ours.shape1[0, k])))), []).append(k)
    right = {}
    for i, r in enumerate(recorded):
        right.setdefault(tuple(sorted((r["shape0"], r["shape1"]))), []).append(i)
    pairs, ours_only, rec_only = [], [], []
    for key in sorted(set(left) | set(right)):
        a, b = list(left.get(key, [])), list(right.get(key, []))
        while a and b:
            if rec_point(recorded[b[0]]) is None:
                i, j = 0, 0
            else:
                d = np.array([[np.linalg.norm(point(k) - recorded[r]["point"]) for r in b] for k in a])
                i, j = np.unravel_index(np.argmin(d), d.shape)
            pairs.append((a.pop(i), b.pop(j)))
        ours_only += a
        rec_only += b
    return pairs, ours_only, rec_only


def _shape_poses(model, state) -> np.ndarray:
    """World poses ``[p, q_xyzw]`` of every shape at ``state``: world shapes as they are, body
    shapes X_WB ∘ X_BS."""
    body_q = np.asarray(state.body_q[0], np.float64)
    X = np.array(model.shape_transform, np.float64)
    on_body = model.shape_body >= 0
    X[on_body] = spatial.transform_compose(body_q[model.shape_body[on_body]], model.shape_transform[on_body])
    return X


def _pair_candidates(model, state, pair):
    """Our narrow phase for one shape pair at ``state``: [(x0, x1, normal, phi)]."""
    X = _shape_poses(model, state)
    a, b = pair
    return ref_collision.pair_contacts(model.shape_type[a], X[a], model.shape_size[a], model.shape_type[b], X[b],
                                       model.shape_size[b], ref_collision.shape_geometry(model, a),
                                       ref_collision.shape_geometry(model, b), rounding0=float(model.shape_rounding[a]),
                                       rounding1=float(model.shape_rounding[b]))


def _near_threshold(model, state, contacts):
    """Pairs within round-off of the inclusion threshold at ``state``: ``(included slots, excluded
    candidates [(pair, x0, x1, n, phi)])``."""
    included, excluded = [], []
    for k in range(int(contacts.count[0])):
        scale = max(np.abs(contacts.x0[0, k]).max(), np.abs(contacts.x1[0, k]).max())
        if is_contact_tie(contacts.phi0[0, k], contacts.margin0[0, k] + contacts.margin1[0, k], scale):
            included.append(k)
    for a, b in model.shape_pair:
        a, b = int(a), int(b)
        margin = model.shape_margin[a] + model.shape_margin[b]
        for x0, x1, n, phi in _pair_candidates(model, state, (a, b)):
            scale = max(np.abs(x0).max(), np.abs(x1).max())
            if phi >= margin and is_contact_tie(phi, margin, scale):
                excluded.append(((a, b), x0, x1, n, float(phi)))
    return included, excluded


def _edited_contacts(model, config, contacts, drop=(), add=()):
    """A copy of ``contacts`` without the slots ``drop`` and with the candidates ``add``."""
    out = contacts.copy()
    keep = [k for k in range(int(contacts.count[0])) if k not in set(drop)]
    rows = [{f: getattr(contacts, f)[0, k].copy() for f in CONTACT_SLOT_FIELDS} for k in keep]
    for (a, b), x0, x1, n, phi in add:  # point contacts, as sap_ref's collision writes them
        mu, ke, k0, k1, tau = ref_collision.combine_materials(model, a, b, config)
        hcd = ref_collision.combine_hc_dissipation(model, a, b, config)
        rows.append(dict(shape0=a, shape1=b, body0=model.shape_body[a], body1=model.shape_body[b], x0=x0, x1=x1,
                         normal=n, phi0=phi, margin0=model.shape_margin[a], margin1=model.shape_margin[b], mu=mu,
                         ke=ke, ke0=k0, ke1=k1, tau_d=tau, hcd=hcd, area=0.0))
    if len(rows) > out.capacity:
        return None
    out.count[0] = len(rows)
    clear_contact(out, 0)
    for slot, r in enumerate(rows):
        write_contact(out, 0, slot, **r)
    return out


def _reproduces(ctx, state, contacts, n) -> bool:
    """Whether the reference, stepping with ``contacts``, reproduces recorded row n+1 to the bar."""
    v1, q1, _ = ctx.reference.step(state, contacts, ctx.dt)
    return ctx.within_bar(n, v1, q1)


def _flip_test(ctx, state, contacts, n, included, excluded):
    """Subsets of the near-threshold pairs whose flipped inclusion reproduces the recording."""
    model, config = ctx.scene.sap_model, ctx.reference.config
    items = [("drop", k) for k in included] + [("add", c) for c in excluded]
    if not items:
        return None
    sizes = range(1, len(items) + 1) if len(items) <= MAX_TIE_FLIPS else (1,)
    for size in sizes:
        for subset in itertools.combinations(items, size):
            edited = _edited_contacts(model, config, contacts, drop=[x for kind, x in subset if kind == "drop"],
                                      add=[x for kind, x in subset if kind == "add"])
            if edited is not None and _reproduces(ctx, state, edited, n):
                return subset
    return None


def _describe_flip(model, contacts, subset) -> str:
    parts = []
    for kind, x in subset:
        if kind == "drop":
            a, b, phi = int(contacts.shape0[0, x]), int(contacts.shape1[0, x]), float(contacts.phi0[0, x])
            parts.append(f"leaving out {model.shape_name[a]}–{model.shape_name[b]} (φ₀ = {phi:.3g} m)")
        else:
            (a, b), phi = x[0], x[4]
            parts.append(f"including {model.shape_name[a]}–{model.shape_name[b]} (φ₀ = {phi:.3g} m)")
    return ", ".join(parts)


def _contact_set(ctx, n, state, ours):
    """Diagnosis of a contact-set difference at step n, or None when the sets agree."""
    model = ctx.scene.sap_model
    name = lambda a, b: f"{model.shape_name[a]}–{model.shape_name[b]}"  # noqa: E731
    if ctx.traj.contacts:
        recorded = _recorded_contacts(ctx.traj, n + 1)
        pairs, ours_only, rec_only = _match(ours, recorded)
        if not ours_only and not rec_only:
            return None, pairs, recorded
        lines, ties = [], []
        for k in ours_only:
            a, b = int(ours.shape0[0, k]), int(ours.shape1[0, k])
            scale = max(np.abs(ours.x0[0, k]).max(), np.abs(ours.x1[0, k]).max())
            margin = float(ours.margin0[0, k] + ours.margin1[0, k])
            tie = is_contact_tie(ours.phi0[0, k], margin, scale)
            ties.append(tie)
            lines.append(f"{name(a, b)} found here only, φ₀ = {float(ours.phi0[0, k]):.3g} m "
                         f"({'a tie' if tie else 'not a tie'}: threshold {margin:.3g} m, round-off bound "
                         f"{contact_tie_bound(scale):.2g} m)")
        for i in rec_only:
            r = recorded[i]
            a, b = r["shape0"], r["shape1"]
            margin = float(model.shape_margin[a] + model.shape_margin[b])
            scale = float(np.abs(r["point"]).max()) if "point" in r else 1.0
            tie = is_contact_tie(r["phi"], margin, scale)
            ties.append(tie)
            lines.append(f"{name(a, b)} recorded only, φ₀ = {r['phi']:.3g} m "
                         f"({'a tie' if tie else 'not a tie'}: threshold {margin:.3g} m, round-off bound "
                         f"{contact_tie_bound(scale):.2g} m)")
        tie = all(ties)
        head = (f"contact set differs at step {n + 1} by a tie (touching within round-off of the threshold: decided "
                "by the last bit, not a bug)" if tie else f"contact set differs at step {n + 1} (not a tie)")
        return Diagnosis(n + 1, "contact_set", tie, tie, head + ": " + "; ".join(lines)), pairs, recorded
    included, excluded = _near_threshold(model, state, ours)
    subset = _flip_test(ctx, state, ours, n, included, excluded)
    if subset is None:
        return None, [], []
    return Diagnosis(n + 1, "contact_set", True, True,
                     f"contact set differs at step {n + 1} by a tie: {_describe_flip(model, ours, subset)}, a pair "
                     "within round-off of the inclusion threshold, reproduces the recorded step"), [], []


# ----------------------------------------------------------------------------- constraint rows


def drake_uses_mpr(type0, type1) -> bool:
    """Whether Drake's point-contact query (Drake 1.51, SceneGraph's penetration as point pairs)
    computes a pair of these shape types with FCL's MPR (libccd's Minkowski Portal Refinement)
    rather than a closed form. Closed forms: a sphere against a sphere, box, cylinder, capsule or
    half space (Drake's own), any shape against a half space and box–box (FCL's). Every other pair
    of sphere, box, capsule, cylinder, ellipsoid and convex mesh goes to MPR, whose contact point
    is a barycentric estimate pulled toward the shapes' centres; see
    docs/validation.md § FCL's MPR pairs
    Height fields have no Drake counterpart (False)."""
    a, b = sorted((ShapeType(int(type0)), ShapeType(int(type1))))
    if ShapeType.PLANE in (a, b) or ShapeType.HEIGHTFIELD in (a, b):
        return False
    if a == ShapeType.SPHERE and b in (ShapeType.SPHERE, ShapeType.CAPSULE, ShapeType.BOX, ShapeType.CYLINDER):
        return False
    return not (a == b == ShapeType.BOX)


def _mpr_slots(ctx, ours, pairs) -> list[bool]:
    """For each matched pair, whether the recording computed it with FCL's MPR (Drake recordings)."""
    if ctx.traj.engine != "drake":
        return [False] * len(pairs)
    m = ctx.scene.sap_model
    types = lambda k: (m.shape_type[int(ours.shape0[0, k])], m.shape_type[int(ours.shape1[0, k])])  # noqa: E731
    return [drake_uses_mpr(*types(k)) for k, _ in pairs]


def _contact_points(ours, i) -> np.ndarray:
    """The points the constraints of our slots ``i`` act at: Drake's stiffness-weighted rule."""
    k0, k1 = ours.ke0[0, i], ours.ke1[0, i]
    w0 = np.where(k0 + k1 > 0, k0 / np.where(k0 + k1 > 0, k0 + k1, 1.0), 0.5)[:, None]
    return w0 * ours.x0[0, i] + (1 - w0) * ours.x1[0, i]


def _outside_depth(model, X, shape, p) -> float:
    """How far the point ``p`` [m] lies outside ``shape`` (≤ 0 inside): this project's narrow phase
    against a sphere of radius 0 at ``p``."""
    out = ref_collision.pair_contacts(ShapeType.SPHERE, np.r_[p, 0.0, 0.0, 0.0, 1.0], np.zeros(3),
                                      model.shape_type[shape], X[shape], model.shape_size[shape], None,
                                      ref_collision.shape_geometry(model, shape),
                                      rounding1=float(model.shape_rounding[shape]))
    return min((float(c[3]) for c in out), default=float("inf"))


def _mpr_rows(ctx, state, ours, pairs, recorded, L) -> list:
    """Rows of the FCL-MPR pairs: φ₀ and normals to DRAKE_MPR_GEOMETRY_TOL, and the recorded
    contact point inside both shapes (MPR's point is a convex combination of points of each)."""
    model = ctx.scene.sap_model
    i = np.array([p[0] for p in pairs])
    rec = [recorded[p[1]] for p in pairs]
    label = "contacts, FCL-MPR pairs:"
    rows = [_stage(f"{label} φ₀ [m]", ours.phi0[0, i], [r["phi"] for r in rec], DRAKE_MPR_GEOMETRY_TOL["phi0"], L)]
    if "normal" in rec[0]:
        rows.append(_stage(f"{label} normals", ours.normal[0, i], [r["normal"] for r in rec],
                           DRAKE_MPR_GEOMETRY_TOL["normal"]))
    if "point" in rec[0]:
        X = _shape_poses(model, state)
        outside, offsets, along = -np.inf, [], []
        for k, r in zip(i, rec):
            p = np.asarray(r["point"], np.float64)
            for s in (int(ours.shape0[0, k]), int(ours.shape1[0, k])):
                outside = max(outside, _outside_depth(model, X, s, p))
            d = p - _contact_points(ours, np.array([k]))[0]
            offsets.append(float(np.linalg.norm(d)))
            along.append(float(d @ ours.normal[0, k]))
        j = int(np.argmax(offsets))
        inside = f"inside both shapes by ≥ {-outside:.3g} m" if outside <= 0 else f"{outside:.3g} m outside a shape"
        rows.append(Stage(f"{label} recorded point outside either shape [m]", max(outside, 0.0), L, GEOMETRY_TOL * L,
                          outside <= GEOMETRY_TOL * L,
                          f"{inside}; {offsets[j]:.3g} m from this implementation's point ({along[j]:+.3g} m along "
                          "the normal)"))
    return rows


def _constraint_rows(ctx, n, state, ours, pairs, recorded, J):
    """Stage rows comparing matched contacts with the recording (φ₀, normal, point, μ, k, τ_d, J v);
    the pairs a Drake recording computed with FCL's MPR get the rows of :func:`_mpr_rows` instead of
    the geometry and J·v rows."""
    if not pairs:
        return []
    cfg = ctx.reference.config
    mpr = _mpr_slots(ctx, ours, pairs)
    exact = [p for p, m in zip(pairs, mpr) if not m]
    i = np.array([p[0] for p in pairs])
    rec = [recorded[p[1]] for p in pairs]
    L = max(1.0, float(np.abs(ours.x0[0, i]).max()), float(np.abs(ours.x1[0, i]).max()))
    rows = []
    if exact:
        ie = np.array([p[0] for p in exact])
        re = [recorded[p[1]] for p in exact]
        rows.append(_stage("contacts: φ₀ [m]", ours.phi0[0, ie], [r["phi"] for r in re], GEOMETRY_TOL, L))
        if "normal" in re[0]:
            rows.append(_stage("contacts: normals", ours.normal[0, ie], [r["normal"] for r in re], GEOMETRY_TOL))
        if "point" in re[0] and cfg.contact_point_mode == "contact_midpoint":
            rows.append(_stage("contacts: contact point [m]", _contact_points(ours, ie), [r["point"] for r in re],
                               GEOMETRY_TOL, L))
    if any(mpr):
        rows += _mpr_rows(ctx, state, ours, [p for p, m in zip(pairs, mpr) if m], recorded, L)
    for key, label in (("mu", "contact μ"), ("ke", "contact k [N/m]"), ("tau_d", "contact τ_d [s]"),
                       ("hcd", "contact Hunt–Crossley d [s/m]")):
        if key in rec[0] and np.all(np.isfinite([r[key] for r in rec])):
            rows.append(_stage(label, getattr(ours, key)[0, i], [r[key] for r in rec], TOL["fp64"], 0.0))
    extra = ctx.traj.extra
    hc = ctx.backend.hunt_crossley()
    if exact and hc is not None and "contact_hc_fe0" in extra:
        # The Hunt–Crossley data of the step (fixed at q₀, v₀) against the recorder's.
        ie = np.array([p[0] for p in exact])
        slots = [recorded[p[1]]["slot"] for p in exact]
        vscale = max(1.0, float(np.abs(ctx.v_rows[n]).max()))
        for key, label, floor in (("fe0", "Hunt–Crossley fₑ₀ [N]", 0.0), ("vn0", "Hunt–Crossley vₙ₀ [m/s]", vscale),
                                  ("n0", "Hunt–Crossley n₀ [N·s]", 0.0), ("eps", "Hunt–Crossley ε_s [m/s]", 0.0)):
            rows.append(_stage(label, hc[key][ie], extra[f"contact_hc_{key}"][n + 1, slots], TOL["fp64"], floor))
    if exact and "contact_separation_speed" in extra and J is not None and len(J) >= len(i):
        ie = np.array([p[0] for p in exact])
        vc = np.einsum("cjn,n->cj", J[ie], ctx.v_rows[n + 1])
        slots = [recorded[p[1]]["slot"] for p in exact]
        sep = extra["contact_separation_speed"][n + 1, slots]
        slip = extra["contact_slip_speed"][n + 1, slots]
        scale = max(1.0, float(np.abs(ctx.v_rows[n + 1]).max()))
        rows.append(_stage("contact J: J·v₁ normal vs recorded separation speed", vc[:, 2], sep, TOL["fp64"], scale))
        rows.append(_stage("contact J: |J·v₁| tangential vs recorded slip speed", np.linalg.norm(vc[:, :2], axis=1),
                           slip, TOL["fp64"], scale))
    return rows


def _recorded_geometry(ours, mpr_pairs, recorded):
    """A copy of ``ours`` whose FCL-MPR pairs ``mpr_pairs`` carry the recording's φ₀, normal and
    contact point (x0 = x1 = the point, so the constraint acts there whatever the weights)."""
    out = ours.copy()
    for k, r in mpr_pairs:
        rc = recorded[r]
        out.phi0[0, k] = rc["phi"]
        flip = (int(ours.shape0[0, k]), int(ours.shape1[0, k])) != (rc["shape0"], rc["shape1"])
        if "normal" in rc:
            out.normal[0, k] = -rc["normal"] if flip else rc["normal"]
        if "point" in rc:
            out.x0[0, k] = out.x1[0, k] = rc["point"]
    return out


def _mpr_point(ctx, n, state, ours, pairs, recorded, rows):
    """``(Diagnosis or None, note)``: whether the step, with the recording's contact geometry on its
    FCL-MPR pairs, reproduces the recorded row (then the contact point of those pairs is the only
    difference: explained); ``note`` says how far it stays otherwise."""
    mpr_pairs = [p for p, m in zip(pairs, _mpr_slots(ctx, ours, pairs)) if m]
    if not mpr_pairs:
        return None, ""
    v1, q1, _ = ctx.backend.step(state, _recorded_geometry(ours, mpr_pairs, recorded), ctx.dt)
    ev, bv, eq, bq = ctx.errors(n, v1, q1)
    ratio = max(ev / bv, eq / bq)
    if ratio > 1.0:
        return None, (f"; with the recording's contact geometry on its FCL-MPR pairs the step is still {ratio:.3g}× "
                      "the bar")
    point = next((s for s in rows if s.name.endswith("recorded point outside either shape [m]")), None)
    where = f" (Drake's point: {point.note})" if point is not None else ""
    return Diagnosis(n + 1, "constraint_rows", False, True,
                     f"contact point of an FCL-MPR pair differs at step {n + 1}{where}: Drake computes this pair with "
                     "FCL's MPR, whose contact point is a barycentric estimate inside both shapes, not a witness "
                     "point; φ₀ and normal agree, and with the recording's contact geometry the step reproduces the "
                     f"recorded one to {ratio:.2g} of the bar", rows, "mpr_contact_point", ratio), ""


# ----------------------------------------------------------------------------- Newton tolerance


def _newton(ctx, n, result):
    """``(reached, r, s, off)``: our stopping criterion at the recorded v_{n+1} on our problem, and the
    largest departure of the recorded v from v* on the DOFs no constraint touches."""
    v_rec = ctx.v_rows[n + 1]
    fm, p = result.free_motion, result.problem
    rest = np.setdiff1d(np.arange(len(v_rec)), p.dofs)
    off = float(np.abs(v_rec[rest] - fm.v_star[rest]).max(initial=0.0))
    if len(p.dofs) == 0:
        return False, 0.0, 0.0, off
    ev = evaluate(p, v_rec[p.dofs])
    reached, r, s = stopping_criterion(p, ev, ctx.reference.config)
    return reached, r, s, off


# ----------------------------------------------------------------------------- stages


def _to_sap(ctx, n, x):
    """A generalized vector in Drake's v order → our SAP order (recordings in the drake convention)."""
    if ctx.traj.convention != "drake":
        return None
    return drake_qv_to_joint(ctx.scene, ctx.traj.q[n], x, joint_qd_order="sap")[1]


def _recording_stages(ctx, n, result, pairs, recorded, v1, q1):
    """Stages against what the recording holds (Drake's forces, actuation and momentum balance)."""
    rows = []
    extra, h = ctx.traj.extra, ctx.dt
    r = result
    if "generalized_contact_forces" in extra and ctx.traj.convention == "drake":
        tau_c = _to_sap(ctx, n, extra["generalized_contact_forces"][n + 1])
        residual = _to_sap(ctx, n, extra["dynamics_residual"][n + 1])
        Bu = np.zeros_like(tau_c)
        actuated = ctx.actuated_dofs
        if actuated is not None and extra["net_actuation"].shape[1]:
            Bu[actuated] = extra["net_actuation"][n + 1]
        momentum = r.free_motion.A @ (ctx.v_rows[n + 1] - r.free_motion.v_star)
        limit_active = r.limits is not None and len(r.limits.R) > 0
        note = "" if not limit_active else "a limit row is active: the recorded residual holds its impulse"
        rows.append(_stage("free motion: A(v₁ − v*) − h(τ_c + Bu) vs recorded momentum residual [N·s]",
                           momentum - h * (tau_c + Bu), residual, STAGE_RTOL,
                           max(1.0, float(np.abs(momentum).max(initial=0.0))), note))
        if r.solve is not None and r.problem is not None:
            ev = r.solve.evaluation
            dofs = r.problem.dofs
            C = len(r.problem.contact_mu)
            if C:
                jt = np.zeros(len(v1))
                jt[dofs] = np.einsum("cjn,cj->n", r.problem.contact_J, ev.contact_gamma)
                rows.append(_stage("generalized contact force Jᵀγ/h [N, N·m]", jt / h, tau_c, STAGE_RTOL))
            drives = r.problem.rows.drive
            if len(drives.dof) and actuated is not None:
                u = np.zeros(len(v1))
                u[drives.dof] = ev.row_gamma[r.problem.rows.rows(RowKind.DRIVE)] / h
                rows.append(_stage("actuation: drive force [N, N·m]", u[actuated], Bu[actuated], STAGE_RTOL))
    if pairs and "force" in recorded[0] and result.contacts is not None and result.solve is not None:
        i = [p[0] for p in pairs]
        f = result.contact_impulses_W[i] / h
        rows.append(_stage("contact force on shape 1's body [N]", f, [recorded[p[1]]["force"] for p in pairs],
                           STAGE_RTOL))
    return rows


def _step_stages(ctx, n, v1, q1):
    return [_stage("v₁ [m/s, rad/s]", v1, ctx.v_rows[n + 1], ctx.one_step_rtol),
            _stage("q₁ (coordinates)", q1, ctx.q_rows[n + 1], ctx.one_step_rtol)]


def _gpu_stages(ctx, state, ref_contacts):
    """sap_gpu against sap_ref on the same inputs (the table of ``sap-compare-backends``)."""
    from sap_tools.compare_backends import COUNT_STAGES, STAGES, collision_differences, stage_differences, verdict

    d = collision_differences(ref_contacts, ctx.backend.collide(state))
    d.update(stage_differences(ctx.reference.solver, ctx.backend.solver, state, ctx.scene.control, ref_contacts,
                               ctx.dt))
    v = verdict(d)
    rows = []
    for key, label in STAGES:
        if key not in d:
            continue
        c = d[key]
        if key in COUNT_STAGES:  # differences that are not ties: any fails
            rows.append(Stage(f"sap_gpu vs sap_ref: {label}", c.used, c.scale, 0.0, v[key] != "FAIL",
                              "tie" if v[key] == "tie" else ""))
        else:
            tol = c.err / c.used if c.used > 0 else float("inf")
            rows.append(Stage(f"sap_gpu vs sap_ref: {label}", c.err, c.scale, tol, v[key] != "FAIL",
                              "tolerance of sap_tools/tolerances.py"))
    return rows


# ----------------------------------------------------------------------------- the diagnosis


def stage_table(ctx, n: int) -> list:
    """Every stage of step n compared (constraint rows, sap_gpu against sap_ref, the recording's
    forces and momentum balance, v₁ and q₁), whatever the step's outcome."""
    state = ctx.state(n)
    ours = ctx.backend.collide(state)
    v1, q1, _ = ctx.backend.step(state, ours, ctx.dt)
    J = ctx.backend.contact_J()
    pairs, recorded = [], []
    if ctx.traj.contacts:
        recorded = _recorded_contacts(ctx.traj, n + 1)
        pairs = _match(ours, recorded)[0]
    stages = _constraint_rows(ctx, n, state, ours, pairs, recorded, J)
    ref_contacts = ctx.reference.collide(state)
    if ctx.backend is not ctx.reference:
        stages += _gpu_stages(ctx, state, ref_contacts)
    ctx.reference.step(state, ref_contacts, ctx.dt)
    stages += _recording_stages(ctx, n, ctx.reference.solver.last_results[0], pairs, recorded, v1, q1)
    return stages + _step_stages(ctx, n, v1, q1)


def diagnose(ctx, n: int) -> Diagnosis:
    """Why the backend's step from row n departs from the recording (module docstring, in that
    order); the diagnosis numbers it step n + 1, as every report does (row n + 1 is its result).

    ``ctx`` (see sap_tools/validate/cli.py) holds the scene, the trajectory, the recorded rows in SAP
    order, the backend under test and the sap_ref reference, dt and the one-step bar.
    """
    state = ctx.state(n)
    ours = ctx.backend.collide(state)
    ctx.backend.step(state, ours, ctx.dt)
    J = ctx.backend.contact_J()
    found, pairs, recorded = _contact_set(ctx, n, state, ours)
    if found is not None:
        return found
    rows = _constraint_rows(ctx, n, state, ours, pairs, recorded, J)
    bad = [s for s in rows if not s.ok]
    if bad:
        return Diagnosis(n + 1, "constraint_rows", False, False,
                         f"constraint rows differ at step {n + 1}: {bad[0].name} (max difference {bad[0].err:.3g}, "
                         f"allowed {bad[0].tol:.3g})", rows)
    explained, mpr_note = _mpr_point(ctx, n, state, ours, pairs, recorded, rows)
    if explained is not None:
        return explained
    ref_contacts = ctx.reference.collide(state)
    ctx.reference.step(state, ref_contacts, ctx.dt)
    result = ctx.reference.solver.last_results[0]
    if result.problem is not None and result.solve is not None:
        reached, r, s, off = _newton(ctx, n, result)
        # Two Newton iterates differ in v; the recorded q must still be this implementation's position
        # update of the recorded v (a q that differs on its own is no Newton-tolerance difference).
        q_of_v_rec = integrate_positions(ctx.scene.sap_model, ctx.q_rows[n], ctx.v_rows[n], ctx.v_rows[n + 1], ctx.dt,
                                         ctx.reference.config.position_integration)
        _, _, eq, bar_q = ctx.errors(n, ctx.v_rows[n + 1], q_of_v_rec)
        if reached and eq <= bar_q and off <= ctx.one_step_rtol * max(1.0, float(np.abs(ctx.v_rows[n + 1]).max())):
            cfg = ctx.reference.config
            return Diagnosis(n + 1, "newton_tolerance", False, True,
                             f"Newton stopped at a different iterate at step {n + 1}: the recorded v₁ satisfies this "
                             f"implementation's stopping criterion (‖D̃∇ℓ‖ = {r:.3g} ≤ {cfg.optimality_abs_tol:.3g} + "
                             f"{cfg.optimality_rel_tol:.3g}·{s:.3g}): both are solutions within the Newton tolerance",
                             rows)
    stages = stage_table(ctx, n)
    first = next((s for s in stages if not s.ok), None)
    where = (f"first departing stage: {first.name} (max difference {first.err:.3g}, allowed {first.tol:.3g})"
             if first else "no single stage departs beyond its tolerance")
    return Diagnosis(n + 1, "step", False, False, f"the step itself differs at step {n + 1}; {where}{mpr_note}", stages)
