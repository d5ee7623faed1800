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

--model fasterrcnn_resnet50_fpn (issue 34, against the OD API's faster_rcnn_resnet50): torchvision's
Faster R-CNN, built with weights=None (BatchNorm2d with batch statistics, every layer trainable),
min_size = max_size = --size so that GeneralizedRCNNTransform keeps the S x S images at S x S, and
--size_divisible (torchvision's 32 pads 600 to 608; the driver passes 1 so that both sides see the
same pixels). Everything else is torchvision's default (bench/README.md lists how it differs from
the OD API's model): ResNet-50 v1.5 + FPN P2-P6, 3 anchors per location and level, 2000 / 1000
proposals after NMS in training / inference, 512 sampled RoIs per image, MultiScaleRoIAlign 7x7,
TwoMLPHead 1024. --box_score_thresh / --box_detections_per_img (torchvision: 0.05 / 100) are the
post-processing's; the driver passes the OD API config's 0.0 / 300 so that both NMS the same
amount (untrained scores are ~1/91, all under 0.05).

--model maskrcnn_resnet50_fpn (issue 34, against the OD API's mask_rcnn_resnet50_atrous): the same
with torchvision's mask branch (MultiScaleRoIAlign 14x14, four 3x3 convs of 256, a 2x deconvolution,
28x28 masks per class; the mask loss on the positives of the 512 sampled RoIs), each groundtruth box's
mask the ellipse inscribed in it.

--mode infer: model.eval(), torch.no_grad(), model(images): the transform, both stages and the
post-processing (detections per image in "check"). --clip_norm: torch.nn.utils.clip_grad_norm_
before the step (the OD API config's gradient_clipping_by_norm; 0: none).
"""
import argparse
import math
import torch
import torchvision

import peer_timing
from peer_timing import emit, time_loop


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="retinanet_resnet50_fpn",
                   choices=["retinanet_resnet50_fpn", "ssdlite320_mobilenet_v3_large", "fasterrcnn_resnet50_fpn",
                            "maskrcnn_resnet50_fpn"])
    p.add_argument("--mode", default="train", choices=["train", "infer"])
    p.add_argument("--size", type=int, default=640)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--boxes", type=int, default=4)
    p.add_argument("--num_classes", type=int, default=91)
    p.add_argument("--iters", type=int, default=5)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--budget_s", type=float, default=600)
    p.add_argument("--impl", default="pytorch",
                   help="the JSON line's impl (pytorch_tuned: run with Orchard's malloc settings)")
    p.add_argument("--clip_norm", type=float, default=0)
    p.add_argument("--size_divisible", type=int, default=32)
    p.add_argument("--box_score_thresh", type=float, default=0.05)
    p.add_argument("--box_detections_per_img", type=int, default=100)
    a = p.parse_args()
    peer_timing.budget_s = a.budget_s
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    if a.model == "retinanet_resnet50_fpn":
        model = torchvision.models.detection.retinanet_resnet50_fpn(
            weights=None, weights_backbone=None, num_classes=a.num_classes, min_size=a.size, max_size=a.size)
    elif a.model in ("fasterrcnn_resnet50_fpn", "maskrcnn_resnet50_fpn"):
        model = getattr(torchvision.models.detection, a.model)(
            weights=None, weights_backbone=None, num_classes=a.num_classes, min_size=a.size, max_size=a.size,
            size_divisible=a.size_divisible, box_score_thresh=a.box_score_thresh,
            box_detections_per_img=a.box_detections_per_img)
    else:
        if a.size != 320:
            raise SystemExit("ssdlite320_mobilenet_v3_large runs at 320x320 only")
        model = torchvision.models.detection.ssdlite320_mobilenet_v3_large(
            weights=None, weights_backbone=None, num_classes=a.num_classes)
    params = sum(p.numel() for p in model.parameters())
    images = [torch.rand(3, a.size, a.size) for _ in range(a.batch)]
    targets = []
    for _ in range(a.batch):
        lo = torch.rand(a.boxes, 2) * 0.5
        size = torch.rand(a.boxes, 2) * 0.4 + 0.1
        yx = torch.cat([lo, lo + size], 1) * a.size  # ymin, xmin, ymax, xmax
        target = {"boxes": yx[:, [1, 0, 3, 2]], "labels": torch.randint(1, a.num_classes, (a.boxes,))}
        if a.model == "maskrcnn_resnet50_fpn":
            # Each box's instance mask: the ellipse inscribed in it (as bench/retinanet_bench.cc).
            axis = torch.arange(a.size) + 0.5
            centre, radius = (yx[:, :2] + yx[:, 2:]) / 2, (yx[:, 2:] - yx[:, :2]) / 2
            dy = ((axis[None, :] - centre[:, :1]) / radius[:, :1]) ** 2
            dx = ((axis[None, :] - centre[:, 1:]) / radius[:, 1:]) ** 2
            target["masks"] = (dy[:, :, None] + dx[:, None, :] <= 1).to(torch.uint8)
        targets.append(target)

    if a.mode == "infer":
        model.eval()
        found = []

        def infer(phase):
            t0 = peer_timing.time.perf_counter()
            with torch.no_grad():
                out = model(images)
            phase["forward_postprocess"] = peer_timing.time.perf_counter() - t0
            found[:] = [len(o["boxes"]) for o in out]

        r = time_loop(a.warmup, a.iters, infer)
        r["check"] = {"detections": found, "params": params}
        emit(a.impl, "infer", a.batch, "image", float(a.batch), a.threads, a.warmup, r,
             model=a.model, height=a.size, width=a.size)
        return

    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
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
        if a.clip_norm > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), a.clip_norm)
        opt.step()
        phase["optimizer"] = peer_timing.time.perf_counter() - t0
        losses["total"] = float(total)
        losses["terms"] = {k: float(v) for k, v in l.items()}

    r = time_loop(a.warmup, a.iters, step)
    if not all(math.isfinite(v) for v in losses["terms"].values()):
        raise SystemExit(f"peer_retinanet.py: a loss is not finite: {losses['terms']}")
    r["check"] = {"total_loss": losses["total"], "losses": losses["terms"], "params": params}
    emit(a.impl, "train", a.batch, "image", float(a.batch), a.threads, a.warmup, r,
         model=a.model, height=a.size, width=a.size)

if __name__ == "__main__":
    main()
