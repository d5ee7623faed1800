#include "orchard/tasks/detect/detection.h"

#include <spdlog/fmt/fmt.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>

#include "orchard/core/error.h"
#include "orchard/data/image.h"
#include "orchard/detect/heads/box_classifier.h"
#include "orchard/detect/metrics/coco_eval.h"
#include "orchard/detect/metrics/coco_mask.h"
#include "orchard/detect/metrics/voc_eval.h"

namespace orchard::tasks {
namespace {

// Ground-truth flags in the evaluation rows.
constexpr int kCrowd = 1, kDifficult = 2, kGroupOf = 4;

// The network input [-1, 1] (CHW or HWC) back to RGB bytes.
data::Image to_image(const at::Tensor& input, bool channels_last) {
  auto hwc = (channels_last ? input : input.permute({1, 2, 0})).contiguous();
  hwc = ((hwc.to(torch::kFloat) + 1) * 127.5).round().clamp(0, 255).to(torch::kUInt8).contiguous();
  data::Image im;
  im.height = static_cast<int>(hwc.size(0));
  im.width = static_cast<int>(hwc.size(1));
  im.pixels.assign(hwc.data_ptr<uint8_t>(), hwc.data_ptr<uint8_t>() + hwc.numel());
  return im;
}

// An instance mask's run lengths in an evaluation row stream: height, width, the number of runs,
// the runs (exact in doubles up to 2^53 pixels).
void append_rle(const detect::Rle& rle, std::vector<double>* out) {
  out->push_back(static_cast<double>(rle.h));
  out->push_back(static_cast<double>(rle.w));
  out->push_back(static_cast<double>(rle.counts.size()));
  for (uint32_t c : rle.counts) out->push_back(static_cast<double>(c));
}

// The masks of a row stream, in order.
std::vector<detect::Rle> read_rles(const at::Tensor& rows, const char* name) {
  std::vector<detect::Rle> out;
  if (!rows.defined()) return out;
  const auto v = rows.contiguous();
  const double* p = v.data_ptr<double>();
  const int64_t n = v.numel();
  for (int64_t i = 0; i < n;) {
    if (i + 3 > n) throw Error(std::string("evaluation rows ") + name + ": a truncated mask");
    detect::Rle rle;
    rle.h = static_cast<int64_t>(p[i]);
    rle.w = static_cast<int64_t>(p[i + 1]);
    const auto runs = static_cast<int64_t>(p[i + 2]);
    i += 3;
    if (runs < 0 || i + runs > n) throw Error(std::string("evaluation rows ") + name + ": a truncated mask");
    rle.counts.reserve(static_cast<size_t>(runs));
    for (int64_t r = 0; r < runs; ++r) rle.counts.push_back(static_cast<uint32_t>(p[i + r]));
    i += runs;
    out.push_back(std::move(rle));
  }
  return out;
}

detect::Rle encode_mask(const at::Tensor& mask) {  // [H, W] bool
  const auto bytes = mask.to(torch::kUInt8).contiguous();
  return detect::rle_encode(bytes.data_ptr<uint8_t>(), bytes.size(0), bytes.size(1));
}

bool has_metrics_set(const DetectionConfig& config, const std::string& name) {
  return std::find(config.metrics_sets.begin(), config.metrics_sets.end(), name) != config.metrics_sets.end();
}

}  // namespace

DetectionTask::DetectionTask(const DetectionConfig& config) : config_(config) {
  if (!config_.model) throw Error("detection: no model configured (pipeline.config's model)");
  meta_ = config_.model->build(config_.num_classes, config_.input);
  if (has_metrics_set(config_, "coco_mask_metrics") && !meta_->predicts_masks())
    throw Error("eval_config.metrics_set coco_mask_metrics needs a model that predicts instance masks (Mask R-CNN: "
                "mask_rcnn_box_predictor.predict_instance_masks); " + meta_->name() + " predicts boxes only");
  for (auto& p : meta_->module()->parameters())
    if (p.dim() == 4) l2_params_.push_back(p);  // conv kernels: conv_hyperparams' l2_regularizer
}

torch::Tensor DetectionTask::forward(const torch::Tensor& images) { return meta_->forward(images, InputShape{}, nullptr); }

torch::Tensor DetectionTask::forward(const torch::Tensor& images, const InputShape& input) {
  return meta_->forward(images, input, nullptr);
}

torch::Tensor DetectionTask::forward_train(const data::Batch& batch) {
  return meta_->forward(batch.images, input_shape(batch), &batch);
}

torch::Tensor DetectionTask::forward_eval(const data::Batch& batch) {
  return meta_->forward_eval(batch.images, input_shape(batch), batch);
}

data::SampleSpec DetectionTask::sample_spec() const {
  data::SampleSpec spec;
  const int64_t h = config_.input.height, w = config_.input.width;
  spec.image_shape = config_.input.channels_last ? std::vector<int64_t>{h, w, 3} : std::vector<int64_t>{3, h, w};
  spec.fields = data::detection_fields(config_.input, config_.num_classes);  // "masks" last with load_instance_masks
  return spec;
}

data::ParseFn DetectionTask::parser(bool training) const {
  const auto input = config_.input;
  const int64_t num_classes = config_.num_classes;
  return [input, num_classes, training](const std::string& record, const std::string& source, std::mt19937_64& rng,
                                        const data::SampleOut& out) {
    const auto example = data::parse_detection_example(record, source, num_classes, input.load_instance_masks);
    auto targets = data::detection_targets(out, 0, input.load_instance_masks);
    targets.num_classes = num_classes;
    data::preprocess_detection(example, input, training, rng, out.image, &targets, source);
  };
}

bool DetectionTask::variable_input_size() const {
  const auto& keep = config_.input.keep_aspect_ratio;
  return keep && !keep->pad_to_max_dimension;
}

InputShape DetectionTask::input_shape(const std::vector<std::pair<int64_t, int64_t>>& image_sizes) const {
  InputShape shape;
  shape.height = config_.input.height;
  shape.width = config_.input.width;
  if (!config_.input.keep_aspect_ratio) return shape;
  shape.image_sizes = image_sizes;
  if (variable_input_size()) {
    shape.height = shape.width = 1;
    for (const auto& [h, w] : image_sizes) {
      shape.height = std::max(shape.height, h);
      shape.width = std::max(shape.width, w);
    }
  }
  return shape;
}

InputShape DetectionTask::input_shape(const data::Batch& batch) const {
  std::vector<std::pair<int64_t, int64_t>> sizes;
  if (config_.input.keep_aspect_ratio) {
    const auto field = batch.field("image_size").to(torch::kCPU).contiguous();
    const auto a = field.accessor<int64_t, 2>();
    for (int64_t i = 0; i < field.size(0); ++i) sizes.emplace_back(a[i][0], a[i][1]);
  }
  return input_shape(sizes);
}

void DetectionTask::prepare_batch(data::Batch* batch) const {
  if (!variable_input_size() || batch->size == 0) return;
  const InputShape shape = input_shape(*batch);
  // SSD's anchors are normalised to the input (their size follows its shorter side): padding an
  // image into a larger input changes the anchors it is trained with, so, as the OD API, the
  // images of a batch must share one size.
  for (size_t i = 1; i < shape.image_sizes.size(); ++i)
    if (shape.image_sizes[i] != shape.image_sizes.front()) {
      const auto& [h0, w0] = shape.image_sizes.front();
      const auto& [h, w] = shape.image_sizes[i];
      throw Error(fmt::format(
          "keep_aspect_ratio_resizer without pad_to_max_dimension: a batch holds images of different sizes ({}x{} "
          "and {}x{}: {}); as in the OD API they cannot share one input. Use batch_size: 1, "
          "pad_to_max_dimension: true, or a crop to one aspect ratio (ssd_random_crop_fixed_aspect_ratio)",
          h0, w0, h, w, i < batch->sources.size() ? batch->sources[i] : std::string("this batch")));
    }
  const int64_t h_dim = config_.input.channels_last ? 1 : 2;
  if (batch->images.size(h_dim) == shape.height && batch->images.size(h_dim + 1) == shape.width) return;
  batch->images = batch->images.narrow(h_dim, 0, shape.height).narrow(h_dim + 1, 0, shape.width).contiguous();
}

Loss DetectionTask::loss(const torch::Tensor& outputs, const data::Batch& batch, int64_t global_batch_size) {
  auto out = outputs.to(torch::kFloat);  // losses in float32 even under autocast
  auto counts = batch.field("num_boxes").to(torch::kCPU);
  const auto& boxes = batch.field("boxes");
  const auto& classes = batch.field("classes");
  const auto& crowd = batch.field("is_crowd");
  const InputShape shape = input_shape(batch);
  std::vector<at::Tensor> gt_boxes, gt_classes;
  for (int64_t i = 0; i < out.size(0); ++i) {
    const int64_t n = counts[i].item<int64_t>();
    const auto trained = crowd[i].narrow(0, 0, n).logical_not();  // crowd regions are not trained on
    auto b = boxes[i].narrow(0, 0, n).index({trained});
    if (!shape.image_sizes.empty()) {  // normalised to the image -> to the padded input
      const auto [h, w] = shape.image_sizes[static_cast<size_t>(i)];
      const float sy = static_cast<float>(h) / static_cast<float>(shape.height);
      const float sx = static_cast<float>(w) / static_cast<float>(shape.width);
      if (sy != 1.0f || sx != 1.0f) b = b * torch::tensor({sy, sx, sy, sx}, b.options());
    }
    gt_boxes.push_back(b);
    gt_classes.push_back(classes[i].narrow(0, 0, n).index({trained}));
  }
  const auto losses = meta_->loss(out, shape, gt_boxes, gt_classes);
  // This replica's share: with replicas the gradients of the shares add up to the mean of the
  // per-replica losses (each normalised by its own matches, as the OD API's towers are).
  const double share = static_cast<double>(batch.size) / static_cast<double>(global_batch_size);
  Loss loss;
  for (const auto& [name, value] : losses) {
    auto& term = loss.terms[name] = value * share;
    loss.terms["batch_" + name] = value.detach();
    loss.data = loss.data.defined() ? loss.data + term : term;
  }
  if (config_.l2_weight > 0 && !l2_params_.empty()) {
    // slim's l2_regularizer(weight): weight * sum(w^2) / 2 per variable.
    auto l2 = torch::zeros({}, l2_params_[0].options());
    for (const auto& p : l2_params_) l2 = l2 + p.pow(2).sum();
    loss.regularizer = l2 * (config_.l2_weight / 2);
  }
  return loss;
}

std::vector<ImageDetections> DetectionTask::postprocess(const torch::Tensor& outputs, const InputShape& input) const {
  return meta_->postprocess(outputs, input);
}

void DetectionTask::train_metrics(const torch::Tensor&, const data::Batch& batch, const Loss& loss,
                                  MetricSums* sums) const {
  sums->add("count", static_cast<double>(batch.size));
  add_training_loss(loss, sums);
  for (const auto& [name, value] : loss.terms)  // the meta-architecture's losses, as shares
    if (name.rfind("batch_", 0) != 0) sums->add("Loss/" + name, value);
}

void DetectionTask::eval_step(const torch::Tensor& outputs, const data::Batch& batch, const Loss& loss,
                              MetricSums* sums) {
  torch::NoGradGuard no_grad;
  sums->add("count", static_cast<double>(batch.size));
  const double n = static_cast<double>(batch.size);
  for (const auto& [name, value] : loss.terms)  // the batch means of the meta-architecture's losses
    if (name.rfind("batch_", 0) == 0) sums->add("eval_Loss/" + name.substr(6), value * n);
  const InputShape shape = input_shape(batch);
  const auto detections = postprocess(outputs, shape);
  const auto boxes = batch.field("boxes").to(torch::kCPU).contiguous();
  const auto classes = batch.field("classes").to(torch::kCPU).contiguous();
  const auto crowd = batch.field("is_crowd").to(torch::kCPU).contiguous();
  const auto difficult_field = batch.field("difficult").to(torch::kCPU).contiguous();
  const auto group_of_field = batch.field("group_of").to(torch::kCPU).contiguous();
  const auto labels_field = batch.field("image_labels").to(torch::kCPU).contiguous();
  const auto counts = batch.field("num_boxes").to(torch::kCPU);
  const auto ids = batch.field("image_id").to(torch::kCPU);
  const auto sizes = batch.field("original_size").to(torch::kCPU);
  const auto box = boxes.accessor<float, 3>();
  const auto cls = classes.accessor<int64_t, 2>();
  const auto is_crowd = crowd.accessor<bool, 2>();
  const auto is_difficult = difficult_field.accessor<bool, 2>();
  const auto is_group_of = group_of_field.accessor<bool, 2>();
  const auto image_labels = labels_field.accessor<bool, 2>();
  std::vector<double> images, gts, dets, labels;
  for (int64_t i = 0; i < batch.size; ++i) {
    const double key = static_cast<double>(ids[i].item<int64_t>());  // 48 bits: exact in a double
    const double h = static_cast<double>(sizes[i][0].item<int64_t>()), w = static_cast<double>(sizes[i][1].item<int64_t>());
    images.push_back(key);
    const int64_t count = counts[i].item<int64_t>();
    for (int64_t j = 0; j < count; ++j) {
      const double flags = (is_crowd[i][j] ? kCrowd : 0) | (is_difficult[i][j] ? kDifficult : 0) |
                           (is_group_of[i][j] ? kGroupOf : 0);
      gts.insert(gts.end(), {key, static_cast<double>(cls[i][j]), box[i][j][1] * w, box[i][j][0] * h,
                             (box[i][j][3] - box[i][j][1]) * w, (box[i][j][2] - box[i][j][0]) * h, flags});
    }
    for (int64_t k = 1; k < labels_field.size(1); ++k)
      if (image_labels[i][k]) labels.insert(labels.end(), {key, static_cast<double>(k)});
    const auto& d = detections[static_cast<size_t>(i)];
    auto b = d.boxes.accessor<float, 2>();
    auto s = d.scores.accessor<float, 1>();
    auto c = d.classes.accessor<int64_t, 1>();
    for (int64_t k = 0; k < d.boxes.size(0); ++k)
      dets.insert(dets.end(), {key, static_cast<double>(c[k]), static_cast<double>(s[k]), b[k][1] * w, b[k][0] * h,
                               (b[k][3] - b[k][1]) * w, (b[k][2] - b[k][0]) * h});
  }
  for (int64_t i = 0; i < batch.size && static_cast<int>(visualizations_.size()) < config_.num_visualizations; ++i) {
    const auto& d = detections[static_cast<size_t>(i)];
    std::vector<data::Box> gt, predicted;
    std::vector<std::string> gt_labels, predicted_labels;
    auto name = [&](int64_t id) {
      const auto index = static_cast<size_t>(id - 1);
      return index < config_.class_names.size() ? config_.class_names[index] : std::to_string(id);
    };
    for (int64_t j = 0; j < counts[i].item<int64_t>(); ++j) {
      gt.push_back({box[i][j][0], box[i][j][1], box[i][j][2], box[i][j][3]});
      gt_labels.push_back(name(cls[i][j]) + (is_crowd[i][j] ? " (crowd)" : "") +
                          (is_difficult[i][j] ? " (difficult)" : "") + (is_group_of[i][j] ? " (group)" : ""));
    }
    for (int64_t k = 0; k < d.boxes.size(0); ++k) {
      const float score = d.scores[k].item<float>();
      if (score < config_.visualization_min_score) continue;
      const auto b = d.boxes[k];
      predicted.push_back({b[0].item<float>(), b[1].item<float>(), b[2].item<float>(), b[3].item<float>()});
      predicted_labels.push_back(fmt::format("{} {:.0f}%", name(d.classes[k].item<int64_t>()), 100 * score));
    }
    auto input = batch.images[i].cpu();  // the image without its padding: boxes are normalised to it
    if (!shape.image_sizes.empty()) {
      const auto [h, w] = shape.image_sizes[static_cast<size_t>(i)];
      const int64_t h_dim = config_.input.channels_last ? 0 : 1;
      input = input.narrow(h_dim, 0, h).narrow(h_dim + 1, 0, w);
    }
    data::Image left = to_image(input, config_.input.channels_last), right = left;
    data::draw_boxes(&left, predicted, predicted_labels, {255, 40, 40});
    data::draw_boxes(&right, gt, gt_labels, {40, 220, 40});
    data::Image both;
    both.height = left.height;
    both.width = 2 * left.width;
    both.pixels.resize(static_cast<size_t>(both.height) * both.width * 3);
    const size_t row = static_cast<size_t>(left.width) * 3;
    for (int y = 0; y < left.height; ++y) {
      std::copy_n(left.pixels.data() + static_cast<size_t>(y) * row, row, both.pixels.data() + 2 * static_cast<size_t>(y) * row);
      std::copy_n(right.pixels.data() + static_cast<size_t>(y) * row, row,
                  both.pixels.data() + (2 * static_cast<size_t>(y) + 1) * row);
    }
    visualizations_.push_back({"Detections_Left_Groundtruth_Right/" + std::to_string(visualizations_.size()),
                               both.height, both.width, data::encode_png(both)});
  }
  auto as_rows = [](std::vector<double>& v, int64_t k) {
    return torch::from_blob(v.data(), {static_cast<int64_t>(v.size()) / k, k}, torch::kDouble).clone();
  };
  if (has_metrics_set(config_, "coco_mask_metrics")) {
    // The masks in the original images' pixels, in the order of the box rows: the ground truth's
    // cut from the sample buffer to the resized image and resized back (nearest neighbour), the
    // detections' pasted from their boxes and thresholded at 0.5 (the OD API's eval_util).
    if (!batch.fields.count("masks"))
      throw Error("eval_config.metrics_set coco_mask_metrics needs the evaluation records' instance masks: set "
                  "load_instance_masks: true and mask_type: PNG_MASKS in eval_input_reader");
    const auto gt_masks = batch.field("masks").to(torch::kCPU);
    std::vector<double> gt_runs, det_runs;
    for (int64_t i = 0; i < batch.size; ++i) {
      const int64_t h0 = sizes[i][0].item<int64_t>(), w0 = sizes[i][1].item<int64_t>();
      int64_t h = shape.height > 0 ? shape.height : gt_masks.size(2), w = shape.height > 0 ? shape.width : gt_masks.size(3);
      if (!shape.image_sizes.empty()) std::tie(h, w) = shape.image_sizes[static_cast<size_t>(i)];
      const int64_t count = counts[i].item<int64_t>();
      if (count > 0) {
        const auto resized = torch::nn::functional::interpolate(
            gt_masks[i].narrow(0, 0, count).narrow(1, 0, h).narrow(2, 0, w).to(torch::kFloat).unsqueeze(0),
            torch::nn::functional::InterpolateFuncOptions()
                .size(std::vector<int64_t>{h0, w0})
                .mode(torch::kNearest))[0];
        for (int64_t j = 0; j < count; ++j) append_rle(encode_mask(resized[j] > 0.5f), &gt_runs);
      }
      const auto& d = detections[static_cast<size_t>(i)];
      const int64_t found = d.boxes.size(0);
      if (found > 0 && !d.masks.defined()) throw Error("coco_mask_metrics: the model returned detections without masks");
      for (int64_t k0 = 0; k0 < found; k0 += 16) {  // a few full-size masks at a time
        const int64_t n = std::min<int64_t>(16, found - k0);
        const auto pasted = detect::paste_box_masks(d.masks.narrow(0, k0, n), d.boxes.narrow(0, k0, n), h0, w0);
        for (int64_t k = 0; k < n; ++k) append_rle(encode_mask(pasted[k] > 0.5f), &det_runs);
      }
    }
    sums->append_rows("coco_mask_groundtruth", as_rows(gt_runs, 1));
    sums->append_rows("coco_mask_detections", as_rows(det_runs, 1));
  }
  sums->append_rows("coco_images", as_rows(images, 1));
  sums->append_rows("coco_groundtruth", as_rows(gts, 7));
  sums->append_rows("coco_detections", as_rows(dets, 7));
  if (!labels.empty()) sums->append_rows("image_labels", as_rows(labels, 2));
}

std::map<std::string, double> DetectionTask::compute_metrics(const MetricSums& s, bool training) const {
  if (training) {
    const double replicas = std::max(1.0, s.get("replicas"));
    const double steps = std::max(1.0, s.get("steps") / replicas);
    std::map<std::string, double> m;
    for (const auto& [name, sum] : s.sums())
      if (name.rfind("Loss/", 0) == 0) m[name] = sum.sum().item<double>() / steps;
    m["Loss/regularization_loss"] = training_regularization_loss(s);
    m["Loss/total_loss"] = training_loss(s);
    return m;
  }
  const double count = std::max(1.0, s.get("count"));
  std::map<std::string, double> m;
  double total = 0;
  for (const auto& [name, sum] : s.sums())
    if (name.rfind("eval_Loss/", 0) == 0) total += m[name.substr(5)] = sum.sum().item<double>() / count;
  m["Loss/total_loss"] = total;
  // The evaluation rows: [image], [image, class, x, y, w, h, flags], [image, class, score, x, y,
  // w, h], [image, verified label]; pixels of the original image.
  std::vector<std::vector<double>> image_rows, gt_rows, det_rows, label_rows;
  auto read = [&](const char* name, std::vector<std::vector<double>>* out) {
    const auto rows = s.rows(name);
    if (!rows.defined()) return;
    auto a = rows.accessor<double, 2>();
    for (int64_t i = 0; i < rows.size(0); ++i) {
      out->emplace_back(static_cast<size_t>(rows.size(1)));
      for (int64_t j = 0; j < rows.size(1); ++j) out->back()[static_cast<size_t>(j)] = a[i][j];
    }
  };
  read("coco_images", &image_rows);
  read("coco_groundtruth", &gt_rows);
  read("coco_detections", &det_rows);
  read("image_labels", &label_rows);
  auto flag = [](double flags, int bit) { return (static_cast<int>(flags) & bit) != 0; };
  for (const auto& metrics_set : config_.metrics_sets) {
    if (metrics_set == "coco_mask_metrics") {
      // pycocotools' segm evaluation of the masks, each in the order of its box row.
      const auto gt_masks = read_rles(s.rows("coco_mask_groundtruth"), "coco_mask_groundtruth");
      const auto det_masks = read_rles(s.rows("coco_mask_detections"), "coco_mask_detections");
      if (gt_masks.size() != gt_rows.size() || det_masks.size() != det_rows.size())
        throw Error(fmt::format("coco_mask_metrics: {} ground-truth masks for {} boxes, {} detection masks for {}",
                                gt_masks.size(), gt_rows.size(), det_masks.size(), det_rows.size()));
      detect::CocoEvaluator coco(detect::CocoIouType::kSegm);
      for (const auto& r : image_rows) coco.add_image(static_cast<int64_t>(r[0]));
      for (size_t i = 0; i < gt_rows.size(); ++i) {
        const auto& r = gt_rows[i];
        detect::CocoGroundTruth g;
        g.image_id = static_cast<int64_t>(r[0]);
        g.category_id = static_cast<int64_t>(r[1]);
        g.x = r[2], g.y = r[3], g.w = r[4], g.h = r[5];
        g.iscrowd = flag(r[6], kCrowd);
        g.mask = gt_masks[i];
        coco.add_ground_truth(g);
      }
      for (size_t i = 0; i < det_rows.size(); ++i) {
        const auto& r = det_rows[i];
        detect::CocoDetection d;
        d.image_id = static_cast<int64_t>(r[0]);
        d.category_id = static_cast<int64_t>(r[1]);
        d.score = r[2];
        d.x = r[3], d.y = r[4], d.w = r[5], d.h = r[6];
        d.mask = det_masks[i];
        coco.add_detection(d);
      }
      std::map<int64_t, std::string> names;
      if (config_.per_category_metrics)
        for (size_t c = 0; c < config_.class_names.size(); ++c) names[static_cast<int64_t>(c + 1)] = config_.class_names[c];
      const auto result = coco.evaluate();
      for (const auto& [name, value] : config_.per_category_metrics ? result.named(names) : result.named()) m[name] = value;
      continue;
    }
    if (metrics_set == "coco_detection_metrics") {
      detect::CocoEvaluator coco;
      for (const auto& r : image_rows) coco.add_image(static_cast<int64_t>(r[0]));
      for (const auto& r : gt_rows) {
        detect::CocoGroundTruth g;
        g.image_id = static_cast<int64_t>(r[0]);
        g.category_id = static_cast<int64_t>(r[1]);
        g.x = r[2], g.y = r[3], g.w = r[4], g.h = r[5];
        g.iscrowd = flag(r[6], kCrowd);
        coco.add_ground_truth(g);
      }
      for (const auto& r : det_rows) {
        detect::CocoDetection d;
        d.image_id = static_cast<int64_t>(r[0]);
        d.category_id = static_cast<int64_t>(r[1]);
        d.score = r[2];
        d.x = r[3], d.y = r[4], d.w = r[5], d.h = r[6];
        coco.add_detection(d);
      }
      const auto result = coco.evaluate();
      for (const auto& [name, value] : result.named()) m[name] = value;
      if (config_.per_category_metrics) {
        for (const auto& [category, ap] : result.per_category_ap) {
          const auto index = static_cast<size_t>(category - 1);
          const std::string name =
              index < config_.class_names.size() ? config_.class_names[index] : "class " + std::to_string(category);
          m["DetectionBoxes_PerformanceByCategory/mAP/" + name] = ap;
        }
      }
      continue;
    }
    // PASCAL VOC / Open Images: per image, its boxes then its detections, in image order.
    auto options = detect::VocMetricsOptions::for_metrics_set(metrics_set);
    options.empty_image_labels_mean_all = config_.empty_image_labels_mean_all;
    detect::VocEvaluator voc(config_.num_classes, options);
    std::map<int64_t, std::vector<detect::VocGroundTruth>> boxes;
    std::map<int64_t, std::vector<detect::VocDetection>> found;
    std::map<int64_t, std::vector<int64_t>> verified;
    for (const auto& r : gt_rows) {
      detect::VocGroundTruth g;
      g.category_id = static_cast<int64_t>(r[1]);
      g.xmin = r[2], g.ymin = r[3], g.xmax = r[2] + r[4], g.ymax = r[3] + r[5];
      g.difficult = flag(r[6], kDifficult);  // crowd regions are ordinary boxes here, as the OD API's
      g.group_of = flag(r[6], kGroupOf);
      boxes[static_cast<int64_t>(r[0])].push_back(g);
    }
    for (const auto& r : det_rows) {
      detect::VocDetection d;
      d.category_id = static_cast<int64_t>(r[1]);
      d.score = r[2];
      d.xmin = r[3], d.ymin = r[4], d.xmax = r[3] + r[5], d.ymax = r[4] + r[6];
      found[static_cast<int64_t>(r[0])].push_back(d);
    }
    for (const auto& r : label_rows) verified[static_cast<int64_t>(r[0])].push_back(static_cast<int64_t>(r[1]));
    for (const auto& r : image_rows) {
      const auto id = static_cast<int64_t>(r[0]);
      voc.add_ground_truth(id, boxes[id], verified[id]);
      voc.add_detections(id, found[id]);
    }
    for (const auto& [name, value] : voc.evaluate().named(options, config_.class_names)) m[name] = value;
  }
  return m;
}

std::vector<SummaryImage> DetectionTask::take_summary_images() {
  std::vector<SummaryImage> out;
  out.swap(visualizations_);
  return out;
}

std::map<std::string, std::string> DetectionTask::signature() const {
  auto signature = meta_->signature();
  signature["task"] = "detect";
  signature["num_classes"] = std::to_string(config_.num_classes);
  return signature;
}

}  // namespace orchard::tasks
