# Section 4b of tests/gpu/slurm.sh (sourced there; uses its srun, $B, $work, $gpu_bus, pass,
# fail, check): the Python package gpubind with the machine's PyTorch and real NCCL, under
# srun --mpi=pmix --gpu-bind-topo.
#  - gpubind.init()'s GPU and bus id match nvidia-smi (and torch's device UUID where torch has it)
#  - gpubind.torch.init_process_group() with nccl at n=1 and an all_reduce on the GPU
#  - n=2 (both tasks on the one GPU, which NCCL refuses) with gloo: all_reduce of the ranks
#  - the ID from gpubind.nccl_id() starts a real NCCL communicator (ctypes ncclCommInitRank and
#    an ncclAllReduce on the GPU, in the NCCL torch loaded)
# GPU_PYTHON names the interpreter (default python3, which has torch with CUDA there).

section "4b. Python: gpubind and gpubind.torch with the machine's PyTorch and NCCL"
py=${GPU_PYTHON:-python3}
pyenv=(env PYTHONPATH="$root/python" GPUBIND_LIBGPUHELPER="$B/libgpuhelper.so.1" PYTHONDONTWRITEBYTECODE=1)
"$py" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available(), "nccl", torch.cuda.nccl.version() if torch.cuda.is_available() else None)' ||
	fail "python: $py cannot import torch"

cat >"$work/py_info.py" <<'EOF'
import gpubind
i = gpubind.init()  # before torch touches CUDA
import torch
uuid = "-"
if i.cuda_device >= 0 and torch.cuda.is_available():
    u = getattr(torch.cuda.get_device_properties(i.cuda_device), "uuid", None)
    uuid = ("GPU-" + str(u)) if u is not None else "-"
print("PYINFO", i.rank, i.size, i.local_rank, i.cuda_device, i.pci_bus_id or "-", i.gpu_uuid or "-", uuid, flush=True)
EOF
out=$(srun --mpi=pmix -n1 --gpus=1 --gpu-bind-topo=verbose "${pyenv[@]}" "$py" "$work/py_info.py" 2>&1)
echo "$out"
read -r _ prank psize _ pdev pbus puuid ptorchuuid <<<"$(grep '^PYINFO' <<<"$out")"
smi_uuid=$(awk -F', ' -v b="$pbus" 'tolower(substr($2, length($2)-11)) == b {print $3}' "$work/smi.csv")
check "python: gpubind.init() rank 0 of 1, cuda_device 0" test "${prank:-x} ${psize:-x} ${pdev:-x}" = "0 1 0"
check "python: gpubind.init()'s bus id ($pbus) is a GPU of nvidia-smi, uuid $puuid = nvidia-smi's ($smi_uuid)" \
	test -n "$smi_uuid" -a "$puuid" = "$smi_uuid"
check "python: the bus id is the plugin's (mapping line)" grep -qi "GPU [0-9]* $pbus " <<<"$out"
if [[ ${ptorchuuid:--} != - ]]; then
	check "python: torch's device cuda:$pdev has that uuid ($ptorchuuid)" test "$ptorchuuid" = "$puuid"
fi

cat >"$work/py_nccl.py" <<'EOF'
import torch, torch.distributed as dist
import gpubind.torch
g = gpubind.torch.init_process_group()
t = torch.full((1024,), float(g.rank + 1), device=g.device)
dist.all_reduce(t)
print("PYNCCL", g.rank, g.world_size, g.backend, t.device.type, int(t[0].item()), g.world_size * (g.world_size + 1) // 2, flush=True)
dist.destroy_process_group()
EOF
out=$(srun --mpi=pmix -n1 --gpus=1 --gpu-bind-topo "${pyenv[@]}" "$py" "$work/py_nccl.py" 2>&1)
echo "$out"
check "python n=1: gpubind.torch.init_process_group() chose nccl, all_reduce on the GPU gave 1" \
	grep -q '^PYNCCL 0 1 nccl cuda 1 1$' <<<"$out"

out=$(TEST_BACKEND=gloo srun --mpi=pmix -n2 --gpus=1 --gpu-bind-topo "${pyenv[@]}" "$py" "$root/tests/python/progs/rank.py" allreduce 2>&1)
echo "$out"
check "python n=2: gloo all_reduce of the ranks gives 1 on both ranks" \
	test "$(grep -c '^PY [01] ALLREDUCE 1 2 gloo pmix ' <<<"$out")" -eq 2

cat >"$work/py_ncclid.py" <<'EOF'
import ctypes, os, sys
import gpubind
i = gpubind.init()
# The program's own NCCL, loaded globally before nccl_id(): the helper then makes the ID with
# this very library (its ncclGetUniqueId is the process's own), and the communicator below
# starts with the same one. A PyTorch wheel may carry an NCCL of another version (statically
# or under its own path); an ID made by one NCCL and used by another is not guaranteed to work.
nccl = ctypes.CDLL("libnccl.so.2", mode=os.RTLD_GLOBAL | os.RTLD_NOW)
v = ctypes.c_int()
nccl.ncclGetVersion(ctypes.byref(v))
uid = gpubind.nccl_id()  # rank 0 makes it with that NCCL
import torch
torch.cuda.set_device(i.cuda_device)
# c_byte, not c_char: a c_char array field set from bytes stops at the first NUL byte, which
# would zero the ID's bootstrap address (connect to 0.0.0.0).
class UniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_byte * 128)]
nccl.ncclCommInitRank.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int, UniqueId, ctypes.c_int]
nccl.ncclAllReduce.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                               ctypes.c_void_p, ctypes.c_void_p]
comm = ctypes.c_void_p()
rc = nccl.ncclCommInitRank(ctypes.byref(comm), i.size, UniqueId.from_buffer_copy(uid), i.rank)
if rc != 0:
    nccl.ncclGetErrorString.restype = ctypes.c_char_p
    print("PYCOMM FAIL ncclCommInitRank", rc, nccl.ncclGetErrorString(rc), flush=True)
    sys.exit(1)
x = torch.full((256,), float(i.rank + 1), device="cuda")
s = torch.cuda.current_stream()
rc = nccl.ncclAllReduce(x.data_ptr(), x.data_ptr(), 256, 7, 0, comm, s.cuda_stream)  # ncclFloat32, ncclSum
s.synchronize()
print("PYCOMM", i.rank, i.size, v.value, rc, int(x[0].item()), flush=True)
nccl.ncclCommDestroy(comm)
EOF
out=$(NCCL_DEBUG=WARN srun --mpi=pmix -n1 --gpus=1 --gpu-bind-topo "${pyenv[@]}" "$py" "$work/py_ncclid.py" 2>&1)
echo "$out"
check "python: gpubind.nccl_id() starts a real NCCL communicator (ncclCommInitRank, ncclAllReduce)" \
	grep -q '^PYCOMM 0 1 [0-9]* 0 1$' <<<"$out"
