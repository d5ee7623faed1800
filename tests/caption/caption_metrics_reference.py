#!/usr/bin/env python3
"""Prints the inputs and expected values of CaptionMetrics.MatchesPythonReference.

An independent re-implementation of pycocoevalcap's formulas (bleu/bleu_scorer.py,
compute_score(option="closest"); cider/cider_scorer.py, CIDEr-D with n=4, sigma=6), written from
their definitions. Run once by hand; the test does not need it: python3 caption_metrics_reference.py
"""
import math
import random
from collections import Counter

N = 4


def ngrams(words):
    return Counter(tuple(words[i:i + n]) for n in range(1, N + 1) for i in range(len(words) - n + 1))


def bleu(corpus):
    totals = {"c": [0] * N, "g": [0] * N, "t": 0, "r": 0}

    def score(c, g, t, r):
        out, p = [], 1.0
        for k in range(N):
            p *= (c[k] + 1e-15) / (g[k] + 1e-9)
            out.append(p ** (1.0 / (k + 1)))
        ratio = (t + 1e-15) / (r + 1e-9)
        return [b * math.exp(1 - 1 / ratio) if ratio < 1 else b for b in out]

    per = []
    for hyp, refs in corpus:
        h = ngrams(hyp)
        best = Counter()
        for ref in refs:
            best |= ngrams(ref)  # element-wise max of counts
        c = [sum(min(v, best[g]) for g, v in h.items() if len(g) == k + 1) for k in range(N)]
        g = [max(0, len(hyp) - k) for k in range(N)]
        r = sorted(refs, key=lambda ref: (abs(len(ref) - len(hyp)), len(ref)))[0]
        per.append(score(c, g, len(hyp), len(r)))
        for k in range(N):
            totals["c"][k] += c[k]
            totals["g"][k] += g[k]
        totals["t"] += len(hyp)
        totals["r"] += len(r)
    return score(totals["c"], totals["g"], totals["t"], totals["r"]), per


def cider_d(corpus, sigma=6.0):
    df = Counter()
    for _, refs in corpus:
        df.update(set(g for ref in refs for g in ngrams(ref)))
    log_n = math.log(len(corpus))

    def vec(words):
        w = {g: tf * (log_n - math.log(max(1.0, df[g]))) for g, tf in ngrams(words).items()}
        norms = [math.sqrt(sum(v * v for g, v in w.items() if len(g) == n)) for n in range(1, N + 1)]
        return w, norms, max(0, len(words) - 1)  # cider_scorer's "length" counts bigrams

    per = []
    for hyp, refs in corpus:
        hw, hn, hl = vec(hyp)
        total = 0.0
        for ref in refs:
            rw, rn, rl = vec(ref)
            for n in range(1, N + 1):
                num = sum(min(v, rw.get(g, 0.0)) * rw.get(g, 0.0) for g, v in hw.items() if len(g) == n)
                if hn[n - 1] and rn[n - 1]:
                    num /= hn[n - 1] * rn[n - 1]
                total += num * math.exp(-((hl - rl) ** 2) / (2 * sigma ** 2))
        per.append(10.0 * total / N / len(refs))
    return sum(per) / len(per), per


def random_corpus(seed=7, images=8):
    rng = random.Random(seed)
    vocab = "a the dog cat on man red ball sits runs".split()

    def edit(words):
        out = list(words)
        for _ in range(rng.randint(0, 3)):
            op = rng.choice("ids")
            i = rng.randrange(len(out) + 1)
            if op == "i":
                out.insert(i, rng.choice(vocab))
            elif out and i < len(out):
                if op == "d":
                    del out[i]
                else:
                    out[i] = rng.choice(vocab)
        return out

    corpus = []
    for _ in range(images):
        base = [rng.choice(vocab) for _ in range(rng.randint(3, 10))]
        refs = [edit(base) for _ in range(rng.randint(1, 4))]
        corpus.append((edit(base), refs))
    return corpus


def main():
    corpus = random_corpus()
    print("// inputs")
    for hyp, refs in corpus:
        print('  {"%s", {%s}},' % (" ".join(hyp), ", ".join('"%s"' % " ".join(r) for r in refs)))
    b, b_per = bleu(corpus)
    c, c_per = cider_d(corpus)
    print("// BLEU corpus\n  {%s}," % ", ".join("%.17g" % v for v in b))
    print("// BLEU per sample")
    for s in b_per:
        print("  {%s}," % ", ".join("%.17g" % v for v in s))
    print("// CIDEr-D corpus\n  %.17g" % c)
    print("// CIDEr-D per sample\n  {%s}" % ", ".join("%.17g" % v for v in c_per))


if __name__ == "__main__":
    main()
