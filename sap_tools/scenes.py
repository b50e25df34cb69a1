"""``sap-scenes``: list the built-in scenes and the Drake scene files of tests/data/drake, or inspect one.

    sap-scenes                          # table of every built-in scene and of the Drake scene files
    sap-scenes box_stack                # its description, model summary and initial body poses
    sap-scenes tests/data/drake/sphere_slide.json   # the same for a JSON scene file
    sap-scenes box_stack --num-worlds 4096 --json

The Drake scene files are the JSON scenes recorded with Drake under ``tests/data/drake/`` of a
source checkout (``pip install -e .``); they are listed by path, which is what ``sap-demo``,
``sap-scenes`` and the comparison tools take. An installed copy without the checkout has no
scene files to list, and says so.
"""

from __future__ import annotations

import json
import os
import pathlib
import sys

import numpy as np

from sap_common import scenes
from sap_common.io import LoadedScene
from sap_tools.cli import check_scene_memory, entry_point, fail, load_scene_arg, parser

_load = load_scene_arg  # the scene argument of every tool: a built-in name or a scene file

# The Drake scene files of a source checkout (absent from an installed copy without it).
DRAKE_SCENE_DIR = pathlib.Path(__file__).resolve().parent.parent / "tests" / "data" / "drake"


def drake_scene_files() -> list[str]:
    """Paths of the Drake scene files (relative to the working directory where that is shorter)."""
    if not DRAKE_SCENE_DIR.is_dir():
        return []
    out = []
    for p in sorted(DRAKE_SCENE_DIR.glob("*.json")):
        if p.name == "index.json":
            continue
        rel = os.path.relpath(p)
        out.append(rel if not rel.startswith("..") else str(p))
    return out


def _row(scene: LoadedScene) -> dict:
    m = scene.sap_model
    return dict(
        name=scene.name, num_worlds=m.num_worlds, bodies=m.body_count, joints=m.joint_count,
        nq=m.joint_coord_count, nv=m.joint_dof_count, shapes=m.shape_count, shape_pairs=len(m.shape_pair),
        dt=scene.dt, num_steps=scene.num_steps, max_rigid_contact=scene.max_rigid_contact,
    )


def _listed(one: LoadedScene, num_worlds: int) -> dict:
    """The table row of a scene loaded with one world, for ``num_worlds`` worlds: every other column
    is the same for any number of worlds, so the listing never builds the batch; ``num_worlds``
    worlds are still checked against the host's memory as a run of that scene checks them
    (``ValueError`` naming ``--num-worlds``)."""
    if num_worlds > 1:
        check_scene_memory(one, num_worlds)
    return dict(_row(one), num_worlds=num_worlds)


def _table(rows: list[dict]) -> str:
    cols = list(rows[0])
    width = {c: max(len(c), *(len(f"{r[c]:g}" if isinstance(r[c], float) else str(r[c])) for r in rows))
             for c in cols}
    fmt = lambda r, c: (f"{r[c]:g}" if isinstance(r[c], float) else str(r[c])).rjust(width[c])  # noqa: E731
    lines = ["  ".join(c.rjust(width[c]) for c in cols)]
    lines += ["  ".join(fmt(r, c) for c in cols) for r in rows]
    return "\n".join(lines)


def describe(scene: LoadedScene) -> str:
    """Description, model summary and world 0's initial body poses of a scene."""
    m, s = scene.sap_model, scene.state
    lines = [f"scene {scene.name}: dt {scene.dt:g} s, {scene.num_steps} steps, "
             f"{scene.max_rigid_contact} contact slots per world", scene.description, m.summary(),
             "initial body poses (world 0) [x y z | qx qy qz qw] and velocities [v_C | ω]:"]
    for b in range(m.body_count):
        p, v = s.body_q[0, b], s.body_qd[0, b]
        lines.append(f"  {m.body_name[b]:>16s}  {np.array2string(p[:3], precision=4)} | "
                     f"{np.array2string(p[3:], precision=4)}   {np.array2string(v[:3], precision=3)} | "
                     f"{np.array2string(v[3:], precision=3)}")
    if scene.solver_kwargs:
        lines.append(f"solver settings of the reference run: {scene.solver_kwargs}")
    return "\n".join(lines)


@entry_point("sap-scenes")
def main(argv=None) -> int:
    p = parser("sap-scenes", __doc__, uses_warp=False)
    p.add_argument("scene", nargs="?", help="built-in scene name or JSON scene file (default: list them all)")
    p.add_argument("--num-worlds", type=int, default=1, help="worlds to build (default 1)")
    p.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    args = p.parse_args(argv)
    try:
        if args.num_worlds < 1:
            raise ValueError(f"--num-worlds: must be >= 1, got {args.num_worlds}")
        if args.scene is None:
            names = [n for n in scenes.names() if scenes.availability(n)[0]]
            rows = [_listed(scenes.get(n, 1), args.num_worlds) for n in names]
            file_rows = [dict(_listed(load_scene_arg(f, 1), args.num_worlds), name=f) for f in drake_scene_files()]
        else:
            scene = _load(args.scene, args.num_worlds)
    except ValueError as e:
        return fail("sap-scenes", e)
    if args.scene is None:
        print("built-in scenes (sap-demo NAME):")
        print(_table(rows))
        for n in scenes.names():
            if n not in names:
                print(f"{n}: unavailable here: {scenes.availability(n)[1]}")
        if file_rows:
            print("\nDrake scene files (sap-demo PATH; they carry Drake's solver settings):")
            print(_table(file_rows))
        else:
            print(f"\nno Drake scene files here ({DRAKE_SCENE_DIR} is not present: they come with a source checkout)")
        if args.json:
            print(json.dumps({"scenes": rows, "scene_files": file_rows}))
        return 0
    print(describe(scene))
    if args.json:
        print(json.dumps(_row(scene)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
