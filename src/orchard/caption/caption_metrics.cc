#include "orchard/caption/caption_metrics.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "orchard/core/error.h"

namespace orchard {
namespace caption {
namespace {

constexpr int kMaxN = 4;
// bleu_scorer.py's guards against division by zero ("tiny" and "small").
constexpr double kTiny = 1e-15;
constexpr double kSmall = 1e-9;
constexpr double kSigma = 6.0;
// np.e: cider_scorer.py writes the length penalty as np.e ** x, a pow rather than an exp.
constexpr double kE = 2.718281828459045;

// A sentence or an n-gram as the ids of its words, one char32_t per word: n-grams of different
// words never collide and std::hash<std::u32string> hashes them.
using Words = std::u32string;

// The distinct 1..4-grams of one sentence with their counts, in order of first occurrence by n
// then position: the iteration order of precook()'s dict, which CIDEr-D's sums follow.
struct NGramCounts {
  std::vector<std::pair<Words, int>> items;
  std::unordered_map<Words, size_t> index;  // n-gram -> its position in items
  int64_t length = 0;                       // words
};

struct EncodedSample {
  NGramCounts hypothesis;
  std::vector<NGramCounts> references;
};

NGramCounts count_ngrams(const Words& words) {
  NGramCounts c;
  c.length = static_cast<int64_t>(words.size());
  for (size_t n = 1; n <= kMaxN; ++n) {
    for (size_t i = 0; i + n <= words.size(); ++i) {
      Words gram = words.substr(i, n);
      const auto [it, added] = c.index.emplace(gram, c.items.size());
      if (added) {
        c.items.emplace_back(std::move(gram), 1);
      } else {
        ++c.items[it->second].second;
      }
    }
  }
  return c;
}

// What Python's str.split() splits on, for ASCII.
bool is_space(unsigned char c) { return c == ' ' || (c >= '\t' && c <= '\r') || (c >= 0x1c && c <= 0x1f); }

// Checks the input and maps every sentence to word ids and n-gram counts.
std::vector<EncodedSample> encode(const std::vector<CaptionSample>& samples, const char* metric) {
  if (samples.empty()) throw Error(std::string(metric) + ": no samples to score");
  std::unordered_map<std::string, char32_t> ids;
  const auto encode_sentence = [&](const Tokens& tokens, size_t sample, const std::string& which) {
    Words words;
    words.reserve(tokens.size());
    for (size_t t = 0; t < tokens.size(); ++t) {
      const std::string& token = tokens[t];
      if (token.empty() || std::any_of(token.begin(), token.end(), [](char c) { return is_space(c); })) {
        throw Error(std::string(metric) + ": sample " + std::to_string(sample) + ", " + which + ", token " +
                    std::to_string(t) + ": \"" + token +
                    "\" is not a word token (empty or holds whitespace; pass tokenised sentences)");
      }
      words.push_back(ids.emplace(token, static_cast<char32_t>(ids.size())).first->second);
    }
    return count_ngrams(words);
  };

  std::vector<EncodedSample> out(samples.size());
  for (size_t i = 0; i < samples.size(); ++i) {
    const CaptionSample& s = samples[i];
    if (s.references.empty()) {
      throw Error(std::string(metric) + ": sample " + std::to_string(i) + " has no reference caption");
    }
    out[i].hypothesis = encode_sentence(s.hypothesis, i, "hypothesis");
    for (size_t r = 0; r < s.references.size(); ++r) {
      out[i].references.push_back(encode_sentence(s.references[r], i, "reference " + std::to_string(r)));
    }
  }
  return out;
}

// cook_test()'s counts for one sample, or their sums over the corpus.
struct BleuCounts {
  std::array<int64_t, kMaxN> correct{};  // clipped k-gram matches
  std::array<int64_t, kMaxN> guess{};    // hypothesis k-grams
  int64_t testlen = 0;
  int64_t reflen = 0;  // the "closest" reference length
};

BleuCounts bleu_counts(const EncodedSample& s) {
  BleuCounts c;
  c.testlen = s.hypothesis.length;
  // The closest reference length; of two equally close, the shorter (Python's min over
  // (abs(l - testlen), l) tuples).
  c.reflen = s.references.front().length;
  std::unordered_map<Words, int> max_counts;  // per n-gram, its largest count in any one reference
  for (const NGramCounts& ref : s.references) {
    const int64_t d = std::llabs(ref.length - c.testlen);
    const int64_t best = std::llabs(c.reflen - c.testlen);
    if (d < best || (d == best && ref.length < c.reflen)) c.reflen = ref.length;
    for (const auto& [gram, count] : ref.items) {
      int& m = max_counts[gram];
      m = std::max(m, count);
    }
  }
  for (int k = 0; k < kMaxN; ++k) c.guess[k] = std::max<int64_t>(0, c.testlen - k);
  for (const auto& [gram, count] : s.hypothesis.items) {
    const auto it = max_counts.find(gram);
    if (it != max_counts.end()) c.correct[gram.size() - 1] += std::min(count, it->second);
  }
  return c;
}

// compute_score()'s formula, for one sample or for the corpus totals.
std::array<double, kMaxN> bleu_from_counts(const BleuCounts& c) {
  std::array<double, kMaxN> out{};
  double product = 1.0;
  for (int k = 0; k < kMaxN; ++k) {
    product *= (static_cast<double>(c.correct[k]) + kTiny) / (static_cast<double>(c.guess[k]) + kSmall);
    out[k] = std::pow(product, 1.0 / (k + 1));
  }
  const double ratio = (static_cast<double>(c.testlen) + kTiny) / (static_cast<double>(c.reflen) + kSmall);
  if (ratio < 1) {
    for (double& b : out) b *= std::exp(1 - 1 / ratio);
  }
  return out;
}

// counts2vec(): tf-idf weights of one sentence's n-grams.
struct TfIdf {
  const NGramCounts* counts = nullptr;
  std::vector<double> weight;  // one per counts->items
  std::array<double, kMaxN> norm{};
  int64_t bigrams = 0;  // counts2vec's "length": it sums the term frequencies of the bigrams
};

TfIdf tf_idf(const NGramCounts& counts, const std::unordered_map<Words, int64_t>& document_frequency,
             double log_num_samples) {
  TfIdf v;
  v.counts = &counts;
  v.weight.reserve(counts.items.size());
  for (const auto& [gram, tf] : counts.items) {
    const auto it = document_frequency.find(gram);
    const double df = it == document_frequency.end() ? 0.0 : static_cast<double>(it->second);
    // An n-gram in no reference gets the idf of one seen once.
    const double w = static_cast<double>(tf) * (log_num_samples - std::log(std::max(1.0, df)));
    v.weight.push_back(w);
    v.norm[gram.size() - 1] += w * w;
    if (gram.size() == 2) v.bigrams += tf;
  }
  for (double& n : v.norm) n = std::sqrt(n);
  return v;
}

// sim(): per n, the clipped cosine similarity times the Gaussian length penalty.
std::array<double, kMaxN> similarity(const TfIdf& hyp, const TfIdf& ref) {
  const double delta = static_cast<double>(hyp.bigrams - ref.bigrams);
  const double penalty = std::pow(kE, -(delta * delta) / (2 * kSigma * kSigma));
  std::array<double, kMaxN> val{};
  const auto& items = hyp.counts->items;
  for (size_t i = 0; i < items.size(); ++i) {
    const Words& gram = items[i].first;
    const auto it = ref.counts->index.find(gram);
    const double r = it == ref.counts->index.end() ? 0.0 : ref.weight[it->second];
    // CIDEr-D's clipping: a hypothesis n-gram counts at most as often as in the reference.
    val[gram.size() - 1] += std::min(hyp.weight[i], r) * r;
  }
  for (int n = 0; n < kMaxN; ++n) {
    if (hyp.norm[n] != 0 && ref.norm[n] != 0) val[n] /= hyp.norm[n] * ref.norm[n];
    val[n] *= penalty;
  }
  return val;
}

}  // namespace

BleuScores bleu(const std::vector<CaptionSample>& samples) {
  const std::vector<EncodedSample> encoded = encode(samples, "BLEU");
  BleuScores scores;
  scores.per_sample.reserve(encoded.size());
  BleuCounts total;
  for (const EncodedSample& s : encoded) {
    const BleuCounts c = bleu_counts(s);
    scores.per_sample.push_back(bleu_from_counts(c));
    for (int k = 0; k < kMaxN; ++k) {
      total.correct[k] += c.correct[k];
      total.guess[k] += c.guess[k];
    }
    total.testlen += c.testlen;
    total.reflen += c.reflen;
  }
  scores.corpus = bleu_from_counts(total);
  return scores;
}

CiderScores cider_d(const std::vector<CaptionSample>& samples) {
  const std::vector<EncodedSample> encoded = encode(samples, "CIDEr-D");

  // compute_doc_freq(): in how many samples' reference sets each n-gram occurs.
  std::unordered_map<Words, int64_t> document_frequency;
  for (const EncodedSample& s : encoded) {
    std::unordered_set<Words> seen;
    for (const NGramCounts& ref : s.references) {
      for (const auto& item : ref.items) {
        if (seen.insert(item.first).second) ++document_frequency[item.first];
      }
    }
  }
  const double log_num_samples = std::log(static_cast<double>(encoded.size()));  // "ref_len"

  CiderScores scores;
  scores.per_sample.reserve(encoded.size());
  double sum = 0;
  for (const EncodedSample& s : encoded) {
    const TfIdf hyp = tf_idf(s.hypothesis, document_frequency, log_num_samples);
    std::array<double, kMaxN> per_n{};
    for (const NGramCounts& ref_counts : s.references) {
      const std::array<double, kMaxN> sim = similarity(hyp, tf_idf(ref_counts, document_frequency, log_num_samples));
      for (int n = 0; n < kMaxN; ++n) per_n[n] += sim[n];
    }
    double score = 0;
    for (double v : per_n) score += v;
    score /= kMaxN;
    score /= static_cast<double>(s.references.size());
    score *= 10.0;
    scores.per_sample.push_back(score);
    sum += score;
  }
  scores.corpus = sum / static_cast<double>(scores.per_sample.size());
  return scores;
}

}  // namespace caption
}  // namespace orchard
