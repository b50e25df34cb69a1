"""``sap-benchmark-collision``: the narrow phase's cost with and without the broad phase, on a pile of shapes.

    sap-benchmark-collision                                  # 120 shapes per world, 64 worlds, sap_gpu and sap_ref
    sap-benchmark-collision --shapes 200 --num-worlds 1024 --device cuda:0 --json

The scene (:func:`pile`): one body per shape on a free joint, the shapes cycling through every
convex type (sphere, capsule, box, cylinder, ellipsoid, two convex meshes), laid on a grid with
a random offset and orientation per world so that neighbours touch and most pairs do not, over a
ground plane and a height field. Every pair of moving shapes is a candidate (a few thousand).

Both pipelines are timed in this one process on the same states: ``broad_phase="aabb"`` (the
narrow phase runs on pairs whose bounding boxes overlap) and ``"none"`` (on every candidate
pair); the contacts are checked to be identical and the ratio of the times is reported. sap_gpu
runs ``--num-worlds`` worlds on ``--device`` (a synchronize after each call); sap_ref runs one world.
"""

from __future__ import annotations

import json
import time

import numpy as np

from sap_tools.cli import entry_point, fail, parser, warp_device

__all__ = ["main", "pile"]

DEFAULT_SHAPES = 120
DEFAULT_WORLDS = 64
DEFAULT_REPEATS = 5
GRID_SPACING = 0.16  # [m] between neighbouring shapes: sizes up to 0.08 m, so neighbours can touch


def pile(num_shapes: int, num_worlds: int, seed: int = 0):
    """``(model, state)``: ``num_shapes`` shapes on free bodies over a plane and a height field."""
    from sap_common import spatial
    from sap_common.builder import ModelBuilder
    from sap_common.scenes import add_shape_of_every_type

    b = ModelBuilder()
    b.add_ground_plane()
    side = int(np.ceil(np.sqrt(num_shapes)))
    half = 0.5 * side * GRID_SPACING
    heights = 0.02 * np.sin(np.add.outer(np.arange(8) * 0.9, np.arange(8) * 0.6))
    b.add_shape_heightfield(heights, spatial.transform((0.0, 0.0, 0.01)), hx=half, hy=half, base=0.1)
    moving = num_shapes - 2
    for i in range(moving):
        body = b.add_body(1.0, inertia=(1e-3, 1e-3, 1e-3))
        b.add_joint_free(-1, body)
        add_shape_of_every_type(b, body, i)
    model = b.replicate(num_worlds).finalize()
    state = model.state()
    rng = np.random.default_rng(seed)
    for w in range(num_worlds):
        for i in range(moving):
            grid = np.array([(i % side) * GRID_SPACING - half, (i // side) * GRID_SPACING - half, 0.07])
            state.body_q[w, i] = spatial.transform(grid + rng.uniform(-0.04, 0.04, 3),
                                                   spatial.quat_normalize(rng.normal(size=4)))
    return model, state


def _check_memory(num_shapes: int, num_worlds: int, device) -> None:
    """``ValueError`` naming --num-worlds when the pile of ``num_worlds`` worlds would not fit
    (sap_tools.cli.check_run_memory), estimated from a one-world pile before the batch is built: its
    state on the host and on the device, one sap_gpu pipeline at a time with its contacts, and the
    two host copies of the contacts compared at the end (docs/scaling.md § Memory)."""
    import sap_gpu
    from sap_common.collision_rules import contact_capacity
    from sap_common.state import contacts_memory, state_memory
    from sap_tools.cli import check_run_memory

    model, _ = pile(num_shapes, 1)
    C = contact_capacity(model)
    compared = contacts_memory(1, C, name="contacts compared (host)")
    estimate = (state_memory(model, name="state (host)") + state_memory(model)
                + sap_gpu.CollisionPipeline.memory_estimate(model, C, device=device) + compared + compared)
    check_run_memory(estimate.worlds(num_worlds), device, "sap-benchmark-collision",
                     f"{num_worlds} worlds of {model.shape_count} shapes", capacity=C, capacity_flag="--shapes")


def _time(fn, repeats: int) -> float:
    fn()  # warm-up (and, on the first call, kernel compilation)
    t0 = time.perf_counter()
    for _ in range(repeats):
        fn()
    return (time.perf_counter() - t0) / repeats


def _gpu(model, state, device, repeats):
    import warp as wp

    import sap_gpu
    from sap_common.collision_rules import contact_capacity

    out, contacts = {}, {}
    dstate = sap_gpu.to_device(state, device)
    for bp in ("aabb", "none"):
        pipe = sap_gpu.CollisionPipeline(model, contact_capacity(model), device=device, broad_phase=bp)
        c = pipe.contacts()

        def run(pipe=pipe, c=c):
            pipe.collide(dstate, c)
            wp.synchronize_device(device)

        out[bp] = _time(run, repeats)
        contacts[bp] = sap_gpu.to_host(c)
    return out, contacts


def _ref(model, state, repeats):
    from sap_common.collision_rules import contact_capacity
    from sap_ref.collision import CollisionPipeline

    one = model.replicate(1)
    s = one.state()
    s.body_q[0] = state.body_q[0]
    out, contacts = {}, {}
    for bp in ("aabb", "none"):
        pipe = CollisionPipeline(one, contact_capacity(one), broad_phase=bp)
        c = pipe.contacts()
        out[bp] = _time(lambda pipe=pipe, c=c: pipe.collide(s, c), repeats)
        contacts[bp] = c
    return out, contacts


def _same(a, b) -> bool:
    import dataclasses

    return all(np.array_equal(getattr(a, f.name), getattr(b, f.name)) for f in dataclasses.fields(a)
               if isinstance(getattr(a, f.name), np.ndarray))


@entry_point("sap-benchmark-collision")
def main(argv=None) -> int:
    p = parser("sap-benchmark-collision", __doc__)
    p.add_argument("--shapes", type=int, default=DEFAULT_SHAPES,
                   help=f"shapes per world, >= 100 (default {DEFAULT_SHAPES})")
    p.add_argument("--num-worlds", type=int, default=DEFAULT_WORLDS, help=f"sap_gpu worlds (default {DEFAULT_WORLDS})")
    p.add_argument("--repeats", type=int, default=DEFAULT_REPEATS,
                   help=f"timed calls per case (default {DEFAULT_REPEATS})")
    p.add_argument("--device", default=None, help="Warp device (default: cuda:0 where present, else cpu)")
    p.add_argument("--skip-ref", action="store_true", help="time sap_gpu only")
    p.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    args = p.parse_args(argv)
    prog = "sap-benchmark-collision"
    if args.shapes < 100:
        return fail(prog, f"--shapes: the benchmark is for scenes of at least 100 shapes, got {args.shapes}")
    if args.num_worlds < 1 or args.repeats < 1:
        return fail(prog, "--num-worlds and --repeats: must be >= 1")
    try:
        device = warp_device(args.device)
    except ValueError as e:
        return fail(prog, e)
    from sap_ref.broad_phase import pair_overlap
    from sap_ref.collision import CollisionPipeline

    try:
        _check_memory(args.shapes, args.num_worlds, device)
    except ValueError as e:
        return fail(prog, e)
    model, state = pile(args.shapes, args.num_worlds)
    poses = CollisionPipeline(model.replicate(1), 0)._shape_poses
    tested = np.mean([pair_overlap(model, poses(state.body_q[w])).sum() for w in range(args.num_worlds)])
    pairs = len(model.shape_pair)
    gpu, gpu_contacts = _gpu(model, state, device, args.repeats)
    row = dict(shapes=model.shape_count, candidate_pairs=pairs, tested_pairs_mean=float(tested),
               num_worlds=args.num_worlds, device=str(device),
               contacts_per_world_mean=float(gpu_contacts["aabb"].count.mean()),
               gpu_ms_aabb=1e3 * gpu["aabb"], gpu_ms_none=1e3 * gpu["none"], gpu_speedup=gpu["none"] / gpu["aabb"],
               gpu_same_contacts=_same(gpu_contacts["aabb"], gpu_contacts["none"]))
    if not args.skip_ref:
        ref, ref_contacts = _ref(model, state, max(1, args.repeats // 2))
        row.update(ref_ms_aabb=1e3 * ref["aabb"], ref_ms_none=1e3 * ref["none"], ref_speedup=ref["none"] / ref["aabb"],
                   ref_same_contacts=_same(ref_contacts["aabb"], ref_contacts["none"]))
    print(f"{row['shapes']} shapes per world, {pairs} candidate pairs, {tested:.0f} pass the broad phase (mean), "
          f"{row['contacts_per_world_mean']:.1f} contacts per world")
    print(f"sap_gpu  {args.num_worlds} worlds on {device}: broad phase {row['gpu_ms_aabb']:.2f} ms, every pair "
          f"{row['gpu_ms_none']:.2f} ms per collide: x{row['gpu_speedup']:.1f} "
          f"(same contacts: {'yes' if row['gpu_same_contacts'] else 'NO'})")
    if not args.skip_ref:
        print(f"sap_ref  1 world: broad phase {row['ref_ms_aabb']:.1f} ms, every pair {row['ref_ms_none']:.1f} ms: "
              f"x{row['ref_speedup']:.1f} (same contacts: {'yes' if row['ref_same_contacts'] else 'NO'})")
    if args.json:
        print(json.dumps(row))
    return 0 if row["gpu_same_contacts"] and row.get("ref_same_contacts", True) else 1


if __name__ == "__main__":
    raise SystemExit(main())
