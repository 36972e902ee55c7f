"""One rank of bench/python.sh: time from this process's exec to a working torch.distributed
process group (gloo, one all_reduce done), phase by phase. `python_rank.py MODE`:

  gpubind   gpubind.init() then gpubind.torch.init_process_group("gloo")  (srun --mpi=pmix)
  env       RANK/WORLD_SIZE from SLURM_PROCID/SLURM_NTASKS, MASTER_ADDR/PORT set by hand, env://
  torchrun  torchrun's variables, env:// (its c10d rendezvous already ran in the agent)

Prints "BENCH MODE RANK EXEC IMPORT HELPER PG": CLOCK_REALTIME seconds of the exec (from
/proc/self/stat's start time), after the imports, after gpubind.init() (= IMPORT for the others)
and after the first all_reduce.
"""
import os
import sys
import time


def exec_time() -> float:
    with open("/proc/self/stat") as f:
        start_ticks = int(f.read().rsplit(")", 1)[1].split()[19])
    boot_now = time.clock_gettime(time.CLOCK_BOOTTIME)
    return time.time() - (boot_now - start_ticks / os.sysconf("SC_CLK_TCK"))


t_exec = exec_time()
mode = sys.argv[1]
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

if mode == "gpubind":
    import gpubind
    import gpubind.torch
t_import = time.time()
if mode == "gpubind":
    gpubind.init()
    t_helper = time.time()
    gpubind.torch.init_process_group("gloo")
else:
    t_helper = t_import
    if mode == "env":
        os.environ["RANK"] = os.environ["SLURM_PROCID"]
        os.environ["WORLD_SIZE"] = os.environ["SLURM_NTASKS"]
    dist.init_process_group("gloo", init_method="env://")
t = torch.ones(1)
dist.all_reduce(t)
t_pg = time.time()
assert int(t.item()) == dist.get_world_size()
# One write: torchrun's workers share one stdout pipe.
os.write(1, f"BENCH {mode} {dist.get_rank()} {t_exec:.3f} {t_import:.3f} {t_helper:.3f} {t_pg:.3f}\n".encode())
dist.destroy_process_group()
