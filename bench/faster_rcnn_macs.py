#!/usr/bin/python3
"""Multiply-accumulates of one forward pass of Orchard's faster_rcnn_resnet50 (analytic: TF-Slim resnet_v1
layout, the sample config's 12 anchors, 64 / 300 crops through block4) and of torchvision's
fasterrcnn_resnet50_fpn (forward hooks on Conv2d / Linear), at S x S, batch 1, train and inference
(bench/README.md, issue 34). Run with /usr/bin/python3: faster_rcnn_macs.py [S] [faster_rcnn|mask_rcnn].

mask_rcnn: the OD API's mask_rcnn_resnet50_atrous_coco (output stride 8: block2 and block3 atrous at
S/8; the mask head on block4's 7x7x2048 features of each box, resized to 33x33, three 3x3 convs of
256 and a 3x3 conv to the 90 classes; training: on the 64 sampled proposals; inference: block4 once
more and the mask head on each of the 300 detections) against torchvision's maskrcnn_resnet50_fpn
(its mask branch on 14x14 RoIAlign features of each detection, box_detections_per_img 300). The
Orchard rows count the OD API's work; a line says what Orchard's mask head runs instead."""
import math, sys
import torch, torchvision

S = int(sys.argv[1]) if len(sys.argv) > 1 else 600
MODEL = sys.argv[2] if len(sys.argv) > 2 else "faster_rcnn"
MASK = MODEL == "mask_rcnn"

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

def orchard(props, train):
    parts = {}
    h, w, parts["conv1"] = conv(S, S, 7, 3, 64, 2)
    h, w = math.ceil(h / 2), math.ceil(w / 2)
    h, w, m1 = slim_stage(h, w, 64, 256, 64, 3, 2)
    h, w, m2 = slim_stage(h, w, 256, 512, 128, 4, 1 if MASK else 2)  # atrous: no stride, same work
    h, w, m3 = slim_stage(h, w, 512, 1024, 256, 6, 1)
    parts["resnet blocks 1-3"] = m1 + m2 + m3
    a = 12
    parts["rpn (3x3 1024->512 + 1x1)"] = conv(h, w, 3, 1024, 512)[2] + conv(h, w, 1, 512, 6 * a)[2]
    _, _, b4 = slim_stage(7, 7, 1024, 2048, 512, 3, 1)
    parts[f"block4 x {props} crops"] = props * b4
    parts["box predictor fc"] = props * 2048 * (90 * 4 + 91)
    if MASK:
        rest = 2 * conv(33, 33, 3, 256, 256)[2] + conv(33, 33, 3, 256, 90)[2]
        head = conv(33, 33, 3, 2048, 256)[2] + rest
        # Orchard: the first convolution's taps on the 7x7 map before the resize; training: the
        # positive proposals only (at most 16 of the 64).
        fast = conv(7, 7, 3, 2048, 256)[2] + rest
        if not train:
            parts[f"block4 x {props} detections"] = props * b4
        parts[f"mask head x {props} ({head / 1e9:.2f} each)"] = props * head
        n = 16 if train else props
        print(f"  (Orchard's mask head runs {'at most ' if train else ''}{n} x {fast / 1e9:.2f} = "
              f"{n * fast / 1e9:.1f} GMACs of these {props * head / 1e9:.1f})")
    return parts, (h, w)

def torchvision_macs(train):
    model = getattr(torchvision.models.detection, PEER)(
        weights=None, weights_backbone=None, num_classes=91, min_size=S, max_size=S, size_divisible=1,
        box_score_thresh=0.0, box_detections_per_img=300)
    groups = {}
    def hook(name):
        def f(mod, inp, out):
            if isinstance(mod, torch.nn.ConvTranspose2d):
                m = inp[0].numel() * mod.out_channels * mod.kernel_size[0] * mod.kernel_size[1]
            elif isinstance(mod, torch.nn.Conv2d):
                m = out.numel() * (mod.in_channels // mod.groups) * mod.kernel_size[0] * mod.kernel_size[1]
            else:
                m = out.numel() * mod.in_features
            groups[name] = groups.get(name, 0) + m
        return f
    for n, mod in model.named_modules():
        if isinstance(mod, (torch.nn.Conv2d, torch.nn.Linear, torch.nn.ConvTranspose2d)):
            key = ("resnet body" if n.startswith("backbone.body") else "fpn" if n.startswith("backbone.fpn")
                   else "rpn head" if n.startswith("rpn") else "box head (TwoMLPHead)" if "box_head" in n
                   else "box predictor" if "box_predictor" in n else "mask head" if "mask_head" in n
                   else "mask predictor" if "mask_predictor" in n else n)
            mod.register_forward_hook(hook(key))
    torch.manual_seed(0)
    images = [torch.rand(3, S, S)]
    with torch.no_grad():
        if train:
            model.train()
            b = torch.tensor([[100., 100., 300., 300.]])
            target = {"boxes": b, "labels": torch.tensor([1])}
            if MASK:
                target["masks"] = torch.zeros(1, S, S, dtype=torch.uint8)
                target["masks"][0, 100:300, 100:300] = 1
            model(images, [target])
        else:
            model.eval()
            model(images)
    return groups, sum(p.numel() for p in model.parameters())

PEER = "maskrcnn_resnet50_fpn" if MASK else "fasterrcnn_resnet50_fpn"
NAME = "mask_rcnn_resnet50_atrous" if MASK else "faster_rcnn_resnet50"
for train, props in ((True, 64), (False, 300)):
    parts, fm = orchard(props, train)
    print(f"== {'train' if train else 'infer'} {S}x{S}: Orchard {NAME} (feature map {fm}), GMACs forward")
    for k, v in parts.items(): print(f"  {k:32s} {v / 1e9:7.2f}")
    print(f"  {'total':32s} {sum(parts.values()) / 1e9:7.2f}")
    g, params = torchvision_macs(train)
    print(f"   torchvision {PEER} ({params} parameters), GMACs forward")
    for k, v in g.items(): print(f"  {k:32s} {v / 1e9:7.2f}")
    print(f"  {'total':32s} {sum(g.values()) / 1e9:7.2f}")
