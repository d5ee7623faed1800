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
    p.add_argument("--device", default="cpu", help="cpu or cuda")
    p.add_argument("--dtype", default="fp32", choices=["fp32", "bf16", "fp16"],
                   help="autocast dtype of the forward pass (fp16: with dynamic loss scaling)")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    device = torch.device(a.device)
    model = build(a.model, a.num_classes, a.width).to(device)
    if a.channels_last:
        model = model.to(memory_format=torch.channels_last)
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    decay = [p for n, p in model.named_parameters() if "bn" not in n and "downsample.1" not in n]
    # The batch lives on the device, as Orchard's --use_synthetic_data batch does.
    x = torch.empty(a.batch_size, 3, a.image_size, a.image_size, device=device).normal_(127, 60)
    if a.channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    y = torch.randint(a.num_classes, (a.batch_size,), device=device)
    ce = nn.CrossEntropyLoss(reduction="sum")
    amp = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(a.dtype)
    scaler = torch.amp.GradScaler(device.type, init_scale=128) if a.dtype == "fp16" else None

    def step():
        # Orchard runs the forward pass under autocast; the loss and L2 stay in fp32.
        with torch.autocast(device.type, dtype=amp, enabled=amp is not None):
            out = model(x)
        loss = ce(out.float(), y) / a.batch_size + 1e-4 * sum((p * p).sum() for p in decay)
        opt.zero_grad()
        if scaler:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        else:
            loss.backward()
            opt.step()
        return loss

    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    for _ in range(a.warmup):
        step()
    sync()
    t = time.perf_counter()
    for _ in range(a.steps):
        loss = step()
    loss.item()
    sync()
    dt = time.perf_counter() - t
    import resource
    print(json.dumps({"impl": "pytorch", "model": a.model, "batch_size": a.batch_size, "image_size": a.image_size,
                      "threads": a.threads, "device": a.device, "dtype": a.dtype, "channels_last": a.channels_last,
                      "torch": torch.__version__, "images_per_second": a.steps * a.batch_size / dt,
                      "max_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))


if __name__ == "__main__":
    main()
