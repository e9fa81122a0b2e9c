"""Data-parallel training of a torchvision model with convkit's convolutions, on synthetic data.

    torchrun --nproc_per_node 2 examples/distributed/train.py                   # ResNet-50, DDP, bf16 channels_last
    torchrun --nproc_per_node 2 examples/distributed/train.py --fsdp --compile  # FSDP2 (fully_shard), torch.compile
    torchrun --nproc_per_node 2 examples/distributed/train.py --device cpu --model resnet18 --batch 4 --image-size 64
    torchrun --nproc_per_node 2 examples/distributed/train.py --torch           # the baseline: PyTorch's convolutions

Every rank builds the same model (convkit.nn.convert: every Conv2d runs convkit's kernels; BatchNorm,
activations and the rest stay PyTorch's), wraps it in DistributedDataParallel or, with --fsdp, shards it
with torch.distributed.fsdp.fully_shard (each ResNet stage, then the model), and trains with SGD on random
images (bf16 channels_last on CUDA; fp32 on the CPU; --memory-format to choose; under --fsdp the weights stay
contiguous, as FSDP2 requires). Each step prints images/s per rank and in total; the
first --warmup steps are not counted. With --eval, the trained weights are then fused (convkit.fuse: BatchNorm
folded, activation and residual in the epilogue) and one evaluation pass is timed on rank 0.
NCCL on CUDA (one GPU per rank, LOCAL_RANK), gloo on the CPU. NVLink multicast stays off (NCCL_NVLS_ENABLE=0
unless set).
"""
import argparse
import copy
import os
import time

import torch
import torch.distributed as dist
import torchvision

import convkit


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="resnet50", help="any torchvision classifier (torchvision.models.NAME)")
    ap.add_argument("--batch", type=int, default=128, help="images per rank and step")
    ap.add_argument("--image-size", type=int, default=224)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--fsdp", action="store_true", help="FSDP2 (fully_shard) instead of DDP")
    ap.add_argument("--compile", action="store_true", help="torch.compile the wrapped model")
    ap.add_argument("--eval", action="store_true", help="then one timed evaluation pass of convkit.fuse(model)")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--lr", type=float, default=0.1)
    ap.add_argument("--memory-format", choices=("channels_last", "contiguous"), default=None,
                    help="of the images and, under DDP, of the weights (default: channels_last on CUDA, "
                         "contiguous on the CPU)")
    ap.add_argument("--torch", action="store_true",
                    help="the baseline: PyTorch's own convolutions (cuDNN on CUDA), no convkit.nn.convert")
    a = ap.parse_args()

    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    cuda = a.device == "cuda"
    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    local = int(os.environ.get("LOCAL_RANK", 0))
    if cuda:
        torch.cuda.set_device(local)
    dist.init_process_group("nccl" if cuda else "gloo")
    dev = torch.device("cuda", local) if cuda else torch.device("cpu")
    dtype = torch.bfloat16 if cuda else torch.float32
    fmt_name = a.memory_format or ("channels_last" if cuda else "contiguous")
    fmt = torch.channels_last if fmt_name == "channels_last" else torch.contiguous_format
    # FSDP2 shards only contiguous parameters ("FSDP does not support non-contiguous parameters yet"): under
    # --fsdp the weights stay KCRS and only the images are channels_last; each convolution then makes its
    # channels_last copy of the (gathered) weight, as cuDNN's does.
    wfmt = torch.contiguous_format if a.fsdp else fmt

    torch.manual_seed(0)  # the same initial weights on every rank
    model = getattr(torchvision.models, a.model)(weights=None)
    if not a.torch:
        model = convkit.nn.convert(model, memory_format=wfmt)
    model = model.to(device=dev, dtype=dtype, memory_format=wfmt)
    if a.fsdp:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        # The mesh names the device: without one, FSDP2 would move a --device cpu model to the GPU of a
        # machine that has one.
        mesh = init_device_mesh(dev.type, (world,))
        for name in ("layer1", "layer2", "layer3", "layer4", "features"):
            sub = getattr(model, name, None)
            if sub is not None:
                fully_shard(sub, mesh=mesh)
        wrapped = fully_shard(model, mesh=mesh)
    else:
        wrapped = torch.nn.parallel.DistributedDataParallel(model, device_ids=[local] if cuda else None)
    step_fn = torch.compile(wrapped) if a.compile else wrapped
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=0.9)

    g = torch.Generator(device=dev).manual_seed(1 + rank)
    x = torch.randn(a.batch, 3, a.image_size, a.image_size, generator=g, device=dev, dtype=dtype)
    x = x.contiguous(memory_format=fmt)
    y = torch.randint(0, 1000, (a.batch,), generator=g, device=dev)
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    times = []
    for step in range(a.steps):
        sync()
        t0 = time.perf_counter()
        loss = torch.nn.functional.cross_entropy(step_fn(x).float(), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sync()
        dt = time.perf_counter() - t0
        if step >= a.warmup:
            times.append(dt)
        if rank == 0:
            print(f"step {step:3d}  loss {loss.item():.4f}  {a.batch / dt:8.1f} images/s per rank, "
                  f"{a.batch * world / dt:9.1f} total", flush=True)
    if rank == 0 and times:
        times.sort()
        med = times[len(times) // 2]
        print(f"{a.model} {'FSDP2' if a.fsdp else 'DDP'}{' compiled' if a.compile else ''}"
              f"{' (PyTorch convolutions)' if a.torch else ''}, {world} ranks on "
              f"{a.device}: median step {med * 1e3:.1f} ms, {a.batch / med:.1f} images/s per rank, "
              f"{a.batch * world / med:.1f} total", flush=True)
    if a.eval and rank == 0 and not a.fsdp and not a.torch:
        fused = convkit.fuse(copy.deepcopy(model).eval(), memory_format=fmt)
        with torch.no_grad():
            fused(x)
            sync()
            t0 = time.perf_counter()
            fused(x)
            sync()
        print(f"eval (convkit.fuse): {(time.perf_counter() - t0) * 1e3:.1f} ms for {a.batch} images; "
              f"{fused.convkit_summary.convs} convolutions, {fused.convkit_summary.bn_folded} BatchNorms folded",
              flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
