"""A tiny DistributedDataParallel training run started by gpubind, with no torchrun and no
MASTER_ADDR:

    srun --mpi=pmix [--gpu-bind-topo] python3 examples/torch_ddp.py [STEPS]

Each rank fits y = 3x - 1 with a one-weight linear model on its own slice of data; DDP averages
the gradients, so every rank ends with the same weights (checked with an all_gather) near
(3, -1). gloo on CPUs, nccl where the rank has a GPU.
"""

import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import gpubind.torch


def main() -> int:
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 50
    g = gpubind.torch.init_process_group()
    torch.manual_seed(1234 + g.rank)  # different data on each rank
    model = torch.nn.Linear(1, 1).to(g.device)
    ddp = DDP(model, device_ids=[g.device.index] if g.device.type == "cuda" else None)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.5)
    for step in range(steps):
        x = torch.rand(32, 1, device=g.device) * 2 - 1
        y = 3 * x - 1
        loss = torch.nn.functional.mse_loss(ddp(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if g.rank == 0 and (step % 10 == 0 or step == steps - 1):
            print(f"step {step:3d} loss {loss.item():.5f}", flush=True)
    w = torch.cat([model.weight.detach().flatten(), model.bias.detach()])
    every = [torch.zeros_like(w) for _ in range(g.world_size)]
    dist.all_gather(every, w)
    same = all(torch.equal(e, every[0]) for e in every)
    print(f"rank {g.rank}/{g.world_size} (local {g.local_rank}, {g.backend} on {g.device}, master "
          f"{g.master_addr}:{g.master_port}): w={w[0].item():.3f} b={w[1].item():.3f}, "
          f"{'same on every rank' if same else 'DIFFERENT across ranks'}", flush=True)
    dist.destroy_process_group()
    return 0 if same and abs(w[0].item() - 3) < 0.1 and abs(w[1].item() + 1) < 0.1 else 1


if __name__ == "__main__":
    sys.exit(main())
