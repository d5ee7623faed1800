#!/usr/bin/python3
"""Captioning benchmarks, the PyTorch-Python peer of bench/caption_bench.cc (issue 7).

Run with Debian's /usr/bin/python3 (python3-torch 1.13, python3-torchvision 0.14). Reads the
inputs caption_bench --make_inputs wrote (meta.json, weights.bin, raw *.bin) and times the same
work on the same Show and Tell model (im2txt's show_and_tell_model.py in eager PyTorch):
torchvision's inception_v3 (aux_logits off, fc = Identity, dropout 0.2, batch-norm momentum
0.0003) -> image_embedding Linear(2048, E, no bias) -> one-layer nn.LSTM(E, H, batch_first)
fed the image embedding first, then the caption's seq_embedding; logits Linear(H, V); dropout
0.3 on the LSTM's inputs and outputs in training. The state dict is loaded from weights.bin by
name (strict), so both sides start from identical weights.

  train_frozen    encoder eval() under no_grad, LSTM + masked token-mean cross entropy,
                  zero_grad, backward, clip_grad_norm_(5.0), SGD(lr 2.0) on the rest
  train_finetune  encoder train() with gradients, + 4e-5 / 2 * sum of its conv weights^2,
                  SGD(lr 0.0005) on everything
  beam            im2txt's caption_generator.py beam search (beam 3, max length 20, TopN heaps,
                  p < 1e-12 skipped, complete captions apart, fallback to partial ones) over all
                  N images at once: every partial caption of every image in one LSTM step, as
                  CaptionTask::generate_from_embeddings does. log_softmax + topk(beam) where
                  im2txt sorts the whole softmax in Python (the same words, much faster).
  beam_per_image  the same search one image at a time (im2txt's loop in run_inference.py)

Prints one JSON line per measurement with the same fields as caption_bench.
"""
import argparse
import heapq
import json
import math
import os
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision

import peer_timing
from peer_timing import emit, time_loop

CLIP_NORM = 5.0
FROZEN_LR, FINETUNE_LR = 2.0, 0.0005
INCEPTION_WEIGHT_DECAY = 4e-5
BATCH_NORM_MOMENTUM = 1.0 - 0.9997
MIN_LOGPROB = math.log(1e-12)


# ---- inputs

class Inputs:
    def __init__(self, directory):
        self.dir = directory
        with open(os.path.join(directory, "meta.json")) as f:
            self.meta = json.load(f)
        self.config = self.meta["config"]

    @staticmethod
    def _dtype(m):
        return torch.int64 if m["dtype"] == "int64" else torch.float32

    def read(self, name):
        m = self.meta["tensors"][name]
        n = math.prod(m["shape"])
        t = torch.from_file(os.path.join(self.dir, name + ".bin"), shared=False, size=n, dtype=self._dtype(m))
        return t.reshape(m["shape"]).clone()

    def state_dict(self):
        with open(os.path.join(self.dir, "weights.bin"), "rb") as f:
            blob = bytearray(f.read())
        out = {}
        for m in self.meta["weights"]:
            n = math.prod(m["shape"])
            t = torch.frombuffer(blob, dtype=self._dtype(m), count=n, offset=m["offset"])
            out[m["name"]] = t.reshape(m["shape"]).clone()
        return out


# ---- the model

class ShowAndTell(nn.Module):
    def __init__(self, vocab, embedding, lstm_units, dropout=True):
        super().__init__()
        self.inception = torchvision.models.inception_v3(
            weights=None, aux_logits=False, init_weights=False, dropout=0.2 if dropout else 0.0)
        self.inception.fc = nn.Identity()
        for m in self.inception.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.momentum = BATCH_NORM_MOMENTUM
        self.image_embedding = nn.Linear(2048, embedding, bias=False)
        self.seq_embedding = nn.Embedding(vocab, embedding)
        self.lstm = nn.LSTM(embedding, lstm_units, num_layers=1, batch_first=True)
        self.logits = nn.Linear(lstm_units, vocab)
        self.lstm_dropout_p = 0.3 if dropout else 0.0

    def drop(self, x):
        return F.dropout(x, self.lstm_dropout_p, self.training)

    def embed_images(self, images, train_encoder):
        if train_encoder:
            self.inception.train(self.training)
            features = self.inception(images)
        else:
            self.inception.eval()
            with torch.no_grad():
                features = self.inception(images)
        return self.image_embedding(features)

    def initial_state(self, image_embeddings):
        _, (h, c) = self.lstm(self.drop(image_embeddings).unsqueeze(1))
        return h.squeeze(0), c.squeeze(0)

    def sequence_logits(self, image_embeddings, input_words):
        h, c = self.initial_state(image_embeddings)
        out, _ = self.lstm(self.drop(self.seq_embedding(input_words)), (h.unsqueeze(0), c.unsqueeze(0)))
        return self.logits(self.drop(out))

    def step(self, words, state):
        out, (h, c) = self.lstm(self.drop(self.seq_embedding(words).unsqueeze(1)),
                                (state[0].unsqueeze(0), state[1].unsqueeze(0)))
        logp = F.log_softmax(self.logits(self.drop(out.squeeze(1))), -1)
        return logp, (h.squeeze(0), c.squeeze(0))


def build_model(config, state_dict, dropout):
    model = ShowAndTell(config["vocab"], config["embedding"], config["lstm"], dropout)
    model.load_state_dict(state_dict, strict=True)
    return model


# ---- training step (train::Trainer's, with CaptionTask's loss)

class TrainStep:
    def __init__(self, config, state_dict, finetune, dropout):
        self.model = build_model(config, state_dict, dropout).train()
        self.finetune = finetune
        for p in self.model.inception.parameters():
            p.requires_grad_(finetune)
        self.l2_params = [p for p in self.model.inception.parameters() if finetune and p.dim() > 1]
        trainable = [p for p in self.model.parameters() if p.requires_grad]
        self.trainable = sum(p.numel() for p in trainable)
        self.optimizer = torch.optim.SGD(trainable, lr=FINETUNE_LR if finetune else FROZEN_LR)

    def loss(self, embeddings, captions, lengths):
        t = int(lengths.max())
        ids = captions[:, :t]
        inputs, targets = ids[:, :t - 1], ids[:, 1:t]
        mask = (torch.arange(t - 1).unsqueeze(0) < (lengths - 1).unsqueeze(1)).float()
        logits = self.model.sequence_logits(embeddings, inputs)
        v = logits.shape[2]
        ce = F.cross_entropy(logits.reshape(-1, v), targets.reshape(-1), reduction="none").reshape(mask.shape)
        total = (ce * mask).sum() / mask.sum().clamp_min(1.0)
        if self.l2_params:
            l2 = torch.zeros(())
            for p in self.l2_params:
                l2 = l2 + p.pow(2).sum()
            total = total + l2 * (INCEPTION_WEIGHT_DECAY / 2)
        return total

    def run(self, images, captions, lengths, ph):
        t0 = time.perf_counter()
        embeddings = self.model.embed_images(images, self.finetune and self.model.training)
        ph["forward"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        total = self.loss(embeddings, captions, lengths)
        ph["loss"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        self.optimizer.zero_grad()
        total.backward()
        ph["backward"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), CLIP_NORM)
        ph["clip"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        self.optimizer.step()
        ph["optimizer"] = time.perf_counter() - t0
        return float(total)


# ---- im2txt's beam search (inference_utils/caption_generator.py)

class Caption:
    def __init__(self, sentence, logprob, score, row):
        self.sentence, self.logprob, self.score, self.row = sentence, logprob, score, row

    def __lt__(self, other):
        return self.score < other.score

    def __eq__(self, other):
        return self.score == other.score


class TopN:
    """Maintains the top n elements of an incrementally provided set (im2txt's TopN)."""

    def __init__(self, n):
        self._n, self._data = n, []

    def size(self):
        return len(self._data)

    def push(self, x):
        if len(self._data) < self._n:
            heapq.heappush(self._data, x)
        else:
            heapq.heappushpop(self._data, x)

    def extract(self, sort=False):
        data, self._data = self._data, []
        if sort:
            data.sort(reverse=True)
        return data


def beam_search(model, embeddings, beam_size, max_caption_length, start_id, end_id):
    """im2txt's CaptionGenerator.beam_search over a batch of images (length_normalization_factor
    0): each image's partial captions live in their own TopN, and one model step serves all."""
    n = embeddings.shape[0]
    state = model.initial_state(embeddings)
    partial = [[Caption([start_id], 0.0, 0.0, i)] for i in range(n)]
    complete = [TopN(beam_size) for _ in range(n)]
    for _ in range(max_caption_length - 1):
        words = [b.sentence[-1] for beams in partial for b in beams]
        rows = [b.row for beams in partial for b in beams]
        if not words:
            break
        index = torch.tensor(rows, dtype=torch.int64)
        current = (state[0].index_select(0, index), state[1].index_select(0, index))
        logp, next_state = model.step(torch.tensor(words, dtype=torch.int64), current)
        values, indices = logp.topk(min(beam_size, logp.shape[1]), dim=1)
        top = list(zip(values.double().tolist(), indices.tolist()))
        r = 0
        for i, beams in enumerate(partial):
            nxt = TopN(beam_size)
            for b in beams:
                vals, idx = top[r]
                for lp, w in zip(vals, idx):
                    if lp < MIN_LOGPROB:  # im2txt: "Avoid log(0)" (p < 1e-12)
                        continue
                    caption = Caption(b.sentence + [w], b.logprob + lp, b.logprob + lp, r)
                    (complete[i] if w == end_id else nxt).push(caption)
                r += 1
            partial[i] = nxt.extract()
        state = next_state
    out = []
    for i in range(n):
        # Never mix complete and partial captions; fall back to the partial ones.
        chosen = complete[i] if complete[i].size() else None
        if chosen is None:
            chosen = TopN(beam_size)
            for b in partial[i]:
                chosen.push(b)
        out.append(chosen.extract(sort=True))
    return out


def beam_check(captions, end_id):
    best = [c[0] for c in captions]
    return {"words": [b.sentence for b in best], "logprobs": [b.logprob for b in best],
            "complete": sum(b.sentence[-1] == end_id for b in best),
            "mean_length": sum(len(b.sentence) for b in best) / len(best)}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--inputs", required=True)
    p.add_argument("--impl", default="pytorch", help="name in the JSON lines (pytorch, pytorch_tuned)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--what", default="train_frozen,train_finetune,beam,beam_per_image")
    p.add_argument("--frozen_sizes", default="299,150")
    p.add_argument("--finetune_sizes", default="150")
    p.add_argument("--finetune_batch", type=int, default=0, help="0: the inputs' batch")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--train_iters", type=int, default=10)
    p.add_argument("--beam_iters", type=int, default=10)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--budget_s", type=float, default=peer_timing.budget_s, help="seconds per measurement (at least 3 iterations)")
    a = p.parse_args()
    peer_timing.budget_s = a.budget_s
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)  # dropout
    inputs = Inputs(a.inputs)
    config = inputs.config
    state_dict = inputs.state_dict()
    captions_all = inputs.read("captions")
    start_id, end_id = config["start_id"], config["end_id"]
    impl, T = a.impl, a.threads

    for what in a.what.split(","):
        if what in ("train_frozen", "train_finetune"):
            finetune = what == "train_finetune"
            b = min(a.finetune_batch, config["batch"]) if finetune and a.finetune_batch > 0 else config["batch"]
            captions = captions_all[:b].contiguous()
            lengths = torch.full((b,), captions.shape[1], dtype=torch.int64)
            for size in (int(s) for s in (a.finetune_sizes if finetune else a.frozen_sizes).split(",") if s):
                images = inputs.read(f"images_{size}")[:b].contiguous()
                step = TrainStep(config, state_dict, finetune, dropout=True)
                r = time_loop(a.warmup, a.train_iters, lambda ph: step.run(images, captions, lengths, ph))
                del step
                # Two steps of a dropout-free copy from the same weights: Orchard must agree.
                exact = TrainStep(config, state_dict, finetune, dropout=False)
                r["check"] = {"params": sum(p.numel() for p in exact.model.parameters()),
                              "trainable_params": exact.trainable,
                              "loss_step1": exact.run(images, captions, lengths, {}),
                              "loss_step2": exact.run(images, captions, lengths, {})}
                del exact
                emit(impl, what, size, "image", b, T, a.warmup, r, batch=b, caption_length=captions.shape[1])
        elif what in ("beam", "beam_per_image"):
            model = build_model(config, state_dict, dropout=True).eval()
            embeddings = inputs.read("beam_embeddings")
            n = embeddings.shape[0]
            out = {}
            args = (3, 20, start_id, end_id)
            if what == "beam":
                def body(ph):
                    with torch.no_grad():
                        out["c"] = beam_search(model, embeddings, *args)
                warmup = a.warmup
            else:
                def body(ph):
                    with torch.no_grad():
                        out["c"] = [beam_search(model, embeddings[i:i + 1], *args)[0] for i in range(n)]
                warmup = min(a.warmup, 1)
            r = time_loop(warmup, a.beam_iters, body)
            r["check"] = beam_check(out["c"], end_id)
            emit(impl, what, n, "caption", n, T, warmup, r, beam_size=3, max_caption_length=20)
        else:
            raise SystemExit(f"peer_caption.py: unknown bench {what!r}")


if __name__ == "__main__":
    main()
