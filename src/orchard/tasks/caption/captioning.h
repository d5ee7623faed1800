// Image captioning (im2txt's Show and Tell): the model of caption/show_and_tell.h trained on
// (image, caption) SequenceExamples with the masked next-word cross entropy; evaluation gives
// im2txt's perplexity plus BLEU-1..4 and CIDEr-D of beam-search captions against every
// reference caption of the image.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <unordered_set>
#include <vector>

#include "orchard/caption/beam_search.h"
#include "orchard/caption/show_and_tell.h"
#include "orchard/data/caption.h"
#include "orchard/engine/task.h"

namespace orchard::tasks {

struct CaptionConfig {
  caption::ShowAndTellOptions model;  // vocab_size from the vocabulary file
  data::CaptionImageOptions image;
  bool train_inception = false;          // fine-tune the encoder (else frozen, inference mode)
  double inception_weight_decay = 4e-5;  // x sum(w^2) / 2 of the encoder's weights, when fine-tuned
  int64_t max_caption_tokens = 64;       // longer captions are cut (keeping </S>) when read
  caption::BeamSearchOptions beam;       // eval captions and `caption run`
  bool eval_captions = true;             // BLEU / CIDEr-D in evaluation (beam search per image)
  int64_t start_id = 0, end_id = 1;      // the vocabulary's <S> and </S>
};

// What captioning's forward pass returns: the encoder's image embeddings and the LSTM's next-word
// logits over the batch's captions (teacher forcing), both in the autocast dtype.
struct CaptionOutputs : Outputs {
  torch::Tensor embeddings;  // [B, E]
  // [B, T - 1, V]: after each of the first T - 1 words of the captions (<S> first; T the batch's
  // longest caption_length), the logits of the next word.
  torch::Tensor logits;
};

class CaptionTask : public Task {
 public:
  explicit CaptionTask(const CaptionConfig& config);
  std::string name() const override { return "caption"; }
  std::shared_ptr<torch::nn::Module> module() override { return model_.ptr(); }
  // -> CaptionOutputs: the encoder and the LSTM over the batch's captions ("caption_ids",
  // "caption_length"), the whole network inside the caller's autocast scope.
  std::unique_ptr<Outputs> forward(const data::Batch& batch, Pass pass) override;
  // Image embeddings [B, E] (`caption run` beam-searches captions from them).
  torch::Tensor inference(const torch::Tensor& images) override;
  data::SampleSpec sample_spec() const override;
  data::ParseFn parser(bool training) const override;
  // im2txt's batch_loss (masked mean over target words of the forward pass's logits) as this
  // replica's share of the global batch, plus the encoder's L2 when it is fine-tuned;
  // "sum_losses" / "sum_weights" (detached) feed perplexity.
  Loss loss(const Outputs& outputs, const data::Batch& batch, int64_t global_batch_size) override;
  std::string data_loss_name() const override { return "cross_entropy"; }
  void train_metrics(const Outputs& outputs, const data::Batch& batch, const Loss& loss,
                     MetricSums* sums) const override;
  void begin_evaluation() override { captioned_.clear(); }
  // Perplexity sums and, with eval_captions, a beam-search caption of each image the pass has
  // not captioned yet, with every caption of the batch as its references.
  void eval_step(const Outputs& outputs, const data::Batch& batch, const Loss& loss, MetricSums* sums) override;
  // Training: loss, perplexity. Eval: loss, Perplexity (im2txt's tag), Bleu_1..Bleu_4, CIDEr-D.
  std::map<std::string, double> compute_metrics(const MetricSums& sums, bool training) const override;
  std::map<std::string, std::string> signature() const override;

  // Beam-search captions of preprocessed images [N, 3, S, S] (the model in eval mode).
  std::vector<std::vector<caption::GeneratedCaption>> generate(const torch::Tensor& images);
  std::vector<std::vector<caption::GeneratedCaption>> generate_from_embeddings(const torch::Tensor& embeddings) const;
  // Parameters the optimizer trains: everything, or everything but the encoder when frozen.
  std::vector<torch::Tensor> trainable_parameters();
  const CaptionConfig& config() const { return config_; }
  caption::ShowAndTell& model() { return model_; }

 private:
  CaptionConfig config_;
  caption::ShowAndTell model_{nullptr};
  std::vector<torch::Tensor> l2_params_;
  std::unordered_set<int64_t> captioned_;  // images already captioned in this evaluation
};

}  // namespace orchard::tasks
