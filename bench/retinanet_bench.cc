// One detection model from a pipeline.config through orchard::tasks::DetectionTask, the C++ side
// of bench/retinanet.sh: the SSD family (RetinaNet: ssd_resnet50_v1_fpn, SSDLite), Faster R-CNN
// (faster_rcnn_resnet50) and Mask R-CNN (mask_rcnn_resnet50_atrous: each groundtruth box gets the
// ellipse inscribed in it as its instance mask); peer bench/peer_retinanet.py (torchvision).
//
// --mode train: forward with the targets, the task's loss (its named terms + L2), backward, the
// config's gradient_clipping_by_norm and optimizer step, on random images in [-1, 1] with
// `--boxes` random groundtruth boxes per image. --mode infer: eval mode, no gradient, forward +
// postprocess (score conversion, box decoding, NMS). Prints one JSON line (bench_util.h's
// fields); "check" holds the loss terms (train) or the detections per image (infer).
//
// --size S runs an S x S input; keep_aspect_ratio_resizer configs (Faster R-CNN's 600..1024) take
// any size, and the batch says so ("image_size"), as the input pipeline does. --breakdown
// (faster_rcnn) times the parts separately instead: first stage, RPN proposals (decode + NMS),
// the proposal sampling (train), crop_and_resize + max pool, block4 + box predictor, then the
// backward of each stage (train) or the postprocess (infer); rows "4r"/"6r" time the grid_sample
// crops (crop_and_resize_grid_sample) on the same boxes for reference, outside the total's parts.
#include <CLI/CLI.hpp>
#include <torch/torch.h>

#include <cmath>
#include <iostream>

#include "bench_util.h"
#include "orchard/detect/config/config.h"
#include "orchard/detect/heads/rpn.h"
#include "orchard/detect/meta_arch/faster_rcnn.h"
#include "orchard/detect/ops/crop_and_resize.h"
#include "orchard/tasks/detect/detection.h"
#include "orchard/train/optimizers.h"

using orchard::bench::emit;
using orchard::bench::time_loop;
using orchard::bench::wall_now;

namespace {

double seconds_since(double t0) { return wall_now() - t0; }

struct BreakdownCounts {
  int64_t proposals = 0;              // second-stage boxes of the batch
  int64_t unit_logit_detections = 0;  // infer: detections of the unit-deviation logits
};

// Faster R-CNN in its parts, as FasterRcnnMetaArchitecture::forward (+ postprocess at inference)
// runs them without the output packing, each part timed on its own. Training replaces the
// task's loss with a stand-in (the sum of squares of each stage's outputs: the same backward
// graph) and splits the backward pass at the first stage's features: the second stage's
// (block4, the box predictor and crop_and_resize's gradient into the features), then the first
// stage's. crop_and_resize's own backward is timed once more on its own.
void faster_rcnn_breakdown(orchard::tasks::FasterRcnnMetaArchitecture& meta, const orchard::tasks::FasterRcnnConfig& c,
                           const orchard::data::Batch& b, bool training, std::map<std::string, double>* phase,
                           BreakdownCounts* counts) {
  namespace detect = orchard::detect;
  const auto& images = b.images;
  const int64_t batch = images.size(0), h = images.size(2), w = images.size(3);
  const auto pixels = torch::tensor({float(h), float(w), float(h), float(w)});
  auto& model = meta.model();
  double t0 = wall_now();
  const auto first = model->first_stage(images);
  (*phase)["1_first_stage"] = seconds_since(t0);
  t0 = wall_now();
  const auto kept = detect::rpn_anchors(meta.anchors(h, w), h, w, training, c.rpn);
  const std::vector<std::pair<int64_t, int64_t>> sizes(static_cast<size_t>(batch), {h, w});
  const auto proposals =
      detect::rpn_proposals(first.box_encodings.detach().index_select(1, kept.index),
                            first.objectness.detach().index_select(1, kept.index), kept.boxes, sizes, c.rpn);
  (*phase)["2_rpn_proposals_nms"] = seconds_since(t0);
  t0 = wall_now();
  std::vector<at::Tensor> boxes, index;
  for (int64_t i = 0; i < batch; ++i) {
    auto p = proposals[static_cast<size_t>(i)].boxes;
    if (training) {
      const int64_t n = b.field("num_boxes")[i].item<int64_t>();
      const auto gt = b.field("boxes")[i].narrow(0, 0, n) * pixels;
      p = detect::sample_proposals(p, gt, b.field("classes")[i].narrow(0, 0, n), c.second_stage).boxes;
    }
    boxes.push_back(p / pixels);
    index.push_back(torch::full({p.size(0)}, i, torch::kLong));
  }
  const auto all = torch::cat(boxes), box_index = torch::cat(index);
  counts->proposals = all.size(0);
  if (training) (*phase)["3_sample_proposals"] = seconds_since(t0);
  // The second stage on a copy of the features, so that its backward stops there.
  const auto features = training ? first.features.detach().requires_grad_() : first.features;
  t0 = wall_now();
  const int64_t crop = c.model.initial_crop_size;
  auto crops = detect::crop_and_resize(features, all, box_index, crop, crop);
  crops = torch::max_pool2d(crops, c.model.maxpool_kernel_size, c.model.maxpool_stride);
  (*phase)["4_crop_and_resize_pool"] = seconds_since(t0);
  {
    // The same crops by the grid_sample path (what the CPU ran before its kernel; other devices).
    torch::NoGradGuard no_grad;
    t0 = wall_now();
    torch::max_pool2d(detect::crop_and_resize_grid_sample(features, all, box_index, crop, crop),
                      c.model.maxpool_kernel_size, c.model.maxpool_stride);
    (*phase)["4r_reference_grid_sample_crop_pool"] = seconds_since(t0);
  }
  t0 = wall_now();
  // box_classifier_features crops again (timed above) before block4.
  const auto [refined, logits] = model->box_predictor(model->box_classifier_features(features, all, box_index));
  (*phase)["5_block4_box_predictor"] = seconds_since(t0) - (*phase)["4_crop_and_resize_pool"];
  if (training) {
    t0 = wall_now();
    (refined.pow(2).mean() + logits.pow(2).mean()).backward();
    (*phase)["6_second_stage_backward"] = seconds_since(t0);
    t0 = wall_now();
    const auto stand_in = first.box_encodings.pow(2).mean() + first.objectness.pow(2).mean();
    torch::autograd::backward({stand_in, first.features}, {torch::ones({}), features.grad()});
    (*phase)["7_first_stage_backward"] = seconds_since(t0);
    const auto leaf = first.features.detach().requires_grad_();
    const auto grad = torch::rand({all.size(0), leaf.size(1), crop, crop});
    const auto again = detect::crop_and_resize(leaf, all, box_index, crop, crop);
    t0 = wall_now();
    again.backward(grad);
    (*phase)["6b_of_which_crop_and_resize_backward"] = seconds_since(t0);
    const auto reference = detect::crop_and_resize_grid_sample(leaf, all, box_index, crop, crop);
    t0 = wall_now();
    reference.backward(grad);
    (*phase)["6r_reference_grid_sample_backward"] = seconds_since(t0);
    return;
  }
  t0 = wall_now();
  int64_t offset = 0;
  for (int64_t i = 0; i < batch; ++i) {
    const int64_t n = proposals[static_cast<size_t>(i)].boxes.size(0);
    detect::box_classifier_detections(refined.narrow(0, offset, n), logits.narrow(0, offset, n),
                                      proposals[static_cast<size_t>(i)].boxes, h, w, c.nms, c.score_converter);
    offset += n;
  }
  (*phase)["6_postprocess"] = seconds_since(t0);
  // An untrained model's logits are large (features of the 0..255 input with batch norms at
  // their initial statistics): the softmax leaves every class score at 0 and the NMS nothing to
  // do. The same post-processing on logits scaled to unit deviation, as a trained model's spread.
  const auto spread = logits / logits.std();
  t0 = wall_now();
  offset = 0;
  int64_t found = 0;
  for (int64_t i = 0; i < batch; ++i) {
    const int64_t n = proposals[static_cast<size_t>(i)].boxes.size(0);
    found += detect::box_classifier_detections(refined.narrow(0, offset, n), spread.narrow(0, offset, n),
                                               proposals[static_cast<size_t>(i)].boxes, h, w, c.nms, c.score_converter)
                 .boxes.size(0);
    offset += n;
  }
  (*phase)["6b_postprocess_unit_logits"] = seconds_since(t0);
  counts->unit_logit_detections = found;
}

}  // namespace

int main(int argc, char** argv) {
  orchard::bench::keep_freed_memory();
  CLI::App app{"Orchard detection training step or inference from a pipeline.config (SSD family, Faster R-CNN)"};
  std::string config_path, mode = "train";
  int threads = 2;
  int64_t batch = 2, boxes = 4, iters = 5, warmup = 1, size = 0;
  uint64_t seed = 1;
  bool breakdown = false;
  app.add_option("--config", config_path, "pipeline.config")->required();
  app.add_option("--mode", mode, "train: one training step; infer: forward + postprocess without gradient")
      ->check(CLI::IsMember({"train", "infer"}))
      ->capture_default_str();
  app.add_option("--size", size, "Input height = width (0: the config's fixed size)")->capture_default_str();
  app.add_option("--batch", batch)->capture_default_str();
  app.add_option("--boxes", boxes, "Groundtruth boxes per image")->capture_default_str();
  app.add_option("--iters", iters)->capture_default_str();
  app.add_option("--warmup", warmup)->capture_default_str();
  app.add_option("--threads", threads)->capture_default_str();
  app.add_option("--seed", seed)->capture_default_str();
  app.add_option("--budget_s", orchard::bench::g_budget_seconds, "Seconds of timed iterations (at least 3)")
      ->capture_default_str();
  app.add_flag("--breakdown", breakdown, "faster_rcnn: time the parts of the step or inference separately");
  CLI11_PARSE(app, argc, argv);
  try {
    at::set_num_threads(threads);
    torch::manual_seed(seed);
    auto pipeline = orchard::detect::load_pipeline_config(config_path, /*strict=*/false);
    orchard::tasks::validate_detection_pipeline(pipeline, config_path);
    const auto config = orchard::tasks::detection_config(pipeline, /*channels_last=*/false);
    orchard::tasks::DetectionTask task(config);
    const int64_t max_boxes = config.input.max_boxes;
    int64_t h = config.input.height, w = config.input.width;
    if (size > 0) {
      if (!task.variable_input_size() && (size != h || size != w))
        throw std::runtime_error("--size " + std::to_string(size) + ": this config's input is fixed at " +
                                 std::to_string(h) + "x" + std::to_string(w));
      h = w = size;
    }
    const auto images = at::rand({batch, 3, h, w}) * 2 - 1;
    // Boxes of 10-50% of each side, classes 1..num_classes.
    orchard::data::Batch b;
    b.size = batch;
    b.images = images;
    auto gt = at::zeros({batch, max_boxes, 4});
    const auto lo = at::rand({batch, boxes, 2}) * 0.5, extent = at::rand({batch, boxes, 2}) * 0.4 + 0.1;
    gt.narrow(1, 0, boxes).copy_(at::cat({lo, lo + extent}, 2));
    b.fields["boxes"] = gt;
    b.fields["classes"] = at::zeros({batch, max_boxes}, at::kLong);
    b.fields["classes"].narrow(1, 0, boxes).copy_(at::randint(1, config.num_classes + 1, {batch, boxes}));
    b.fields["is_crowd"] = at::zeros({batch, max_boxes}, at::kBool);
    b.fields["num_boxes"] = at::full({batch}, boxes, at::kLong);
    b.fields["image_size"] = torch::tensor({h, w}, at::kLong).repeat({batch, 1});  // each image fills the input
    if (task.meta_architecture().predicts_masks()) {
      // Mask R-CNN: each box's instance mask is the ellipse inscribed in it (the peer's too).
      const auto ys = (at::arange(h, at::kFloat) + 0.5) / h, xs = (at::arange(w, at::kFloat) + 0.5) / w;
      const auto centre = (gt.narrow(2, 0, 2) + gt.narrow(2, 2, 2)) / 2,
                 radius = (gt.narrow(2, 2, 2) - gt.narrow(2, 0, 2)) / 2;
      auto rel = [&](const at::Tensor& axis, int64_t k) {  // [batch, max_boxes, n] squared offset / radius
        return ((axis.view({1, 1, -1}) - centre.select(2, k).unsqueeze(2)) /
                radius.select(2, k).clamp_min(1e-6).unsqueeze(2))
            .pow(2);
      };
      auto masks = (rel(ys, 0).unsqueeze(3) + rel(xs, 1).unsqueeze(2)) <= 1;
      masks.narrow(1, boxes, max_boxes - boxes).zero_();
      b.fields["masks"] = masks;
    }
    const auto input = task.input_shape(b);

    int64_t params = 0;
    for (const auto& p : task.module()->parameters()) params += p.numel();
    auto* faster_rcnn = dynamic_cast<orchard::tasks::FasterRcnnMetaArchitecture*>(&task.meta_architecture());
    if (breakdown && !faster_rcnn) throw std::runtime_error("--breakdown is for faster_rcnn configs");
    const auto* fc = faster_rcnn ? dynamic_cast<const orchard::tasks::FasterRcnnConfig*>(config.model.get()) : nullptr;
    BreakdownCounts counts;
    orchard::bench::TimedResult r;
    if (breakdown && mode == "train") {
      task.module()->train();
      r = time_loop(warmup, iters, [&](std::map<std::string, double>* phase) {
        task.module()->zero_grad();
        faster_rcnn_breakdown(*faster_rcnn, *fc, b, /*training=*/true, phase, &counts);
      });
      r.check = {{"proposals", counts.proposals}, {"params", params}};
    } else if (mode == "train") {
      task.module()->train();
      auto [optimizer, lr] =
          orchard::train::make_od_api_optimizer(pipeline.train_config().optimizer(), task.module()->parameters());
      const double clip = pipeline.train_config().gradient_clipping_by_norm();
      orchard::tasks::Loss terms;
      r = time_loop(warmup, iters, [&](std::map<std::string, double>* phase) {
        double t0 = wall_now();
        const auto out = task.forward(b, orchard::tasks::Pass::kTrain);
        (*phase)["forward"] = seconds_since(t0);
        t0 = wall_now();
        terms = task.loss(*out, b, batch);
        (*phase)["loss"] = seconds_since(t0);
        t0 = wall_now();
        optimizer->zero_grad();
        terms.total().backward();
        (*phase)["backward"] = seconds_since(t0);
        t0 = wall_now();
        if (clip > 0) torch::nn::utils::clip_grad_norm_(task.module()->parameters(), clip);  // as the trainer
        optimizer->step();
        (*phase)["optimizer"] = seconds_since(t0);
      });
      // The loss terms of the last step: each must exist and be finite.
      nlohmann::json losses = nlohmann::json::object();
      for (const auto& [name, value] : terms.terms)
        if (name.rfind("batch_", 0) != 0) losses[name] = value.item<double>();
      if (terms.regularizer.defined()) losses["regularization_loss"] = terms.regularizer.item<double>();
      const double total = terms.total().item<double>();
      for (const auto& [name, value] : losses.items())
        if (!std::isfinite(value.get<double>())) throw std::runtime_error("loss " + name + " is not finite");
      r.check = {{"total_loss", total}, {"losses", losses}, {"params", params}};
    } else {
      task.module()->eval();
      torch::NoGradGuard no_grad;
      if (faster_rcnn && !breakdown) {
        // An untrained two-stage model's class logits are ~100 (see faster_rcnn_breakdown): its
        // softmax scores every class 0 and nothing reaches the third stage. Zero logits score every
        // class 1 / (num_classes + 1) > the samples' threshold 0, so the post-processing keeps
        // max_total_detections, as a trained model does under these configs (and torchvision at
        // box_score_thresh 0), and Mask R-CNN predicts that many masks.
        for (auto& p : task.module()->named_parameters())
          if (p.key().find("class_logits.") != std::string::npos) p.value().zero_();
      }
      std::vector<orchard::tasks::ImageDetections> detections;
      r = time_loop(warmup, iters, [&](std::map<std::string, double>* phase) {
        if (breakdown) return faster_rcnn_breakdown(*faster_rcnn, *fc, b, /*training=*/false, phase, &counts);
        double t0 = wall_now();
        const auto out = task.forward(images);
        (*phase)["forward"] = seconds_since(t0);
        t0 = wall_now();
        detections = task.postprocess(*out, input);
        (*phase)["postprocess"] = seconds_since(t0);
      });
      std::vector<int64_t> found;
      for (const auto& d : detections) found.push_back(d.boxes.defined() ? d.boxes.size(0) : 0);
      r.check = {{"detections", found}, {"params", params}};
      if (breakdown)
        r.check = {{"proposals", counts.proposals},
                   {"unit_logit_detections", counts.unit_logit_detections},
                   {"params", params}};
    }
    emit(breakdown ? mode + "_breakdown" : mode, batch, "image", static_cast<double>(batch), threads, warmup, r,
         {{"model", task.meta_architecture().name()}, {"height", h}, {"width", w}});
  } catch (const std::exception& e) {
    std::cerr << "retinanet_bench: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
