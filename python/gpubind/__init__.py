"""gpubind: rank, GPU and NCCL unique ID of a Slurm/PMIx process, from libgpuhelper.

A pure-Python (ctypes) binding of libgpuhelper.so.1 (see docs/python.md and docs/helper.md)::

    import gpubind
    info = gpubind.init()            # rank, size, local rank/size, node, GPU, bus id, ...
    uid = gpubind.nccl_id()          # 128 bytes, the same on every rank
    gpubind.barrier()
    cfg = gpubind.bcast(b"..." if info.rank == 0 else None)
    everyone = gpubind.allgather(socket.gethostname().encode())

and, for PyTorch, ``gpubind.torch.init_process_group()``. Launch with
``srun --mpi=pmix [--gpu-bind-topo] python3 prog.py``; no MASTER_ADDR, no torchrun.

Collective calls (init, nccl_id, barrier, bcast, allgather, finalize) must be made by every
rank, in the same order. Failures raise gpubind.Error with the helper's code and message.
"""

import atexit
import ctypes
import dataclasses
import os
import struct
import sys
import threading
from typing import List, NoReturn, Optional, Union

from . import _lib
from ._lib import Error

__all__ = ["Error", "Info", "init", "nccl_id", "barrier", "bcast", "allgather", "abort",
           "finalize", "nvl_cliques", "library_version", "initialized", "TORCHRUN_ENV"]

__version__ = "1.0.0"

# Set by torchrun (torch.distributed.run / elastic) in every worker it starts.
TORCHRUN_ENV = "TORCHELASTIC_RUN_ID"

BytesLike = Union[bytes, bytearray, memoryview]


@dataclasses.dataclass(frozen=True)
class Info:
    """What gpubind.init() reports: every field of gpuhelper_info_t.

    Attributes:
        rank, size: the process's global rank and the job's number of processes.
        local_rank, local_size: its place among the processes on its node, and their number.
        node_id, num_nodes: its node's place (0..num_nodes-1) in the job's node list.
        cuda_device: the CUDA device index to use (torch.cuda.set_device), -1 when none; on
            AMD GPUs HIP's device number, which a ROCm torch.cuda takes alike.
        pci_bus_id: that GPU's PCI bus id ("0000:1b:00.0"), "" when unknown.
        gpu_uuid: its UUID ("GPU-..." or "MIG-..."), "" when unknown.
        nccl_id: the world NCCL ID made during init (128 bytes), or None; by default gpubind
            makes the ID lazily (see nccl_id()), so this is None unless GPUHELPER_NCCL_ID=init.
        flags: gpuhelper_info_t.flags (GPUHELPER_INFO_* bits).
        nvl_clique: the multi-node NVLink clique "<cluster_uuid>.<clique_id>", or "".
    """

    rank: int
    size: int
    local_rank: int
    local_size: int
    node_id: int
    num_nodes: int
    cuda_device: int
    pci_bus_id: str
    gpu_uuid: str
    nccl_id: Optional[bytes]
    flags: int
    nvl_clique: str


_lock = threading.RLock()
_info: Optional[Info] = None
_finalized = False
_uncaught = False


def _under_torchrun() -> bool:
    return bool(os.environ.get(TORCHRUN_ENV))


def _cuda_initialised() -> Optional[str]:
    """Why CUDA counts as initialised in this process already, or None."""
    torch = sys.modules.get("torch")
    if torch is not None:
        try:
            if torch.cuda.is_initialized():
                return "torch has initialised CUDA (torch.cuda.is_initialized() is True)"
        except Exception:  # a torch without CUDA support: nothing initialised
            pass
    return None


def _mirror_env() -> None:
    """Copy the helper's setenv of the CUDA variables into os.environ (and so to children)."""
    for name in ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER"):
        v = _lib.c_getenv(name)
        if v is not None and os.environ.get(name) != v:
            os.environ[name] = v


def initialized() -> bool:
    """True once init() has succeeded in this process."""
    return _info is not None


def init() -> Info:
    """Ask the job's PMIx server where this process is and which GPU it takes. Collective.

    Idempotent: later calls return the same Info without talking to PMIx again. Must come
    before CUDA starts (the first torch.cuda call that touches a device): the helper may set
    CUDA_DEVICE_ORDER=PCI_BUS_ID and, for a MIG rank, CUDA_VISIBLE_DEVICES, which CUDA reads
    only when it starts; both are mirrored into os.environ. The world NCCL ID is made lazily,
    by the first nccl_id() (GPUHELPER_NCCL_ID=lazy unless set), so that rank 0 loads no
    libnccl beside the one the program may load later.

    Raises:
        Error: no PMIx server for a job of several processes, a rank that did not arrive in
            GPUHELPER_TIMEOUT seconds, bad GPU variables, the library missing, CUDA already
            initialised, or running as a torchrun worker (TORCHELASTIC_RUN_ID set: the workers
            share one srun task's PMIx identity; use torchrun's RANK and LOCAL_RANK).
    """
    global _info
    with _lock:
        if _info is not None:
            return _info
        if _under_torchrun():
            raise Error("init", f"{TORCHRUN_ENV}={os.environ[TORCHRUN_ENV]} is set: this is a torchrun worker, "
                                "and torchrun's workers inherit one srun task's PMIx identity, so the "
                                "helper would give them all the same rank; use torchrun's RANK, "
                                "LOCAL_RANK and WORLD_SIZE (gpubind.torch.init_process_group does)")
        why = _cuda_initialised()
        if why:
            raise Error("init", why + ": gpubind.init() must come before CUDA starts (before the first "
                                "torch.cuda call that uses a device), or the GPU it names may not be "
                                "the device CUDA numbers so")
        _lib.load()
        _install_exit_hooks()
        st = _lib.InfoStruct()
        st.struct_size = ctypes.sizeof(_lib.InfoStruct)
        set_lazy = "GPUHELPER_NCCL_ID" not in os.environ
        if set_lazy:
            os.environ["GPUHELPER_NCCL_ID"] = "lazy"
        try:
            _lib.call("gpuhelper_init", ctypes.byref(st))
        finally:
            if set_lazy:
                del os.environ["GPUHELPER_NCCL_ID"]
            _mirror_env()
        has_id = bool(st.flags & _lib.INFO_NCCL_ID)
        _info = Info(
            rank=st.rank, size=st.size, local_rank=st.local_rank, local_size=st.local_size,
            node_id=st.node_id, num_nodes=st.num_nodes, cuda_device=st.cuda_device,
            pci_bus_id=st.pci_bus_id.decode(errors="replace"),
            gpu_uuid=st.gpu_uuid.decode(errors="replace"),
            nccl_id=bytes(st.nccl_id) if has_id else None,
            flags=st.flags, nvl_clique=st.nvl_clique.decode(errors="replace"))
        return _info


def _need_init(call: str) -> Info:
    if _info is None:
        raise Error(call, "gpubind.init() has not succeeded in this process")
    return _info


def nccl_id() -> bytes:
    """The world NCCL unique ID (128 bytes, the same on every rank). Collective.

    The first call makes it: rank 0 calls ncclGetUniqueId of the NCCL (or RCCL) already in the
    process (torch's, when torch with CUDA or ROCm is imported, also when loaded RTLD_LOCAL),
    else dlopens GPUHELPER_NCCL_LIBRARY when set, else libnccl.so.2 then librccl.so.1 (RCCL
    first when the rank's GPU is AMD's; docs/helper.md "Where the ID comes from"). Pass it to
    ncclCommInitRank with size and rank from init().

    Raises:
        Error: GPUHELPER_ENCCL with rank 0's reason (no NCCL there, versions differ), a
            timeout, or init() not called.
    """
    _need_init("nccl_id")
    buf = ctypes.create_string_buffer(_lib.NCCL_ID_BYTES)
    with _lock:
        _lib.call("gpuhelper_nccl_id", buf)
    return buf.raw


def barrier() -> None:
    """Return once every rank has called barrier(). Collective."""
    _need_init("barrier")
    with _lock:
        _lib.call("gpuhelper_barrier")


def _as_bytes(call: str, data: object) -> bytes:
    if isinstance(data, (bytes, bytearray, memoryview)):
        return bytes(data)
    if isinstance(data, str):
        return data.encode()
    raise Error(call, f"data is a {type(data).__name__}, expected bytes, bytearray, memoryview or str")


def bcast(data: Optional[Union[BytesLike, str]] = None, root: int = 0) -> bytes:
    """Root's data, on every rank. Collective; ranks other than root may pass None.

    Lengths are exchanged first, so only root's data counts (other ranks' data is ignored).
    At most GPUHELPER_COLL_MAX_BYTES (16 MiB); use NCCL for bulk data.
    """
    info = _need_init("bcast")
    if not 0 <= root < info.size:
        raise Error("bcast", f"root {root}, expected 0..{info.size - 1} (the job size - 1)")
    mine = b""
    if info.rank == root:
        if data is None:
            raise Error("bcast", f"rank {root} is the root: data is None, expected bytes or str")
        mine = _as_bytes("bcast", data)
    with _lock:
        hdr = ctypes.create_string_buffer(struct.pack("<Q", len(mine)), 8)
        _lib.call("gpuhelper_bcast", root, hdr, 8)
        (n,) = struct.unpack("<Q", hdr.raw)
        if n == 0:
            return b""
        buf = ctypes.create_string_buffer(mine, n) if info.rank == root else ctypes.create_string_buffer(n)
        _lib.call("gpuhelper_bcast", root, buf, n)
    return buf.raw


def allgather(data: Union[BytesLike, str]) -> List[bytes]:
    """Every rank's data, in rank order, on every rank. Collective; lengths may differ.

    The lengths travel first, then every rank's data padded to the longest. At most
    GPUHELPER_COLL_MAX_BYTES (16 MiB) per rank.
    """
    info = _need_init("allgather")
    mine = _as_bytes("allgather", data)
    with _lock:
        lens_out = ctypes.create_string_buffer(8 * info.size)
        _lib.call("gpuhelper_allgather", struct.pack("<Q", len(mine)), 8, lens_out, len(lens_out))
        lens = struct.unpack(f"<{info.size}Q", lens_out.raw)
        width = max(lens)
        if width == 0:
            return [b""] * info.size
        out = ctypes.create_string_buffer(width * info.size)
        _lib.call("gpuhelper_allgather", mine.ljust(width, b"\0"), width, out, len(out))
    raw = out.raw
    return [raw[r * width:r * width + lens[r]] for r in range(info.size)]


def nvl_cliques() -> int:
    """How many distinct multi-node NVLink cliques the ranks are in (0: none). Collective."""
    _need_init("nvl_cliques")
    n = ctypes.c_int(0)
    with _lock:
        _lib.call("gpuhelper_nvl_cliques", ctypes.byref(n))
    return n.value


def abort(code: int = 1, msg: Optional[str] = None) -> NoReturn:
    """End every process of the job (PMIx_Abort), with exit status code's low 8 bits (1 if 0).

    Not collective: any rank may call it at any time. Python's stdout and stderr are flushed
    first; like os._exit, no atexit handler or finally block runs. Without init() or a PMIx
    server it ends this process only.
    """
    for f in (sys.stdout, sys.stderr):
        try:
            if f is not None:
                f.flush()
        except Exception:
            pass
    if code & 0xFF == 0:
        code = 1
    try:
        lib = _lib.load()
    except Error as e:
        sys.stderr.write(f"{e}\ngpubind: abort: ending this process only\n")
        sys.stderr.flush()
        os._exit(code & 0xFF)
    lib.gpuhelper_abort(code, msg.encode(errors="replace") if msg is not None else None)
    os._exit(code & 0xFF)  # not reached: gpuhelper_abort returns only for code 0


def finalize() -> None:
    """Wait until every rank has called finalize(), then release PMIx. Collective.

    gpubind calls it at interpreter exit once init() was called, unless the program ended with
    an uncaught exception or a call timed out, so a rank 0 whose node serves the others' reads stays until
    they are done. Call it yourself to finish earlier; afterwards init() fails with
    GPUHELPER_EFINALIZED.
    """
    global _finalized
    with _lock:
        if _finalized or _lib._lib is None:
            return
        _finalized = True
        _lib.call("gpuhelper_finalize")


def library_version() -> str:
    """The loaded libgpuhelper's version, "MAJOR.MINOR.PATCH" (loads the library)."""
    return _lib.version(_lib.load())


_hooks_installed = False


def _install_exit_hooks() -> None:
    """finalize() at exit (also after a failed init(): the others' finalize then need not wait
    for this rank), unless the program ended with an uncaught exception or the last failed call
    left the ranks out of step (a timeout, a peer's death, calls in another order): then the
    others are not waiting in finalize, and joining their barrier would wait out the timeout."""
    global _hooks_installed
    if _hooks_installed:
        return
    _hooks_installed = True
    prev = sys.excepthook

    def hook(tp, value, tb):  # type: ignore[no-untyped-def]
        global _uncaught
        _uncaught = True
        prev(tp, value, tb)

    sys.excepthook = hook

    def at_exit() -> None:
        if _uncaught or _lib.last_failure in _lib.OUT_OF_STEP:
            return
        try:
            finalize()
        except Error as e:
            sys.stderr.write(f"{e}\n")

    atexit.register(at_exit)

