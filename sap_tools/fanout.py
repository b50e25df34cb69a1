"""Ray fan-out for the tools whose work is embarrassingly parallel: ``sap-validate --ray`` (one task
per recording and backend) and ``sap-benchmark --ray`` (one task per run of the sweep).

Each task runs the same function the local run calls, in a Ray worker process, and returns its
report; the driver gathers the reports in the order of the local run, so the printed text, the
JSON and the JUnit file are the local run's (only wall-clock timings differ). Ray is an optional
dependency (``pip install -e ".[ray]"``), imported only when ``--ray`` is given.

``--ray`` with no address connects to the cluster named by ``RAY_ADDRESS`` or, without one,
starts a local Ray instance on this machine (as ``ray.init()``); ``--ray ADDRESS`` connects to
that cluster (``ray://host:10001`` or ``host:6379``). A Ray instance this process started is shut
down at the end. Connecting to a cluster is bounded in time: where no cluster answers, ``--ray``
fails within :data:`RAY_CONNECT_TIMEOUT_S` (``SAP_RAY_CONNECT_TIMEOUT_S``) with a one-line usage
error instead of Ray's minutes of retries (:func:`_connect`). Every node must see the recordings
and scene files at the same paths (a shared file system or the same checkout) and have this
package installed in the same Python environment (docs/scaling.md § Ray).

Resources: a CPU task asks Ray for one CPU; a task on a CUDA device asks for one GPU and runs on
``cuda:0`` of the GPUs Ray gives it (Ray sets ``CUDA_VISIBLE_DEVICES`` per task), so a cluster's
GPUs are shared out one task each.
"""

from __future__ import annotations

import contextlib
import os
import re
import socket
import sys
import tempfile
import threading
import time

__all__ = ["RAY_LOCAL", "RAY_CONNECT_TIMEOUT_S", "ray_session", "map_tasks", "task_device", "ray_resources"]

RAY_LOCAL = ""  # the value of a bare --ray: RAY_ADDRESS, else a local instance

# How long connecting to a cluster may take before --ray gives up with a usage error. A live Ray
# head answers in milliseconds on a LAN and well under a second across a WAN; Ray's own retries
# (20 GCS attempts of ~41 s each in Ray 2.x, i.e. ~14 min) exist to wait for a head that is still
# starting, which on the command line reads as a hang. SAP_RAY_CONNECT_TIMEOUT_S overrides it.
RAY_CONNECT_TIMEOUT_S = 10.0
RAY_CONNECT_TIMEOUT_ENV = "SAP_RAY_CONNECT_TIMEOUT_S"
_RAY_LOG_PREFIX = re.compile(r"^\[[^]]*\]\s*(?:[\w.]+:\d+:\s*)?")  # "[time W pid tid] file.cc:123: "


def _import_ray():
    try:
        import ray
    except ImportError:
        raise ValueError("--ray: needs the 'ray' package (pip install -e \".[ray]\" or pip install ray)") from None
    return ray


def connect_timeout() -> float:
    """:data:`RAY_CONNECT_TIMEOUT_S`, or the seconds ``SAP_RAY_CONNECT_TIMEOUT_S`` gives."""
    text = os.environ.get(RAY_CONNECT_TIMEOUT_ENV, "").strip()
    if not text:
        return RAY_CONNECT_TIMEOUT_S
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not value > 0 or value == float("inf"):
        raise ValueError(f"{RAY_CONNECT_TIMEOUT_ENV}: must be a number of seconds > 0, got {text!r}")
    return value


def _target(ray, address: str | None) -> tuple[str | None, str]:
    """The address ``ray.init`` will connect to (None: it starts a local instance) and where it
    came from, for the messages."""
    if address and address not in ("auto", "local"):
        return address, "--ray"
    env = os.environ.get("RAY_ADDRESS", "")
    if env and address != "local":
        return env, "RAY_ADDRESS"
    if address == "local":
        return None, "--ray"
    try:  # the cluster `ray start` recorded on this machine, as ray.init() itself looks it up
        from ray._private.services import canonicalize_bootstrap_address

        recorded = "the cluster `ray start` recorded here; `ray stop` clears a stale record"
        return canonicalize_bootstrap_address(address or None), recorded
    except Exception as e:  # noqa: BLE001 -- "auto" with no cluster running, or a Ray without the helper
        if address == "auto":
            raise ValueError(f"--ray: auto: {' '.join(str(e).split())}") from None
        return None, "--ray"


def _host_port(ray, target: str, named: str) -> tuple[str, int]:
    """``(host, port)`` where ``ray.init(address=target)`` connects: ``host:port`` (``[v6]:port``)
    as Ray resolves it (a loopback host becomes this machine's address), or ``ray://host:port``."""
    client = target.startswith("ray://")
    rest = target[len("ray://"):].split("/", 1)[0] if client else target
    host, _, port = rest.rpartition(":")
    if not host.strip("[]") or not port.isdigit():
        raise ValueError(f"--ray: {named} is not a Ray address: give host:port (the head's GCS, port 6379 by "
                         "default) or ray://host:port (Ray Client, port 10001 by default)")
    if not client:
        with contextlib.suppress(Exception):  # Ray's own resolution; without it (another Ray), the address as given
            from ray._private.services import canonicalize_bootstrap_address

            host, _, port = canonicalize_bootstrap_address(target).rpartition(":")
    return host.strip("[]"), int(port)


def _probe(host: str, port: int, timeout: float) -> str | None:
    """None if something accepts a TCP connection at ``host:port`` within ``timeout`` seconds,
    else why not (``{}`` where the address goes). Name resolution runs in a daemon thread, so a
    resolver that hangs counts too."""
    t0 = time.monotonic()
    found: list = []
    resolve = threading.Thread(target=lambda: found.append(_resolve(host, port)), daemon=True)
    resolve.start()
    resolve.join(timeout)
    if not found:
        return f"the host name {host!r} did not resolve within {timeout:g} s"
    if isinstance(found[0], Exception):
        return f"the host name {host!r} does not resolve ({found[0].strerror or found[0]})"
    error = None
    for family, kind, proto, _, sockaddr in found[0]:
        left = timeout - (time.monotonic() - t0)
        if left <= 0:
            break
        with socket.socket(family, kind, proto) as s:
            s.settimeout(left)
            try:
                s.connect(sockaddr)
                return None
            except OSError as e:
                error = e
    if error is None or isinstance(error, TimeoutError):
        return f"a TCP connection to {{}} got no answer within {timeout:g} s"
    return f"a TCP connection to {{}} failed: {error.strerror or error}"


def _resolve(host: str, port: int):
    try:
        return socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as e:
        return e


@contextlib.contextmanager
def _env_defaults(values: dict):
    """``values`` in ``os.environ`` for the block, each only where the user set none (theirs win)."""
    added = [k for k in values if k not in os.environ]
    os.environ.update({k: values[k] for k in added})
    try:
        yield
    finally:
        for k in added:
            os.environ.pop(k, None)


def _ray_knobs(timeout: float) -> dict:
    """Ray's own connection settings (Ray 2.x) that make one connection attempt fail in about
    ``timeout`` seconds instead of Ray's minutes of retries. The GCS: one attempt
    (``RAY_gcs_server_port_wait_time_s``, read at each connect) of a channel connect and a pubsub
    connect (``RAY_gcs_rpc_server_connect_timeout_s`` each), the cluster-id request
    (``RAY_py_gcs_connect_timeout_s``) and a 1 s pause; these two Ray's C++ core reads once, as
    ``import ray`` loads it (:func:`ray_session` imports Ray with them when it is the first to,
    as in the tools; a process that imported Ray before keeps Ray's ~41 s for the attempt). Ray
    Client (``ray://``): three attempts of ``RAY_CLIENT_*_CONNECTION_TIMEOUT_S``, read at its
    import on the first ``ray://`` connection."""
    t = max(1, int(timeout))
    channel = max(1, t // 5)
    client = str(max(1, t // 3))
    return {"RAY_gcs_server_port_wait_time_s": "1", "RAY_gcs_rpc_server_connect_timeout_s": str(channel),
            "RAY_py_gcs_connect_timeout_s": str(max(1, t - 2 * channel - 1)),
            "RAY_CLIENT_INITIAL_CONNECTION_TIMEOUT_S": client, "RAY_CLIENT_MAX_CONNECTION_TIMEOUT_S": client}


@contextlib.contextmanager
def _stderr_held():
    """File descriptor 2 into a temporary file for the block (Ray's C++ core writes its retry
    warnings there, past Python's ``sys.stderr``); yields a function that returns what was written."""
    with contextlib.suppress(Exception):
        sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as held:
        os.dup2(held.fileno(), 2)
        try:
            yield lambda: (held.seek(0), held.read().decode(errors="replace"))[1]
        finally:
            with contextlib.suppress(Exception):
                sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)


def _last_ray_message(text: str) -> str:
    lines = [_RAY_LOG_PREFIX.sub("", ln).strip() for ln in text.splitlines()]
    lines = [ln for ln in lines if ln and not ln.startswith(("Traceback", "File ", "During handling"))]
    return lines[-1][:300].rstrip(".") if lines else ""


def _connect(ray, address: str | None, kwargs: dict, timeout: float) -> None:
    """``ray.init(**kwargs)``; a connection to a cluster bounded by ``timeout`` seconds (a TCP
    probe first, then Ray's own settings, see :func:`_ray_knobs`), every failure a one-line
    ``ValueError`` that names the address, what was tried and what to do."""
    target, source = _target(ray, address)
    if target is None:  # a local instance: Ray starts it, with its own timeouts
        try:
            ray.init(**kwargs)
        except Exception as e:  # noqa: BLE001 -- Ray that cannot start is a usage error
            with contextlib.suppress(Exception):
                ray.shutdown()
            raise ValueError(f"--ray: cannot start a local Ray instance ({type(e).__name__}: "
                             f"{' '.join(str(e).split())[:300]})") from None
        return
    named = target if source == "--ray" else f"{target} (from {source})"
    setting = f"{RAY_CONNECT_TIMEOUT_ENV}={timeout:g} s"
    client = target.startswith("ray://")
    if client:
        try:
            import grpc  # noqa: F401 -- what Ray Client needs and the minimal `pip install ray` lacks
        except ImportError:
            raise ValueError(f"--ray: {named} is a Ray Client address, which needs the ray[client] extra "
                             "(grpcio), not installed here: pip install \"ray[client]\" (or give the head's GCS "
                             "address host:6379 from a machine of the cluster)") from None
    probed = client or "://" not in target  # (another scheme Ray resolves through a module of its own: no probe)
    if probed:
        host, port = _host_port(ray, target, named)
        why = _probe(host, port, timeout)
        if why is not None:
            where = "" if target.endswith(f"{host}:{port}") else f" (where Ray connects for {target})"
            port_note = "the Ray Client port, 10001 by default" if client else "the GCS port, 6379 by default"
            raise ValueError(f"--ray: no Ray cluster answers at {named}: {why.replace('{}', f'{host}:{port}{where}')} "
                             f"({setting}); check the address (`ray start --head` prints it; {port_note}) and "
                             "that the cluster is up and reachable from here")
    t0 = time.monotonic()
    with _env_defaults(_ray_knobs(timeout)), _stderr_held() as said:
        try:
            ray.init(**kwargs)
            error = None
        except Exception as e:  # noqa: BLE001 -- a cluster that cannot be reached is a usage error
            error = e
            with contextlib.suppress(Exception):
                ray.shutdown()  # whatever the failed attempt set up, so nothing of it stays running
        output = said()
    if error is None:
        if output:
            sys.stderr.write(output)  # Ray's "Connected to Ray cluster" lines, as without the hold
        return
    detail = _last_ray_message(output) or " ".join(f"{type(error).__name__}: {error}".split())[:300]
    hint = ("the Ray Client server's (ray start --head runs it on port 10001)" if client else
            "the head's GCS port (6379 by default; the dashboard's 8265 is not, and the Ray Client port 10001 "
            "takes ray://host:10001), and from a machine outside the cluster use ray://")
    lead = f"{named} accepts connections, but Ray did not connect" if probed else f"Ray did not connect to {named}"
    raise ValueError(f"--ray: {lead} (gave up after {time.monotonic() - t0:.0f} s, {setting}): {detail}; check "
                     f"that the address is {hint}")


@contextlib.contextmanager
def ray_session(address: str | None):
    """Ray connected for the ``with`` block: reuse a session this process already has, else
    ``ray.init`` (``address`` None or :data:`RAY_LOCAL`: ``RAY_ADDRESS`` or a local instance), and
    shut down at the end what was started here. A connection to a cluster fails within
    :func:`connect_timeout` seconds with a one-line ``ValueError`` (:func:`_connect`). Worker output
    is not forwarded to this process (the tool's own output stays parseable)."""
    timeout = connect_timeout()
    if "ray" not in sys.modules:
        with _env_defaults(_ray_knobs(timeout)):  # Ray's C++ core reads its settings as Ray is imported
            ray = _import_ray()
    else:
        ray = _import_ray()
    started = False
    if not ray.is_initialized():
        kwargs = dict(log_to_driver=False, include_dashboard=False)
        if address:
            kwargs["address"] = address
        _connect(ray, address, kwargs, timeout)
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
