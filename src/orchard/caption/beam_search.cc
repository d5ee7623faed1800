#include "orchard/caption/beam_search.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>

#include "orchard/core/error.h"

namespace orchard::caption {
namespace {

struct Beam {
  GeneratedCaption caption;
  int64_t row = 0;  // this caption's row in the current decoder state
};

// im2txt's TopN: keeps the n highest scores; a newcomer that only ties the lowest is dropped
// (heapq.heappushpop returns it).
class TopN {
 public:
  explicit TopN(size_t n) : n_(n) {}
  void push(Beam beam) {
    if (items_.size() < n_) {
      items_.push_back(std::move(beam));
      return;
    }
    auto lowest = std::min_element(items_.begin(), items_.end(),
                                   [](const Beam& a, const Beam& b) { return a.caption.score < b.caption.score; });
    if (lowest->caption.score < beam.caption.score) *lowest = std::move(beam);
  }
  std::vector<Beam>& items() { return items_; }

 private:
  size_t n_;
  std::vector<Beam> items_;
};

}  // namespace

std::vector<std::vector<GeneratedCaption>> beam_search(const DecoderState& initial, const StepFn& step,
                                                       int64_t start_id, int64_t end_id, const BeamSearchOptions& o) {
  if (o.beam_size < 1) throw Error("beam_size must be at least 1");
  if (o.max_caption_length < 2) throw Error("max_caption_length must be at least 2 (<S> and one word)");
  if (initial.empty()) throw Error("beam search needs a decoder state");
  const int64_t n = initial.front().size(0);
  const size_t beam = static_cast<size_t>(o.beam_size);
  const double min_logprob = std::log(1e-12);

  std::vector<std::vector<Beam>> partial(static_cast<size_t>(n));
  std::vector<TopN> complete(static_cast<size_t>(n), TopN(beam));
  for (int64_t i = 0; i < n; ++i) partial[static_cast<size_t>(i)].push_back({{{start_id}, 0.0, 0.0}, i});
  DecoderState state = initial;

  for (int t = 0; t < o.max_caption_length - 1; ++t) {
    std::vector<int64_t> words, rows;
    for (const auto& beams : partial)
      for (const auto& b : beams) {
        words.push_back(b.caption.words.back());
        rows.push_back(b.row);
      }
    if (words.empty()) break;
    const auto device = state.front().device();
    const auto row_index = at::tensor(rows, at::kLong).to(device);
    DecoderState current;
    for (const auto& s : state) current.push_back(s.index_select(0, row_index));
    auto [logp, next_state] = step(at::tensor(words, at::kLong).to(device), current);
    const int64_t k = std::min<int64_t>(o.beam_size, logp.size(1));
    auto [values, indices] = logp.topk(k, /*dim=*/1);  // sorted, most probable first
    values = values.to(at::kCPU, at::kDouble).contiguous();
    indices = indices.to(at::kCPU).contiguous();
    const auto v = values.accessor<double, 2>();
    const auto w = indices.accessor<int64_t, 2>();

    int64_t r = 0;
    for (size_t i = 0; i < partial.size(); ++i) {
      TopN next(beam);
      for (const auto& b : partial[i]) {
        for (int64_t j = 0; j < k; ++j) {
          if (v[r][j] < min_logprob) continue;  // im2txt: "Avoid log(0)"
          Beam nb;
          nb.caption.words = b.caption.words;
          nb.caption.words.push_back(w[r][j]);
          nb.caption.logprob = b.caption.logprob + v[r][j];
          nb.caption.score = nb.caption.logprob;
          nb.row = r;
          if (w[r][j] == end_id) {
            if (o.length_normalization_factor > 0)
              nb.caption.score /= std::pow(static_cast<double>(nb.caption.words.size()), o.length_normalization_factor);
            complete[i].push(std::move(nb));
          } else {
            next.push(std::move(nb));
          }
        }
        ++r;
      }
      partial[i] = std::move(next.items());
    }
    state = std::move(next_state);
  }

  std::vector<std::vector<GeneratedCaption>> out(static_cast<size_t>(n));
  for (size_t i = 0; i < out.size(); ++i) {
    auto& chosen = complete[i].items().empty() ? partial[i] : complete[i].items();
    std::stable_sort(chosen.begin(), chosen.end(),
                     [](const Beam& a, const Beam& b) { return a.caption.score > b.caption.score; });
    for (auto& b : chosen) out[i].push_back(std::move(b.caption));
  }
  return out;
}

}  // namespace orchard::caption
