// The Show and Tell model, beam search and the captioning task: beam search on a hand-set
// model, the training path against step-by-step inference, im2txt's initialisation, the masked
// loss, the frozen encoder and the evaluation metrics.
#include "orchard/caption/show_and_tell.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <map>

#include "orchard/caption/beam_search.h"
#include "orchard/core/error.h"
#include "orchard/data/caption.h"
#include "orchard/data/image.h"
#include "orchard/tasks/caption/captioning.h"

namespace orchard::caption {
namespace {

// A hand-set decoder over words {0: <S>, 1: </S>, 2: a, 3: b, 4: c}: the next word's
// probabilities depend only on the last word (the state counts steps, to check it is carried).
//   <S> -> a 0.5, b 0.4, </S> 0.1
//   a   -> </S> 0.35, c 0.33, b 0.32          (a </S>: 0.175)
//   b   -> </S> 0.9, a 0.05, c 0.05           (b </S>: 0.36: the best sentence, though a > b first;
//                                               then a </S> 0.175, a b </S> 0.144, </S> 0.1)
//   c   -> c 0.6, </S> 0.4
constexpr int64_t kStart = 0, kEnd = 1;
const std::map<int64_t, std::vector<double>> kNext = {
    {0, {0.0, 0.1, 0.5, 0.4, 0.0}},
    {2, {0.0, 0.35, 0.0, 0.32, 0.33}},
    {3, {0.0, 0.9, 0.05, 0.0, 0.05}},
    {4, {0.0, 0.4, 0.0, 0.0, 0.6}},
};

std::pair<at::Tensor, DecoderState> markov_step(const at::Tensor& words, const DecoderState& state) {
  auto logp = torch::full({words.size(0), 5}, -1e9, torch::kDouble);
  for (int64_t i = 0; i < words.size(0); ++i) {
    const auto& p = kNext.at(words[i].item<int64_t>());
    for (int64_t w = 0; w < 5; ++w)
      if (p[static_cast<size_t>(w)] > 0) logp[i][w] = std::log(p[static_cast<size_t>(w)]);
  }
  return {logp, {state[0] + 1}};
}

TEST(BeamSearch, FindsTheBestSentenceGreedyMisses) {
  BeamSearchOptions o;
  o.beam_size = 3;
  o.max_caption_length = 20;
  const auto out = beam_search({torch::zeros({1, 1})}, markov_step, kStart, kEnd, o);
  ASSERT_EQ(out.size(), 1u);
  ASSERT_EQ(out[0].size(), 3u);
  EXPECT_EQ(out[0][0].words, (std::vector<int64_t>{0, 3, 1}));  // b </S>
  EXPECT_NEAR(std::exp(out[0][0].logprob), 0.36, 1e-12);
  EXPECT_EQ(out[0][1].words, (std::vector<int64_t>{0, 2, 1}));  // a </S>
  EXPECT_NEAR(std::exp(out[0][1].logprob), 0.175, 1e-12);
  EXPECT_EQ(out[0][2].words, (std::vector<int64_t>{0, 2, 3, 1}));  // a b </S>: 0.5 * 0.32 * 0.9 = 0.144
  EXPECT_NEAR(std::exp(out[0][2].logprob), 0.144, 1e-12);
  // Beam 1 is greedy: a, then </S>.
  o.beam_size = 1;
  const auto greedy = beam_search({torch::zeros({1, 1})}, markov_step, kStart, kEnd, o);
  ASSERT_EQ(greedy[0].size(), 1u);
  EXPECT_EQ(greedy[0][0].words, (std::vector<int64_t>{0, 2, 1}));
}

TEST(BeamSearch, RespectsMaxLengthAndFallsBackToPartialCaptions) {
  // From c the chain prefers c forever; starting at c (initial "word" c via a one-word model).
  auto from_c = [](const at::Tensor& words, const DecoderState& s) {
    auto w = words.clone();
    w.masked_fill_(w == kStart, 4);  // <S> behaves as c
    return markov_step(w, s);
  };
  BeamSearchOptions o;
  o.beam_size = 1;
  o.max_caption_length = 4;  // <S> + 3 words
  const auto out = beam_search({torch::zeros({1, 1})}, from_c, kStart, kEnd, o);
  ASSERT_EQ(out[0].size(), 1u);
  EXPECT_EQ(out[0][0].words, (std::vector<int64_t>{0, 4, 4, 4}));  // no </S> within 4 words: partial
  EXPECT_NEAR(out[0][0].logprob, 3 * std::log(0.6), 1e-12);
  // With a wider beam, complete captions win over partial ones.
  o.beam_size = 2;
  const auto wide = beam_search({torch::zeros({1, 1})}, from_c, kStart, kEnd, o);
  EXPECT_EQ(wide[0][0].words, (std::vector<int64_t>{0, 1}));  // </S> at once: 0.4
  for (const auto& c : wide[0]) EXPECT_LE(c.words.size(), 4u);
}

TEST(BeamSearch, LengthNormalisationAndBatchesOfImages) {
  BeamSearchOptions o;
  o.beam_size = 3;
  o.length_normalization_factor = 1.0;
  // Two images share the steps; the second starts as if after c.
  auto step = [](const at::Tensor& words, const DecoderState& s) {
    auto w = words.clone();
    for (int64_t i = 0; i < w.size(0); ++i)
      if (w[i].item<int64_t>() == kStart && s[1][i].item<double>() > 0) w[i] = 4;
    auto [logp, next] = markov_step(w, {s[0]});
    return std::make_pair(logp, DecoderState{next[0], s[1]});
  };
  const auto out =
      beam_search({torch::zeros({2, 1}), torch::tensor({0.0, 1.0}).reshape({2, 1})}, step, kStart, kEnd, o);
  ASSERT_EQ(out.size(), 2u);
  // Scores are logprob / length: b </S> has log(0.36) / 3.
  EXPECT_EQ(out[0][0].words, (std::vector<int64_t>{0, 3, 1}));
  EXPECT_NEAR(out[0][0].score, std::log(0.36) / 3, 1e-12);
  EXPECT_EQ(out[1][0].words, (std::vector<int64_t>{0, 1}));  // c-like start: </S> 0.4 at once
  EXPECT_THROW(beam_search({torch::zeros({1, 1})}, markov_step, kStart, kEnd, BeamSearchOptions{0, 20, 0}), Error);
}

ShowAndTellOptions tiny_options() {
  ShowAndTellOptions o;
  o.vocab_size = 11;
  o.embedding_size = 8;
  o.num_lstm_units = 6;
  return o;
}

TEST(ShowAndTell, Im2txtInitialisation) {
  torch::manual_seed(0);
  ShowAndTell model(tiny_options());
  for (const auto& item : model->named_parameters()) {
    const auto& name = item.key();
    const auto& p = item.value();
    if (name.rfind(kEncoderPrefix, 0) == 0) continue;
    if (name == "lstm.bias_ih_l0") {
      EXPECT_TRUE(torch::equal(p.narrow(0, 0, 6), torch::zeros({6})));
      EXPECT_TRUE(torch::equal(p.narrow(0, 6, 6), torch::ones({6})));  // forget bias 1.0
      EXPECT_TRUE(torch::equal(p.narrow(0, 12, 12), torch::zeros({12})));
    } else if (name == "lstm.bias_hh_l0" || name == "logits.bias") {
      EXPECT_TRUE(torch::equal(p, torch::zeros_like(p))) << name;
    } else {
      EXPECT_LE(p.abs().max().item<double>(), 0.08) << name;
      EXPECT_GT(p.abs().max().item<double>(), 0.07) << name;
    }
  }
  EXPECT_EQ(model->named_parameters().find("image_embedding.bias"), nullptr);  // im2txt: biases_initializer=None
  EXPECT_NE(model->named_parameters().find("inception.Conv2d_1a_3x3.conv.weight"), nullptr);
  EXPECT_EQ(model->named_parameters().find("inception.fc.weight"), nullptr);
}

// The training path (whole sequence at once) and inference (one word at a time from the
// image's initial state) must be the same function.
TEST(ShowAndTell, SequenceLogitsEqualStepByStepInference) {
  torch::manual_seed(1);
  ShowAndTell model(tiny_options());
  model->eval();
  torch::NoGradGuard no_grad;
  const auto images = torch::randn({2, 3, 75, 75});
  const auto emb = model->embed_images(images, false);
  EXPECT_EQ(emb.sizes(), (std::vector<int64_t>{2, 8}));
  const auto words = torch::tensor({0, 4, 7, 2, 0, 9, 3, 5}, torch::kLong).reshape({2, 4});
  const auto logits = model->sequence_logits(emb, words);
  EXPECT_EQ(logits.sizes(), (std::vector<int64_t>{2, 4, 11}));
  LstmState state = model->initial_state(emb);
  for (int64_t t = 0; t < 4; ++t) {
    auto [logp, next] = model->step(words.select(1, t), state);
    EXPECT_TRUE(torch::allclose(logp, torch::log_softmax(logits.select(1, t), -1), 1e-5, 1e-6)) << t;
    state = next;
  }
}

TEST(ShowAndTell, DropoutOnlyInTraining) {
  torch::manual_seed(2);
  ShowAndTell model(tiny_options());
  const auto emb = torch::randn({3, 8});
  const auto words = torch::tensor({0, 4, 7}, torch::kLong).reshape({3, 1});
  model->eval();
  EXPECT_TRUE(torch::equal(model->sequence_logits(emb, words), model->sequence_logits(emb, words)));
  model->train();
  EXPECT_FALSE(torch::equal(model->sequence_logits(emb, words), model->sequence_logits(emb, words)));
}

}  // namespace
}  // namespace orchard::caption

namespace orchard::tasks {
namespace {

CaptionConfig tiny_config(bool train_inception) {
  CaptionConfig c;
  c.model.vocab_size = 11;
  c.model.embedding_size = 8;
  c.model.num_lstm_units = 6;
  c.image.image_size = 75;
  c.image.resize_size = 80;
  c.train_inception = train_inception;
  c.max_caption_tokens = 6;
  c.start_id = 0;
  c.end_id = 1;
  c.beam.max_caption_length = 5;
  return c;
}

// The fields of a batch of captions: padded ids, lengths, image ids.
data::Batch caption_batch(const std::vector<std::vector<int64_t>>& captions, const std::vector<int64_t>& image_ids,
                          int64_t width, float pad = 0) {
  data::Batch b;
  const int64_t n = static_cast<int64_t>(captions.size());
  b.size = n;
  b.images = torch::randn({n, 3, 75, 75});
  auto lengths = torch::zeros({n}, torch::kLong);
  auto ids = torch::full({n, width}, static_cast<int64_t>(pad), torch::kLong);
  for (int64_t i = 0; i < n; ++i) {
    lengths[i] = static_cast<int64_t>(captions[i].size());
    for (size_t j = 0; j < captions[i].size(); ++j) ids[i][static_cast<int64_t>(j)] = captions[i][j];
  }
  b.fields["caption_ids"] = ids;
  b.fields["caption_length"] = lengths;
  b.fields["image_id"] = torch::tensor(image_ids, torch::kLong);
  return b;
}

TEST(CaptionTask, MaskedLossIgnoresPaddingAndIsTheTokenMean) {
  torch::manual_seed(3);
  CaptionTask task(tiny_config(false));
  task.module()->eval();
  torch::NoGradGuard no_grad;
  auto batch = caption_batch({{0, 4, 5, 1}, {0, 7, 1}}, {1, 2}, 6);
  const auto outputs = task.forward(batch, Pass::kEval);
  const auto& emb = outputs_as<CaptionOutputs>(*outputs).embeddings;
  EXPECT_EQ(outputs_as<CaptionOutputs>(*outputs).logits.sizes(),
            (std::vector<int64_t>{2, 3, 11}));  // T - 1 = 3 steps, 11 words
  const auto terms = task.loss(*outputs, batch, 2);
  auto padded = caption_batch({{0, 4, 5, 1}, {0, 7, 1}}, {1, 2}, 6, 9.0f);
  padded.images = batch.images;
  EXPECT_NEAR(task.loss(*task.forward(padded, Pass::kEval), padded, 2).total().item<double>(),
              terms.total().item<double>(), 1e-6);
  EXPECT_EQ(terms.terms.at("sum_weights").item<double>(), 5.0);  // 3 + 2 target words
  // By hand: -log p(target) summed over the real positions, over 5.
  auto& model = task.model();
  double sum = 0;
  const std::vector<std::vector<int64_t>> caps = {{0, 4, 5, 1}, {0, 7, 1}};
  for (int64_t i = 0; i < 2; ++i) {
    auto state = model->initial_state(emb.narrow(0, i, 1));
    for (size_t t = 0; t + 1 < caps[i].size(); ++t) {
      auto [logp, next] = model->step(torch::tensor({caps[i][t]}, torch::kLong), state);
      sum -= logp[0][caps[i][t + 1]].item<double>();
      state = next;
    }
  }
  EXPECT_NEAR(terms.terms.at("sum_losses").item<double>(), sum, 1e-4);
  EXPECT_NEAR(terms.data.item<double>(), sum / 5, 1e-5);
  // A replica's share of a global batch of 4.
  EXPECT_NEAR(task.loss(*outputs, batch, 4).data.item<double>(), sum / 5 / 2, 1e-5);
  EXPECT_FALSE(terms.regularizer.defined());
}

TEST(CaptionTask, FrozenEncoderGetsNoGradientsAndNoL2) {
  torch::manual_seed(4);
  CaptionTask frozen(tiny_config(false));
  frozen.module()->train();
  auto batch = caption_batch({{0, 4, 1}, {0, 5, 6, 1}}, {1, 2}, 6);
  auto terms = frozen.loss(*frozen.forward(batch, Pass::kTrain), batch, 2);
  terms.total().backward();
  auto& enc = frozen.model()->encoder();
  for (const auto& p : enc->parameters()) EXPECT_FALSE(p.grad().defined());
  EXPECT_TRUE(frozen.model()->named_parameters()["image_embedding.weight"].grad().defined());
  // Frozen: inference-mode batch norm, so the running statistics do not move.
  const auto mean = enc->named_buffers()["Conv2d_1a_3x3.bn.running_mean"].clone();
  frozen.forward(batch, Pass::kTrain);
  EXPECT_TRUE(torch::equal(mean, enc->named_buffers()["Conv2d_1a_3x3.bn.running_mean"]));
  const size_t all = frozen.module()->parameters().size();
  EXPECT_EQ(frozen.trainable_parameters().size(), all - enc->parameters().size());

  CaptionTask tuned(tiny_config(true));
  tuned.module()->train();
  auto t2 = tuned.loss(*tuned.forward(batch, Pass::kTrain), batch, 2);
  ASSERT_TRUE(t2.regularizer.defined());
  double l2 = 0;
  for (const auto& p : tuned.model()->encoder()->parameters())
    if (p.dim() > 1) l2 += p.pow(2).sum().item<double>();
  EXPECT_NEAR(t2.regularizer.item<double>(), 4e-5 * l2 / 2, 1e-3 * t2.regularizer.item<double>());
  t2.total().backward();
  EXPECT_TRUE(tuned.model()->encoder()->named_parameters()["Conv2d_1a_3x3.conv.weight"].grad().defined());
  EXPECT_EQ(tuned.trainable_parameters().size(), all);
}

TEST(CaptionTask, EvalCaptionsEachImageOnceAndScoresAgainstAllItsReferences) {
  torch::manual_seed(5);
  CaptionTask task(tiny_config(false));
  task.module()->eval();
  torch::NoGradGuard no_grad;
  MetricSums sums;
  task.begin_evaluation();
  // Image 1 twice (two references), image 2 once; then image 1 again in another batch.
  auto b1 = caption_batch({{0, 4, 5, 1}, {0, 6, 1}, {0, 4, 1}}, {1, 2, 1}, 6);
  task.eval_step(*task.forward(b1, Pass::kEval), b1, task.loss(*task.forward(b1, Pass::kEval), b1, 3), &sums);
  auto b2 = caption_batch({{0, 7, 8, 1}}, {1}, 6);
  task.eval_step(*task.forward(b2, Pass::kEval), b2, task.loss(*task.forward(b2, Pass::kEval), b2, 1), &sums);
  EXPECT_EQ(sums.rows("caption_hyps").size(0), 2);  // images 1 and 2
  EXPECT_EQ(sums.rows("caption_refs").size(0), 4);
  const auto m = task.compute_metrics(sums, false);
  EXPECT_EQ(m.at("captioned_images"), 2.0);
  EXPECT_NEAR(m.at("Perplexity"), std::exp(m.at("loss")), 1e-9);
  for (const char* k : {"Bleu_1", "Bleu_2", "Bleu_3", "Bleu_4", "CIDEr-D"}) {
    ASSERT_EQ(m.count(k), 1u) << k;
    EXPECT_TRUE(std::isfinite(m.at(k))) << k;
  }
  // The next evaluation captions image 1 again.
  MetricSums again;
  task.begin_evaluation();
  task.eval_step(*task.forward(b2, Pass::kEval), b2, task.loss(*task.forward(b2, Pass::kEval), b2, 1), &again);
  EXPECT_EQ(again.rows("caption_hyps").size(0), 1);
  // Hypotheses are the beam search's best caption.
  const auto generated = task.generate(b2.images);
  const auto row = again.rows("caption_hyps")[0];
  const auto& best = generated[0][0].words;
  ASSERT_EQ(static_cast<size_t>(row[1].item<double>()), best.size());
  for (size_t j = 0; j < best.size(); ++j) EXPECT_EQ(row[2 + j].item<double>(), static_cast<double>(best[j]));
}

TEST(CaptionTask, ParserWritesIdsImageIdAndCutsLongCaptions) {
  CaptionTask task(tiny_config(false));
  data::CaptionExample e;
  e.image_id = (int64_t{1} << 30) + 5;
  data::Image im;
  im.height = im.width = 90;
  im.pixels.assign(90 * 90 * 3, 128);
  e.encoded = data::encode_jpeg(im);
  e.ids = {0, 2, 3, 4, 5, 6, 7, 1};  // 8 ids > max_caption_tokens 6
  const auto parse = task.parser(false);
  const auto spec = task.sample_spec();
  ASSERT_EQ(spec.fields.size(), 3u);
  EXPECT_EQ(spec.fields[0].name, "caption_ids");
  std::vector<float> pixels(3 * 75 * 75);
  std::vector<int64_t> ids(6);
  int64_t length = 0, image_id = 0;
  data::SampleOut out;
  out.image = pixels.data();
  out.fields = {ids.data(), &length, &image_id};
  std::mt19937_64 rng(0);
  parse(data::make_caption_example(e), "r", rng, out);
  EXPECT_EQ(length, 6);
  EXPECT_EQ(image_id, e.image_id);
  EXPECT_EQ(ids, (std::vector<int64_t>{0, 2, 3, 4, 5, 1}));
  e.ids = {0, 11, 1};  // outside the vocabulary of 11
  try {
    parse(data::make_caption_example(e), "f: record 2", rng, out);
    ADD_FAILURE() << "no error";
  } catch (const DataError& err) {
    EXPECT_NE(std::string(err.what()).find("f: record 2"), std::string::npos) << err.what();
    EXPECT_NE(std::string(err.what()).find("vocabulary"), std::string::npos) << err.what();
  }
}

}  // namespace
}  // namespace orchard::tasks
