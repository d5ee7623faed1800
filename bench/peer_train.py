#!/usr/bin/python3
"""PyTorch-Python peer for bench/train.sh: the same ResNet, batch, threads and loss as
`orchard classify train --use_synthetic_data`, eager mode. Prints one JSON line."""
import argparse, json, time

import torch
import torch.nn as nn
import torchvision


def build(model, num_classes, width):
    small = model.endswith("_small")
    depth = model.replace("_small", "")
    if width and width != 64:
        # torchvision's ResNet has a fixed base width of 64: build it narrow by hand.
        from torchvision.models.resnet import BasicBlock, Bottleneck, ResNet
        layers = {"resnet18": [2, 2, 2, 2], "resnet34": [3, 4, 6, 3], "resnet50": [3, 4, 6, 3]}[depth]
        block = BasicBlock if depth in ("resnet18", "resnet34") else Bottleneck

        class Narrow(ResNet):
            def __init__(self):
                nn.Module.__init__(self)
                self._norm_layer = nn.BatchNorm2d
                self.inplanes, self.dilation, self.groups, self.base_width = width, 1, 1, 64
                self.conv1 = nn.Conv2d(3, width, 7, 2, 3, bias=False)
                self.bn1 = nn.BatchNorm2d(width)
                self.relu = nn.ReLU(inplace=True)
                self.maxpool = nn.MaxPool2d(3, 2, 1)
                self.layer1 = self._make_layer(block, width, layers[0])
                self.layer2 = self._make_layer(block, width * 2, layers[1], stride=2)
                self.layer3 = self._make_layer(block, width * 4, layers[2], stride=2)
                self.layer4 = self._make_layer(block, width * 8, layers[3], stride=2)
                self.avgpool = nn.AdaptiveAvgPool2d(1)
                self.fc = nn.Linear(width * 8 * block.expansion, num_classes)
        m = Narrow()
    else:
        m = getattr(torchvision.models, depth)(num_classes=num_classes)
        width = 64
    if small:
        m.conv1 = nn.Conv2d(3, width, 3, 1, 1, bias=False)
        m.maxpool = nn.Identity()
    return m


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="resnet50")
    p.add_argument("--width", type=int, default=0)
    p.add_argument("--batch_size", type=int, default=8)
    p.add_argument("--image_size", type=int, default=224)
    p.add_argument("--num_classes", type=int, default=1000)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--channels_last", action="store_true")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    model = build(a.model, a.num_classes, a.width)
    if a.channels_last:
        model = model.to(memory_format=torch.channels_last)
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    decay = [p for n, p in model.named_parameters() if "bn" not in n and "downsample.1" not in n]
    x = torch.empty(a.batch_size, 3, a.image_size, a.image_size).normal_(127, 60)
    if a.channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    y = torch.randint(a.num_classes, (a.batch_size,))
    ce = nn.CrossEntropyLoss(reduction="sum")

    def step():
        out = model(x)
        loss = ce(out, y) / a.batch_size + 1e-4 * sum((p * p).sum() for p in decay)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss

    for _ in range(a.warmup):
        step()
    t = time.perf_counter()
    for _ in range(a.steps):
        loss = step()
    loss.item()
    dt = time.perf_counter() - t
    import resource
    print(json.dumps({"impl": "pytorch", "model": a.model, "batch_size": a.batch_size, "image_size": a.image_size,
                      "threads": a.threads, "images_per_second": a.steps * a.batch_size / dt,
                      "max_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))


if __name__ == "__main__":
    main()
