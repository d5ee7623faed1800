#!/usr/bin/python3
"""Writes tests/fixtures/torchvision_inception_v3.txt for tests/models/inception_v3_test.cc:

- one "name shape" line per state_dict entry of torchvision's
  inception_v3(aux_logits=True, init_weights=False, num_classes=1000), in state_dict order. The
  shape is comma-separated ("32,3,3,3"; "scalar" for a 0-d tensor such as num_batches_tracked).
  The test compares Orchard's named_parameters + named_buffers with them, so torchvision (and
  its ImageNet) state dicts import by name;
- "# aux_logits A parameters N" lines: the number of trainable parameters with (A = 1) and
  without (A = 0) the auxiliary classifier;
- reference outputs of inception_v3(num_classes=10, aux_logits=True, init_weights=False) whose
  state_dict entry number j (in state_dict order) holds, with
  base = sin(0.731 * ((k * k) mod 65521) + j), k = arange(numel) (int64 square, float64 sin,
  reshaped to the entry's shape):
    running_var 1 + 0.5 base^2, running_mean 0.1 base, 1-d weight (BN gamma) 1 + 0.1 base,
    bias 0.1 base, other weights base * sqrt(6 / fan_in) (fan_in = numel / shape[0]),
  for the input x(n, s) = sin(0.013 * arange(n * 3 * s * s)) shaped [n, 3, s, s]. All computed
  in float64:
    "# eval_logits S T v0 ... v9": eval mode, input x(1, S), transform_input T (0/1);
    "# eval_features S v0 ... v7": the first 8 of the 2048 pooled features (before dropout), eval;
    "# train_logits S v..." and "# train_aux S v...": training mode (batch statistics), dropout
      0, input x(2, S), the [2, 10] logits and auxiliary logits, row-major.
  The C++ test fills Orchard's InceptionV3 the same way and must reproduce them: a forward-pass
  check against torchvision without a weight file.

  This differs from make_torchvision_mobilenet_names.py's scheme (base = sin(0.731 k + j),
  weights base * sqrt(3 / fan_in)) on purpose. sin(a k + j) over the flattened index is a sum
  of two exponentials in k, so every weight matrix it fills has rank <= 2; through Inception's
  ~95 convolutions the input is lost (the logits for x and for a zero input agree to 1e-9) and
  the logits would test only the biases. The squared index makes the matrices generic and the
  larger gain keeps the signal alive: flipping the input moves the logits by ~0.8.
Regenerate with
  /usr/bin/python3 tests/models/make_torchvision_inception_names.py
(Debian python3-torchvision 0.14; no weights are downloaded: weights=None). Takes ~30 s."""
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
        k = torch.arange(t.numel(), dtype=torch.int64)
        base = torch.sin(((k * k) % 65521).double() * 0.731 + j).reshape(t.shape)
        if name.endswith("running_var"):
            v = 1 + 0.5 * base * base
        elif name.endswith("running_mean"):
            v = 0.1 * base
        elif t.dim() == 1 and name.endswith("weight"):
            v = 1 + 0.1 * base
        elif name.endswith("bias"):
            v = 0.1 * base
        else:
            v = base * math.sqrt(6.0 / (t.numel() // t.shape[0]))
        t.copy_(v.to(t.dtype))


def make_input(n, size):
    return torch.sin(torch.arange(n * 3 * size * size, dtype=torch.float64) * 0.013).reshape(n, 3, size, size)


def deterministic_model(transform_input=False, dropout=0.5):
    m = torchvision.models.inception_v3(weights=None, num_classes=10, aux_logits=True, init_weights=False,
                                        transform_input=transform_input, dropout=dropout)
    with torch.no_grad():
        deterministic_fill(m)
    return m.double()


def values(t):
    return " ".join("%.10g" % v for v in t.flatten().tolist())


def main():
    model = torchvision.models.inception_v3(weights=None, aux_logits=True, init_weights=False)
    path = os.path.join(OUT, "torchvision_inception_v3.txt")
    with open(path, "w") as f, torch.no_grad():
        f.write("# torchvision %s inception_v3(aux_logits=True) state_dict: name shape "
                "(tests/models/make_torchvision_inception_names.py)\n" % torchvision.__version__)
        for name, t in model.state_dict().items():
            f.write("%s %s\n" % (name, ",".join(str(d) for d in t.shape) or "scalar"))
        for aux in (1, 0):
            m = torchvision.models.inception_v3(weights=None, aux_logits=bool(aux), init_weights=False)
            f.write("# aux_logits %d parameters %d\n" % (aux, sum(p.numel() for p in m.parameters())))

        for size, transform in ((80, 0), (80, 1), (139, 0)):
            m = deterministic_model(transform_input=bool(transform)).eval()
            f.write("# eval_logits %d %d %s\n" % (size, transform, values(m(make_input(1, size)))))

        m = deterministic_model().eval()
        pooled = {}
        m.avgpool.register_forward_hook(lambda module, inputs, output: pooled.__setitem__("x", output))
        m(make_input(1, 80))
        f.write("# eval_features 80 %s\n" % values(pooled["x"].flatten()[:8]))

        size = 299  # the smallest input the auxiliary classifier accepts
        m = deterministic_model(dropout=0.0).train()
        out = m(make_input(2, size))
        f.write("# train_logits %d %s\n" % (size, values(out.logits)))
        f.write("# train_aux %d %s\n" % (size, values(out.aux_logits)))
    print(path)


if __name__ == "__main__":
    main()
