// im2txt's CaptionGenerator (inference_utils/caption_generator.py) over a batch of images:
// from each image's initial state, extend every partial caption by its beam_size most likely
// next words (probabilities below 1e-12 are skipped), keep the beam_size best partial
// captions by log-probability, move those ending in </S> to the complete captions (their
// score optionally divided by length^length_normalization_factor), and stop after
// max_caption_length - 1 steps or when no partial caption is left. Images without a complete
// caption fall back to their partial ones. All images' partial captions share each LSTM step.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

namespace orchard::caption {

struct BeamSearchOptions {
  int beam_size = 3;
  int max_caption_length = 20;  // words including <S> and </S>
  double length_normalization_factor = 0.0;
};

struct GeneratedCaption {
  std::vector<int64_t> words;  // <S> ... (</S> when complete)
  double logprob = 0;          // sum of the chosen words' log-probabilities
  double score = 0;            // logprob, length-normalised when complete
};

// The decoder state as tensors whose dim 0 indexes captions (e.g. LSTM h and c, [N, H]).
using DecoderState = std::vector<at::Tensor>;
// Log-probabilities [N, V] of the next word after `words` [N] (int64) from `state`, and the
// state after reading them.
using StepFn = std::function<std::pair<at::Tensor, DecoderState>(const at::Tensor& words, const DecoderState& state)>;

// Captions of each image, best first (at most beam_size). `initial` holds one row per image.
std::vector<std::vector<GeneratedCaption>> beam_search(const DecoderState& initial, const StepFn& step,
                                                       int64_t start_id, int64_t end_id,
                                                       const BeamSearchOptions& options);

}  // namespace orchard::caption
