#!/usr/bin/python3
"""Detection benchmarks, the PyTorch-Python peer of bench/detect_bench.cc (issue 6).

Run with Debian's /usr/bin/python3 (python3-torch 1.13, python3-torchvision 0.14). Reads the
inputs detect_bench --make_inputs wrote (meta.json + raw *.bin) and times the same work:

  nms          torchvision.ops.nms (boxes reordered to x1, y1, x2, y2 outside the timing)
  postprocess  threshold + torchvision.ops.batched_nms + 100 per class + clip + top 100
  loss         the TF OD API SSD loss written in PyTorch: IoU, argmax matcher (force match),
               box encoding, smooth L1 + sigmoid cross entropy (F.binary_cross_entropy_with_logits
               on one-hot targets), hard example mining (torchvision NMS over the decoded boxes
               by classification loss, IoU 0.99, 3000, 3 negatives per positive, at least 3)
  model        torchvision mobilenet_v2().features + the SSD extras and 1x1 heads, forward +
               backward of the sum of the outputs squared
  train        model + loss + L2 (4e-5 / 2 * sum of conv kernels squared) + RMSprop step
  eval         forward (eval mode, no grad) + the postprocess above per image

Prints one JSON line per measurement with the same fields as detect_bench.
"""
import argparse
import json
import math
import os
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision
from torchvision.ops import batched_nms, nms

import peer_timing
from peer_timing import emit, time_loop

NUM_CLASSES = 90
ANCHORS_PER_LOCATION = (3, 6, 6, 6, 6, 6)
EXTRA_DEPTHS = (512, 256, 256, 128)
SCALES = (10.0, 10.0, 5.0, 5.0)  # faster_rcnn_box_coder y, x, height, width


# ---- inputs

class Inputs:
    def __init__(self, directory):
        self.dir = directory
        with open(os.path.join(directory, "meta.json")) as f:
            self.meta = json.load(f)["tensors"]

    def read(self, name):
        m = self.meta[name]
        dtype = torch.int64 if m["dtype"] == "int64" else torch.float32
        n = math.prod(m["shape"])
        t = torch.from_file(os.path.join(self.dir, name + ".bin"), shared=False, size=n, dtype=dtype)
        return t.reshape(m["shape"]).clone()


# ---- box ops (ymin, xmin, ymax, xmax), as the TF OD API

def to_xyxy(boxes):
    return boxes[..., [1, 0, 3, 2]]


def decode(codes, anchors):
    ha, wa = anchors[:, 2] - anchors[:, 0], anchors[:, 3] - anchors[:, 1]
    yca, xca = anchors[:, 0] + ha / 2, anchors[:, 1] + wa / 2
    ty, tx, th, tw = codes.unbind(-1)
    h, w = torch.exp(th / SCALES[2]) * ha, torch.exp(tw / SCALES[3]) * wa
    yc, xc = ty / SCALES[0] * ha + yca, tx / SCALES[1] * wa + xca
    return torch.stack([yc - h / 2, xc - w / 2, yc + h / 2, xc + w / 2], -1)


def encode(boxes, anchors):
    eps = 1e-8
    ha, wa = anchors[:, 2] - anchors[:, 0], anchors[:, 3] - anchors[:, 1]
    yca, xca = anchors[:, 0] + ha / 2, anchors[:, 1] + wa / 2
    h, w = boxes[:, 2] - boxes[:, 0], boxes[:, 3] - boxes[:, 1]
    yc, xc = boxes[:, 0] + h / 2, boxes[:, 1] + w / 2
    ha, wa, h, w = ha + eps, wa + eps, h + eps, w + eps
    return torch.stack([(yc - yca) / ha * SCALES[0], (xc - xca) / wa * SCALES[1],
                        torch.log(h / ha) * SCALES[2], torch.log(w / wa) * SCALES[3]], 1)


def iou(a, b):
    ih = (torch.minimum(a[:, None, 2], b[None, :, 2]) - torch.maximum(a[:, None, 0], b[None, :, 0])).clamp(min=0)
    iw = (torch.minimum(a[:, None, 3], b[None, :, 3]) - torch.maximum(a[:, None, 1], b[None, :, 1])).clamp(min=0)
    inter = ih * iw
    area_a = (a[:, 2] - a[:, 0]) * (a[:, 3] - a[:, 1])
    area_b = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
    union = area_a[:, None] + area_b[None, :] - inter
    return torch.where(inter == 0, torch.zeros_like(inter), inter / union)


def argmax_match(sim, threshold=0.5):
    """ArgMaxMatcher(0.5, 0.5, negatives_lower_than_unmatched, force_match_for_each_row)."""
    best, match = sim.max(0)
    match = match.masked_fill(best < threshold, -1)
    best_col = sim.argmax(1)
    claims = best_col[:, None] == torch.arange(sim.shape[1])[None, :]
    return torch.where(claims.any(0), claims.int().argmax(0), match)


def postprocess_image(boxes, scores, score_threshold=1e-8, iou_threshold=0.6, per_class=100, total=100):
    """multiclass_non_max_suppression: boxes [A, 4] (ymin, xmin, ymax, xmax), scores [A, C]."""
    anchor, cls = (scores > score_threshold).nonzero(as_tuple=True)
    s = scores[anchor, cls]
    keep = batched_nms(to_xyxy(boxes)[anchor], s, cls, iou_threshold)  # by descending score
    # At most per_class per class: rank within the class (keep is score-ordered; stable sort).
    kc = cls[keep]
    order = torch.sort(kc, stable=True).indices
    counts = torch.bincount(kc, minlength=scores.shape[1])
    starts = torch.cumsum(counts, 0) - counts
    rank = torch.empty_like(order)
    rank[order] = torch.arange(order.numel()) - starts[kc[order]]
    keep = keep[rank < per_class]
    b = boxes[anchor[keep]].clamp(0, 1)
    nonempty = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1]) > 0
    keep, b = keep[nonempty][:total], b[nonempty][:total]
    return b, s[keep], cls[keep] + 1


def ssd_loss(outputs, anchors, gt_boxes, gt_classes):
    """The SSD loss of ssd_mobilenet_v2_coco.config. outputs [B, A, 4 + C + 1]."""
    codes, logits = outputs[..., :4], outputs[..., 4:]
    batch, num_anchors = codes.shape[:2]
    cls_t, reg_t, matches = [], [], []
    for i in range(batch):
        m = argmax_match(iou(gt_boxes[i], anchors))
        row = m.clamp(min=0)
        matched = m >= 0
        reg_t.append(torch.where(matched[:, None], encode(gt_boxes[i][row], anchors), torch.zeros(())))
        cls_t.append(torch.where(matched, gt_classes[i][row], torch.zeros((), dtype=torch.long)))
        matches.append(m)
    cls_t, reg_t, matches = torch.stack(cls_t), torch.stack(reg_t), torch.stack(matches)
    reg_w = (matches >= 0).float()
    cls_w = (matches != -2).float()
    loc = (F.smooth_l1_loss(codes, reg_t, reduction="none", beta=1.0) * reg_w[..., None]).sum(2)
    one_hot = F.one_hot(cls_t, logits.shape[2]).float()
    cls = F.binary_cross_entropy_with_logits(logits, one_hot, reduction="none").sum(2) * cls_w
    # Hard example mining, per image.
    with torch.no_grad():
        decoded = to_xyxy(decode(codes.detach(), anchors))
        rank = cls.detach()
    index = []
    for i in range(batch):
        sel = nms(decoded[i], rank[i], 0.99)[:3000]
        m = matches[i][sel]
        positives = m >= 0
        max_neg = max(3, 3 * int(positives.sum()))
        negatives_so_far = torch.cumsum(m == -1, 0)
        index.append(sel[positives | (negatives_so_far <= max_neg)] + i * num_anchors)
    index = torch.cat(index)
    normalizer = reg_w.sum().clamp(min=1)
    return loc.reshape(-1)[index].sum() / normalizer, cls.reshape(-1)[index].sum() / normalizer


# ---- model: the same layers and shapes as orchard::detect::SsdModel

def conv_tf_same(conv, x):
    """TF 'SAME' padding (the odd pixel at the bottom/right), as Orchard's conv2d_tf_same."""
    pads = []
    for d in (0, 1):
        size, s, k = x.shape[2 + d], conv.stride[d], conv.kernel_size[d]
        total = max((-(-size // s) - 1) * s + k - size, 0)
        pads.append((total // 2, total - total // 2))
    if pads[0][0] == pads[0][1] and pads[1][0] == pads[1][1]:
        return F.conv2d(x, conv.weight, conv.bias, conv.stride, (pads[0][0], pads[1][0]), conv.dilation, conv.groups)
    return F.conv2d(F.pad(x, (pads[1][0], pads[1][1], pads[0][0], pads[0][1])), conv.weight, conv.bias,
                    conv.stride, 0, conv.dilation, conv.groups)


class ConvBnRelu6(nn.Module):
    def __init__(self, cin, cout, k, stride=1):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, k, stride, bias=False)
        self.bn = nn.BatchNorm2d(cout, eps=0.001, momentum=0.0003)

    def forward(self, x):
        return F.relu6(self.bn(conv_tf_same(self.conv, x)))


class SsdModel(nn.Module):
    def __init__(self, num_classes=NUM_CLASSES):
        super().__init__()
        self.num_classes = num_classes
        self.features = torchvision.models.mobilenet_v2().features
        for m in self.features.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.eps, m.momentum = 0.001, 0.0003
        channels = [self.features[14].conv[0][0].out_channels, self.features[18][0].out_channels]  # 576, 1280
        self.extras = nn.ModuleList()
        for d in EXTRA_DEPTHS:
            self.extras.append(nn.Sequential(ConvBnRelu6(channels[-1], d // 2, 1), ConvBnRelu6(d // 2, d, 3, 2)))
            channels.append(d)
        self.box_heads = nn.ModuleList(nn.Conv2d(c, a * 4, 1) for c, a in zip(channels, ANCHORS_PER_LOCATION))
        self.class_heads = nn.ModuleList(
            nn.Conv2d(c, a * (num_classes + 1), 1) for c, a in zip(channels, ANCHORS_PER_LOCATION))
        for m in list(self.extras.modules()) + list(self.box_heads) + list(self.class_heads):
            if isinstance(m, nn.Conv2d):
                nn.init.trunc_normal_(m.weight, std=0.03, a=-0.06, b=0.06)
                if m.bias is not None:
                    nn.init.zeros_(m.bias)

    def forward(self, x):
        f = self.features
        for i in range(14):
            x = f[i](x)
        x = f[14].conv[0](x)  # layer_15/expansion_output
        maps = [x]
        for layer in list(f[14].conv)[1:]:
            x = layer(x)
        for i in range(15, 19):
            x = f[i](x)
        maps.append(x)  # layer_19
        for extra in self.extras:
            x = extra(x)
            maps.append(x)
        batch = x.shape[0]
        boxes, classes = [], []
        for m, bh, ch in zip(maps, self.box_heads, self.class_heads):
            boxes.append(bh(m).permute(0, 2, 3, 1).reshape(batch, -1, 4))
            classes.append(ch(m).permute(0, 2, 3, 1).reshape(batch, -1, self.num_classes + 1))
        return torch.cat([torch.cat(boxes, 1), torch.cat(classes, 1)], 2)


def gt_lists(inputs, batch):
    counts = inputs.read("loss_counts")[:batch]
    targets = inputs.read("loss_targets")[:batch]
    boxes, classes = [], []
    for i in range(batch):
        rows = targets[i, 4:4 + 5 * int(counts[i])].reshape(-1, 5)
        boxes.append(rows[:, :4].contiguous())
        classes.append(rows[:, 4].round().long())
    return boxes, classes


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--inputs", required=True)
    p.add_argument("--impl", default="pytorch", help="name in the JSON lines (pytorch, pytorch_tuned)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--what", default="nms,postprocess,loss,model,train,eval")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--model_batches", default="8")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--nms_iters", type=int, default=200)
    p.add_argument("--post_iters", type=int, default=40)
    p.add_argument("--loss_iters", type=int, default=20)
    p.add_argument("--model_iters", type=int, default=6)
    p.add_argument("--eval_iters", type=int, default=5)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--budget_s", type=float, default=peer_timing.budget_s, help="seconds per measurement (at least 3 iterations)")
    a = p.parse_args()
    peer_timing.budget_s = a.budget_s
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    inputs = Inputs(a.inputs)
    anchors = inputs.read("anchors")
    # Warm-up iterations, as detect_bench: many for the fast calls, few for the slow ones.
    small_warmup, loss_warmup, eval_warmup = 10 * a.warmup, a.warmup + 1, 1
    impl, T = a.impl, a.threads

    for what in a.what.split(","):
        if what == "nms":
            for n in (1917, 20000):
                boxes = to_xyxy(inputs.read(f"nms_{n}_boxes")).contiguous()
                scores = inputs.read(f"nms_{n}_scores")
                iters = max(a.nms_iters // 10, 5) if n > 5000 else a.nms_iters
                nms_warmup = a.warmup if n > 5000 else small_warmup
                out = {}
                r = time_loop(nms_warmup, iters, lambda ph: out.__setitem__("keep", nms(boxes, scores, 0.6)))
                r["check"] = {"kept": out["keep"].numel(), "index_sum": int(out["keep"].sum())}
                emit(impl, "nms", n, "call", 1, T, nms_warmup, r)
        elif what == "postprocess":
            boxes, scores = inputs.read("post_boxes"), inputs.read("post_scores")
            out = {}
            r = time_loop(loss_warmup, a.post_iters, lambda ph: out.__setitem__("d", postprocess_image(boxes, scores)))
            b, s, c = out["d"]
            r["check"] = {"kept": s.numel(), "score_sum": float(s.sum()), "class_sum": int(c.sum())}
            emit(impl, "postprocess", boxes.shape[0], "image", 1, T, loss_warmup, r)
        elif what == "loss":
            outputs = inputs.read("loss_outputs")[:a.batch].contiguous()
            gt_boxes, gt_classes = gt_lists(inputs, a.batch)
            out = {}

            def body(ph):
                x = outputs.detach().requires_grad_(True)
                t0 = time.perf_counter()
                loc, cls = ssd_loss(x, anchors, gt_boxes, gt_classes)
                ph["forward"] = time.perf_counter() - t0
                t0 = time.perf_counter()
                (loc + cls).backward()
                ph["backward"] = time.perf_counter() - t0
                out["l"] = (loc, cls)

            r = time_loop(loss_warmup, a.loss_iters, body)
            r["check"] = {"localization_loss": float(out["l"][0]), "classification_loss": float(out["l"][1])}
            emit(impl, "loss", a.batch, "batch", 1, T, loss_warmup, r)
        elif what == "model":
            model = SsdModel().train()
            for bs in (int(b) for b in a.model_batches.split(",")):
                images = torch.rand(bs, 3, 300, 300) * 2 - 1
                out = {}

                def body(ph):
                    model.zero_grad(set_to_none=True)
                    t0 = time.perf_counter()
                    y = model(images)
                    loss = y.pow(2).sum()
                    ph["forward"] = time.perf_counter() - t0
                    t0 = time.perf_counter()
                    loss.backward()
                    ph["backward"] = time.perf_counter() - t0
                    out["shape"] = list(y.shape)

                r = time_loop(a.warmup, a.model_iters, body)
                r["check"] = {"output_shape": out["shape"], "params": sum(p.numel() for p in model.parameters())}
                emit(impl, "model", bs, "image", bs, T, a.warmup, r)
        elif what == "train":
            model = SsdModel().train()
            # ssd_mobilenet_v2_coco.config: rms_prop_optimizer, lr 0.004, decay 0.9, momentum 0.9, eps 1.0.
            optimizer = torch.optim.RMSprop(model.parameters(), lr=0.004, alpha=0.9, eps=1.0, momentum=0.9)
            l2_params = [p for p in model.parameters() if p.dim() == 4]
            images = torch.rand(a.batch, 3, 300, 300) * 2 - 1
            gt_boxes, gt_classes = gt_lists(inputs, a.batch)
            out = {}

            def body(ph):
                t0 = time.perf_counter()
                y = model(images)
                ph["forward"] = time.perf_counter() - t0
                t0 = time.perf_counter()
                loc, cls = ssd_loss(y, anchors, gt_boxes, gt_classes)
                total = loc + cls + 4e-5 / 2 * sum(p.pow(2).sum() for p in l2_params)
                ph["loss"] = time.perf_counter() - t0
                t0 = time.perf_counter()
                optimizer.zero_grad(set_to_none=True)
                total.backward()
                ph["backward"] = time.perf_counter() - t0
                t0 = time.perf_counter()
                optimizer.step()
                ph["optimizer"] = time.perf_counter() - t0
                out["total"] = float(total)

            r = time_loop(a.warmup, a.model_iters, body)
            r["check"] = {"total_loss": out["total"]}
            emit(impl, "train", a.batch, "image", a.batch, T, a.warmup, r)
        elif what == "eval":
            model = SsdModel().eval()
            images = torch.rand(a.batch, 3, 300, 300) * 2 - 1
            out = {}

            def body(ph):
                with torch.no_grad():
                    t0 = time.perf_counter()
                    y = model(images)
                    ph["forward"] = time.perf_counter() - t0
                    t0 = time.perf_counter()
                    boxes = decode(y[..., :4], anchors)
                    scores = y[..., 4:].sigmoid()[..., 1:]  # background column dropped
                    out["d"] = [postprocess_image(boxes[i], scores[i]) for i in range(y.shape[0])]
                    ph["postprocess"] = time.perf_counter() - t0

            r = time_loop(eval_warmup, a.eval_iters, body)
            r["check"] = {"kept": sum(d[1].numel() for d in out["d"])}
            emit(impl, "eval", a.batch, "image", a.batch, T, eval_warmup, r)
        else:
            raise SystemExit(f"peer_detect.py: unknown bench {what!r}")


if __name__ == "__main__":
    main()
