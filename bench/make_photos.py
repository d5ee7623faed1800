#!/usr/bin/python3
"""Makes ImageNet-like JPEG "photos" from Fashion-MNIST for the input-pipeline benchmark.

Writes OUT/<class>/<index>.jpg: 500x375 (landscape) or 375x500 (portrait) RGB JPEGs at
quality 90 with 4:2:0 chroma subsampling, like the bulk of ImageNet. Each 28x28 item is
upscaled, colourised over a coloured background and given multi-scale texture and noise
so that the files are about as large (and as slow to decode) as real photos (~50-150 KB).

Run with Debian's interpreter (PIL and numpy come with python3-torchvision):
    /usr/bin/python3 bench/make_photos.py --out_dir /tmp/photos --count 512
"""
import argparse
import gzip
import os
import struct
import sys

import numpy as np
from PIL import Image

CLASSES = ["t_shirt_top", "trouser", "pullover", "dress", "coat",
           "sandal", "shirt", "sneaker", "bag", "ankle_boot"]


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    magic, = struct.unpack(">I", data[:4])
    ndim = magic & 0xFF
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def smooth_noise(rng, h, w, cells):
    """Value noise: a coarse random grid upscaled bicubically to h x w, in [-1, 1]."""
    ch, cw = max(2, h // cells), max(2, w // cells)
    grid = rng.uniform(0, 255, size=(ch, cw)).astype(np.uint8)
    img = Image.fromarray(grid, "L").resize((w, h), Image.BICUBIC)
    return np.asarray(img, dtype=np.float32) / 127.5 - 1.0


def make_photo(rng, item, width, height):
    # Object mask: the item upscaled to ~70-95% of the short side, placed at random.
    short = min(width, height)
    side = int(short * rng.uniform(0.7, 0.95))
    obj = Image.fromarray(item, "L").resize((side, side), Image.BICUBIC)
    mask = np.zeros((height, width), np.float32)
    top = rng.integers(0, height - side + 1)
    left = rng.integers(0, width - side + 1)
    mask[top:top + side, left:left + side] = np.asarray(obj, np.float32) / 255.0

    # Background: a colour gradient plus low-frequency blotches ("scenery").
    yy, xx = np.mgrid[0:height, 0:width].astype(np.float32)
    c0, c1 = rng.uniform(30, 225, size=3), rng.uniform(30, 225, size=3)
    t = (xx / width * rng.uniform(-1, 1) + yy / height * rng.uniform(-1, 1))
    t = (t - t.min()) / max(1e-6, t.max() - t.min())
    bg = c0[None, None, :] * (1 - t[..., None]) + c1[None, None, :] * t[..., None]
    for cells, amp in ((60, 40.0), (12, 18.0), (3, 14.0)):
        n = smooth_noise(rng, height, width, cells)
        bg += amp * n[..., None] * rng.uniform(0.5, 1.0, size=3)[None, None, :]

    # Foreground: the item's own shading times a random colour, with fabric texture.
    colour = rng.uniform(40, 255, size=3)
    shade = 0.35 + 0.65 * mask
    fg = colour[None, None, :] * shade[..., None]
    fg += 22.0 * smooth_noise(rng, height, width, 4)[..., None]

    alpha = np.clip(mask * 3.0, 0.0, 1.0)[..., None]
    img = bg * (1 - alpha) + fg * alpha
    # Fine sensor-like grain: what makes real photos' JPEGs large.
    img += rng.normal(0.0, 14.0, size=img.shape).astype(np.float32)
    return Image.fromarray(np.clip(img, 0, 255).astype(np.uint8), "RGB")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out_dir", required=True)
    p.add_argument("--count", type=int, default=512)
    p.add_argument("--source_dir", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--quality", type=int, default=90)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()

    images = read_idx(os.path.join(args.source_dir, "train-images-idx3-ubyte.gz"))
    labels = read_idx(os.path.join(args.source_dir, "train-labels-idx1-ubyte.gz"))
    rng = np.random.default_rng(args.seed)
    for name in CLASSES:
        os.makedirs(os.path.join(args.out_dir, name), exist_ok=True)
    total = 0
    for i in range(args.count):
        # ImageNet is about 3/4 landscape.
        width, height = (500, 375) if rng.uniform() < 0.75 else (375, 500)
        photo = make_photo(rng, images[i], width, height)
        path = os.path.join(args.out_dir, CLASSES[labels[i]], "%05d.jpg" % i)
        photo.save(path, "JPEG", quality=args.quality, subsampling=2)  # 2 = 4:2:0
        total += os.path.getsize(path)
    print("wrote %d JPEGs to %s, mean %.1f KB" % (args.count, args.out_dir, total / args.count / 1024.0),
          file=sys.stderr)


if __name__ == "__main__":
    main()
