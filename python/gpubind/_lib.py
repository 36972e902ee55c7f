"""ctypes binding of libgpuhelper.so.1's public C API (lib/gpuhelper.h), nothing more.

The library is loaded on first use, not at import: loading it starts its Go runtime (threads,
signal handlers; see docs/helper.md), which a program that only imports gpubind should not pay
for. Only calls and struct fields of the public header are used; the struct is passed with its
struct_size, so an older 1.x library fills the fields it knows and leaves the rest zero.
"""

import ctypes
import os
import threading
from typing import Callable, Optional

from . import _config

NCCL_ID_BYTES = 128
NVL_CLIQUE_BYTES = 64
INFO_NCCL_ID = 0x1

# Return codes of lib/gpuhelper.h (names for messages; gpuhelper_strerror has the text).
CODES = {
    0: "GPUHELPER_SUCCESS",
    -1: "GPUHELPER_EINVAL",
    -2: "GPUHELPER_ENOSERVER",
    -3: "GPUHELPER_EPMIX",
    -4: "GPUHELPER_ETIMEOUT",
    -5: "GPUHELPER_ENCCL",
    -6: "GPUHELPER_EFORK",
    -7: "GPUHELPER_EGPU",
    -8: "GPUHELPER_ENOTINIT",
    -9: "GPUHELPER_EENV",
    -10: "GPUHELPER_EINTERNAL",
    -11: "GPUHELPER_EFINALIZED",
    -12: "GPUHELPER_EMIG",
    -13: "GPUHELPER_EPEER",
    -14: "GPUHELPER_EORDER",
}

# The environment variable that names the library file to load instead of the default search.
LIBRARY_ENV = "GPUBIND_LIBGPUHELPER"
SONAME = "libgpuhelper.so.1"


class InfoStruct(ctypes.Structure):
    """gpuhelper_info_t, field for field (1.3)."""

    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("rank", ctypes.c_int),
        ("size", ctypes.c_int),
        ("local_rank", ctypes.c_int),
        ("local_size", ctypes.c_int),
        ("node_id", ctypes.c_int),
        ("num_nodes", ctypes.c_int),
        ("cuda_device", ctypes.c_int),
        ("pci_bus_id", ctypes.c_char * 32),
        ("gpu_uuid", ctypes.c_char * 96),
        ("nccl_id", ctypes.c_ubyte * NCCL_ID_BYTES),
        ("flags", ctypes.c_ulonglong),
        ("nvl_clique", ctypes.c_char * NVL_CLIQUE_BYTES),
    ]


class Error(Exception):
    """A failed gpubind call.

    Attributes:
        code: the helper's return code (a negative GPUHELPER_E... value), or None when the
            failure is gpubind's own (the library cannot be loaded, a bad argument, the
            environment disagrees with the launcher).
        name: the code's name ("GPUHELPER_ETIMEOUT"), or "" when code is None.
        detail: what went wrong (the helper's gpuhelper_last_error, naming the input or the
            rank involved).
        call: the call that failed ("gpuhelper_init").
    """

    def __init__(self, call: str, detail: str, code: Optional[int] = None, strerror: str = "") -> None:
        self.call = call
        self.code = code
        self.name = CODES.get(code, f"code {code}") if code is not None else ""
        self.detail = detail
        self.strerror = strerror
        if code is None:
            text = f"gpubind: {call}: {detail}"
        else:
            text = f"gpubind: {call}: {strerror or self.name}: {detail or '(no details)'}"
        super().__init__(text)


_lock = threading.Lock()
_lib: Optional[ctypes.CDLL] = None
# The code of the last failed call (0: none): after a timeout, a peer's death or calls out of
# order the ranks are out of step, and the finalize barrier at exit would only wait out the
# timeout.
last_failure = 0
OUT_OF_STEP = (-4, -13, -14)


def _candidates() -> "list[str]":
    """Where to look for the library, in order."""
    named = os.environ.get(LIBRARY_ENV, "")
    if named:
        return [named]
    out = [SONAME]
    if _config.LIBDIR:
        out.append(os.path.join(_config.LIBDIR, SONAME))
    return out


def load() -> ctypes.CDLL:
    """Load libgpuhelper.so.1 once and declare the prototypes; Error naming every path tried."""
    global _lib
    with _lock:
        if _lib is not None:
            return _lib
        tried = []
        lib = None
        for path in _candidates():
            try:
                lib = ctypes.CDLL(path, mode=ctypes.RTLD_LOCAL)
                break
            except OSError as e:
                tried.append(f"{path}: {e}")
        if lib is None:
            raise Error("load", f"cannot load {SONAME} (" + "; ".join(tried) +
                        f"); install libgpuhelper1, add its directory to LD_LIBRARY_PATH, or set "
                        f"{LIBRARY_ENV} to the file")
        _declare(lib)
        _lib = lib
        return lib


def _declare(lib: ctypes.CDLL) -> None:
    c_int, c_void_p, c_size_t, c_char_p = ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p
    protos = {
        "gpuhelper_init": (c_int, [ctypes.POINTER(InfoStruct)]),
        "gpuhelper_finalize": (c_int, []),
        "gpuhelper_strerror": (c_char_p, [c_int]),
        "gpuhelper_last_error": (c_char_p, []),
        "gpuhelper_version": (c_char_p, []),
        # 1.1
        "gpuhelper_nccl_id": (c_int, [c_void_p]),
        "gpuhelper_barrier": (c_int, []),
        "gpuhelper_bcast": (c_int, [c_int, c_void_p, c_size_t]),
        "gpuhelper_allgather": (c_int, [c_void_p, c_size_t, c_void_p, c_size_t]),
        "gpuhelper_abort": (c_int, [c_int, c_char_p]),
        # 1.3
        "gpuhelper_nvl_cliques": (c_int, [ctypes.POINTER(c_int)]),
    }
    for name, (res, args) in protos.items():
        try:
            fn = getattr(lib, name)
        except AttributeError:
            continue  # an older library: call() says which version the call needs
        fn.restype = res
        fn.argtypes = args


def version(lib: ctypes.CDLL) -> str:
    """The loaded library's "MAJOR.MINOR.PATCH"."""
    v = lib.gpuhelper_version()
    return v.decode() if v else "?"


def call(name: str, *args: object) -> int:
    """Call gpuhelper_<name>; raise Error with the helper's code and message on failure."""
    lib = load()
    try:
        fn: Callable[..., int] = getattr(lib, name)
    except AttributeError:
        raise Error(name, f"the loaded libgpuhelper ({version(lib)}) has no {name}: it needs a newer "
                          "libgpuhelper1") from None
    global last_failure
    rc = fn(*args)
    if rc < 0:
        last_failure = rc
        detail = lib.gpuhelper_last_error() or b""
        text = lib.gpuhelper_strerror(rc) or b""
        raise Error(name, detail.decode(errors="replace"), rc, text.decode(errors="replace"))
    return rc


def c_getenv(name: str) -> Optional[str]:
    """The C environment's value of name (the helper's setenv does not reach os.environ)."""
    libc = ctypes.CDLL(None)
    libc.getenv.restype = ctypes.c_char_p
    libc.getenv.argtypes = [ctypes.c_char_p]
    v = libc.getenv(name.encode())
    return v.decode(errors="surrogateescape") if v is not None else None
