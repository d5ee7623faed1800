#!/usr/bin/python3
"""The PyTorch-Python peer of `orchard classify predict` for bench/predict.sh.

What a PyTorch user writes to classify image files with a torchvision ResNet-50 in eager mode:
build the model, load the state dict, then per batch decode with PIL, resize the short side
to 256, centre-crop 224, normalise, forward under torch.inference_mode(), softmax, top-k, and
print one line per image. Run with Debian's /usr/bin/python3 (python3-torch 1.13,
python3-torchvision 0.14), as a whole process: bench/predict.sh times it from start to exit.

    /usr/bin/python3 bench/peer_predict.py --state_dict r50.pt --threads 1 --batch_size 32 a.jpg b.jpg
"""
import argparse
import json
import sys
import time

import torch
import torchvision
from PIL import Image
from torchvision import transforms


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--state_dict", required=True)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--batch_size", type=int, default=32)
    p.add_argument("--top_k", type=int, default=5)
    p.add_argument("images", nargs="+")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    model = torchvision.models.resnet50()
    model.load_state_dict(torch.load(a.state_dict))
    model.eval()
    preprocess = transforms.Compose([
        transforms.Resize(256),
        transforms.CenterCrop(224),
        transforms.ToTensor(),
        transforms.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225]),
    ])
    with torch.inference_mode():
        for begin in range(0, len(a.images), a.batch_size):
            start = time.perf_counter()
            files = a.images[begin:begin + a.batch_size]
            batch = torch.stack([preprocess(Image.open(f).convert("RGB")) for f in files])
            prepared = time.perf_counter()
            top_p, top_i = torch.softmax(model(batch), 1).topk(a.top_k, 1)
            for f, ps, ids in zip(files, top_p.tolist(), top_i.tolist()):
                print(json.dumps({"file": f, "predictions": [{"class_id": i, "probability": q} for i, q in zip(ids, ps)]}))
            sys.stdout.flush()
            # What bench/predict.sh reads (the same line as `orchard -v classify predict` logs).
            print("predict batch: %d images in %.2f ms (inputs %.2f ms)" %
                  (len(files), 1e3 * (time.perf_counter() - start), 1e3 * (prepared - start)), file=sys.stderr)


if __name__ == "__main__":
    main()
