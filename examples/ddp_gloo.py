"""One model trained on several nodes with PyTorch's DistributedDataParallel, as a command
job with `resources.nodes` (Slurm executor). gpuq gives every node what torchrun's static
rendezvous gives its processes (`MASTER_ADDR`, `MASTER_PORT`, `WORLD_SIZE`, `RANK`,
`LOCAL_RANK`, `NODE_RANK`): one process per node, using all of that node's GPUs. (To run
one process per GPU, start `torchrun --nnodes $GPUQ_NODES --node-rank $NODE_RANK
--master-addr $MASTER_ADDR --master-port $MASTER_PORT --nproc-per-node N` yourself.)

Each rank trains on its own shard; DDP averages the gradients, so every rank ends with the
same weights. The script checks that (all-gather of the weights, and a model trained on
this rank's shard alone must differ) and exits 1 if it fails. `--backend nccl` on GPUs;
gloo (the default) runs on CPUs. Only rank 0 saves (`GPUQ_ARTIFACTS_DIR`).

    gpuq run --nodes 2 -- python examples/ddp_gloo.py
"""

import argparse
import os
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=20)
parser.add_argument("--batch-size", type=int, default=16, help="per rank")
parser.add_argument("--backend", default="gloo")
args = parser.parse_args()

torch.set_num_threads(1)
dist.init_process_group(args.backend)  # env://: MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK
rank, world = dist.get_rank(), dist.get_world_size()
print(f"rank {rank} of {world} (node rank {os.environ.get('NODE_RANK')})", flush=True)

generator = torch.Generator().manual_seed(0)
x = torch.randn(world * 256, 4, generator=generator)
y = x @ torch.tensor([[1.0], [-2.0], [0.5], [3.0]])
x_shard, y_shard = x[rank::world], y[rank::world]


def new_model() -> torch.nn.Module:
    torch.manual_seed(1)
    return torch.nn.Linear(4, 1)


def train(model: torch.nn.Module) -> None:
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    for step in range(args.steps):
        i = (step * args.batch_size) % len(x_shard)
        xb, yb = x_shard[i : i + args.batch_size], y_shard[i : i + args.batch_size]
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(xb), yb)
        loss.backward()
        optimizer.step()
    print(f"rank {rank}: loss after {args.steps} steps {loss.item():.4f}", flush=True)


model = DistributedDataParallel(new_model())
train(model)
weights = torch.cat([p.detach().ravel() for p in model.module.parameters()])
gathered = [torch.empty_like(weights) for _ in range(world)]
dist.all_gather(gathered, weights)
same_everywhere = all(torch.allclose(w, weights) for w in gathered)
alone = new_model()
train(alone)
differs = not torch.allclose(torch.cat([p.detach().ravel() for p in alone.parameters()]), weights)
if not (same_everywhere and differs):
    print(
        f"rank {rank}: all-reduce check FAILED (same on all ranks: {same_everywhere}, "
        f"differs from this shard alone: {differs})",
        flush=True,
    )
    sys.exit(1)
print(f"rank {rank}: all-reduce check passed", flush=True)
if rank == 0:
    out = os.path.join(os.environ.get("GPUQ_ARTIFACTS_DIR", "."), "model.pt")
    torch.save(model.module.state_dict(), out)
    print(f"rank 0 saved {out}", flush=True)
dist.destroy_process_group()
