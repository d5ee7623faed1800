#include "orchard/tasks/caption/captioning.h"

#include <torch/torch.h>

#include <cmath>
#include <unordered_map>

#include "orchard/caption/caption_metrics.h"
#include "orchard/core/error.h"

namespace orchard::tasks {
namespace {

// A caption of an evaluated image: "caption_hyps" the beam search's, "caption_refs" every
// reference. Gathered (and merged across workers) as float64 rows of MetricSums: image_id, the
// number of words, the word ids zero-padded to the rows' width.
struct CaptionRecord {
  int64_t image_id = 0;
  std::vector<int64_t> words;  // cut to the width when written
};

at::Tensor to_rows(const std::vector<CaptionRecord>& records, int64_t width) {
  auto rows = torch::zeros({static_cast<int64_t>(records.size()), 2 + width}, torch::kDouble);
  auto a = rows.accessor<double, 2>();
  for (size_t i = 0; i < records.size(); ++i) {
    const auto& words = records[i].words;
    const int64_t n = std::min<int64_t>(width, static_cast<int64_t>(words.size()));
    a[i][0] = static_cast<double>(records[i].image_id);
    a[i][1] = static_cast<double>(n);
    for (int64_t j = 0; j < n; ++j) a[i][2 + j] = static_cast<double>(words[static_cast<size_t>(j)]);
  }
  return rows;
}

std::vector<CaptionRecord> from_rows(const at::Tensor& rows) {
  std::vector<CaptionRecord> records;
  const auto a = rows.accessor<double, 2>();
  for (int64_t i = 0; i < rows.size(0); ++i) {
    CaptionRecord r;
    r.image_id = static_cast<int64_t>(a[i][0]);
    const auto n = static_cast<int64_t>(a[i][1]);
    for (int64_t j = 0; j < n; ++j) r.words.push_back(static_cast<int64_t>(a[i][2 + j]));
    records.push_back(std::move(r));
  }
  return records;
}

// The words without <S> and </S>, as strings (the metrics compare tokens).
caption::Tokens caption_tokens(const std::vector<int64_t>& words, int64_t start_id, int64_t end_id) {
  caption::Tokens tokens;
  for (int64_t id : words) {
    if (id == start_id || id == end_id) continue;
    tokens.push_back(std::to_string(id));
  }
  return tokens;
}

// The batch's captions as the LSTM reads them: T the longest caption_length; input the first
// T - 1 words [B, T - 1] (<S> first), target the words after them, mask [B, T - 1] float32 1 where
// the target is a word of the caption.
struct CaptionSteps {
  at::Tensor input, target, mask;
};

CaptionSteps caption_steps(const data::Batch& batch) {
  const auto& length = batch.field("caption_length");
  const int64_t t = length.max().item<int64_t>();
  const auto ids = batch.field("caption_ids").narrow(1, 0, t);
  CaptionSteps s;
  s.input = ids.narrow(1, 0, t - 1);
  s.target = ids.narrow(1, 1, t - 1);
  s.mask =
      (torch::arange(t - 1, ids.options()).unsqueeze(0) < (length.to(ids.device()) - 1).unsqueeze(1)).to(torch::kFloat);
  return s;
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

std::unique_ptr<Outputs> CaptionTask::forward(const data::Batch& batch, Pass) {
  auto outputs = std::make_unique<CaptionOutputs>();
  outputs->embeddings = inference(batch.images);
  outputs->logits = model_->sequence_logits(outputs->embeddings, caption_steps(batch).input);
  return outputs;
}

torch::Tensor CaptionTask::inference(const torch::Tensor& images) {
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

Loss CaptionTask::loss(const Outputs& task_outputs, const data::Batch& batch, int64_t global_batch_size) {
  const auto& outputs = outputs_as<CaptionOutputs>(task_outputs);
  const CaptionSteps steps = caption_steps(batch);
  const auto& target = steps.target;
  const auto& mask = steps.mask;
  auto logits = outputs.logits.to(torch::kFloat);
  const int64_t v = logits.size(2);
  auto ce =
      torch::nn::functional::cross_entropy(logits.reshape({-1, v}), target.reshape({-1}),
                                           torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kNone))
          .reshape(mask.sizes());
  const auto sum_losses = (ce * mask).sum();
  const auto sum_weights = mask.sum();
  const auto batch_loss = sum_losses / sum_weights.clamp_min(1.0);
  Loss loss;
  loss.data = batch_loss * (static_cast<double>(outputs.embeddings.size(0)) / static_cast<double>(global_batch_size));
  if (!l2_params_.empty() && config_.inception_weight_decay > 0) {
    auto l2 = torch::zeros({}, outputs.embeddings.options().dtype(torch::kFloat));
    for (const auto& p : l2_params_) l2 = l2 + p.to(torch::kFloat).pow(2).sum();
    loss.regularizer = l2 * (config_.inception_weight_decay / 2);
  }
  loss.terms["sum_losses"] = sum_losses.detach();
  loss.terms["sum_weights"] = sum_weights.detach();
  return loss;
}

void CaptionTask::train_metrics(const Outputs&, const data::Batch&, const Loss& loss, MetricSums* sums) const {
  sums->add("sum_losses", loss.terms.at("sum_losses").to(torch::kDouble));
  sums->add("sum_weights", loss.terms.at("sum_weights").to(torch::kDouble));
  add_training_loss(loss, sums);
}

void CaptionTask::eval_step(const Outputs& outputs, const data::Batch& batch, const Loss& loss, MetricSums* sums) {
  sums->add("sum_losses", loss.terms.at("sum_losses").to(torch::kDouble));
  sums->add("sum_weights", loss.terms.at("sum_weights").to(torch::kDouble));
  sums->add("count", static_cast<double>(batch.size));
  if (!config_.eval_captions) return;
  // Every caption of the batch is a reference of its image; each image is captioned once.
  const auto caption_ids = batch.field("caption_ids").to(torch::kCPU);
  const auto lengths = batch.field("caption_length").to(torch::kCPU);
  const auto image_ids = batch.field("image_id").to(torch::kCPU);
  std::vector<int64_t> new_rows, new_ids;
  std::vector<CaptionRecord> refs;
  for (int64_t i = 0; i < batch.size; ++i) {
    const int64_t id = image_ids[i].item<int64_t>();
    const int64_t n = lengths[i].item<int64_t>();
    const auto words = caption_ids[i].narrow(0, 0, n).contiguous();
    refs.push_back({id, std::vector<int64_t>(words.data_ptr<int64_t>(), words.data_ptr<int64_t>() + n)});
    if (captioned_.insert(id).second) {
      new_rows.push_back(i);
      new_ids.push_back(id);
    }
  }
  sums->append_rows("caption_refs", to_rows(refs, config_.max_caption_tokens));
  if (new_rows.empty()) return;
  const auto all = outputs_as<CaptionOutputs>(outputs).embeddings.to(torch::kFloat);
  const auto embeddings = all.index_select(0, torch::tensor(new_rows, torch::kLong).to(all.device()));
  const auto generated = generate_from_embeddings(embeddings);
  std::vector<CaptionRecord> hyps;
  for (size_t i = 0; i < generated.size(); ++i)
    hyps.push_back({new_ids[i], generated[i].empty() ? std::vector<int64_t>{} : generated[i].front().words});
  sums->append_rows("caption_hyps", to_rows(hyps, config_.beam.max_caption_length));
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
  for (const auto& h : from_rows(hyps)) {
    if (!index.emplace(h.image_id, samples.size()).second) continue;
    samples.push_back({caption_tokens(h.words, config_.start_id, config_.end_id), {}});
  }
  for (const auto& r : from_rows(refs)) {
    auto it = index.find(r.image_id);
    if (it != index.end())
      samples[it->second].references.push_back(caption_tokens(r.words, config_.start_id, config_.end_id));
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
