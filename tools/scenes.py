"""``sap-scenes``: list the built-in scenes and the Drake anchor scene files, or inspect one.

    sap-scenes                          # table of every built-in scene
    sap-scenes box_stack                # its description, model summary and initial body poses
    sap-scenes path/to/scene.json       # the same for a JSON scene file (Drake anchor format)
    sap-scenes box_stack --num-worlds 4096 --json
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

from sap_common import scenes
from sap_common.io import LoadedScene, load_json


def _load(name: str, num_worlds: int) -> LoadedScene:
    if name.endswith(".json") or os.path.exists(name):
        return load_json(name, num_worlds=num_worlds)
    return scenes.get(name, num_worlds=num_worlds)


def _row(scene: LoadedScene) -> dict:
    m = scene.sap_model
    return dict(
        name=scene.name, num_worlds=m.num_worlds, bodies=m.body_count, joints=m.joint_count,
        nq=m.joint_coord_count, nv=m.joint_dof_count, shapes=m.shape_count, shape_pairs=len(m.shape_pair),
        dt=scene.dt, num_steps=scene.num_steps, max_rigid_contact=scene.max_rigid_contact,
    )


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


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="sap-scenes", description=__doc__.split("\n")[0])
    parser.add_argument("scene", nargs="?", help="built-in scene name or JSON scene file (default: list all)")
    parser.add_argument("--num-worlds", type=int, default=1, help="worlds to build (default 1)")
    parser.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    args = parser.parse_args(argv)
    try:
        if args.scene is None:
            names = [n for n in scenes.names() if scenes.availability(n)[0]]
            rows = [_row(scenes.get(n, args.num_worlds)) for n in names]
            print(_table(rows))
            for n in scenes.names():
                if n not in names:
                    print(f"{n}: unavailable here: {scenes.availability(n)[1]}")
            if args.json:
                print(json.dumps({"scenes": rows}))
            return 0
        scene = _load(args.scene, args.num_worlds)
    except ValueError as e:
        print(f"sap-scenes: error: {e}", file=sys.stderr)
        return 2
    print(describe(scene))
    if args.json:
        print(json.dumps(_row(scene)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
