"""Writes a torchvision classifier's state dict as users have it (torch.save of state_dict(), an
OrderedDict in the zip format) with random weights and batch-norm statistics, a fixed input and
torchvision's eval-mode logits for it: the reference of `orchard import-weights` (issue 8).

  /usr/bin/python3 make_torchvision_state_dict.py ARCH OUT_DIR [SIZE]

OUT_DIR/state_dict.pt, OUT_DIR/input.f32 ([2, 3, SIZE, SIZE] float32, little-endian, torchvision's
normalised input), OUT_DIR/logits.f32 ([2, 10]).
"""
import os
import sys

import torch
import torchvision


def main():
    arch, out = sys.argv[1], sys.argv[2]
    size = int(sys.argv[3]) if len(sys.argv) > 3 else 64
    torch.manual_seed(0)
    if arch == "inception_v3":
        # The auxiliary classifier is in torchvision's state dicts; Orchard leaves it out.
        model = torchvision.models.inception_v3(weights=None, num_classes=10, aux_logits=True,
                                                transform_input=False, init_weights=True)
    else:
        model = getattr(torchvision.models, arch)(weights=None, num_classes=10)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.uniform_(-0.2, 0.2)
                m.running_var.uniform_(0.5, 1.5)
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.2, 0.2)
                m.num_batches_tracked.fill_(7)
    model.eval()
    os.makedirs(out, exist_ok=True)
    torch.save(model.state_dict(), os.path.join(out, "state_dict.pt"))
    x = torch.randn(2, 3, size, size)
    with torch.no_grad():
        logits = model(x)
    x.numpy().astype("<f4").tofile(os.path.join(out, "input.f32"))
    logits.numpy().astype("<f4").tofile(os.path.join(out, "logits.f32"))


if __name__ == "__main__":
    main()
