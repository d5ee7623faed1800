#include "orchard/caption/show_and_tell.h"

#include <torch/torch.h>

namespace orchard::caption {

ShowAndTellImpl::ShowAndTellImpl(const ShowAndTellOptions& o) : options_(o) {
  models::InceptionV3Options io;
  io.num_classes = 0;
  io.aux_logits = false;
  io.dropout = 1.0 - o.inception_dropout_keep_prob;
  io.batch_norm_momentum = 1.0 - o.batch_norm_decay;
  io.depth_multiplier = o.inception_depth_multiplier;
  io.torchvision_init = o.inception_torchvision_init;
  io.tf_avg_pool = o.inception_tf_avg_pool;
  inception_ = register_module("inception", models::InceptionV3(io));
  image_embedding_ = register_module(
      "image_embedding",
      torch::nn::Linear(torch::nn::LinearOptions(inception_->num_features(), o.embedding_size).bias(false)));
  seq_embedding_ = register_module("seq_embedding", torch::nn::Embedding(o.vocab_size, o.embedding_size));
  lstm_ = register_module(
      "lstm",
      torch::nn::LSTM(torch::nn::LSTMOptions(o.embedding_size, o.num_lstm_units).num_layers(1).batch_first(true)));
  logits_ = register_module("logits", torch::nn::Linear(o.num_lstm_units, o.vocab_size));

  torch::NoGradGuard no_grad;
  for (auto& p : image_embedding_->parameters()) p.uniform_(-o.initializer_scale, o.initializer_scale);
  for (auto& p : seq_embedding_->parameters()) p.uniform_(-o.initializer_scale, o.initializer_scale);
  logits_->weight.uniform_(-o.initializer_scale, o.initializer_scale);
  logits_->bias.zero_();
  for (auto& item : lstm_->named_parameters()) {
    const std::string& name = item.key();
    auto& p = item.value();
    if (name.rfind("weight", 0) == 0) {
      p.uniform_(-o.initializer_scale, o.initializer_scale);
    } else {
      p.zero_();
      // torch's gate order is (input, forget, cell, output): BasicLSTMCell's forget_bias 1.0.
      if (name.rfind("bias_ih", 0) == 0) p.narrow(0, o.num_lstm_units, o.num_lstm_units).fill_(1.0);
    }
  }
}

torch::Tensor ShowAndTellImpl::lstm_dropout(const torch::Tensor& x) {
  return torch::dropout(x, 1.0 - options_.lstm_dropout_keep_prob, is_training());
}

torch::Tensor ShowAndTellImpl::embed_images(const torch::Tensor& images, bool train_encoder) {
  torch::Tensor features;
  if (train_encoder) {
    inception_->train(is_training());
    features = inception_->forward(images);
  } else {
    inception_->eval();
    torch::NoGradGuard no_grad;
    features = inception_->forward(images);
  }
  return image_embedding_->forward(features);
}

LstmState ShowAndTellImpl::initial_state(const torch::Tensor& image_embeddings) {
  // In float32 whatever the autocast: the image embedding comes out of an autocast Linear
  // (bf16 with --dtype bf16), and CPU autocast has no rule that casts the LSTM's inputs.
  auto out = lstm_->forward(lstm_dropout(image_embeddings).to(torch::kFloat).unsqueeze(1));
  const auto& [h, c] = std::get<1>(out);
  return {h.squeeze(0), c.squeeze(0)};
}

torch::Tensor ShowAndTellImpl::sequence_logits(const torch::Tensor& image_embeddings,
                                               const torch::Tensor& input_words) {
  const LstmState state = initial_state(image_embeddings);
  auto out = lstm_->forward(lstm_dropout(seq_embedding_->forward(input_words)),
                            std::make_tuple(state.first.unsqueeze(0), state.second.unsqueeze(0)));
  return logits_->forward(lstm_dropout(std::get<0>(out)));
}

std::pair<torch::Tensor, LstmState> ShowAndTellImpl::step(const torch::Tensor& words, const LstmState& state) {
  auto out = lstm_->forward(lstm_dropout(seq_embedding_->forward(words).unsqueeze(1)),
                            std::make_tuple(state.first.unsqueeze(0), state.second.unsqueeze(0)));
  const auto& [h, c] = std::get<1>(out);
  auto logp = torch::log_softmax(logits_->forward(lstm_dropout(std::get<0>(out).squeeze(1))), -1);
  return {logp, {h.squeeze(0), c.squeeze(0)}};
}

}  // namespace orchard::caption
