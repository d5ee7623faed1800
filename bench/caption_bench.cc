// Captioning benchmarks (issue 7): `orchard caption`'s training step and beam search, timed as
// the same work in bench/peer_caption.py (PyTorch 1.13 + torchvision 0.14) is timed.
//
//   train_frozen    CaptionTask training step with the encoder frozen (inference mode, no
//                   grad): forward (Inception-v3 + image embedding + the LSTM over the
//                   captions), loss (masked cross entropy), zero_grad + backward, clip_grad_norm_ 5.0,
//                   SGD step (lr 2.0) on the non-encoder parameters, as engine::Trainer runs it
//   train_finetune  the same with --train_inception: the encoder in training mode with
//                   gradients, its conv weights' L2 (4e-5) in the loss, SGD (lr 0.0005) on all
//   beam            im2txt's beam search (beam 3, max length 20) of N images from precomputed
//                   image embeddings, all images' partial captions batched into each LSTM step
//                   (CaptionTask::generate_from_embeddings)
//   beam_per_image  the same one image at a time (the im2txt caption_generator loop)
//
// Inputs are identical on both sides: `--make_inputs` writes them into --inputs (raw float32 /
// int64 arrays + meta.json): the model's weights (weights.bin, torchvision / im2txt names, the
// encoder's batch-norm statistics set from one batch), images per size, captions, embeddings.
// Both programs load the weights from there. Prints one JSON line per measurement, the same
// fields as detect_bench and the peer:
//   {"impl":"orchard","bench":"train_frozen","size":299,"unit":"image","threads":2,...,
//    "median_ms":..,"per_s":..,"phases_ms":{..},"check":{..}}
// check: train benches: the parameter counts (all, trained) and the loss of two steps on a
// dropout-free copy of the model from the same weights (step 1: the forward pass; step 2: after
// one clipped SGD step); beam: the best caption of every image and its log-probability.
#include <ATen/CPUGeneratorImpl.h>
#include <CLI/CLI.hpp>
#include <malloc.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "bench_util.h"
#include "orchard/core/error.h"
#include "orchard/tasks/caption/captioning.h"

namespace {

using orchard::bench::emit;
using orchard::bench::g_budget_seconds;
using orchard::bench::keep_freed_memory;
using orchard::bench::time_loop;
using orchard::bench::TimedResult;
using orchard::bench::wall_now;

using nlohmann::json;
using orchard::Error;

constexpr int64_t kStartId = 0, kEndId = 1;
constexpr double kClipNorm = 5.0;       // im2txt's clip_gradients
constexpr double kFrozenLr = 2.0;       // im2txt's initial_learning_rate
constexpr double kFinetuneLr = 0.0005;  // im2txt's train_inception_learning_rate

std::vector<int64_t> split_ints(const std::string& s) {
  std::vector<int64_t> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');)
    if (!item.empty()) out.push_back(std::stoll(item));
  return out;
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

// ---- inputs shared with the peer: meta.json + one raw little-endian file per input tensor +
// weights.bin (the model's parameters and buffers back to back, offsets in meta.json).

json tensor_meta(const at::Tensor& t) {
  return {{"shape", t.sizes().vec()}, {"dtype", t.scalar_type() == at::kLong ? "int64" : "float32"}};
}

void write_raw(std::ofstream& f, const at::Tensor& t, const std::string& path) {
  TORCH_CHECK(t.scalar_type() == at::kFloat || t.scalar_type() == at::kLong, "only float32 / int64 tensors");
  const auto c = t.contiguous().cpu();
  f.write(static_cast<const char*>(c.data_ptr()), static_cast<std::streamsize>(c.nbytes()));
  if (!f) throw Error("cannot write " + path);
}

at::Tensor read_raw(std::ifstream& f, const json& m, const std::string& path) {
  const auto shape = m.at("shape").get<std::vector<int64_t>>();
  const auto dtype = m.at("dtype").get<std::string>() == "int64" ? at::kLong : at::kFloat;
  auto t = at::empty(shape, dtype);
  f.read(static_cast<char*>(t.data_ptr()), static_cast<std::streamsize>(t.nbytes()));
  if (!f || f.gcount() != static_cast<std::streamsize>(t.nbytes())) throw Error(path + ": short or missing");
  return t;
}

class Inputs {
 public:
  explicit Inputs(std::string dir) : dir_(std::move(dir)) {}

  // meta.json's "config", or null when there is no meta.json.
  json config() const {
    std::ifstream f(dir_ + "/meta.json");
    return f ? json::parse(f).at("config") : json();
  }

  void write(const std::string& name, const at::Tensor& t) {
    const std::string path = dir_ + "/" + name + ".bin";
    std::ofstream f(path, std::ios::binary);
    write_raw(f, t, path);
    tensors_[name] = tensor_meta(t);
  }
  void write_weights(torch::nn::Module& model) {
    const std::string path = dir_ + "/weights.bin";
    std::ofstream f(path, std::ios::binary);
    json index = json::array();
    int64_t offset = 0;
    auto add = [&](const std::string& name, const at::Tensor& t) {
      auto m = tensor_meta(t);
      m["name"] = name;
      m["offset"] = offset;
      index.push_back(m);
      write_raw(f, t.detach(), path);
      offset += static_cast<int64_t>(t.nbytes());
    };
    for (const auto& p : model.named_parameters()) add(p.key(), p.value());
    for (const auto& b : model.named_buffers()) add(b.key(), b.value());
    weights_ = index;
  }
  void finish(const json& config) {
    std::ofstream f(dir_ + "/meta.json");
    f << json{{"config", config}, {"tensors", tensors_}, {"weights", weights_}}.dump(1) << "\n";
    if (!f) throw Error("cannot write " + dir_ + "/meta.json");
  }

  at::Tensor read(const std::string& name) {
    load_meta();
    if (!meta_.at("tensors").contains(name)) throw Error(dir_ + "/meta.json: no tensor '" + name + "'");
    const std::string path = dir_ + "/" + name + ".bin";
    std::ifstream f(path, std::ios::binary);
    return read_raw(f, meta_["tensors"][name], path);
  }
  // Copies weights.bin into every parameter and buffer of `model`, checking names and shapes
  // both ways.
  void load_weights(torch::nn::Module& model) {
    load_meta();
    const std::string path = dir_ + "/weights.bin";
    std::ifstream f(path, std::ios::binary);
    std::map<std::string, at::Tensor> dst;
    for (const auto& p : model.named_parameters()) dst[p.key()] = p.value();
    for (const auto& b : model.named_buffers()) dst[b.key()] = b.value();
    torch::NoGradGuard no_grad;
    size_t loaded = 0;
    for (const auto& m : meta_.at("weights")) {
      const auto name = m.at("name").get<std::string>();
      f.seekg(m.at("offset").get<int64_t>());
      const auto t = read_raw(f, m, path);
      auto it = dst.find(name);
      if (it == dst.end()) throw Error(path + ": '" + name + "' is not a variable of this model");
      if (it->second.sizes() != t.sizes()) throw Error(path + ": '" + name + "' has another shape");
      it->second.copy_(t);
      ++loaded;
    }
    if (loaded != dst.size())
      throw Error(path + ": " + std::to_string(loaded) + " variables for a model of " + std::to_string(dst.size()));
  }

 private:
  void load_meta() {
    if (!meta_.is_null()) return;
    std::ifstream f(dir_ + "/meta.json");
    if (!f) throw Error(dir_ + "/meta.json: missing (run with --make_inputs first)");
    meta_ = json::parse(f);
  }

  std::string dir_;
  json meta_, tensors_ = json::object(), weights_ = json::array();
};

struct Dims {
  int64_t vocab = 12000, embedding = 512, lstm = 512, batch = 16, caption_length = 16, beam_images = 32;
  std::vector<int64_t> sizes = {299, 150};

  json to_json(uint64_t seed, double end_bias) const {
    return {{"vocab", vocab},       {"embedding", embedding}, {"lstm", lstm},
            {"batch", batch},       {"sizes", sizes},         {"caption_length", caption_length},
            {"seed", seed},         {"end_bias", end_bias},   {"beam_images", beam_images},
            {"start_id", kStartId}, {"end_id", kEndId}};
  }
  static Dims from_json(const json& j) {
    Dims d;
    d.vocab = j.at("vocab");
    d.embedding = j.at("embedding");
    d.lstm = j.at("lstm");
    d.batch = j.at("batch");
    d.caption_length = j.at("caption_length");
    d.beam_images = j.at("beam_images");
    d.sizes = j.at("sizes").get<std::vector<int64_t>>();
    return d;
  }
};

orchard::tasks::CaptionConfig task_config(const Dims& d, bool finetune, bool dropout) {
  orchard::tasks::CaptionConfig c;
  c.model.vocab_size = d.vocab;
  c.model.embedding_size = d.embedding;
  c.model.num_lstm_units = d.lstm;
  if (!dropout) {
    c.model.lstm_dropout_keep_prob = 1.0;
    c.model.inception_dropout_keep_prob = 1.0;
  }
  c.train_inception = finetune;
  c.start_id = kStartId;
  c.end_id = kEndId;
  c.beam.beam_size = 3;
  c.beam.max_caption_length = 20;
  return c;
}

// The model's weights (im2txt's initialisation, seeded), with two changes so that the benches
// see numbers more like a trained model's: the encoder's batch-norm statistics come from one
// batch of the first size (momentum 1), not (0, 1), and the logits' bias of </S> is raised by
// end_bias. The untrained logits spread by only ~0.1 (top 3 of 12000 words ~0.45 above the
// mean): +0.25 puts </S> near the top-3 border, so that the best captions end at lengths 2-19
// and a few never end (the search's fallback to partial captions); +0.5 ends almost all at 2-3.
void make_inputs(const std::string& dir, uint64_t seed, const Dims& d, double end_bias) {
  torch::manual_seed(seed);
  auto g = at::make_generator<at::CPUGeneratorImpl>(seed + 1);
  auto options = task_config(d, false, true).model;
  options.batch_norm_decay = 0.0;  // running statistics := the calibration batch's
  orchard::caption::ShowAndTell model(options);
  Inputs in(dir);
  std::map<int64_t, at::Tensor> images;
  for (int64_t s : d.sizes) {
    images[s] = at::rand({d.batch, 3, s, s}, g) * 2 - 1;
    in.write("images_" + std::to_string(s), images[s]);
  }
  at::Tensor embeddings;
  {
    torch::NoGradGuard no_grad;
    model->train();
    model->embed_images(images[d.sizes.front()], /*train_encoder=*/true);
    model->eval();
    embeddings = model->embed_images(images[d.sizes.front()], /*train_encoder=*/false);
    for (const auto& p : model->named_parameters())
      if (p.key() == "logits.bias") p.value()[kEndId] += end_bias;
  }
  model->train();
  in.write_weights(*model);
  // Captions: <S>, caption_length - 2 random words (not <S>, </S>, <UNK>), </S>.
  auto captions = at::randint(3, d.vocab, {d.batch, d.caption_length}, g, at::kLong);
  captions.select(1, 0).fill_(kStartId);
  captions.select(1, d.caption_length - 1).fill_(kEndId);
  in.write("captions", captions);
  // Beam-search inputs: random embeddings as spread as the model's own.
  in.write("beam_embeddings", at::randn({d.beam_images, d.embedding}, g) * embeddings.std().item<double>());
  in.finish(d.to_json(seed, end_bias));
}

double seconds_since(double t0) { return wall_now() - t0; }

// A batch as the caption parser writes it: caption_ids, caption_length, image_id.
orchard::data::Batch caption_batch(const at::Tensor& captions) {
  const int64_t b = captions.size(0), t = captions.size(1);
  orchard::data::Batch batch;
  batch.size = b;
  batch.fields["caption_ids"] = captions.to(at::kLong);
  batch.fields["caption_length"] = at::full({b}, t, at::kLong);
  batch.fields["image_id"] = at::arange(b, at::kLong);
  return batch;
}

struct TrainStep {
  orchard::tasks::CaptionTask task;
  torch::optim::SGD optimizer;

  TrainStep(const orchard::tasks::CaptionConfig& config, Inputs& in)
      : task(config),
        optimizer(task.trainable_parameters(),
                  torch::optim::SGDOptions(config.train_inception ? kFinetuneLr : kFrozenLr)) {
    in.load_weights(*task.module());
    task.module()->train();
  }

  // engine::Trainer's step: forward, loss, zero_grad, backward, clip, optimizer step.
  double run(const at::Tensor& images, const orchard::data::Batch& batch, std::map<std::string, double>* phase) {
    double t0 = wall_now();
    orchard::data::Batch with_images = batch;
    with_images.images = images;
    const auto out = task.forward(with_images, orchard::tasks::Pass::kTrain);
    (*phase)["forward"] = seconds_since(t0);
    t0 = wall_now();
    auto terms = task.loss(*out, batch, batch.size);
    (*phase)["loss"] = seconds_since(t0);
    t0 = wall_now();
    optimizer.zero_grad();
    terms.total().backward();
    (*phase)["backward"] = seconds_since(t0);
    t0 = wall_now();
    torch::nn::utils::clip_grad_norm_(task.module()->parameters(), kClipNorm);
    (*phase)["clip"] = seconds_since(t0);
    t0 = wall_now();
    optimizer.step();
    (*phase)["optimizer"] = seconds_since(t0);
    return terms.total().item<double>();
  }
};

int64_t count(const std::vector<torch::Tensor>& params) {
  int64_t n = 0;
  for (const auto& p : params) n += p.numel();
  return n;
}

// The best caption of every image, its log-probability and whether it is complete.
json beam_check(const std::vector<std::vector<orchard::caption::GeneratedCaption>>& captions) {
  json words = json::array(), logprobs = json::array();
  int64_t complete = 0, length = 0;
  for (const auto& c : captions) {
    const auto& best = c.front();
    words.push_back(best.words);
    logprobs.push_back(best.logprob);
    complete += best.words.back() == kEndId;
    length += static_cast<int64_t>(best.words.size());
  }
  return {{"words", words},
          {"logprobs", logprobs},
          {"complete", complete},
          {"mean_length", static_cast<double>(length) / static_cast<double>(captions.size())}};
}

}  // namespace

int main(int argc, char** argv) {
  keep_freed_memory();
  CLI::App app{"Orchard captioning benchmarks (training step with the encoder frozen / fine-tuned, beam search)"};
  std::string inputs_dir, what = "train_frozen,train_finetune,beam,beam_per_image";
  std::string frozen_sizes = "299,150", finetune_sizes = "150", make_sizes;
  int threads = 2;
  int64_t finetune_batch = 0, warmup = 2, train_iters = 10, beam_iters = 10;
  uint64_t seed = 1;
  double end_bias = 0.25;
  bool make = false;
  Dims dims;
  app.add_option("--inputs", inputs_dir, "Directory of the shared inputs (meta.json + *.bin)")->required();
  app.add_flag("--make_inputs", make, "Write the inputs into --inputs (unless they are there with these settings)");
  app.add_option("--seed", seed, "--make_inputs: random seed")->capture_default_str();
  app.add_option("--vocab", dims.vocab, "--make_inputs: vocabulary size")->capture_default_str();
  app.add_option("--embedding", dims.embedding, "--make_inputs: image and word embedding size")->capture_default_str();
  app.add_option("--lstm", dims.lstm, "--make_inputs: LSTM units")->capture_default_str();
  app.add_option("--batch", dims.batch, "--make_inputs: images and captions per training batch")->capture_default_str();
  app.add_option("--caption_length", dims.caption_length, "--make_inputs: ids per caption, <S> and </S> included")
      ->capture_default_str();
  app.add_option("--beam_images", dims.beam_images, "--make_inputs: images (embeddings) for beam search")
      ->capture_default_str();
  app.add_option("--sizes", make_sizes, "--make_inputs: image sizes (default: frozen and fine-tune sizes)");
  app.add_option("--end_bias", end_bias, "--make_inputs: added to the logits' bias of </S>")->capture_default_str();
  app.add_option("--threads", threads, "at::set_num_threads")->capture_default_str();
  app.add_option("--what", what, "Comma list of train_frozen, train_finetune, beam, beam_per_image")
      ->capture_default_str();
  app.add_option("--frozen_sizes", frozen_sizes, "Image sizes of train_frozen")->capture_default_str();
  app.add_option("--finetune_sizes", finetune_sizes, "Image sizes of train_finetune")->capture_default_str();
  app.add_option("--finetune_batch", finetune_batch, "Batch of train_finetune (0: the inputs' batch)");
  app.add_option("--warmup", warmup, "Untimed iterations of each bench")->capture_default_str();
  app.add_option("--train_iters", train_iters, "Timed training steps (cut by --budget_s)")->capture_default_str();
  app.add_option("--beam_iters", beam_iters, "Timed beam searches (cut by --budget_s)")->capture_default_str();
  app.add_option("--budget_s", g_budget_seconds, "Seconds per measurement: timed iterations stop after it (at least 3)")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  try {
    at::set_num_threads(threads);
    Inputs in(inputs_dir);
    if (make) {
      if (make_sizes.empty()) make_sizes = frozen_sizes + "," + finetune_sizes;
      dims.sizes.clear();
      for (int64_t s : split_ints(make_sizes))
        if (std::find(dims.sizes.begin(), dims.sizes.end(), s) == dims.sizes.end()) dims.sizes.push_back(s);
      const json wanted = dims.to_json(seed, end_bias);
      if (in.config() == wanted) {
        std::cerr << "caption_bench: inputs in " << inputs_dir << " are up to date\n";
        return 0;
      }
      std::cerr << "caption_bench: writing inputs into " << inputs_dir << "...\n";
      make_inputs(inputs_dir, seed, dims, end_bias);
      return 0;
    }
    const json config = in.config();
    if (config.is_null()) throw Error(inputs_dir + "/meta.json: missing (run with --make_inputs first)");
    dims = Dims::from_json(config);
    torch::manual_seed(seed);  // dropout
    const auto captions = in.read("captions");

    for (const auto& w : split(what)) {
      if (w == "train_frozen" || w == "train_finetune") {
        const bool finetune = w == "train_finetune";
        const int64_t b = finetune && finetune_batch > 0 ? std::min(finetune_batch, dims.batch) : dims.batch;
        const auto batch = caption_batch(captions.narrow(0, 0, b));
        for (int64_t size : split_ints(finetune ? finetune_sizes : frozen_sizes)) {
          const auto images = in.read("images_" + std::to_string(size)).narrow(0, 0, b).contiguous();
          TimedResult r;
          {
            TrainStep step(task_config(dims, finetune, /*dropout=*/true), in);
            r = time_loop(warmup, train_iters, [&](auto* phase) { step.run(images, batch, phase); });
          }
          // Two steps of a dropout-free copy from the same weights: the peer must agree.
          TrainStep exact(task_config(dims, finetune, /*dropout=*/false), in);
          std::map<std::string, double> phase;
          json check = {{"params", count(exact.task.module()->parameters())},
                        {"trainable_params", count(exact.task.trainable_parameters())}};
          check["loss_step1"] = exact.run(images, batch, &phase);
          check["loss_step2"] = exact.run(images, batch, &phase);
          r.check = check;
          emit(w, size, "image", static_cast<double>(b), threads, warmup, r,
               {{"batch", b}, {"caption_length", dims.caption_length}});
        }
      } else if (w == "beam" || w == "beam_per_image") {
        orchard::tasks::CaptionTask task(task_config(dims, false, true));
        in.load_weights(*task.module());
        const auto embeddings = in.read("beam_embeddings");
        const int64_t n = embeddings.size(0);
        std::vector<std::vector<orchard::caption::GeneratedCaption>> out;
        const int64_t bench_warmup = w == "beam" ? warmup : std::min<int64_t>(warmup, 1);
        TimedResult r = time_loop(bench_warmup, beam_iters, [&](auto*) {
          if (w == "beam") {
            out = task.generate_from_embeddings(embeddings);
          } else {
            out.clear();
            for (int64_t i = 0; i < n; ++i) out.push_back(task.generate_from_embeddings(embeddings.narrow(0, i, 1))[0]);
          }
        });
        const auto& beam = task.config().beam;
        r.check = beam_check(out);
        emit(w, n, "caption", static_cast<double>(n), threads, bench_warmup, r,
             {{"beam_size", beam.beam_size}, {"max_caption_length", beam.max_caption_length}});
      } else {
        throw Error("--what: unknown bench '" + w + "' (train_frozen, train_finetune, beam, beam_per_image)");
      }
    }
  } catch (const std::exception& e) {
    std::cerr << "caption_bench: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
