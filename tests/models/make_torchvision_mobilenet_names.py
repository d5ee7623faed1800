#!/usr/bin/python3
"""Writes tests/fixtures/torchvision_mobilenet_v2.txt for tests/detect/ssd_model_test.cc:

- one "name shape" line per state_dict entry of torchvision's mobilenet_v2 (num_classes=1000,
  width_mult=1.0), in state_dict order. The shape is comma-separated ("32,3,3,3"; "scalar" for
  a 0-d tensor such as num_batches_tracked). The test compares Orchard's named_parameters +
  named_buffers with them, so torchvision state dicts import by name;
- "# width_mult W parameters N" lines: the number of trainable parameters at widths 1.0, 0.5,
  0.35 and 1.4 (torchvision keeps the last layer at 1280 channels below 1.0);
- a "# deterministic_logits v0 ... v9" line: the eval-mode logits of mobilenet_v2(num_classes=10)
  whose state_dict entry number j (in state_dict order) holds, with
  base = sin(0.731 * arange(numel) + j) (float64, reshaped to the entry's shape):
    running_var 1 + 0.5 base^2, running_mean 0.1 base, 1-d weight (BN gamma) 1 + 0.1 base,
    bias 0.1 base, other weights base * sqrt(3 / fan_in) (fan_in = numel / shape[0]),
  for the input sin(0.013 * arange(3 * 64 * 64)) shaped [1, 3, 64, 64]. The C++ test fills
  Orchard's MobileNetV2 the same way and must reproduce them: a forward-pass check against
  torchvision without a weight file.
Regenerate with
  /usr/bin/python3 tests/models/make_torchvision_mobilenet_names.py
(Debian python3-torchvision; no weights are downloaded: weights=None)."""
import math
import os

import torch
import torchvision

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "fixtures")


def deterministic_fill(model):
    for j, (name, t) in enumerate(model.state_dict().items()):
        if t.dim() == 0:
            continue  # num_batches_tracked
        base = torch.sin(torch.arange(t.numel(), dtype=torch.float64) * 0.731 + j).reshape(t.shape)
        if name.endswith("running_var"):
            v = 1 + 0.5 * base * base
        elif name.endswith("running_mean"):
            v = 0.1 * base
        elif t.dim() == 1 and name.endswith("weight"):
            v = 1 + 0.1 * base
        elif name.endswith("bias"):
            v = 0.1 * base
        else:
            v = base * math.sqrt(3.0 / (t.numel() // t.shape[0]))
        t.copy_(v.to(t.dtype))


model = torchvision.models.mobilenet_v2(weights=None, num_classes=1000)
path = os.path.join(OUT, "torchvision_mobilenet_v2.txt")
with open(path, "w") as f:
    f.write("# torchvision %s mobilenet_v2 state_dict: name shape "
            "(tests/models/make_torchvision_mobilenet_names.py)\n" % torchvision.__version__)
    for name, t in model.state_dict().items():
        f.write("%s %s\n" % (name, ",".join(str(d) for d in t.shape) or "scalar"))
    for width in (1.0, 0.5, 0.35, 1.4):
        m = torchvision.models.mobilenet_v2(weights=None, num_classes=1000, width_mult=width)
        f.write("# width_mult %g parameters %d\n" % (width, sum(p.numel() for p in m.parameters())))
    with torch.no_grad():
        m = torchvision.models.mobilenet_v2(weights=None, num_classes=10).eval()
        deterministic_fill(m)
        x = torch.sin(torch.arange(3 * 64 * 64, dtype=torch.float64) * 0.013).reshape(1, 3, 64, 64).float()
        logits = m(x)[0]
    f.write("# deterministic_logits %s\n" % " ".join("%.7g" % v for v in logits.tolist()))
print(path)
