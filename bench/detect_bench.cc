// Detection benchmarks (issue 6): `orchard detect`'s hot spots, timed as the same work in
// bench/peer_detect.py (PyTorch 1.13 + torchvision 0.14) is timed.
//
//   nms          detect::nms over N boxes (one class of an SSD image: 1917; a large set: 20000)
//   postprocess  detect::multiclass_nms of one image: [1917, 90] sigmoid scores, the COCO
//                config's batch_non_max_suppression (1e-8, IoU 0.6, 100 per class, 100 total)
//   loss         detect::ssd_loss forward + backward on fixed model outputs [B, 1917, 95]:
//                target assignment, smooth L1 + sigmoid cross entropy, hard example mining
//   model        SsdModel forward + backward, loss = sum of the outputs squared
//   train        DetectionTask: forward + loss (with the miner, L2) + backward + the config's
//                optimizer step (RMSProp), split into phases
//   eval         forward (eval mode, no grad) + DetectionTask::postprocess
//
// Inputs are identical on both sides: `--make_inputs` writes them (raw float32/int64 files +
// meta.json) into --inputs, and both programs read them from there. Prints one JSON line per
// measurement with the same fields as the peer:
//   {"impl":"orchard","bench":"nms","size":1917,"unit":"call","threads":2,"warmup":..,"iters":..,
//    "median_ms":..,"mean_ms":..,"min_ms":..,"cpu_ms":..,"per_s":..,"phases_ms":{..},"check":{..}}
// median_ms is the median time of one iteration (a call, a batch); per_s = units per second at
// that median (calls, or images for model/train/eval); cpu_ms = process CPU time per iteration
// (all threads). phases_ms holds per-phase medians where a bench has phases.
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <CLI/CLI.hpp>
#include <malloc.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
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
#include "orchard/detect/config/config.h"
#include "orchard/detect/meta_arch/ssd.h"
#include "orchard/tasks/detect/detection.h"

namespace {

// The loss inputs' groundtruth as the inputs directory holds it (peer_detect.py reads the same):
// per image [height, width, 0, index, then max_boxes x (ymin, xmin, ymax, xmax, class)].
constexpr int64_t kLossHeader = 4;

using orchard::bench::emit;
using orchard::bench::g_budget_seconds;
using orchard::bench::keep_freed_memory;
using orchard::bench::time_loop;
using orchard::bench::TimedResult;
using orchard::bench::wall_now;

using nlohmann::json;
using orchard::Error;

// ---- inputs shared with the peer: raw little-endian arrays + meta.json (name -> shape, dtype)

class Inputs {
 public:
  explicit Inputs(std::string dir) : dir_(std::move(dir)) {}

  void write(const std::string& name, const at::Tensor& t) {
    const auto c = t.contiguous().cpu();
    std::ofstream f(dir_ + "/" + name + ".bin", std::ios::binary);
    f.write(static_cast<const char*>(c.data_ptr()), static_cast<std::streamsize>(c.nbytes()));
    if (!f) throw Error("cannot write " + dir_ + "/" + name + ".bin");
    meta_[name] = {{"shape", c.sizes().vec()}, {"dtype", c.scalar_type() == at::kLong ? "int64" : "float32"}};
  }
  void finish(uint64_t seed) {
    std::ofstream f(dir_ + "/meta.json");
    f << json{{"seed", seed}, {"tensors", meta_}}.dump(1) << "\n";
    if (!f) throw Error("cannot write " + dir_ + "/meta.json");
  }

  at::Tensor read(const std::string& name) {
    if (meta_.is_null()) {
      std::ifstream f(dir_ + "/meta.json");
      if (!f) throw Error(dir_ + "/meta.json: missing (run with --make_inputs first)");
      meta_ = json::parse(f).at("tensors");
    }
    if (!meta_.contains(name)) throw Error(dir_ + "/meta.json: no tensor '" + name + "'");
    const auto shape = meta_[name].at("shape").get<std::vector<int64_t>>();
    const auto dtype = meta_[name].at("dtype").get<std::string>() == "int64" ? at::kLong : at::kFloat;
    auto t = at::empty(shape, dtype);
    std::ifstream f(dir_ + "/" + name + ".bin", std::ios::binary);
    f.read(static_cast<char*>(t.data_ptr()), static_cast<std::streamsize>(t.nbytes()));
    if (!f || f.gcount() != static_cast<std::streamsize>(t.nbytes()))
      throw Error(dir_ + "/" + name + ".bin: short or missing");
    return t;
  }

 private:
  std::string dir_;
  json meta_;
};

// Random boxes (ymin, xmin, ymax, xmax) with centres in [0, 1] and sides in [0.02, 0.27].
at::Tensor random_boxes(int64_t n, at::Generator& g) {
  const auto c = at::rand({n, 2}, g);
  const auto s = at::rand({n, 2}, g) * 0.25 + 0.02;
  return at::cat({c - s / 2, c + s / 2}, 1);
}

void make_inputs(const std::string& dir, uint64_t seed, const orchard::tasks::SsdMetaArchitecture& ssd,
                 int64_t num_classes, int64_t batch, int64_t max_boxes) {
  auto g = at::make_generator<at::CPUGeneratorImpl>(seed);
  const auto& anchors = ssd.anchors();
  const int64_t num_anchors = anchors.size(0);
  const auto& coder = ssd.config().loss.coder;
  Inputs in(dir);
  in.write("anchors", anchors);
  // NMS over one class of an SSD image: the anchors moved by random box codes.
  in.write("nms_1917_boxes", orchard::detect::decode_boxes(at::randn({num_anchors, 4}, g), anchors, coder));
  in.write("nms_1917_scores", at::rand({num_anchors}, g));
  in.write("nms_20000_boxes", random_boxes(20000, g));
  in.write("nms_20000_scores", at::rand({20000}, g));
  // One image's post-processing input: decoded boxes, sigmoid scores of logits ~ N(-4, 2^2)
  // (a trained model's are mostly low; every one passes the 1e-8 threshold either way).
  in.write("post_boxes", orchard::detect::decode_boxes(at::randn({num_anchors, 4}, g), anchors, coder));
  in.write("post_scores", (at::randn({num_anchors, num_classes}, g) * 2 - 4).sigmoid());
  // Loss input: model outputs [B, A, 4 + C + 1] (codes ~ N(0, 1), logits ~ N(-4, 2^2)) and
  // 1..12 groundtruth boxes per image, packed as kLossHeader says.
  in.write(
      "loss_outputs",
      at::cat({at::randn({batch, num_anchors, 4}, g), at::randn({batch, num_anchors, num_classes + 1}, g) * 2 - 4}, 2));
  const auto counts = at::randint(1, 13, {batch}, g, at::kLong);
  auto targets = at::zeros({batch, kLossHeader + 5 * max_boxes});
  for (int64_t i = 0; i < batch; ++i) {
    const int64_t n = counts[i].item<int64_t>();
    auto header = targets[i].narrow(0, 0, kLossHeader);
    header.copy_(at::tensor({480.0f, 640.0f, 0.0f, static_cast<float>(i)}));
    const auto lo = at::rand({n, 2}, g) * 0.7;
    const auto side = at::rand({n, 2}, g) * 0.3 + 0.05;
    const auto cls = at::randint(1, num_classes + 1, {n, 1}, g, at::kLong).to(at::kFloat);
    targets[i].narrow(0, kLossHeader, 5 * n).copy_(at::cat({lo, lo + side, cls}, 1).reshape(-1));
  }
  in.write("loss_counts", counts);
  in.write("loss_targets", targets);
  in.finish(seed);
}

double seconds_since(double t0) { return wall_now() - t0; }

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

int64_t parameter_count(torch::nn::Module& m) {
  int64_t n = 0;
  for (const auto& p : m.parameters()) n += p.numel();
  return n;
}

void zero_grads(torch::nn::Module& m) {
  for (auto& p : m.parameters()) p.mutable_grad().reset();
}

// The groundtruth of the loss inputs: box counts and the packed rows (the inputs file's layout,
// shared with peer_detect.py).
struct LossTargets {
  at::Tensor counts, packed;
};
LossTargets loss_batch(Inputs& in, int64_t batch) {
  return {in.read("loss_counts").narrow(0, 0, batch), in.read("loss_targets").narrow(0, 0, batch)};
}

// The same groundtruth as the detection parser's typed fields (DetectionTask::loss reads them).
orchard::data::Batch as_batch(const LossTargets& t) {
  const int64_t batch = t.packed.size(0), max_boxes = (t.packed.size(1) - kLossHeader) / 5;
  const auto rows = t.packed.narrow(1, kLossHeader, 5 * max_boxes).reshape({batch, max_boxes, 5});
  orchard::data::Batch b;
  b.size = batch;
  b.fields["boxes"] = rows.narrow(2, 0, 4).contiguous();
  b.fields["classes"] = rows.select(2, 4).round().to(at::kLong);
  b.fields["is_crowd"] = at::zeros({batch, max_boxes}, at::kBool);
  b.fields["num_boxes"] = t.counts;
  return b;
}

}  // namespace

int main(int argc, char** argv) {
  keep_freed_memory();
  CLI::App app{"Orchard detection benchmarks (NMS, post-processing, SSD loss, model, training step, eval)"};
  std::string config_path = "configs/ssd_mobilenet_v2_coco.config", inputs_dir,
              what = "nms,postprocess,loss,model,train,eval";
  std::string model_batches = "8";
  int threads = 2;
  int64_t batch = 8;
  uint64_t seed = 1;
  bool make = false;
  int64_t nms_iters = 200, post_iters = 40, loss_iters = 20, model_iters = 6, eval_iters = 5;
  int64_t warmup = 2;
  app.add_option("--config", config_path, "pipeline.config (the model, anchors, loss, post-processing)")
      ->capture_default_str();
  app.add_option("--inputs", inputs_dir, "Directory of the shared inputs (meta.json + *.bin)")->required();
  app.add_flag("--make_inputs", make, "Write the inputs into --inputs and exit");
  app.add_option("--seed", seed, "--make_inputs: random seed")->capture_default_str();
  app.add_option("--threads", threads, "at::set_num_threads")->capture_default_str();
  app.add_option("--what", what, "Comma list of nms, postprocess, loss, model, train, eval")->capture_default_str();
  app.add_option("--batch", batch, "Batch of the loss, train and eval benches (<= the inputs' batch for loss)")
      ->capture_default_str();
  app.add_option("--model_batches", model_batches, "Comma list of batch sizes for the model bench")
      ->capture_default_str();
  app.add_option("--warmup", warmup,
                 "Untimed iterations of model and train (x10 for nms over 1917 boxes, +1 for postprocess and loss, "
                 "1 for eval)")
      ->capture_default_str();
  app.add_option("--nms_iters", nms_iters)->capture_default_str();
  app.add_option("--post_iters", post_iters)->capture_default_str();
  app.add_option("--loss_iters", loss_iters)->capture_default_str();
  app.add_option("--model_iters", model_iters, "Timed iterations of model and train")->capture_default_str();
  app.add_option("--eval_iters", eval_iters)->capture_default_str();
  app.add_option("--budget_s", g_budget_seconds, "Seconds per measurement: timed iterations stop after it (at least 3)")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  try {
    at::set_num_threads(threads);
    torch::manual_seed(static_cast<uint64_t>(seed));
    auto pipeline = orchard::detect::load_pipeline_config(config_path, /*strict=*/false);
    orchard::tasks::validate_detection_pipeline(pipeline, config_path);
    const auto config = orchard::tasks::detection_config(pipeline, /*channels_last=*/false);
    orchard::tasks::DetectionTask task(config);
    auto& ssd = dynamic_cast<orchard::tasks::SsdMetaArchitecture&>(task.meta_architecture());
    const int64_t height = config.input.height, width = config.input.width;
    if (make) {
      make_inputs(inputs_dir, seed, ssd, config.num_classes, std::max<int64_t>(batch, 8), config.input.max_boxes);
      return 0;
    }
    Inputs in(inputs_dir);
    // Warm-up iterations: many for the fast calls, few for the slow ones (the peer's
    // post-processing takes seconds per image).
    const int64_t small_warmup = 10 * warmup, loss_warmup = warmup + 1, eval_warmup = 1;
    const auto anchors = in.read("anchors");
    TORCH_CHECK(at::allclose(anchors, ssd.anchors()), "the inputs' anchors are not this config's");

    for (const auto& w : split(what)) {
      if (w == "nms") {
        for (int64_t n : {1917, 20000}) {
          const auto boxes = in.read("nms_" + std::to_string(n) + "_boxes");
          const auto scores = in.read("nms_" + std::to_string(n) + "_scores");
          at::Tensor keep;
          const bool large = n > 5000;
          const int64_t iters = large ? std::max<int64_t>(nms_iters / 10, 5) : nms_iters;
          const int64_t nms_warmup = large ? warmup : small_warmup;
          auto r = time_loop(nms_warmup, iters, [&](auto*) { keep = orchard::detect::nms(boxes, scores, 0.6f); });
          r.check = {{"kept", keep.numel()}, {"index_sum", keep.sum().item<int64_t>()}};
          emit("nms", n, "call", 1, threads, nms_warmup, r);
        }
      } else if (w == "postprocess") {
        const auto boxes = in.read("post_boxes"), scores = in.read("post_scores");
        orchard::detect::Detections d;
        auto r = time_loop(loss_warmup, post_iters,
                           [&](auto*) { d = orchard::detect::multiclass_nms(boxes, scores, ssd.config().nms); });
        r.check = {{"kept", d.scores.numel()},
                   {"score_sum", d.scores.sum().item<double>()},
                   {"class_sum", d.classes.sum().item<int64_t>()}};
        emit("postprocess", boxes.size(0), "image", 1, threads, loss_warmup, r);
      } else if (w == "loss") {
        // detect::ssd_loss as DetectionTask::loss calls it, without the L2 term (that is the model's).
        const auto outputs = in.read("loss_outputs").narrow(0, 0, batch).contiguous();
        const auto b = loss_batch(in, batch);
        std::map<std::string, at::Tensor> l;
        auto r = time_loop(loss_warmup, loss_iters, [&](std::map<std::string, double>* phase) {
          const auto x = outputs.detach().requires_grad_(true);
          double t0 = wall_now();
          std::vector<at::Tensor> gt_boxes, gt_classes;
          for (int64_t i = 0; i < batch; ++i) {
            const int64_t n = b.counts[i].item<int64_t>();
            const auto rows = b.packed[i].narrow(0, kLossHeader, 5 * n).reshape({n, 5});
            gt_boxes.push_back(rows.narrow(1, 0, 4));
            gt_classes.push_back(rows.select(1, 4).round().to(at::kLong));
          }
          l = orchard::detect::ssd_loss(x.narrow(2, 0, 4), x.narrow(2, 4, x.size(2) - 4), ssd.anchors(), gt_boxes,
                                        gt_classes, ssd.config().loss);
          (*phase)["forward"] = seconds_since(t0);
          t0 = wall_now();
          (l.at("localization_loss") + l.at("classification_loss")).backward();
          (*phase)["backward"] = seconds_since(t0);
        });
        // What dominates the forward: target assignment and the miner (its NMS), timed alone.
        std::vector<orchard::detect::SsdTargets> targets(static_cast<size_t>(batch));
        {
          const auto x = outputs.narrow(2, 0, 4);
          std::vector<at::Tensor> cls_losses;
          auto parts = time_loop(loss_warmup, loss_iters, [&](std::map<std::string, double>* phase) {
            double t0 = wall_now();
            for (int64_t i = 0; i < batch; ++i) {
              const int64_t n = b.counts[i].item<int64_t>();
              const auto rows = b.packed[i].narrow(0, kLossHeader, 5 * n).reshape({n, 5});
              targets[i] = orchard::detect::assign_targets(ssd.anchors(), rows.narrow(1, 0, 4),
                                                           rows.select(1, 4).round().to(at::kLong),
                                                           ssd.config().loss.matcher, ssd.config().loss.coder);
            }
            (*phase)["assign_targets"] = seconds_since(t0);
            t0 = wall_now();
            const auto decoded = orchard::detect::decode_boxes(x, ssd.anchors(), ssd.config().loss.coder);
            // Rank by a stand-in loss: the logits' softplus sum (what the miner sees is a per-anchor loss).
            const auto rank = at::softplus(outputs.narrow(2, 4, outputs.size(2) - 4)).sum(2);
            (*phase)["miner_inputs"] = seconds_since(t0);
            t0 = wall_now();
            for (int64_t i = 0; i < batch; ++i)
              orchard::detect::mine_hard_examples(decoded[i], rank[i], targets[i].match, ssd.config().loss.miner);
            (*phase)["mine_hard_examples"] = seconds_since(t0);
          });
          for (const auto& [k, v] : parts.phases) r.phases[k] = v;
        }
        r.check = {{"localization_loss", l.at("localization_loss").item<double>()},
                   {"classification_loss", l.at("classification_loss").item<double>()}};
        emit("loss", batch, "batch", 1, threads, loss_warmup, r);
      } else if (w == "model") {
        auto& model = ssd.model();
        model->train();
        for (const auto& bs_text : split(model_batches)) {
          const int64_t bs = std::stoll(bs_text);
          const auto images = at::rand({bs, 3, height, width}) * 2 - 1;
          at::Tensor out;
          auto r = time_loop(warmup, model_iters, [&](std::map<std::string, double>* phase) {
            zero_grads(*model);
            double t0 = wall_now();
            out = model->forward(images);
            const auto loss = out.pow(2).sum();
            (*phase)["forward"] = seconds_since(t0);
            t0 = wall_now();
            loss.backward();
            (*phase)["backward"] = seconds_since(t0);
          });
          r.check = {{"output_shape", out.sizes().vec()}, {"params", parameter_count(*model)}};
          emit("model", bs, "image", static_cast<double>(bs), threads, warmup, r);
        }
      } else if (w == "train") {
        auto& model = ssd.model();
        model->train();
        const auto& rms = pipeline.train_config().optimizer().rms_prop_optimizer();
        TORCH_CHECK(pipeline.train_config().optimizer().has_rms_prop_optimizer(), "expected rms_prop_optimizer");
        torch::optim::RMSprop optimizer(
            model->parameters(),
            torch::optim::RMSpropOptions(rms.learning_rate().exponential_decay_learning_rate().initial_learning_rate())
                .alpha(rms.decay())
                .eps(rms.epsilon())
                .momentum(rms.momentum_optimizer_value()));
        const auto images = at::rand({batch, 3, height, width}) * 2 - 1;
        const auto b = as_batch(loss_batch(in, batch));
        orchard::tasks::Loss terms;
        auto r = time_loop(warmup, model_iters, [&](std::map<std::string, double>* phase) {
          double t0 = wall_now();
          const auto out = task.forward(images);
          (*phase)["forward"] = seconds_since(t0);
          t0 = wall_now();
          terms = task.loss(*out, b, batch);
          (*phase)["loss"] = seconds_since(t0);
          t0 = wall_now();
          optimizer.zero_grad();
          terms.total().backward();
          (*phase)["backward"] = seconds_since(t0);
          t0 = wall_now();
          optimizer.step();
          (*phase)["optimizer"] = seconds_since(t0);
        });
        r.check = {{"total_loss", terms.total().item<double>()}};
        emit("train", batch, "image", static_cast<double>(batch), threads, warmup, r);
      } else if (w == "eval") {
        auto& model = ssd.model();
        model->eval();
        const auto images = at::rand({batch, 3, height, width}) * 2 - 1;
        std::vector<orchard::tasks::ImageDetections> dets;
        auto r = time_loop(eval_warmup, eval_iters, [&](std::map<std::string, double>* phase) {
          torch::NoGradGuard no_grad;
          double t0 = wall_now();
          const auto out = task.forward(images);
          (*phase)["forward"] = seconds_since(t0);
          t0 = wall_now();
          dets = task.postprocess(*out);
          (*phase)["postprocess"] = seconds_since(t0);
        });
        int64_t kept = 0;
        for (const auto& d : dets) kept += d.scores.numel();
        r.check = {{"kept", kept}};
        emit("eval", batch, "image", static_cast<double>(batch), threads, eval_warmup, r);
        model->train();
      } else {
        throw Error("--what: unknown bench '" + w + "' (nms, postprocess, loss, model, train, eval)");
      }
    }
  } catch (const std::exception& e) {
    std::cerr << "detect_bench: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
