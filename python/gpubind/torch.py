"""torch.distributed under plain ``srun --mpi=pmix``: no torchrun, no MASTER_ADDR, no port race.

    import gpubind.torch
    g = gpubind.torch.init_process_group()      # "nccl" on a GPU, "gloo" otherwise
    model = DDP(model.to(g.device), device_ids=[g.device] if g.device.type == "cuda" else None)

What it does (docs/python.md has the reasons):

1. gpubind.init(): rank, sizes, node and GPU from the job's PMIx server. RANK, WORLD_SIZE,
   LOCAL_RANK and LOCAL_WORLD_SIZE are set from it; an environment that already holds other
   values (a batch script exporting one RANK to every task) is an error, never believed.
2. torch.cuda.set_device(cuda_device) where CUDA is available.
3. The master address: 127.0.0.1 on one node; otherwise an address of rank 0's node on a
   network every node shares (allgathered interface tables, NCCL_SOCKET_IFNAME and
   GLOO_SOCKET_IFNAME preferred, IPv4 before IPv6), unless MASTER_ADDR is set.
   GLOO_SOCKET_IFNAME, when unset, becomes this node's interface on that network.
4. Rank 0 creates the TCPStore itself, on MASTER_PORT or else on port 0 (the kernel picks a
   free port: no race with other jobs on the node), and broadcasts address and port through
   the helper; the others connect to it. init_process_group(backend, store=..., rank=...,
   world_size=...) follows on every rank.

Under torchrun (TORCHELASTIC_RUN_ID set) PMIx is not touched: torchrun's workers inherit one
srun task's PMIx identity. torchrun's RANK, LOCAL_RANK, WORLD_SIZE and MASTER_ADDR/PORT are
used instead, and rank 0 says so on stderr.
"""

import dataclasses
import datetime
import json
import os
import socket
import sys
from typing import Any, Optional

import torch
import torch.distributed as dist

import gpubind
from gpubind import Error, Info, _netif

__all__ = ["init_process_group", "Group"]

# The variables set from the helper (and checked against it when already set).
_ENV_FROM_INFO = (("RANK", "rank"), ("WORLD_SIZE", "size"), ("LOCAL_RANK", "local_rank"),
                  ("LOCAL_WORLD_SIZE", "local_size"))
# init_process_group arguments gpubind decides.
_OURS = ("init_method", "store", "rank", "world_size")


@dataclasses.dataclass(frozen=True)
class Group:
    """What init_process_group set up.

    Attributes:
        rank, world_size, local_rank, local_world_size: as set in the environment.
        backend: the backend the process group was created with.
        device: torch.device("cuda", n) of this rank's GPU, or torch.device("cpu").
        master_addr, master_port: where rank 0's TCPStore listens.
        launcher: "pmix" (gpubind.init()) or "torchrun".
        info: gpubind.init()'s answer; None under torchrun.
    """

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    backend: str
    device: "torch.device"
    master_addr: str
    master_port: int
    launcher: str
    info: Optional[Info]


def _env_int(name: str) -> Optional[int]:
    v = os.environ.get(name)
    if v is None or v == "":
        return None
    try:
        return int(v)
    except ValueError:
        raise Error("init_process_group", f"{name}={v!r}, expected an integer") from None


def _check_env(info: Info) -> None:
    """Refuse RANK/WORLD_SIZE/LOCAL_RANK/LOCAL_WORLD_SIZE that disagree with PMIx; set them."""
    bad = []
    for var, field in _ENV_FROM_INFO:
        have, want = _env_int(var), getattr(info, field)
        if have is not None and have != want:
            bad.append(f"{var}={have} but PMIx says {want}")
    if bad:
        raise Error("init_process_group", "the environment disagrees with the job's PMIx server (rank "
                    f"{info.rank}): " + ", ".join(bad) + "; a batch script that exports RANK or "
                    "LOCAL_RANK gives every task the batch step's value: unset them (gpubind sets them)")
    for var, field in _ENV_FROM_INFO:
        os.environ[var] = str(getattr(info, field))


def _device(local_index: int, cuda_ok: bool) -> "torch.device":
    if cuda_ok:
        torch.cuda.set_device(local_index)
        return torch.device("cuda", local_index)
    return torch.device("cpu")


def _default_backend(backend: Optional[str], cuda_ok: bool) -> str:
    if backend:
        return backend
    return "nccl" if cuda_ok and dist.is_nccl_available() else "gloo"


def _set_gloo_ifname(name: Optional[str]) -> None:
    if name and not os.environ.get("GLOO_SOCKET_IFNAME"):
        os.environ["GLOO_SOCKET_IFNAME"] = name


def _gloo_ifname_for(addr: str) -> None:
    """GLOO_SOCKET_IFNAME (if unset): this node's interface on addr's network, if any."""
    try:
        ip = socket.getaddrinfo(addr, None, type=socket.SOCK_STREAM)[0][4][0]
        _set_gloo_ifname(_netif.local_ifname(_netif.local_table(include_loopback=True), ip))
    except (OSError, ValueError, Error):
        pass  # the store connect reports an unreachable address


def _master_addr(info: Info) -> str:
    """The address the others reach rank 0 at (collective when the job spans nodes and
    MASTER_ADDR is unset: every rank allgathers its node's interface table)."""
    user = os.environ.get("MASTER_ADDR", "")
    if user:
        _gloo_ifname_for(user)
        return user
    if info.num_nodes == 1:
        _set_gloo_ifname(_netif.loopback_name())
        return "127.0.0.1"
    table = _netif.local_table()
    rec: dict = {"node": info.node_id}
    if info.local_rank == 0 or info.rank == 0:
        rec.update(host=socket.gethostname(), table=[i.to_list() for i in table])
    records = [json.loads(b) for b in gpubind.allgather(json.dumps(rec))]
    by_node = _netif.tables_by_node(records)
    root = records[0]
    others = [by_node[n] for n in sorted(by_node) if n != root["node"]]
    specs = [os.environ.get("NCCL_SOCKET_IFNAME", ""), os.environ.get("GLOO_SOCKET_IFNAME", "")]
    master = _netif.choose_master([_netif.Iface.from_list(v) for v in root["table"]],
                                  [[_netif.Iface.from_list(v) for v in o["table"]] for o in others],
                                  specs, [root.get("host", "")] + [o.get("host", "") for o in others])
    _set_gloo_ifname(_netif.local_ifname(table, master.addr))
    return master.addr


def _store(info: Info, addr: str, timeout: datetime.timedelta) -> "tuple[Any, str, int]":
    """Rank 0's TCPStore on MASTER_PORT or a kernel-chosen port; its address and port reach
    the others by a helper broadcast, as separate fields."""
    port = _env_int("MASTER_PORT") or 0
    if info.rank == 0:
        try:
            store = dist.TCPStore(addr, port, info.size, True, timeout, wait_for_workers=False)
            msg = {"addr": addr, "port": int(store.port)}
        except Exception as e:  # tell the others now instead of letting them time out
            gpubind.bcast(json.dumps({"error": f"{type(e).__name__}: {e}"}))
            raise Error("init_process_group", f"rank 0 cannot create the TCPStore on port {port}: {e}") from e
        gpubind.bcast(json.dumps(msg))
        return store, addr, msg["port"]
    msg = json.loads(gpubind.bcast(None))
    if "error" in msg:
        raise Error("init_process_group", f"rank 0 could not create the TCPStore: {msg['error']}")
    store = dist.TCPStore(msg["addr"], int(msg["port"]), info.size, False, timeout)
    return store, msg["addr"], int(msg["port"])


def init_process_group(backend: Optional[str] = None, **kwargs: Any) -> Group:
    """Start torch.distributed's default process group for a job launched by
    ``srun --mpi=pmix`` (or mpirun), or by torchrun.

    Args:
        backend: "nccl", "gloo", ...; default "nccl" where this rank has a GPU that CUDA can
            use and torch has NCCL, "gloo" otherwise.
        **kwargs: passed on to torch.distributed.init_process_group (timeout, pg_options, ...),
            except init_method, store, rank and world_size, which gpubind decides.

    Returns:
        Group: ranks, backend, device and master address.

    Raises:
        Error: from gpubind.init() (no PMIx server, a rank that never arrived, the library
            missing, CUDA already initialised), an environment whose RANK, WORLD_SIZE,
            LOCAL_RANK or LOCAL_WORLD_SIZE disagree with PMIx, no network shared by every
            node, or rank 0 unable to create the store.
    """
    for k in _OURS:
        if k in kwargs:
            raise Error("init_process_group", f"{k}= is not accepted: gpubind decides it (use "
                        "torch.distributed.init_process_group directly to choose it yourself)")
    timeout = kwargs.get("timeout") or datetime.timedelta(minutes=30)
    if os.environ.get(gpubind.TORCHRUN_ENV):
        return _under_torchrun(backend, kwargs)

    info = gpubind.init()  # before anything starts CUDA
    _check_env(info)
    cuda_ok = info.cuda_device >= 0 and torch.cuda.is_available()
    device = _device(info.cuda_device, cuda_ok)
    backend = _default_backend(backend, cuda_ok)
    addr = _master_addr(info)
    store, addr, port = _store(info, addr, timeout)
    os.environ.setdefault("MASTER_ADDR", addr)
    os.environ.setdefault("MASTER_PORT", str(port))
    dist.init_process_group(backend, store=store, rank=info.rank, world_size=info.size, **kwargs)
    return Group(info.rank, info.size, info.local_rank, info.local_size, backend, device, addr, port,
                 "pmix", info)


def _under_torchrun(backend: Optional[str], kwargs: dict) -> Group:
    run_id = os.environ[gpubind.TORCHRUN_ENV]
    vals = {}
    for var, _ in _ENV_FROM_INFO:
        v = _env_int(var)
        if v is None:
            raise Error("init_process_group", f"{gpubind.TORCHRUN_ENV}={run_id} is set (a torchrun worker) "
                        f"but {var} is not: expected torchrun to set it")
        vals[var] = v
    if vals["RANK"] == 0:
        sys.stderr.write(f"gpubind: under torchrun ({gpubind.TORCHRUN_ENV}={run_id}): ranks from torchrun's "
                         "RANK/LOCAL_RANK/WORLD_SIZE and its MASTER_ADDR/PORT; PMIx is not used\n")
    cuda_ok = torch.cuda.is_available() and torch.cuda.device_count() > 0
    local = vals["LOCAL_RANK"] % torch.cuda.device_count() if cuda_ok else 0
    device = _device(local, cuda_ok)
    backend = _default_backend(backend, cuda_ok)
    if os.environ.get("MASTER_ADDR"):
        _gloo_ifname_for(os.environ["MASTER_ADDR"])
    dist.init_process_group(backend, init_method="env://", rank=vals["RANK"], world_size=vals["WORLD_SIZE"],
                            **kwargs)
    return Group(vals["RANK"], vals["WORLD_SIZE"], vals["LOCAL_RANK"], vals["LOCAL_WORLD_SIZE"], backend,
                 device, os.environ.get("MASTER_ADDR", ""), _env_int("MASTER_PORT") or 0, "torchrun", None)
