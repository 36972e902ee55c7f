"""One rank of a tests/python step: `rank.py MODE [ARGS]`, run under srun by python_test.go.

Every line it prints for the test starts with "PY <rank> ", so the Go side can check each
rank's answer. Errors the test expects are printed as "PY <rank> ERROR <code> <name> <message>"
(code "None" for gpubind's own errors) and the program exits 0: the step must end cleanly.
"""

import os
import sys
import time

import gpubind


def say(rank: object, *words: object) -> None:
    # One write per line: torchrun's workers share one stdout pipe.
    os.write(1, (" ".join(str(w) for w in ("PY", rank) + words) + "\n").encode())


def rank_env() -> str:
    return os.environ.get("SLURM_PROCID", "?")


def mode_info() -> None:
    i = gpubind.init()
    say(i.rank, "INFO", i.rank, i.size, i.local_rank, i.local_size, i.node_id, i.num_nodes, i.cuda_device,
        i.pci_bus_id or "-", i.gpu_uuid or "-", os.environ.get("CUDA_VISIBLE_DEVICES", "-"),
        os.environ.get("CUDA_DEVICE_ORDER", "-"), os.environ["SLURM_PROCID"], os.environ["SLURM_LOCALID"],
        os.environ["SLURM_NODEID"])
    again = gpubind.init()
    say(i.rank, "IDEMPOTENT", again is i)


def mode_ncclid() -> None:
    pre = os.environ.get("RANKPY_PRELOAD")
    if pre:
        # As a Python extension (torch) loads NCCL/RCCL: RTLD_LOCAL, invisible to dlsym(RTLD_DEFAULT).
        import ctypes
        ctypes.CDLL(pre, mode=os.RTLD_LOCAL | os.RTLD_NOW)
    i = gpubind.init()
    say(i.rank, "INITID", "none" if i.nccl_id is None else i.nccl_id.hex())
    gpubind.barrier()  # every rank is past init before rank 0 makes the ID
    uid = gpubind.nccl_id()
    say(i.rank, "NCCLID", len(uid), uid.hex())
    say(i.rank, "NCCLID2", gpubind.nccl_id().hex())


def mode_coll() -> None:
    i = gpubind.init()
    r = i.rank
    # bcast: unequal lengths on purpose (non-roots pass other data or None).
    got = gpubind.bcast(b"x" * 1000 + b"end" if r == 1 else (b"ignored" if r % 2 else None), root=1)
    say(r, "BCAST1", len(got), got[-3:].decode())
    got = gpubind.bcast("" if r == 0 else None)
    say(r, "BCAST0", len(got))
    got = gpubind.bcast("héllo" if r == 0 else None)
    say(r, "BCASTSTR", got.decode())
    # allgather: rank r sends r+1 copies of its rank, rank 2 sends nothing.
    mine = b"" if r == 2 else (str(r) * (r + 1)).encode()
    all_ = gpubind.allgather(mine)
    say(r, "ALLGATHER", ",".join(a.decode() or "-" for a in all_))
    empty = gpubind.allgather(b"")
    say(r, "ALLEMPTY", len(empty), sum(len(e) for e in empty))
    gpubind.barrier()
    say(r, "BARRIER", "ok")


def mode_allreduce() -> None:
    import torch
    import torch.distributed as dist

    import gpubind.torch as gt

    g = gt.init_process_group(os.environ.get("TEST_BACKEND") or None)
    t = torch.tensor([float(g.rank)])
    dist.all_reduce(t)
    say(g.rank, "ALLREDUCE", int(t.item()), g.world_size, g.backend, g.launcher, g.master_addr,
        os.environ.get("GLOO_SOCKET_IFNAME", "-"), os.environ["RANK"], os.environ["WORLD_SIZE"],
        os.environ["LOCAL_RANK"], os.environ["LOCAL_WORLD_SIZE"], g.device)
    dist.destroy_process_group()


def mode_expect(what: str) -> None:
    """Run the call `what` and print the Error it raises."""
    r = rank_env()
    try:
        if what == "init":
            gpubind.init()
        elif what == "late0":  # rank 0 arrives after the others' timeout
            if r == "0":
                time.sleep(float(os.environ.get("LATE", "8")))
            gpubind.init()
        elif what == "absent":  # the last rank never calls allgather
            i = gpubind.init()
            if i.rank == i.size - 1:
                say(i.rank, "ABSENT")
                time.sleep(float(os.environ.get("LATE", "8")))
                return
            gpubind.allgather(b"x")
        elif what == "torch":
            import gpubind.torch as gt
            gt.init_process_group("gloo")
        else:
            raise SystemExit(f"rank.py: unknown call {what!r}")
        say(r, "NOERROR")
    except gpubind.Error as e:
        say(r, "ERROR", e.code, e.name or "-", str(e).replace("\n", " "))


def main() -> None:
    mode = sys.argv[1]
    if mode == "info":
        mode_info()
    elif mode == "ncclid":
        mode_ncclid()
    elif mode == "coll":
        mode_coll()
    elif mode == "allreduce":
        mode_allreduce()
    elif mode == "expect":
        mode_expect(sys.argv[2])
    else:
        raise SystemExit(f"rank.py: unknown mode {mode!r}")


if __name__ == "__main__":
    main()
