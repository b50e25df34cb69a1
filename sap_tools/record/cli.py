"""``sap-record``: record a scene with Drake (pydrake 1.51.1) or MuJoCo, for ``sap-validate``.

    sap-record --reference --timing                       # regenerate tests/data/drake/ (needs [drake])
    sap-record --reference --check                        # regenerate into a temporary folder, compare
    sap-record sphere_on_sphere --out recordings/         # a built-in scene, recorded by Drake (lagged)
    sap-record sphere_slide --approximation similar --out recordings/   # → recordings/sphere_slide_similar.json
    sap-record model.xml --engine mujoco --steps 500 --out recordings/
    sap-record slider_push --approximation sap --set 'gravity=[0, 0, -7]' --name slider_push_g7 --out recordings/

Drake (``--engine drake``, the default; ``pip install -e ".[drake]"``): the scene becomes a
``MultibodyPlant`` with SAP and point contact under the discrete contact approximation
``--approximation`` (``lagged``, ``similar`` or ``sap``; default: a Drake scene file's own,
else ``lagged``, the plant's default), Drake's simulator steps it, and the recording is
written in the format of ``tests/data/drake/README.md``: ``<scene>.json`` (the scene read back
from the plant, conventions, checks) and ``<scene>.npz`` (q, v, body poses and velocities,
energies, contacts with depth, witness points and forces, actuation, dynamics residuals, M and
the bias terms at the start and the end), and the scene's entry in ``index.json``. A scene is a
built-in scene name (``sap-scenes``) or a Drake scene file, which re-records itself; features
with no Drake counterpart are refused with a message naming them (sap_tools/record/spec.py). A
scene file is checked before Drake builds anything, by ``sap_common.io.load_json`` and by what
Drake needs besides (sap_tools/record/scene_file.py): a bad file is one line naming the file and
the field, never a traceback; a file without a ``scene`` key is named after its file, as
``load_json`` names it.
The scene file carries the approximation (``plant.discrete_contact_approximation``), which
``sap-validate`` follows; a recording under ``lagged`` or ``similar`` is named
``<scene>_lagged`` / ``<scene>_similar`` (``sap`` keeps the scene's name) and also holds each
contact's Hunt–Crossley data (fₑ₀, vₙ₀, n₀, ε_s), computed here because pydrake exposes none of
them, checked against the recorded impulses.
``--set FIELD=VALUE`` (repeatable, built-in scenes) records the scene with one of its per-world
parameters replaced (``sap_common.parameters.PARAMETER_FIELDS``: masses, inertias, joint gains,
limits, materials, gravity; VALUE is JSON shaped like the model's field) under the name
``--name``: recordings of one scene with different parameters, which ``sap-validate --batched``
holds to Drake in one batched run (docs/validation.md § Recordings with other parameters).
Recording twice gives identical files (byte for byte; with ``--timing`` the ``performance``
block measures Drake's own speed and differs from run to run). A recording replaces one of the
same name in ``--out`` only when it is the same recording (the same scene and number of steps,
sap_tools/record/overwrite.py), as ``--reference`` rewriting its own files; a different one is
refused before any simulation unless ``--force`` is given.

MuJoCo (``--engine mujoco``): an MJCF/URDF file stepped by ``mujoco.mj_step`` with zero
controls from ``qpos0``, written as a trajectory file (``sap_common.io.trajectory``, convention
``mujoco``) with the contacts MuJoCo found each step (shape pairs, distance, point, normal).
MuJoCo has its own contact model, so ``sap-validate`` compares such a recording by statistics.

``--reference`` regenerates every scene of ``tests/data/drake/index.json`` from its own file;
``--check`` writes into a temporary folder instead and compares the result with the committed
files field by field (:func:`compare_recordings`), exit status 1 on a difference beyond the
stated tolerance.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile

import numpy as np

from sap_tools.cli import atomic_output, check_out_dir, entry_point, fail, load_scene_arg, parser

__all__ = ["REFERENCE_DIR", "CHECK_RTOL", "parse_parameter_sets", "RUN_DEPENDENT", "MUJOCO_INTEGRATORS",
           "MUJOCO_JUDGED_INTEGRATORS", "record_drake", "record_mujoco", "mujoco_integrator", "explicit_damping_growth",
           "compare_recordings", "write_json", "main"]

# The repository: this file is sap_tools/record/cli.py.
_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
REFERENCE_DIR = os.path.join(_ROOT, "tests", "data", "drake")
# Fields that describe the run, not the scene: the machine, library versions, timing, and the
# paths and generator name of the workspace that wrote the file.
RUN_DEPENDENT = ("performance", "versions", "generator", "recording.file")
# The convention self-checks and the physics summaries under ``checks`` are recomputed from the
# recorded arrays by formulas that may group the same arithmetic differently: measured differences
# against the committed files ≤ 1.1e-15 absolute (w_principal of free_spin, through an eigen-
# decomposition); 1e-12·max(1, |x|) keeps them apart from any change of the recorded data.
CHECK_RTOL = 1e-12
_DERIVED = ("checks", "convention_self_checks (all must be ~1e-12 or less)")
# NPZ arrays the recorder computes itself with NumPy (not read from Drake): the dynamics residual
# M Δv − h(τ…) and the Hunt–Crossley data. Their last bits follow the machine's summation order
# (measured between two x86-64 machines: dynamics_residual differs by 4e-19 to 3.5e-18 in 4 of 25
# recordings, every array read from Drake bit-identical), so they compare within
# CHECK_RTOL·max(1, |x|) like the recomputed JSON summaries; every other array bit for bit.
DERIVED_ARRAYS = ("dynamics_residual", "contact_hc_fe0", "contact_hc_vn0", "contact_hc_n0", "contact_hc_eps")


def write_json(path: str, doc: dict) -> None:
    """Strict JSON with one-space indentation and a final newline (the format's layout), written
    atomically (a temporary file beside ``path``, renamed when complete)."""
    text = json.dumps(doc, indent=1, allow_nan=False) + "\n"  # a value JSON cannot hold fails before any write
    with atomic_output(path) as tmp, open(tmp, "w") as f:
        f.write(text)


def _repo_relative(path: str) -> str:
    """``path`` relative to the repository when it lies inside it, else its file name."""
    full = os.path.abspath(path)
    return os.path.relpath(full, _ROOT) if full.startswith(_ROOT + os.sep) else os.path.basename(full)


DEFAULT_APPROXIMATION = "lagged"  # MultibodyPlantConfig's default discrete_contact_approximation


def parse_parameter_sets(items, name: str | None) -> dict:
    """``--set FIELD=VALUE`` items as ``{field: float64 array}``: FIELD one of the per-world
    parameters (``sap_common.parameters.PARAMETER_FIELDS``), VALUE a JSON number or (nested) list
    shaped like the model's field; ``--name`` (the recording's name) is required with them, so a
    recording with other parameters never takes the scene's own name."""
    from sap_common.parameters import check_name

    fields = {}
    for item in items or ():
        field, sep, text = item.partition("=")
        if not sep:
            raise ValueError(f"--set: expected FIELD=VALUE (a JSON number or list), got {item!r}")
        try:
            check_name(field.strip())
        except ValueError as e:
            raise ValueError(f"--set: {e}") from None
        try:
            value = np.asarray(json.loads(text), dtype=np.float64)
        except (json.JSONDecodeError, TypeError, ValueError):
            raise ValueError(f"--set: {field.strip()}: {text!r} is not a JSON number or list of numbers") from None
        if field.strip() in fields:
            raise ValueError(f"--set: {field.strip()} given twice")
        fields[field.strip()] = value
    if fields and not name:
        raise ValueError("--name: a recording with --set needs its own name (the scene's name is its own recording's)")
    if name is not None and (not name or not all(c.isalnum() or c in "_-" for c in name)):
        raise ValueError(f"--name: letters, digits, '_' and '-' only, got {name!r}")
    return fields


def _spec(scene_arg: str, approximation: str | None = None, parameters: dict | None = None,
          name: str | None = None) -> dict:
    """The Drake scene specification of a scene argument: a Drake scene file as it is, once
    checked (:func:`sap_tools.record.scene_file.read_scene_file`), a built-in scene converted (or
    refused); ``approximation`` (None: a file's own
    ``plant.discrete_contact_approximation``, else :data:`DEFAULT_APPROXIMATION`) sets the plant's
    approximation and the recording's name. ``parameters`` (``{field: value}``, built-in scenes
    only) replace the model's per-world parameters (``SapModel.replace``, validated as a model is);
    ``name`` renames the recording."""
    from sap_tools.record.spec import with_approximation

    spec = _scene_spec(scene_arg, parameters or {}, name)
    if approximation is None and "discrete_contact_approximation" not in spec["plant"]:
        approximation = DEFAULT_APPROXIMATION
    return spec if approximation is None else with_approximation(spec, approximation)


def _scene_spec(scene_arg: str, parameters: dict, name: str | None) -> dict:
    from sap_tools.record.spec import scene_to_spec

    if parameters or name:
        if scene_arg.lower().endswith((".json", ".xml", ".urdf")):
            raise ValueError(f"--set/--name: apply to built-in scenes; {scene_arg!r} is a file (edit the file instead)")
        import dataclasses

        scene = load_scene_arg(scene_arg, 1)
        if parameters:
            for field, value in parameters.items():
                want = np.shape(getattr(scene.sap_model, field))
                if value.shape != want:
                    raise ValueError(f"--set: {field}: expected shape {want} (scene {scene.name!r}), got {value.shape}")
            model = scene.sap_model.replace(**parameters)
            changed = ", ".join(parameters)
            scene = dataclasses.replace(scene, sap_model=model, state=model.state(),
                                        description=f"{scene.description} Parameters other than the built-in "
                                                    f"scene's: {changed}.")
        return {**scene_to_spec(scene), "scene": name or scene.name}

    if scene_arg.lower().endswith(".json"):
        from sap_tools.record.scene_file import read_scene_file

        return read_scene_file(scene_arg)  # the loader's checks and what Drake needs besides, before Drake
    if scene_arg.lower().endswith((".xml", ".urdf")):
        raise ValueError(f"scene: {scene_arg!r} is an MJCF/URDF file; record it with --engine mujoco (Drake scenes "
                         "come from built-in scenes or Drake scene files)")
    return scene_to_spec(load_scene_arg(scene_arg, 1))


def record_drake(scene_arg: str, out_dir: str, *, steps=None, timing=False,
                 approximation: str | None = None, parameters: dict | None = None,
                 name: str | None = None) -> tuple[str, str]:
    """Record a scene with Drake into ``out_dir`` under ``approximation`` (None: a Drake scene
    file's own, else lagged), with ``parameters`` replaced and the recording named ``name``
    (:func:`_spec`); returns ``(json path, npz path)``."""
    from sap_tools.record.checks import SELF_CHECK_LIMIT, convention_self_checks, hunt_crossley_arrays, scene_checks
    from sap_tools.record.document import drake_document, index_entry, jsonable
    from sap_tools.record.drake import record

    spec = _spec(scene_arg, approximation, parameters, name)
    ds, sim, perf = record(spec, num_steps=steps, with_timing=timing)
    name = spec.get("scene", "scene")
    json_path, npz_path = os.path.join(out_dir, f"{name}.json"), os.path.join(out_dir, f"{name}.npz")
    doc = drake_document(ds, sim, perf, npz_file=_repo_relative(npz_path), checks={}, self_checks={})
    arrays = sim["arrays"]
    doc["checks"] = jsonable(scene_checks(ds, doc, arrays))
    self_checks = convention_self_checks(ds, doc, arrays)
    if ds.approximation != "sap":  # per-contact Hunt–Crossley data, checked against the impulses
        hc_arrays, hc_checks = hunt_crossley_arrays(ds, doc, arrays)
        arrays.update(hc_arrays)
        self_checks.update(hc_checks)
    bad = {k: v for k, v in self_checks.items() if not v <= SELF_CHECK_LIMIT}
    if bad:
        raise RuntimeError(f"scene {name!r}: convention self-checks above {SELF_CHECK_LIMIT:g}: {bad}; not written")
    doc["convention_self_checks (all must be ~1e-12 or less)"] = jsonable(self_checks)
    with atomic_output(npz_path) as tmp:
        np.savez_compressed(tmp, **arrays)  # numpy's zip entries carry a fixed date: reproducible bytes
    write_json(json_path, doc)
    index_path = os.path.join(out_dir, "index.json")
    index = {"generator": doc["generator"], "pydrake": doc["versions"]["pydrake"], "scenes": {}}
    if os.path.isfile(index_path):
        with open(index_path) as f:
            index = json.load(f)
        index["generator"] = doc["generator"]
    index["scenes"][name] = index_entry(doc, _repo_relative(json_path), _repo_relative(npz_path))
    write_json(index_path, index)
    return json_path, npz_path


# MuJoCo's integrators by their MJCF names (mjtIntegrator order), and the ones whose step
# sap-validate derives from this project's dynamics (docs/validation.md § MuJoCo recordings).
MUJOCO_INTEGRATORS = ("Euler", "RK4", "implicit", "implicitfast")
MUJOCO_JUDGED_INTEGRATORS = ("Euler", "implicitfast")


def mujoco_integrator(name: str | None, model_integrator: int) -> str:
    """The MJCF name of the integrator a MuJoCo recording uses: ``name`` (``--integrator``, any
    case) or the model's own; ``ValueError`` naming ``--integrator`` for one sap-validate cannot judge."""
    if name is None:
        chosen = MUJOCO_INTEGRATORS[int(model_integrator)]
        if chosen not in MUJOCO_JUDGED_INTEGRATORS:
            raise ValueError(f"--integrator: the model's integrator is {chosen}; sap-validate derives MuJoCo's "
                             f"{' and '.join(MUJOCO_JUDGED_INTEGRATORS)} steps only: record with --integrator "
                             "implicitfast (or euler)")
        return chosen
    by_lower = {n.lower(): n for n in MUJOCO_JUDGED_INTEGRATORS}
    if name.lower() not in by_lower:
        valid = ", ".join(n.lower() for n in MUJOCO_JUDGED_INTEGRATORS)
        raise ValueError(f"--integrator: {name!r} is not one of {valid}")
    return by_lower[name.lower()]


def explicit_damping_growth(m, integrator: str) -> float:
    """How much MuJoCo's Euler step amplifies the joint velocities through the actuators' velocity
    gains (``kv``), which Euler applies explicitly: the spectral radius of I − h·(M + hD)⁻¹·K_v at
    ``qpos0`` (K_v = the actuators' −∂force/∂qvel). Above 1 the explicit damping overshoots and
    round-off in those velocities grows by that factor per step while nothing else acts on them.
    0 for implicitfast (kv implicit) or a model without velocity gains."""
    import mujoco

    if integrator != "Euler" or m.nu == 0:
        return 0.0
    d = mujoco.MjData(m)
    mujoco.mj_forward(m, d)
    moment = np.zeros((m.nu, m.nv))
    for a in range(m.nu):  # joint transmissions: the moment arm is the gear on the joint's DOF
        if int(m.actuator_trntype[a]) == int(mujoco.mjtTrn.mjTRN_JOINT):
            moment[a, int(m.jnt_dofadr[int(m.actuator_trnid[a, 0])])] = float(m.actuator_gear[a, 0])
    kv = -np.array([float(m.actuator_biasprm[a, 2]) if int(m.actuator_biastype[a]) == int(mujoco.mjtBias.mjBIAS_AFFINE)
                    else 0.0 for a in range(m.nu)])
    if not np.any(kv > 0):
        return 0.0
    K = moment.T @ np.diag(kv) @ moment
    M = np.zeros((m.nv, m.nv))
    if hasattr(d, "qM"):  # MuJoCo 3: mj_fullM(m, dst, qM)
        mujoco.mj_fullM(m, M, d.qM)
    else:  # MuJoCo 4: mj_fullM(m, d, dst)
        mujoco.mj_fullM(m, d, M)
    h = float(m.opt.timestep)
    damping = np.array(m.dof_damping) if not int(m.opt.disableflags) & int(mujoco.mjtDisableBit.mjDSBL_EULERDAMP) \
        else np.zeros(m.nv)
    T = np.eye(m.nv) - h * np.linalg.solve(M + h * np.diag(damping), K)
    return float(np.max(np.abs(np.linalg.eigvals(T))))


def record_mujoco(scene_arg: str, out_dir: str, *, steps=None, integrator: str | None = None) -> str:
    """Step an MJCF/URDF scene with MuJoCo and write a trajectory file; returns its path.

    ``integrator`` (``"euler"`` or ``"implicitfast"``) replaces the model's own for the recording;
    the file names the one used. A model whose own integrator sap-validate cannot judge (RK4,
    implicit) needs it."""
    import mujoco

    from sap_common.io import load_mjcf
    from sap_common.io.trajectory import write_trajectory

    if not scene_arg.lower().endswith((".xml", ".urdf")) or not os.path.isfile(scene_arg):
        raise ValueError(f"scene: --engine mujoco records an MJCF/URDF file; {scene_arg!r} is not one")
    scene = load_mjcf(scene_arg)
    m, shape_of = scene.mj_model, scene.mujoco_map.shape
    chosen = mujoco_integrator(integrator, m.opt.integrator)
    m.opt.integrator = MUJOCO_INTEGRATORS.index(chosen)
    growth = explicit_damping_growth(m, chosen)
    if growth > 1.0:
        print(f"sap-record: note: {scene.name}: MuJoCo's Euler integrator applies the actuators' velocity gains (kv) "
              f"explicitly; at h = {m.opt.timestep:g} s its velocity update has a mode that grows by x{growth:.3g} per "
              "step while nothing else acts on it (round-off in the joint velocities grows so); --integrator "
              "implicitfast treats kv implicitly", file=sys.stderr)
    d = mujoco.MjData(m)
    N = int(steps or scene.num_steps)
    qpos, qvel, rows = [d.qpos.copy()], [d.qvel.copy()], [[]]
    resets = [int(getattr(mujoco.mjtWarning, w)) for w in ("mjWARN_BADQPOS", "mjWARN_BADQVEL", "mjWARN_BADQACC")]
    for n in range(N):
        mujoco.mj_step(m, d)  # collision at q_n, then the step: d.contact describes the step n → n+1
        if any(d.warning[w].number for w in resets):  # MuJoCo found NaN/huge values and reset to qpos0
            raise ValueError(f"{scene_arg}: MuJoCo found the simulation unstable in step {n + 1} (a NaN or huge "
                             f"position, velocity or acceleration) and reset it to its initial state, so the result "
                             f"is not a trajectory; not written (a smaller timestep, or --integrator implicitfast "
                             f"where actuators have kv, may help)")
        row = []
        for c in d.contact[:d.ncon]:
            a, b = shape_of[int(c.geom1)], shape_of[int(c.geom2)]
            if a < 0 or b < 0:
                continue  # a geom type with no shape of ours
            normal = np.array(c.frame[:3]) * (1.0 if a < b else -1.0)  # MuJoCo's from geom1 to geom2
            row.append((min(a, b), max(a, b), float(c.dist), np.array(c.pos), normal))
        qpos.append(d.qpos.copy())
        qvel.append(d.qvel.copy())
        rows.append(row)
    C = max(1, max(len(r) for r in rows))
    contacts = {"contact_count": np.array([len(r) for r in rows], np.int64),
                "contact_shape0": np.full((N + 1, C), -1, np.int64),
                "contact_shape1": np.full((N + 1, C), -1, np.int64),
                "contact_phi": np.zeros((N + 1, C)), "contact_point": np.zeros((N + 1, C, 3)),
                "contact_normal": np.zeros((N + 1, C, 3))}
    for n, row in enumerate(rows):
        for k, (a, b, phi, p, normal) in enumerate(row):
            contacts["contact_shape0"][n, k], contacts["contact_shape1"][n, k] = a, b
            contacts["contact_phi"][n, k], contacts["contact_point"][n, k] = phi, p
            contacts["contact_normal"][n, k] = normal
    out = os.path.join(out_dir, f"{scene.name}.mujoco.npz")
    rel_scene = os.path.relpath(os.path.abspath(scene_arg), os.path.abspath(out_dir))
    with atomic_output(out) as tmp:
        write_trajectory(tmp, scene=rel_scene, dt=float(m.opt.timestep), q=np.array(qpos), v=np.array(qvel),
                         convention="mujoco", engine="mujoco", contacts=contacts, integrator=chosen)
    return out


# ----------------------------------------------------------------------------- comparison


def _walk(new, old, path: str, out: list, derived: bool) -> None:
    if path.lstrip(".") in RUN_DEPENDENT:
        return
    if isinstance(old, dict) and isinstance(new, dict):
        for k in old.keys() | new.keys():
            p = f"{path}.{k}" if path else k
            if p in RUN_DEPENDENT:
                continue
            if k not in new or k not in old:
                out.append({"field": p, "kind": "missing here" if k not in new else "only here"})
                continue
            _walk(new[k], old[k], p, out, derived or p in _DERIVED)
    elif isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        for i, (a, b) in enumerate(zip(new, old)):
            _walk(a, b, f"{path}[{i}]", out, derived)
    elif (isinstance(new, (int, float)) and isinstance(old, (int, float)) and not isinstance(new, bool)
          and not isinstance(old, bool)):
        diff = abs(float(new) - float(old))
        tol = CHECK_RTOL * max(1.0, abs(float(old))) if derived else 0.0
        if diff > 0:
            out.append({"field": path, "kind": "number", "diff": diff, "tolerance": tol, "ok": diff <= tol})
    elif new != old:
        out.append({"field": path, "kind": "value", "new": new, "old": old, "ok": False})


def compare_recordings(new_json: str, old_json: str) -> dict:
    """Field-by-field comparison of two recordings of one scene (JSON and the NPZ beside each).

    NPZ arrays must be identical (same names, order, dtype, shape and bits) but the recorder's own
    derived arrays (:data:`DERIVED_ARRAYS`, within CHECK_RTOL·max(1, |x|)); JSON fields too,
    except the run-dependent ones (:data:`RUN_DEPENDENT`, skipped) and the numbers under
    ``checks`` and the convention self-checks (recomputed summaries, :data:`CHECK_RTOL`).
    Returns ``{"ok", "arrays": [...], "fields": [...], "largest": {...}}`` with every difference.
    """
    from sap_common.io.drake import load_recording

    with open(new_json) as f:
        new = json.load(f)
    with open(old_json) as f:
        old = json.load(f)
    fields: list = []
    _walk(new, old, "", fields, False)
    a, b = load_recording(new_json), load_recording(old_json)
    arrays = []
    if list(a) != list(b):
        arrays.append({"array": "(names)", "new": list(a), "old": list(b), "ok": False})
    for k in b:
        if k not in a:
            continue
        x, y = a[k], b[k]
        same = x.dtype == y.dtype and x.shape == y.shape and np.array_equal(x, y)
        if not same:
            comparable = x.dtype == y.dtype and x.shape == y.shape
            d = float(np.abs(x.astype(float) - y.astype(float)).max()) if comparable else float("inf")
            within = comparable and k in DERIVED_ARRAYS and bool(
                np.all(np.abs(x - y) <= CHECK_RTOL * np.maximum(1.0, np.abs(y))))
            arrays.append({"array": k, "max_abs_diff": d, "derived": k in DERIVED_ARRAYS, "ok": within})
    ok = all(f.get("ok", False) for f in fields) and all(x["ok"] for x in arrays)
    numbers = [f for f in fields if f["kind"] == "number"]
    largest = max(numbers, key=lambda f: f["diff"] / max(f["tolerance"], 1e-300), default=None)
    return {"ok": ok, "arrays": arrays, "fields": fields, "largest": largest,
            "npz_bytes_identical": _same_bytes(new_json[:-5] + ".npz", old_json[:-5] + ".npz")}


def _same_bytes(a: str, b: str) -> bool:
    with open(a, "rb") as f, open(b, "rb") as g:
        return f.read() == g.read()


def _reference_scenes() -> list[str]:
    with open(os.path.join(REFERENCE_DIR, "index.json")) as f:
        return [os.path.join(REFERENCE_DIR, f"{name}.json") for name in json.load(f)["scenes"]]


def _check_overwrites(scenes: list, specs: list, out: str, steps: int | None, force: bool) -> None:
    """Refuse (``ValueError``) before any simulation when two scenes of this run would be written
    under one name, or when a recording would replace a different one in ``out`` without
    ``force`` (:func:`sap_tools.record.overwrite.check_overwrite`)."""
    from sap_tools.record.overwrite import check_overwrite, first_difference, recording_identity, recording_paths

    by_name = {}
    for scene, spec in zip(scenes, specs):
        name = spec.get("scene", "scene")
        if name in by_name:
            first, first_spec = by_name[name]
            difference = first_difference(recording_identity(spec, steps), recording_identity(first_spec, steps))
            if difference:
                raise ValueError(f"scenes: {first!r} and {scene!r} would both be recorded as "
                                 f"{recording_paths(out, name)[0]!r}, the second replacing the first ({difference}); "
                                 "record them into different folders or give one a 'scene' key of its own")
            continue
        by_name[name] = (scene, spec)
        check_overwrite(spec, out, steps, force)


@entry_point("sap-record")
def main(argv=None) -> int:
    p = parser("sap-record", __doc__)
    p.add_argument("scenes", nargs="*", help="built-in scene names, Drake scene files (.json) or, with "
                                             "--engine mujoco, MJCF/URDF files")
    p.add_argument("--engine", default="drake", choices=("drake", "mujoco"), help="who simulates (default drake)")
    p.add_argument("--out", default=None, help="output folder (default: the current folder; --reference: "
                                               "tests/data/drake)")
    p.add_argument("--steps", type=int, default=None, help="steps to record (default: the scene's)")
    p.add_argument("--integrator", default=None, help="MuJoCo: euler or implicitfast instead of the model's own "
                                                      "integrator (sap-validate judges these two)")
    p.add_argument("--approximation", default=None, choices=("lagged", "similar", "sap"),
                   help="Drake: the plant's discrete contact approximation (default: a Drake scene file's own, else "
                        "lagged, the plant's default); lagged/similar recordings are named <scene>_lagged/_similar")
    p.add_argument("--set", action="append", default=None, metavar="FIELD=VALUE", dest="parameters",
                   help="Drake, built-in scenes: replace a per-world parameter of the model (body_mass, gravity, "
                        "shape_material_mu, joint_target_ke, ...; VALUE is JSON shaped like the field); repeatable; "
                        "needs --name")
    p.add_argument("--name", default=None, help="the recording's name (with --set; default: the scene's)")
    p.add_argument("--timing", action="store_true", help="Drake: also measure Drake's time per step (7 runs)")
    p.add_argument("--reference", action="store_true", help="Drake: every scene of tests/data/drake/index.json")
    p.add_argument("--check", action="store_true", help="with --reference: record into a temporary folder and compare "
                                                        "with the committed files instead of overwriting them")
    p.add_argument("--force", action="store_true", help="Drake: overwrite a different recording of the same name in "
                                                        "--out (without it sap-record refuses before simulating; "
                                                        "the same recording is rewritten without --force)")
    p.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    args = p.parse_args(argv)
    try:
        if args.steps is not None and args.steps < 1:
            raise ValueError(f"--steps: must be >= 1, got {args.steps}")
        if args.check and not args.reference:
            raise ValueError("--check: compares with the committed files, so it needs --reference")
        if args.reference and (args.scenes or args.engine != "drake"):
            raise ValueError("--reference: records the committed Drake scenes; give no scenes and no --engine mujoco")
        if args.reference and args.approximation is not None:
            raise ValueError("--approximation: --reference re-records every committed scene under its own "
                             "approximation")
        parameters = parse_parameter_sets(args.parameters, args.name)
        if (parameters or args.name) and (args.engine != "drake" or args.reference or len(args.scenes) != 1):
            raise ValueError("--set/--name: record one built-in scene with Drake (no --reference, no --engine mujoco)")
        if args.engine == "mujoco" and args.approximation is not None:
            raise ValueError("--approximation: a Drake setting; MuJoCo (--engine mujoco) has its own contact model")
        if not args.reference and not args.scenes:
            raise ValueError("scenes: give at least one scene (or --reference)")
        mjcf = [s for s in args.scenes if s.lower().endswith((".xml", ".urdf"))]
        if args.engine == "drake" and mjcf:
            raise ValueError(f"scene: {mjcf[0]!r} is an MJCF/URDF file; record it with --engine mujoco (Drake "
                             "scenes come from built-in scenes or Drake scene files)")
        if args.integrator is not None:
            if args.engine != "mujoco":
                raise ValueError("--integrator: chooses MuJoCo's integrator; it needs --engine mujoco")
            mujoco_integrator(args.integrator, 0)
        if args.force and (args.engine != "drake" or args.check):
            raise ValueError("--force: overwrites Drake recordings in --out; not with --engine mujoco or --check")
        scenes = _reference_scenes() if args.reference else args.scenes
        out = args.out or (REFERENCE_DIR if args.reference and not args.check else ".")
        if not args.check:
            check_out_dir("--out", out)
        if args.engine == "drake":  # refusals (and --set's model checks) before any simulation
            specs = [_spec(s, args.approximation, parameters, args.name) for s in scenes]
            if not args.check:  # --check records into a fresh temporary folder
                _check_overwrites(scenes, specs, out, args.steps, args.force)
            del specs
            from sap_tools.record.drake import pydrake_available

            ok, why = pydrake_available()
            if not ok:
                raise ValueError(f"--engine drake: {why}")
        if args.check:
            out = tempfile.mkdtemp(prefix="sap-record-check-")
            check_out_dir("--out", out)
    except ValueError as e:
        return fail("sap-record", e)
    results, ok = [], True
    for s in scenes:
        try:
            if args.engine == "mujoco":
                path = record_mujoco(s, out, steps=args.steps, integrator=args.integrator)
                print(f"{s}: wrote {path}")
                results.append({"scene": s, "trajectory": path})
                continue
            json_path, npz_path = record_drake(s, out, steps=args.steps, timing=args.timing,
                                               approximation=args.approximation, parameters=parameters,
                                               name=args.name)
        except ValueError as e:
            return fail("sap-record", e)
        entry = {"scene": s, "json": json_path, "npz": npz_path}
        print(f"{s}: wrote {json_path} and {npz_path}")
        if args.check:
            c = compare_recordings(json_path, s)
            entry["comparison"] = c
            ok &= c["ok"]
            big = c["largest"]
            print(f"  against {s}: arrays {'identical' if not c['arrays'] else c['arrays']}, NPZ bytes "
                  f"{'identical' if c['npz_bytes_identical'] else 'differ'}; {len(c['fields'])} JSON fields differ"
                  + (f", largest {big['field']} by {big['diff']:.3g} (tolerance {big['tolerance']:.3g})" if big else "")
                  + f" → {'ok' if c['ok'] else 'DIFFERS'}")
            for f in c["fields"]:
                if not f.get("ok", False):
                    print(f"    {f}")
        results.append(entry)
    if args.json:
        print(json.dumps({"ok": ok, "recordings": results}, default=str))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
