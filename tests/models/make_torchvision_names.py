#!/usr/bin/python3
"""Writes tests/fixtures/torchvision_resnet{18,50}.txt: one "name shape" line per state_dict
entry of torchvision's resnet18 / resnet50 (num_classes=1000), in state_dict order. The
shape is comma-separated ("64,3,7,7"; "scalar" for a 0-d tensor such as num_batches_tracked).

The C++ test (tests/models/resnet_test.cc) compares Orchard's named_parameters +
named_buffers with these files, so torchvision state dicts import by name. Regenerate with
  /usr/bin/python3 tests/models/make_torchvision_names.py
(Debian python3-torchvision; no weights are downloaded: weights=None).

Also writes tests/fixtures/torchvision_resnet_configs.txt: "arch block layers parameters"
for resnet18/34/50/101/152: the block type, the blocks per stage and the number of trainable
parameters (num_classes=1000)."""
import os

import torchvision

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "fixtures")

for arch in ("resnet18", "resnet50"):
    model = getattr(torchvision.models, arch)(weights=None, num_classes=1000)
    path = os.path.join(OUT, "torchvision_%s.txt" % arch)
    with open(path, "w") as f:
        f.write("# torchvision %s %s state_dict: name shape (tests/models/make_torchvision_names.py)\n"
                % (torchvision.__version__, arch))
        for name, t in model.state_dict().items():
            f.write("%s %s\n" % (name, ",".join(str(d) for d in t.shape) or "scalar"))
    print(path)

path = os.path.join(OUT, "torchvision_resnet_configs.txt")
with open(path, "w") as f:
    f.write("# torchvision %s: arch block layers trainable_parameters (tests/models/make_torchvision_names.py)\n"
            % torchvision.__version__)
    for arch in ("resnet18", "resnet34", "resnet50", "resnet101", "resnet152"):
        model = getattr(torchvision.models, arch)(weights=None, num_classes=1000)
        block = type(model.layer1[0]).__name__.lower().replace("block", "")
        layers = ",".join(str(len(getattr(model, "layer%d" % i))) for i in range(1, 5))
        f.write("%s %s %s %d\n" % (arch, block, layers, sum(p.numel() for p in model.parameters())))
print(path)
