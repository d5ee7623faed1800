// Caption metrics of the MS COCO caption evaluation toolkit (pycocoevalcap, the coco-caption
// repository): corpus BLEU-1..4 as Bleu(4).compute_score (bleu/bleu_scorer.py, option
// "closest") and CIDEr-D as Cider().compute_score (cider/cider_scorer.py, n = 4, sigma = 6).
//
// Input: one hypothesis and one or more references per image, each a sentence of word tokens.
// pycocoevalcap first runs its PTBTokenizer (a Java step: lowercasing, splitting off and
// dropping punctuation); that is not reproduced here. Tokens are taken as they are: the caller
// passes lowercase words without punctuation, so that a sentence here is what PTBTokenizer
// would have produced. A token must be non-empty and hold no whitespace (pycocoevalcap splits
// the sentence string on whitespace).
//
// Both metrics are corpus-level: BLEU adds up n-gram counts and lengths over all images before
// taking ratios, and CIDEr-D's idf comes from the references of all images passed in one call.
// Evaluate the whole split in one call; scores of separate calls cannot be merged.
#pragma once

#include <array>
#include <string>
#include <vector>

namespace orchard {
namespace caption {

// One sentence as word tokens, e.g. {"a", "dog", "on", "a", "beach"}.
using Tokens = std::vector<std::string>;

// One image: the generated caption and the ground-truth captions.
struct CaptionSample {
  Tokens hypothesis;
  std::vector<Tokens> references;  // at least one; a reference may be empty
};

struct BleuScores {
  // BLEU-1..4 of the corpus (what pycocoevalcap reports): clipped n-gram matches, n-gram
  // counts, hypothesis and effective reference lengths are summed over all samples first.
  std::array<double, 4> corpus{};
  // BLEU-1..4 of each sample alone, in input order (compute_score's second result).
  std::vector<std::array<double, 4>> per_sample;
};

struct CiderScores {
  double corpus = 0;               // mean of per_sample
  std::vector<double> per_sample;  // CIDEr-D of each sample, in input order
};

// BLEU-1..4 as pycocoevalcap's BleuScorer.compute_score(option="closest"):
//   correct_k  hypothesis k-gram counts, each clipped to its largest count in any one reference
//   guess_k    max(0, len(hyp) - k + 1)
//   reflen     the reference length closest to len(hyp); of two equally close, the shorter
//   BLEU-n   = prod_{k<=n}((correct_k + 1e-15) / (guess_k + 1e-9)) ^ (1/n)
//              * exp(1 - 1/r) if r < 1,  r = (testlen + 1e-15) / (reflen + 1e-9)
// The corpus score uses the sums over samples of correct_k, guess_k, testlen and reflen. The
// 1e-15 and 1e-9 are kept, so an exact match scores slightly below 1 (1 - ~1e-10), and a
// BLEU-n without any n-gram match is small but not 0: its precision (1e-15 / guess_n) enters
// the geometric mean (BLEU-4: a factor (1e-15 / guess_4)^(1/4) ~ 5.6e-4 / guess_4^(1/4)). An
// empty hypothesis scores 0.
// Throws orchard::Error when `samples` is empty, a sample has no reference or a token is empty
// or holds whitespace.
BleuScores bleu(const std::vector<CaptionSample>& samples);

// CIDEr-D as pycocoevalcap's CiderScorer.compute_score (n = 4, sigma = 6):
//   df(g)      number of samples with n-gram g in at least one of their references
//   weight     tf(g) * (log(N) - log(max(1, df(g)))),  N = number of samples
//   sim_n      sum_{g in hyp, |g| = n} min(w_hyp(g), w_ref(g)) * w_ref(g) / (|w_hyp|_n |w_ref|_n)
//              (0 when either norm is 0), times exp(-delta^2 / (2 sigma^2)), delta the
//              difference of the two sentences' bigram counts (= of their word counts unless
//              one is empty, where the score is 0 anyway)
//   CIDEr-D  = 10 * mean over n = 1..4 of (mean over references of sim_n)
// and the corpus score is the mean over samples. A single sample always scores 0 (log(1) = 0
// makes every weight 0), as in pycocoevalcap.
// Agrees with pycocoevalcap to rounding (sums here run in a fixed order; numpy's mean sums
// pairwise).
// Throws orchard::Error when `samples` is empty, a sample has no reference or a token is empty
// or holds whitespace.
CiderScores cider_d(const std::vector<CaptionSample>& samples);

}  // namespace caption
}  // namespace orchard
