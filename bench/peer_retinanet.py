#!/usr/bin/python3
"""The PyTorch-Python peer of bench/retinanet_bench.cc (issue 33): torchvision's
retinanet_resnet50_fpn, or with --model ssdlite320_mobilenet_v3_large its SSDLite (Debian's
python3-torchvision 0.14), trained from scratch (BatchNorm2d, every layer trainable, as
Orchard's), one training step = forward with the targets (its loss), backward, SGD with momentum
0.9. Same image size, batch and number of groundtruth boxes.

ssdlite320_mobilenet_v3_large without backbone weights builds MobileNetV3-Large with the reduced
tail (the last layers at half width, as the OD API's V3_LARGE_DETECTION), taps the same two
layers, 4 depthwise extra layers (512, 256, 256, 128) and depthwise heads, 6 anchors per location
everywhere (the OD API's config: 3 on the first map), softmax cross-entropy with hard negative
mining 3:1 (the config: sigmoid focal loss), images resized inside the step to 320x320.

What differs from the OD API's ssd_resnet50_v1_fpn (Orchard): torchvision has 9 anchors per
location (3 scales x 3 aspect ratios, Orchard's config 6), P6 from P5 and no batch norm in the
head towers (the OD API: a batch norm per level after each tower conv), its ResNet is v1.5
(stride in the first unit's 3x3; TF-Slim's in the last unit), the L1 box loss, and its
GeneralizedRCNNTransform normalises the images inside the step.
"""
import argparse
import torch
import torchvision

import peer_timing
from peer_timing import emit, time_loop


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="retinanet_resnet50_fpn",
                   choices=["retinanet_resnet50_fpn", "ssdlite320_mobilenet_v3_large"])
    p.add_argument("--size", type=int, default=640)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--boxes", type=int, default=4)
    p.add_argument("--num_classes", type=int, default=91)
    p.add_argument("--iters", type=int, default=5)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--budget_s", type=float, default=600)
    a = p.parse_args()
    peer_timing.budget_s = a.budget_s
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    if a.model == "retinanet_resnet50_fpn":
        model = torchvision.models.detection.retinanet_resnet50_fpn(
            weights=None, weights_backbone=None, num_classes=a.num_classes, min_size=a.size, max_size=a.size)
    else:
        if a.size != 320:
            raise SystemExit("ssdlite320_mobilenet_v3_large runs at 320x320 only")
        model = torchvision.models.detection.ssdlite320_mobilenet_v3_large(
            weights=None, weights_backbone=None, num_classes=a.num_classes)
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    images = [torch.rand(3, a.size, a.size) for _ in range(a.batch)]
    targets = []
    for _ in range(a.batch):
        lo = torch.rand(a.boxes, 2) * 0.5
        size = torch.rand(a.boxes, 2) * 0.4 + 0.1
        yx = torch.cat([lo, lo + size], 1) * a.size  # ymin, xmin, ymax, xmax
        targets.append({"boxes": yx[:, [1, 0, 3, 2]], "labels": torch.randint(1, a.num_classes, (a.boxes,))})
    losses = {}

    def step(phase):
        t0 = peer_timing.time.perf_counter()
        l = model(images, targets)
        total = sum(l.values())
        phase["forward_loss"] = peer_timing.time.perf_counter() - t0
        t0 = peer_timing.time.perf_counter()
        opt.zero_grad()
        total.backward()
        phase["backward"] = peer_timing.time.perf_counter() - t0
        t0 = peer_timing.time.perf_counter()
        opt.step()
        phase["optimizer"] = peer_timing.time.perf_counter() - t0
        losses["total"] = float(total)

    r = time_loop(a.warmup, a.iters, step)
    r["check"] = {"total_loss": losses["total"], "params": sum(p.numel() for p in model.parameters())}
    emit("pytorch", "train", a.batch, "image", float(a.batch), a.threads, a.warmup, r,
         model=a.model, height=a.size, width=a.size)


if __name__ == "__main__":
    main()
