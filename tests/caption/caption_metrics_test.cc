#include "orchard/caption/caption_metrics.h"

#include <gtest/gtest.h>

#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include "orchard/core/error.h"

namespace orchard::caption {
namespace {

// "a b c" -> {"a", "b", "c"}; "" -> {}.
Tokens words(const std::string& sentence) {
  std::istringstream in(sentence);
  Tokens out;
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

CaptionSample sample(const std::string& hypothesis, const std::vector<std::string>& references) {
  CaptionSample s;
  s.hypothesis = words(hypothesis);
  for (const std::string& r : references) s.references.push_back(words(r));
  return s;
}

// Relative tolerance: the hand-worked values drop the 1e-15 / 1e-9 guards where noted, which
// moves a score by ~1e-9 relative.
void expect_rel(double got, double want, double rel, const std::string& what) {
  EXPECT_NEAR(got, want, rel * std::abs(want)) << what;
}

void expect_bleu(const std::array<double, 4>& got, const std::array<double, 4>& want, double rel) {
  for (int k = 0; k < 4; ++k) expect_rel(got[k], want[k], rel, "BLEU-" + std::to_string(k + 1));
}

// --- BLEU -----------------------------------------------------------------------------------

TEST(Bleu, ExactMatchIsOneUpToTheGuards) {
  // hyp = ref, 5 words: correct = guess = {5, 4, 3, 2}, testlen = reflen = 5. With the guards,
  // p_k = (c + 1e-15) / (c + 1e-9) and r = (5 + 1e-15) / (5 + 1e-9) < 1, so there is a brevity
  // penalty exp(1 - 1/r) ~ 1 - 2e-10 even for a perfect match.
  const auto s = bleu({sample("a b c d e", {"a b c d e"})});
  const double r = (5 + 1e-15) / (5 + 1e-9);
  const double bp = std::exp(1 - 1 / r);
  double product = 1;
  const int counts[4] = {5, 4, 3, 2};
  for (int k = 0; k < 4; ++k) {
    product *= (counts[k] + 1e-15) / (counts[k] + 1e-9);
    expect_rel(s.corpus[k], std::pow(product, 1.0 / (k + 1)) * bp, 1e-15, "BLEU-" + std::to_string(k + 1));
    EXPECT_LT(s.corpus[k], 1.0);
    EXPECT_GT(s.corpus[k], 1.0 - 1e-9);
  }
  ASSERT_EQ(s.per_sample.size(), 1u);
  expect_bleu(s.per_sample[0], s.corpus, 1e-15);
}

TEST(Bleu, NoFourGramsGivesTheGuardValue) {
  // "a b c" matches its reference but has no 4-gram: guess_4 = correct_4 = 0, so
  // p_4 = 1e-15 / 1e-9 = 1e-6 and BLEU-4 = (1 * 1 * 1 * 1e-6)^(1/4) = 0.0316227766 (times the
  // ~1 - 1e-9 of the guards). pycocoevalcap: 0.031622776576649109.
  const auto s = bleu({sample("a b c", {"a b c"})});
  expect_rel(s.corpus[3], std::pow(1e-6, 0.25), 1e-8, "BLEU-4");
  expect_rel(s.corpus[3], 0.031622776576649109, 1e-13, "BLEU-4 (pycocoevalcap)");
  expect_rel(s.corpus[0], 1.0, 1e-8, "BLEU-1");
}

TEST(Bleu, BrevityPenaltyOnlyForShortHypotheses) {
  // Short: hyp "a b c" (3), ref 6 words: all hyp n-grams match, r = 3/6, BP = exp(1 - 2) = e^-1.
  //   BLEU-1..3 = e^-1 = 0.36787944; BLEU-4 = (1e-6)^(1/4) * e^-1 (no 4-gram).
  const auto short_hyp = bleu({sample("a b c", {"a b c d e f"})});
  const double e1 = std::exp(-1.0);
  expect_bleu(short_hyp.corpus, {e1, e1, e1, std::pow(1e-6, 0.25) * e1}, 1e-8);
  // Long: hyp "a b c d e f" (6), ref "a b c" (3): no penalty (r = 2 > 1).
  //   p = 3/6, 2/5, 1/4, (0 + 1e-15)/3: BLEU-1 = 0.5, BLEU-2 = sqrt(0.2) = 0.4472136,
  //   BLEU-3 = (0.05)^(1/3) = 0.3684031, BLEU-4 = (0.05 * 1e-15 / 3)^(1/4) = 6.389e-5.
  const auto long_hyp = bleu({sample("a b c d e f", {"a b c"})});
  expect_bleu(long_hyp.corpus, {0.5, std::sqrt(0.2), std::cbrt(0.05), std::pow(0.05 * 1e-15 / 3, 0.25)}, 1e-8);
}

TEST(Bleu, ClosestReferenceLength) {
  // hyp 4 words, refs of 2 and 5 words: the closest is 5 (|4-5| = 1 < 2), so
  // BP = exp(1 - 5/4) = exp(-0.25) = 0.77880078 while every hyp n-gram matches "a b c d e".
  // ("shortest" (2) or "average" (3.5) would give no penalty: BLEU-1 ~ 1.)
  // pycocoevalcap: 0.77880078268200481, 0.77880078264955477, 0.77880078259547147, 0.77880078247107987.
  const auto s = bleu({sample("a b c d", {"a b", "a b c d e"})});
  const double bp = std::exp(-0.25);
  expect_bleu(s.corpus, {bp, bp, bp, bp}, 1e-8);
  expect_bleu(s.corpus, {0.77880078268200481, 0.77880078264955477, 0.77880078259547147, 0.77880078247107987}, 1e-13);
}

TEST(Bleu, ClosestReferenceLengthTiePicksTheShorter) {
  // hyp 4 words, refs of 5 and 3 words: both 1 away; the shorter (3) wins, r = 4/3 > 1, no
  // penalty and BLEU-n ~ 1. Picking 5 would give exp(-0.25) = 0.7788.
  // pycocoevalcap: 0.9999999997500002, 0.99999999970833353, 0.99999999963888919, 0.99999999947916718.
  const auto s = bleu({sample("a b c d", {"a b c d e", "a b c"})});
  expect_bleu(s.corpus, {0.9999999997500002, 0.99999999970833353, 0.99999999963888919, 0.99999999947916718}, 1e-13);
}

TEST(Bleu, ClipsCountsByTheLargestCountInOneReference) {
  // hyp "the the the the", refs "the cat" and "the the dog":
  //   unigram "the": 4 in hyp, at most 2 in one reference -> correct_1 = 2 (not 3 = summed
  //     over refs, not 4 = unclipped); guess_1 = 4, p_1 = 1/2
  //   bigram "the the": 3 in hyp, 1 in ref 2 -> p_2 = 1/3
  //   trigram "the the the": 2 in hyp, none in refs -> p_3 = 1e-15 / 2
  //   4-gram: 1 in hyp, none in refs -> p_4 = 1e-15 / 1
  //   reflen: hyp 4, refs 2 and 3 -> 3, no penalty.
  //   BLEU-1 = 0.5, BLEU-2 = sqrt(1/6) = 0.40824829, BLEU-3 = (1/6 * 0.5e-15)^(1/3) = 4.3679e-6,
  //   BLEU-4 = (1/6 * 0.5e-15 * 1e-15)^(1/4) = 1.6990e-8.
  const auto s = bleu({sample("the the the the", {"the cat", "the the dog"})});
  expect_bleu(s.corpus,
              {0.5, std::sqrt(1.0 / 6), std::cbrt(1.0 / 6 * 0.5e-15), std::pow(1.0 / 6 * 0.5e-15 * 1e-15, 0.25)}, 1e-8);
  // pycocoevalcap.
  expect_bleu(s.corpus, {0.49999999987500021, 0.40824829034479093, 4.3679023221042019e-06, 1.6990442439622041e-08},
              1e-13);
}

TEST(Bleu, CorpusSumsCountsBeforeTakingRatios) {
  // A: "a b c" vs "a b c": correct = guess = {3, 2, 1, 0}, testlen 3, reflen 3.
  // B: "x y z w" vs "x y q r s": correct {2, 1, 0, 0}, guess {4, 3, 2, 1}, testlen 4, reflen 5.
  // Totals: correct {5, 3, 1, 0}, guess {7, 5, 3, 1}, testlen 7, reflen 8 -> BP = exp(1 - 8/7).
  //   BLEU-1 = 5/7 BP = 0.6191985, BLEU-2 = sqrt(5/7 * 3/5) BP = 0.5675048,
  //   BLEU-3 = (1/7)^(1/3) BP = 0.4531673, BLEU-4 = (1/7 * 1e-15)^(1/4) BP = 9.4773e-5.
  // The mean of the per-sample scores would be different (BLEU-1: (1 + 0.3894) / 2 = 0.6947).
  // Per sample B: BP = exp(1 - 5/4); BLEU-1 = 2/4 BP = 0.3894004, BLEU-2 = sqrt(1/2 * 1/3) BP.
  const auto s = bleu({sample("a b c", {"a b c"}), sample("x y z w", {"x y q r s"})});
  const double bp = std::exp(1 - 8.0 / 7);
  expect_bleu(s.corpus,
              {5.0 / 7 * bp, std::sqrt(3.0 / 7) * bp, std::cbrt(1.0 / 7) * bp, std::pow(1.0 / 7 * 1e-15, 0.25) * bp},
              1e-8);
  ASSERT_EQ(s.per_sample.size(), 2u);
  expect_bleu(s.per_sample[0], {1, 1, 1, std::pow(1e-6, 0.25)}, 1e-8);
  const double bp_b = std::exp(1 - 5.0 / 4);
  expect_rel(s.per_sample[1][0], 0.5 * bp_b, 1e-8, "B BLEU-1");
  expect_rel(s.per_sample[1][1], std::sqrt(0.5 / 3) * bp_b, 1e-8, "B BLEU-2");
  // pycocoevalcap.
  expect_bleu(s.corpus, {0.61919849964464468, 0.56750479894871986, 0.45316732104005697, 9.477273653004635e-05}, 1e-13);
  expect_bleu(s.per_sample[1],
              {0.38940039134100252, 0.31794408812859948, 3.4017257479837295e-06, 1.3232169873399237e-08}, 1e-13);
}

TEST(Bleu, EmptySentences) {
  // An empty hypothesis: r = 1e-15 / (2 + 1e-9), BP = exp(1 - 2e15) = 0.
  // "a" against an empty reference: reflen 0, no penalty, p_1 = 1e-15 / 1.
  // Corpus: correct 0, guess {1, 0, 0, 0}, testlen 1, reflen 2 + 0: BLEU-1 = 1e-15 e^-1.
  const auto s = bleu({sample("", {"a b"}), sample("a", {""})});
  for (int k = 0; k < 4; ++k) EXPECT_NEAR(s.per_sample[0][k], 0.0, 1e-300);
  expect_rel(s.per_sample[1][0], 1e-15, 1e-8, "BLEU-1 vs empty reference");
  expect_rel(s.corpus[0], 1e-15 * std::exp(-1.0), 1e-8, "corpus BLEU-1");
  // pycocoevalcap.
  expect_bleu(s.corpus,
              {3.6787944043568421e-16, 1.1633369367066766e-11, 3.6787944068093757e-10, 2.0687381220004209e-09}, 1e-13);
}

// --- CIDEr-D --------------------------------------------------------------------------------

TEST(CiderD, OneImageScoresZero) {
  // idf weights are log(N) - log(max(1, df)) with N = 1: all 0, so even a perfect match is 0.
  const auto s = cider_d({sample("a b c", {"a b c"})});
  EXPECT_NEAR(s.corpus, 0.0, 1e-15);
  ASSERT_EQ(s.per_sample.size(), 1u);
}

TEST(CiderD, HandWorkedTwoImages) {
  // N = 2, L = log 2. Reference n-grams: image 1 {a, b, a_b}, image 2 {a, d, a_d}.
  // df(a) = 2 -> weight 0; every other n-gram (df 1, or df 0 for c and a_c) -> weight L.
  // Image 1: hyp = ref: n = 1: (0*0 + L*L) / (L * L) = 1; n = 2: 1; n = 3, 4: no n-grams, 0.
  //   10 * mean(1, 1, 0, 0) = 5.
  // Image 2: hyp {a: 0, c: L}, ref {a: 0, d: L}: nothing with a non-zero weight in common, 0.
  // Corpus: 2.5.
  const auto s = cider_d({sample("a b", {"a b"}), sample("a c", {"a d"})});
  ASSERT_EQ(s.per_sample.size(), 2u);
  EXPECT_NEAR(s.per_sample[0], 5.0, 1e-12);
  EXPECT_NEAR(s.per_sample[1], 0.0, 1e-12);
  EXPECT_NEAR(s.corpus, 2.5, 1e-12);
}

TEST(CiderD, HandWorkedIdfClippingAndLengthPenalty) {
  // Image 1: hyp "a b", refs R1 "a b" and R2 "b a b". Image 2: hyp "c c", ref "a c".
  // N = 2, L = log 2. df counts images, not references or occurrences: df(a) = 2 (both images),
  // df(b) = 1 (in R1 and R2 of the same image). So w(a) = 0 and every other n-gram weighs
  // tf * L (c_c appears in no reference: df 0, log(max(1, 0)) = 0, weight L too).
  // Image 1, hyp: n1 {a: 0, b: L}, |.| = L; n2 {a_b: L}, |.| = L; 1 bigram.
  //   vs R1 (identical): sims {1, 1, 0, 0}, delta 0.
  //   vs R2: n1 {b: 2L, a: 0}, |.| = 2L; n2 {b_a: L, a_b: L}, |.| = sqrt(2) L; n3 {b_a_b: L};
  //     2 bigrams, delta = -1, penalty g = exp(-1/72).
  //     n1: min(L, 2L) * 2L / (L * 2L) = 1; n2: L*L / (L * sqrt(2) L) = 1/sqrt(2); n3: hyp has
  //     none, 0. sims {g, g/sqrt(2), 0, 0}.
  //   CIDEr-D = 10 * mean_n(sum over refs) / 2 refs = 10/8 * (2 + g (1 + 1/sqrt(2))) = 4.6044511.
  // Image 2: hyp n1 {c: 2L}, |.| = 2L; n2 {c_c: L}. ref n1 {a: 0, c: L}, |.| = L; n2 {a_c: L}.
  //   Both have 1 bigram: no penalty. n1 clipped: min(2L, L) * L / (2L * L) = 1/2 (unclipped:
  //   1); n2: c_c not in ref, 0. CIDEr-D = 10 * 0.5 / 4 = 1.25.
  // Corpus: (4.6044511 + 1.25) / 2 = 2.9272255. pycocoevalcap: 4.604451070809966, 1.25,
  // 2.927225535404983.
  const auto s = cider_d({sample("a b", {"a b", "b a b"}), sample("c c", {"a c"})});
  const double g = std::exp(-1.0 / 72);
  const double image1 = 10.0 / 8 * (2 + g * (1 + 1 / std::sqrt(2.0)));
  ASSERT_EQ(s.per_sample.size(), 2u);
  EXPECT_NEAR(s.per_sample[0], image1, 1e-12);
  EXPECT_NEAR(s.per_sample[1], 1.25, 1e-12);
  EXPECT_NEAR(s.corpus, (image1 + 1.25) / 2, 1e-12);
  EXPECT_NEAR(s.per_sample[0], 4.604451070809966, 1e-12);
  EXPECT_NEAR(s.corpus, 2.927225535404983, 1e-12);
}

// --- Errors ---------------------------------------------------------------------------------

TEST(CaptionMetrics, RejectsBadInput) {
  EXPECT_THROW(bleu({sample("a b", {"a b"}), sample("a", {})}), Error);
  EXPECT_THROW(cider_d({sample("a b", {"a b"}), sample("a", {})}), Error);
  EXPECT_THROW(bleu({}), Error);
  EXPECT_THROW(cider_d({}), Error);
  CaptionSample untokenised;
  untokenised.hypothesis = {"a dog"};
  untokenised.references = {{"a", "dog"}};
  EXPECT_THROW(bleu({untokenised}), Error);
  EXPECT_THROW(cider_d({untokenised}), Error);
  CaptionSample empty_token;
  empty_token.hypothesis = {"a", "dog"};
  empty_token.references = {{"a", "", "dog"}};
  EXPECT_THROW(bleu({empty_token}), Error);
  try {
    bleu({sample("a b", {"a b"}), sample("a", {})});
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("sample 1"), std::string::npos) << e.what();
  }
}

// --- Against the Python reference -----------------------------------------------------------

// Inputs and values printed by tests/caption/caption_metrics_reference.py (an independent
// re-implementation of pycocoevalcap's formulas; it also agrees with pycocoevalcap's own
// BleuScorer / CiderScorer on this corpus to 2e-15).
std::vector<CaptionSample> reference_corpus() {
  return {
      sample("dog cat a the the sits a man runs", {"dog red red a the sits the man runs"}),
      sample("runs the runs red", {"runs on runs red"}),
      sample("man the sits on runs a", {"man the sits man a", "man the sits the runs a dog"}),
      sample("the sits dog", {"the sits red", "the sits red dog", "the sits red dog"}),
      sample("the the dog on ball the a on runs ball on",
             {"the the on ball the a on man runs the ball on", "the the on on ball the on runs ball on cat",
              "the the on ball the a on ball on", "the the on red a on runs ball on"}),
      sample("cat a ball runs dog on", {"cat a ball runs dog on", "cat a ball runs on", "cat a ball runs man sits on"}),
      sample("sits red red red red the ball red a cat", {"sits red red red the ball red a cat"}),
      sample("runs the a runs sits the",
             {"runs a the a runs dog sits the", "runs a the a runs dog sits the", "runs a the a runs dog dog the"}),
  };
}

TEST(Bleu, MatchesPythonReference) {
  const auto s = bleu(reference_corpus());
  expect_bleu(s.corpus, {0.89090909087669423, 0.77883014982413934, 0.66607760955227069, 0.59332007207619542}, 1e-12);
  const std::vector<std::array<double, 4>> want = {
      {0.7777777776049386, 0.54006172474355774, 3.4668063709300401e-06, 9.1287092894932348e-09},
      {0.74999999962500041, 0.49999999972916709, 4.9999999969444519e-06, 1.8803015450937985e-08},
      {0.83333333319444458, 0.70710678105691149, 0.49999999989722249, 8.0342841875383789e-05},
      {0.99999999933333383, 0.70710678065621801, 7.9370052523449478e-06, 4.7287080412723211e-06},
      {0.90909090892562006, 0.85280286526351046, 0.78560097572214238, 0.70168793898903881},
      {0.99999999966666675, 0.99999999965000008, 0.99999999962777797, 0.99999999959583352},
      {0.89999999991000013, 0.89442719090550427, 0.88790400164312278, 0.88011173668800713},
      {0.71653131033494577, 0.5550227663834344, 0.38071406849273209, 6.025286102350238e-05},
  };
  ASSERT_EQ(s.per_sample.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    SCOPED_TRACE("sample " + std::to_string(i));
    expect_bleu(s.per_sample[i], want[i], 1e-12);
  }
}

TEST(CiderD, MatchesPythonReference) {
  const auto s = cider_d(reference_corpus());
  EXPECT_NEAR(s.corpus, 4.274577980768143, 1e-12);
  const std::vector<double> want = {1.9408115629781704, 2.4578495253227524, 3.2061968835477801, 2.129558578955963,
                                    5.1643263754924584, 7.3784995355359655, 8.569492739468533,  3.3498886448435172};
  ASSERT_EQ(s.per_sample.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(s.per_sample[i], want[i], 1e-12) << "sample " << i;
}

}  // namespace
}  // namespace orchard::caption
