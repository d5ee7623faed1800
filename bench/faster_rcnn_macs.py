#!/usr/bin/python3
"""Multiply-accumulates of one forward pass of Orchard's faster_rcnn_resnet50 (analytic: TF-Slim resnet_v1
layout, the sample config's 12 anchors, 64 / 300 crops through block4) and of torchvision's
fasterrcnn_resnet50_fpn (forward hooks on Conv2d / Linear), at S x S, batch 1, train and inference
(bench/README.md, issue 34). Run with /usr/bin/python3: faster_rcnn_macs.py [S]."""
import math, sys
import torch, torchvision

S = int(sys.argv[1]) if len(sys.argv) > 1 else 600

def conv(h, w, k, cin, cout, stride=1):
    ho, wo = math.ceil(h / stride), math.ceil(w / stride)
    return ho, wo, ho * wo * k * k * cin * cout

def slim_stage(h, w, cin, depth, bottleneck, units, stride):
    """resnet_v1 bottleneck units, the stride in the last unit's 3x3 (TF-Slim)."""
    macs = 0
    for u in range(units):
        s = stride if u == units - 1 else 1
        if cin != depth:
            macs += conv(h, w, 1, cin, depth, s)[2]
        macs += conv(h, w, 1, cin, bottleneck)[2]
        ho, wo, m = conv(h, w, 3, bottleneck, bottleneck, s)
        macs += m + conv(ho, wo, 1, bottleneck, depth)[2]
        h, w, cin = ho, wo, depth
    return h, w, macs

def orchard(props):
    parts = {}
    h, w, parts["conv1"] = conv(S, S, 7, 3, 64, 2)
    h, w = math.ceil(h / 2), math.ceil(w / 2)
    h, w, m1 = slim_stage(h, w, 64, 256, 64, 3, 2)
    h, w, m2 = slim_stage(h, w, 256, 512, 128, 4, 2)
    h, w, m3 = slim_stage(h, w, 512, 1024, 256, 6, 1)
    parts["resnet blocks 1-3"] = m1 + m2 + m3
    a = 12
    parts["rpn (3x3 1024->512 + 1x1)"] = conv(h, w, 3, 1024, 512)[2] + conv(h, w, 1, 512, 6 * a)[2]
    _, _, b4 = slim_stage(7, 7, 1024, 2048, 512, 3, 1)
    parts[f"block4 x {props} crops"] = props * b4
    parts["box predictor fc"] = props * 2048 * (90 * 4 + 91)
    return parts, (h, w)

def torchvision_macs(train):
    model = torchvision.models.detection.fasterrcnn_resnet50_fpn(
        weights=None, weights_backbone=None, num_classes=91, min_size=S, max_size=S, size_divisible=1,
        box_score_thresh=0.0, box_detections_per_img=300)
    groups = {}
    def hook(name):
        def f(mod, inp, out):
            if isinstance(mod, torch.nn.Conv2d):
                m = out.numel() * (mod.in_channels // mod.groups) * mod.kernel_size[0] * mod.kernel_size[1]
            else:
                m = out.numel() * mod.in_features
            groups[name] = groups.get(name, 0) + m
        return f
    for n, mod in model.named_modules():
        if isinstance(mod, (torch.nn.Conv2d, torch.nn.Linear)):
            key = ("resnet body" if n.startswith("backbone.body") else "fpn" if n.startswith("backbone.fpn")
                   else "rpn head" if n.startswith("rpn") else "box head (TwoMLPHead)" if "box_head" in n
                   else "box predictor" if "box_predictor" in n else n)
            mod.register_forward_hook(hook(key))
    torch.manual_seed(0)
    images = [torch.rand(3, S, S)]
    with torch.no_grad():
        if train:
            model.train()
            b = torch.tensor([[100., 100., 300., 300.]])
            model(images, [{"boxes": b, "labels": torch.tensor([1])}])
        else:
            model.eval()
            model(images)
    return groups, sum(p.numel() for p in model.parameters())

for train, props in ((True, 64), (False, 300)):
    parts, fm = orchard(props)
    print(f"== {'train' if train else 'infer'} {S}x{S}: Orchard faster_rcnn_resnet50 (feature map {fm}), GMACs forward")
    for k, v in parts.items(): print(f"  {k:32s} {v / 1e9:7.2f}")
    print(f"  {'total':32s} {sum(parts.values()) / 1e9:7.2f}")
    g, params = torchvision_macs(train)
    print(f"   torchvision fasterrcnn_resnet50_fpn ({params} parameters), GMACs forward")
    for k, v in g.items(): print(f"  {k:32s} {v / 1e9:7.2f}")
    print(f"  {'total':32s} {sum(g.values()) / 1e9:7.2f}")
