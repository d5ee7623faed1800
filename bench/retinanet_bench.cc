// The training step of an SSD-family model from a pipeline.config (RetinaNet:
// ssd_resnet50_v1_fpn), the C++ side of bench/retinanet.sh; peer bench/peer_retinanet.py
// (torchvision's retinanet_resnet50_fpn). Times forward, loss, backward and the config's
// optimizer step on random images in [-1, 1] with `--boxes` random groundtruth boxes per image,
// and prints one JSON line (bench_util.h's fields).
#include <CLI/CLI.hpp>
#include <torch/torch.h>

#include <iostream>

#include "bench_util.h"
#include "orchard/detect/config.h"
#include "orchard/tasks/detect/detection.h"
#include "orchard/train/optimizers.h"

using orchard::bench::emit;
using orchard::bench::time_loop;
using orchard::bench::wall_now;

namespace {
double seconds_since(double t0) { return wall_now() - t0; }
}  // namespace

int main(int argc, char** argv) {
  orchard::bench::keep_freed_memory();
  CLI::App app{"Orchard SSD-family training step (RetinaNet) from a pipeline.config"};
  std::string config_path;
  int threads = 2;
  int64_t batch = 2, boxes = 4, iters = 5, warmup = 1;
  uint64_t seed = 1;
  app.add_option("--config", config_path, "pipeline.config")->required();
  app.add_option("--batch", batch)->capture_default_str();
  app.add_option("--boxes", boxes, "Groundtruth boxes per image")->capture_default_str();
  app.add_option("--iters", iters)->capture_default_str();
  app.add_option("--warmup", warmup)->capture_default_str();
  app.add_option("--threads", threads)->capture_default_str();
  app.add_option("--seed", seed)->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  try {
    at::set_num_threads(threads);
    torch::manual_seed(seed);
    auto pipeline = orchard::detect::load_pipeline_config(config_path, /*strict=*/false);
    orchard::detect::validate_pipeline_config(pipeline, config_path);
    const auto config = orchard::tasks::detection_config(pipeline, /*channels_last=*/false);
    orchard::tasks::DetectionTask task(config);
    task.module()->train();
    auto [optimizer, lr] = orchard::train::make_od_api_optimizer(pipeline.train_config().optimizer(),
                                                                 task.module()->parameters());
    const int64_t h = config.input.height, w = config.input.width, max_boxes = config.input.max_boxes;
    const auto images = at::rand({batch, 3, h, w}) * 2 - 1;
    // Boxes of 10-50% of each side, classes 1..num_classes.
    orchard::data::Batch b;
    b.size = batch;
    b.images = images;
    auto gt = at::zeros({batch, max_boxes, 4});
    const auto lo = at::rand({batch, boxes, 2}) * 0.5, size = at::rand({batch, boxes, 2}) * 0.4 + 0.1;
    gt.narrow(1, 0, boxes).copy_(at::cat({lo, lo + size}, 2));
    b.fields["boxes"] = gt;
    b.fields["classes"] = at::zeros({batch, max_boxes}, at::kLong);
    b.fields["classes"].narrow(1, 0, boxes).copy_(at::randint(1, config.num_classes + 1, {batch, boxes}));
    b.fields["is_crowd"] = at::zeros({batch, max_boxes}, at::kBool);
    b.fields["num_boxes"] = at::full({batch}, boxes, at::kLong);
    orchard::tasks::Loss terms;
    auto r = time_loop(warmup, iters, [&](std::map<std::string, double>* phase) {
      double t0 = wall_now();
      const auto out = task.forward_train(b);
      (*phase)["forward"] = seconds_since(t0);
      t0 = wall_now();
      terms = task.loss(out, b, batch);
      (*phase)["loss"] = seconds_since(t0);
      t0 = wall_now();
      optimizer->zero_grad();
      terms.total().backward();
      (*phase)["backward"] = seconds_since(t0);
      t0 = wall_now();
      optimizer->step();
      (*phase)["optimizer"] = seconds_since(t0);
    });
    int64_t params = 0;
    for (const auto& p : task.module()->parameters()) params += p.numel();
    r.check = {{"total_loss", terms.total().item<double>()}, {"params", params}};
    emit("train", batch, "image", static_cast<double>(batch), threads, warmup, r,
         {{"model", task.meta_architecture().name()}, {"height", h}, {"width", w}});
  } catch (const std::exception& e) {
    std::cerr << "retinanet_bench: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
