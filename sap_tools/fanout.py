"""Ray fan-out for the tools whose work is embarrassingly parallel: ``sap-validate --ray`` (one task
per recording and backend) and ``sap-benchmark --ray`` (one task per run of the sweep).

Each task runs the same function the local run calls, in a Ray worker process, and returns its
report; the driver gathers the reports in the order of the local run, so the printed text, the
JSON and the JUnit file are the local run's (only wall-clock timings differ). Ray is an optional
dependency (``pip install -e ".[ray]"``), imported only when ``--ray`` is given.

``--ray`` with no address connects to the cluster named by ``RAY_ADDRESS`` or, without one,
starts a local Ray instance on this machine (as ``ray.init()``); ``--ray ADDRESS`` connects to
that cluster (``ray://host:10001`` or ``host:6379``). A Ray instance this process started is shut
down at the end. Every node must see the recordings and scene files at the same paths (a shared
file system or the same checkout) and have this package installed in the same Python
environment (docs/scaling.md § Ray).

Resources: a CPU task asks Ray for one CPU; a task on a CUDA device asks for one GPU and runs on
``cuda:0`` of the GPUs Ray gives it (Ray sets ``CUDA_VISIBLE_DEVICES`` per task), so a cluster's
GPUs are shared out one task each.
"""

from __future__ import annotations

import contextlib

__all__ = ["RAY_LOCAL", "ray_session", "map_tasks", "task_device", "ray_resources"]

RAY_LOCAL = ""  # the value of a bare --ray: RAY_ADDRESS, else a local instance


def _import_ray():
    try:
        import ray
    except ImportError:
        raise ValueError("--ray: needs the 'ray' package (pip install -e \".[ray]\" or pip install ray)") from None
    return ray


@contextlib.contextmanager
def ray_session(address: str | None):
    """Ray connected for the ``with`` block: reuse a session this process already has, else
    ``ray.init`` (``address`` None or :data:`RAY_LOCAL`: ``RAY_ADDRESS`` or a local instance), and
    shut down at the end what was started here. Worker output is not forwarded to this process
    (the tool's own output stays parseable)."""
    ray = _import_ray()
    started = False
    if not ray.is_initialized():
        kwargs = dict(log_to_driver=False, include_dashboard=False)
        if address:
            kwargs["address"] = address
        try:
            ray.init(**kwargs)
        except Exception as e:  # noqa: BLE001 -- a cluster that cannot be reached is a usage error
            raise ValueError(f"--ray {address or ''}: cannot connect to or start Ray ({type(e).__name__}: "
                             f"{' '.join(str(e).split())[:300]})") from None
        started = True
    try:
        yield ray
    finally:
        if started:
            ray.shutdown()


def task_device(device: str) -> str:
    """The device a task runs on: a CUDA device becomes ``cuda:0`` of the GPU Ray assigns the task."""
    return "cuda:0" if str(device).startswith("cuda") else str(device)


def ray_resources(device: str) -> dict:
    """Ray resources of one task on ``device``: one GPU for CUDA, else one CPU."""
    return {"num_gpus": 1, "num_cpus": 1} if str(device).startswith("cuda") else {"num_cpus": 1}


def map_tasks(ray, fn, arguments: list, resources: list) -> list:
    """``[fn(*a) for a in arguments]``, each call a Ray task with its ``resources``; the results in
    the order of ``arguments`` (Ray runs them in any order, as resources free up)."""
    remote = ray.remote(fn)
    refs = [remote.options(**r).remote(*a) for a, r in zip(arguments, resources)]
    return ray.get(refs)
