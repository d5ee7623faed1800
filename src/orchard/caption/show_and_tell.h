// The Show and Tell model (Vinyals et al. 2015; im2txt's show_and_tell_model.py): an
// Inception-v3 image encoder whose pooled features are projected to an image embedding, fed
// as the first input of a one-layer LSTM that then reads the caption's word embeddings and
// predicts the next word at every step.
//
//   image -> Inception-v3 -> [N, 2048] -> image_embedding (no bias) -> [N, E]
//   zero state --(image embedding)--> LSTM --(<S> w1 w2 ...)--> logits over the vocabulary
//
// im2txt's details kept: every variable outside the encoder starts uniform(-scale, scale);
// BasicLSTMCell's zero-initialised bias plus its constant forget bias 1.0 (here folded into the
// forget-gate slice of bias_ih, which is then trainable); dropout (1 - keep_prob) on the LSTM's
// inputs and outputs in training (DropoutWrapper), not on its state; the encoder runs in
// training mode (batch statistics, dropout 1 - 0.8) only when it is fine-tuned.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/rnn.h>
#include <torch/nn/pimpl.h>

#include <utility>

#include "orchard/models/inception_v3.h"

namespace orchard::caption {

struct ShowAndTellOptions {
  int64_t vocab_size = 12000;
  int64_t embedding_size = 512;  // image and word embeddings
  int64_t num_lstm_units = 512;
  double lstm_dropout_keep_prob = 0.7;
  double initializer_scale = 0.08;
  double inception_dropout_keep_prob = 0.8;
  double batch_norm_decay = 0.9997;         // the encoder's batch norm (TF decay = 1 - torch momentum)
  double inception_depth_multiplier = 1.0;  // TF-Slim's depth_multiplier: < 1 thins the encoder
  bool inception_torchvision_init = false;  // models::InceptionV3Options::torchvision_init
  bool inception_tf_avg_pool = false;       // models::InceptionV3Options::tf_avg_pool
};

// LSTM state (h, c), each [N, num_lstm_units].
using LstmState = std::pair<torch::Tensor, torch::Tensor>;

class ShowAndTellImpl : public torch::nn::Module {
 public:
  explicit ShowAndTellImpl(const ShowAndTellOptions& options = {});

  // Image embeddings [N, E] of preprocessed images [N, 3, H, W]. `train_encoder`: the encoder
  // in training mode with gradients; otherwise it runs in inference mode without them (im2txt's
  // is_inception_model_training), whatever this module's mode.
  torch::Tensor embed_images(const torch::Tensor& images, bool train_encoder);
  // The state after the LSTM has read the image embedding from the zero state.
  LstmState initial_state(const torch::Tensor& image_embeddings);
  // Next-word logits [N, T, V] for input words [N, T] (each row starting with <S>).
  torch::Tensor sequence_logits(const torch::Tensor& image_embeddings, const torch::Tensor& input_words);
  // One inference step: log-probabilities [N, V] of the word after `words` [N], and the new state.
  std::pair<torch::Tensor, LstmState> step(const torch::Tensor& words, const LstmState& state);

  models::InceptionV3& encoder() { return inception_; }
  const ShowAndTellOptions& options() const { return options_; }

 private:
  torch::Tensor lstm_dropout(const torch::Tensor& x);

  ShowAndTellOptions options_;
  models::InceptionV3 inception_{nullptr};
  torch::nn::Linear image_embedding_{nullptr};
  torch::nn::Embedding seq_embedding_{nullptr};
  torch::nn::LSTM lstm_{nullptr};
  torch::nn::Linear logits_{nullptr};
};
TORCH_MODULE(ShowAndTell);

// Parameter names of the encoder start with this ("inception.Conv2d_1a_3x3.conv.weight").
constexpr const char* kEncoderPrefix = "inception.";

}  // namespace orchard::caption
