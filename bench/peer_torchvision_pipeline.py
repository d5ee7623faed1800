#!/usr/bin/python3
"""The peer of pipeline_bench: torchvision's standard ImageNet training input pipeline.

ImageFolder (PIL decode) + RandomResizedCrop(224) + RandomHorizontalFlip + ToTensor +
Normalize, batched by a DataLoader with --workers worker processes (torch.set_num_threads(1)
in each), over the same JPEGs that pipeline_bench reads from TFRecords. Prints one JSON
line with the same fields as pipeline_bench:
  {"impl":"torchvision","threads":T,"images":N,"seconds":..,"images_per_s":..,
   "images_per_s_per_thread":..,"cpu_seconds":..,"images_per_cpu_s":..,...}
Worker start-up is excluded: one iterator yields warm-up + timed batches and the clock
starts after the warm-up batches. cpu_seconds is the CPU time of the main process and of
all workers during the timed batches (from /proc).

Run with Debian's interpreter, which has python3-torch and python3-torchvision:
    /usr/bin/python3 bench/peer_torchvision_pipeline.py --root /tmp/photos --workers 2
"""
import argparse
import json
import os
import time

import torch
import torchvision
from torchvision import transforms

CLK_TCK = os.sysconf("SC_CLK_TCK")


def proc_cpu_seconds(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime + stime


def worker_init(_):
    torch.set_num_threads(1)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--root", required=True, help="class-per-folder JPEG tree")
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--batch_size", type=int, default=32)
    p.add_argument("--batches", type=int, default=40, help="timed batches")
    p.add_argument("--warmup_batches", type=int, default=4)
    p.add_argument("--image_size", type=int, default=224)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    if args.workers < 1:
        p.error("--workers must be >= 1")

    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    transform = transforms.Compose([
        transforms.RandomResizedCrop(args.image_size),
        transforms.RandomHorizontalFlip(),
        transforms.ToTensor(),
        transforms.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225]),
    ])
    dataset = torchvision.datasets.ImageFolder(args.root, transform=transform)
    # Shuffled epochs back to back, as many as needed, in one iterator (no epoch restarts).
    total = (args.warmup_batches + args.batches) * args.batch_size
    g = torch.Generator().manual_seed(args.seed)
    order = []
    while len(order) < total:
        order += torch.randperm(len(dataset), generator=g).tolist()
    order = order[:total]
    loader = torch.utils.data.DataLoader(dataset, batch_size=args.batch_size, sampler=order,
                                         num_workers=args.workers, worker_init_fn=worker_init,
                                         drop_last=True, pin_memory=False)
    start = time.perf_counter()
    it = iter(loader)
    checksum = 0.0
    for _ in range(args.warmup_batches):
        images, labels = next(it)
        checksum += float(images[0, 0, 0, 0]) + int(labels[0])
    pids = [w.pid for w in it._workers]
    t0 = time.perf_counter()
    c0 = time.process_time() + sum(proc_cpu_seconds(pid) for pid in pids)
    n = 0
    for i in range(args.batches):
        images, labels = next(it)
        n += images.shape[0]
        checksum += float(images.view(-1)[i]) + int(labels[0])
    secs = time.perf_counter() - t0
    cpu = time.process_time() + sum(proc_cpu_seconds(pid) for pid in pids) - c0
    out = {
        "impl": "torchvision",
        "threads": args.workers,
        "batch_size": args.batch_size,
        "image_size": args.image_size,
        "images": n,
        "seconds": secs,
        "images_per_s": n / secs,
        "images_per_s_per_thread": n / secs / args.workers,
        "cpu_seconds": cpu,
        "images_per_cpu_s": n / cpu,
        "startup_seconds": t0 - start,
        "files": len(dataset),
        "checksum": checksum,
        "torch": torch.__version__,
        "torchvision": torchvision.__version__,
    }
    print(json.dumps(out, sort_keys=True), flush=True)
    del it


if __name__ == "__main__":
    main()
