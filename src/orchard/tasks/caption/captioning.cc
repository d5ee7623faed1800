#include "orchard/tasks/caption/captioning.h"

#include <torch/torch.h>

#include <cmath>
#include <unordered_map>

#include "orchard/caption/caption_metrics.h"
#include "orchard/core/error.h"

namespace orchard::tasks {
namespace {


// Rows [n, 2 + width]: image_id, length, ids (zero-padded).
at::Tensor id_rows(const std::vector<int64_t>& image_ids, const std::vector<std::vector<int64_t>>& words,
                   int64_t width) {
  auto rows = torch::zeros({static_cast<int64_t>(words.size()), 2 + width}, torch::kDouble);
  auto a = rows.accessor<double, 2>();
  for (size_t i = 0; i < words.size(); ++i) {
    const int64_t n = std::min<int64_t>(width, static_cast<int64_t>(words[i].size()));
    a[i][0] = static_cast<double>(image_ids[i]);
    a[i][1] = static_cast<double>(n);
    for (int64_t j = 0; j < n; ++j) a[i][2 + j] = static_cast<double>(words[i][static_cast<size_t>(j)]);
  }
  return rows;
}

// The words of a row without <S> and </S>, as strings (the metrics compare tokens).
caption::Tokens row_tokens(const at::TensorAccessor<double, 1>& row, int64_t start_id, int64_t end_id) {
  caption::Tokens tokens;
  const auto n = static_cast<int64_t>(row[1]);
  for (int64_t j = 0; j < n; ++j) {
    const auto id = static_cast<int64_t>(row[2 + j]);
    if (id == start_id || id == end_id) continue;
    tokens.push_back(std::to_string(id));
  }
  return tokens;
}

}  // namespace

CaptionTask::CaptionTask(const CaptionConfig& config) : config_(config) {
  if (config_.model.vocab_size < 3) throw Error("caption: the vocabulary needs at least <S>, </S> and <UNK>");
  if (config_.max_caption_tokens < 3) throw Error("caption: max_caption_tokens must be at least 3");
  model_ = caption::ShowAndTell(config_.model);
  for (auto& p : model_->encoder()->parameters()) {
    p.set_requires_grad(config_.train_inception);
    // TF-Slim's inception arg_scope regularises conv weights (not batch norm).
    if (config_.train_inception && p.dim() > 1) l2_params_.push_back(p);
  }
}

torch::Tensor CaptionTask::forward(const torch::Tensor& images) {
  return model_->embed_images(images, config_.train_inception && model_->is_training());
}

data::SampleSpec CaptionTask::sample_spec() const {
  data::SampleSpec spec;
  spec.image_shape = {3, config_.image.image_size, config_.image.image_size};
  // "caption_ids": the word ids (<S> ... </S>) padded with 0; "caption_length": how many;
  // "image_id": image/image_id.
  spec.fields = {{"caption_ids", at::kLong, {config_.max_caption_tokens}},
                 {"caption_length", at::kLong, {}},
                 {"image_id", at::kLong, {}}};
  return spec;
}

data::ParseFn CaptionTask::parser(bool training) const {
  const auto image = config_.image;
  const int64_t max_tokens = config_.max_caption_tokens;
  const int64_t vocab = config_.model.vocab_size;
  return [image, max_tokens, vocab, training](const std::string& record, const std::string& source,
                                              std::mt19937_64& rng, const data::SampleOut& out) {
    const auto e = data::parse_caption_example(record, source);
    for (int64_t id : e.ids)
      if (id < 0 || id >= vocab)
        throw DataError(source + ": 'image/caption_ids' holds " + std::to_string(id) + ", outside the vocabulary of " +
                        std::to_string(vocab) + " words (another word_counts.txt?)");
    data::preprocess_caption_image(e.encoded, image, training, rng, out.image, source);
    const int64_t n = std::min<int64_t>(max_tokens, static_cast<int64_t>(e.ids.size()));
    int64_t* ids = out.field<int64_t>(0);
    std::copy_n(e.ids.begin(), n, ids);
    if (n < static_cast<int64_t>(e.ids.size())) ids[n - 1] = e.ids.back();  // a cut caption still ends in </S>
    *out.field<int64_t>(1) = n;
    *out.field<int64_t>(2) = e.image_id;
  };
}

Loss CaptionTask::loss(const torch::Tensor& outputs, const data::Batch& batch, int64_t global_batch_size) {
  const auto& length = batch.field("caption_length");
  const int64_t t = length.max().item<int64_t>();
  const auto ids = batch.field("caption_ids").narrow(1, 0, t);
  const auto input = ids.narrow(1, 0, t - 1);
  const auto target = ids.narrow(1, 1, t - 1);
  const auto mask =
      (torch::arange(t - 1, ids.options()).unsqueeze(0) < (length.to(ids.device()) - 1).unsqueeze(1))
          .to(torch::kFloat);
  auto logits = model_->sequence_logits(outputs, input).to(torch::kFloat);
  const int64_t v = logits.size(2);
  auto ce = torch::nn::functional::cross_entropy(
                logits.reshape({-1, v}), target.reshape({-1}),
                torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kNone))
                .reshape(mask.sizes());
  const auto sum_losses = (ce * mask).sum();
  const auto sum_weights = mask.sum();
  const auto batch_loss = sum_losses / sum_weights.clamp_min(1.0);
  Loss loss;
  loss.data = batch_loss * (static_cast<double>(outputs.size(0)) / static_cast<double>(global_batch_size));
  if (!l2_params_.empty() && config_.inception_weight_decay > 0) {
    auto l2 = torch::zeros({}, outputs.options().dtype(torch::kFloat));
    for (const auto& p : l2_params_) l2 = l2 + p.to(torch::kFloat).pow(2).sum();
    loss.regularizer = l2 * (config_.inception_weight_decay / 2);
  }
  loss.terms["sum_losses"] = sum_losses.detach();
  loss.terms["sum_weights"] = sum_weights.detach();
  return loss;
}

void CaptionTask::train_metrics(const torch::Tensor&, const data::Batch&, const Loss& loss, MetricSums* sums) const {
  sums->add("sum_losses", loss.terms.at("sum_losses").to(torch::kDouble));
  sums->add("sum_weights", loss.terms.at("sum_weights").to(torch::kDouble));
  add_training_loss(loss, sums);
}

void CaptionTask::eval_step(const torch::Tensor& outputs, const data::Batch& batch, const Loss& loss,
                            MetricSums* sums) {
  sums->add("sum_losses", loss.terms.at("sum_losses").to(torch::kDouble));
  sums->add("sum_weights", loss.terms.at("sum_weights").to(torch::kDouble));
  sums->add("count", static_cast<double>(batch.size));
  if (!config_.eval_captions) return;
  // Every caption of the batch is a reference of its image; each image is captioned once.
  const auto caption_ids = batch.field("caption_ids").to(torch::kCPU);
  const auto lengths = batch.field("caption_length").to(torch::kCPU);
  const auto image_ids = batch.field("image_id").to(torch::kCPU);
  std::vector<int64_t> ref_ids, new_rows, new_ids;
  std::vector<std::vector<int64_t>> refs;
  for (int64_t i = 0; i < batch.size; ++i) {
    const int64_t id = image_ids[i].item<int64_t>();
    const int64_t n = lengths[i].item<int64_t>();
    const auto words = caption_ids[i].narrow(0, 0, n).contiguous();
    refs.emplace_back(words.data_ptr<int64_t>(), words.data_ptr<int64_t>() + n);
    ref_ids.push_back(id);
    if (captioned_.insert(id).second) {
      new_rows.push_back(i);
      new_ids.push_back(id);
    }
  }
  sums->append_rows("caption_refs", id_rows(ref_ids, refs, config_.max_caption_tokens));
  if (new_rows.empty()) return;
  const auto embeddings = outputs.index_select(0, torch::tensor(new_rows, torch::kLong).to(outputs.device()));
  const auto generated = generate_from_embeddings(embeddings);
  std::vector<std::vector<int64_t>> hyps;
  for (const auto& g : generated) hyps.push_back(g.empty() ? std::vector<int64_t>{} : g.front().words);
  sums->append_rows("caption_hyps", id_rows(new_ids, hyps, config_.beam.max_caption_length));
}

std::map<std::string, double> CaptionTask::compute_metrics(const MetricSums& s, bool training) const {
  const double mean = s.get("sum_losses") / std::max(1.0, s.get("sum_weights"));
  if (training) return {{"loss", training_loss(s)}, {"perplexity", std::exp(mean)}};
  std::map<std::string, double> m = {{"loss", mean}, {"Perplexity", std::exp(mean)}};
  const auto hyps = s.rows("caption_hyps");
  const auto refs = s.rows("caption_refs");
  if (!config_.eval_captions || !hyps.defined() || !refs.defined()) return m;
  // Group references by image; with several workers an image may have been captioned on more
  // than one: the first (lowest rank) caption counts.
  std::unordered_map<int64_t, size_t> index;
  std::vector<caption::CaptionSample> samples;
  const auto h = hyps.accessor<double, 2>();
  for (int64_t i = 0; i < h.size(0); ++i) {
    const auto id = static_cast<int64_t>(h[i][0]);
    if (!index.emplace(id, samples.size()).second) continue;
    samples.push_back({row_tokens(h[i], config_.start_id, config_.end_id), {}});
  }
  const auto r = refs.accessor<double, 2>();
  for (int64_t i = 0; i < r.size(0); ++i) {
    auto it = index.find(static_cast<int64_t>(r[i][0]));
    if (it != index.end()) samples[it->second].references.push_back(row_tokens(r[i], config_.start_id, config_.end_id));
  }
  const auto bleu = caption::bleu(samples);
  for (int n = 0; n < 4; ++n) m["Bleu_" + std::to_string(n + 1)] = bleu.corpus[static_cast<size_t>(n)];
  m["CIDEr-D"] = caption::cider_d(samples).corpus;
  m["captioned_images"] = static_cast<double>(samples.size());
  return m;
}

std::map<std::string, std::string> CaptionTask::signature() const {
  return {{"task", "caption"},
          {"model", "show_and_tell"},
          {"vocab_size", std::to_string(config_.model.vocab_size)},
          {"embedding_size", std::to_string(config_.model.embedding_size)},
          {"num_lstm_units", std::to_string(config_.model.num_lstm_units)}};
}

std::vector<std::vector<caption::GeneratedCaption>> CaptionTask::generate_from_embeddings(
    const torch::Tensor& embeddings) const {
  torch::NoGradGuard no_grad;
  auto model = model_.ptr();
  const bool was_training = model->is_training();
  model->eval();
  const auto state = model->initial_state(embeddings.to(torch::kFloat));
  auto step = [&](const at::Tensor& words, const caption::DecoderState& s) {
    auto [logp, next] = model->step(words, {s[0], s[1]});
    return std::make_pair(logp, caption::DecoderState{next.first, next.second});
  };
  auto out = caption::beam_search({state.first, state.second}, step, config_.start_id, config_.end_id, config_.beam);
  model->train(was_training);
  return out;
}

std::vector<std::vector<caption::GeneratedCaption>> CaptionTask::generate(const torch::Tensor& images) {
  torch::NoGradGuard no_grad;
  const bool was_training = model_->is_training();
  model_->eval();
  auto out = generate_from_embeddings(model_->embed_images(images, false));
  model_->train(was_training);
  return out;
}

std::vector<torch::Tensor> CaptionTask::trainable_parameters() {
  std::vector<torch::Tensor> params;
  for (auto& p : model_->parameters())
    if (p.requires_grad()) params.push_back(p);
  return params;
}

}  // namespace orchard::tasks
