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

// The evaluation's records, gathered per batch and merged across workers as float64 rows of
// MetricSums (image ids have 48 bits: exact in a double); boxes in pixels of the original image.
// Each record type writes and reads its own row: kColumns, to_row, from_row.

// An evaluated image ("coco_images").
struct EvalImage {
  static constexpr int64_t kColumns = 1;
  int64_t image_id = 0;
  void to_row(double* row) const { row[0] = static_cast<double>(image_id); }
  static EvalImage from_row(const double* row) { return {static_cast<int64_t>(row[0])}; }
};

// A ground-truth box ("coco_groundtruth"), its flags packed into one column.
struct EvalGroundTruth {
  static constexpr int64_t kColumns = 7;
  static constexpr int kCrowd = 1, kDifficult = 2, kGroupOf = 4;
  int64_t image_id = 0, class_id = 0;
  double x = 0, y = 0, w = 0, h = 0;  // top-left corner and size
  bool crowd = false, difficult = false, group_of = false;
  void to_row(double* row) const {
    const int flags = (crowd ? kCrowd : 0) | (difficult ? kDifficult : 0) | (group_of ? kGroupOf : 0);
    const double values[kColumns] = {static_cast<double>(image_id), static_cast<double>(class_id), x, y, w, h,
                                     static_cast<double>(flags)};
    std::copy_n(values, kColumns, row);
  }
  static EvalGroundTruth from_row(const double* row) {
    EvalGroundTruth g;
    g.image_id = static_cast<int64_t>(row[0]);
    g.class_id = static_cast<int64_t>(row[1]);
    g.x = row[2], g.y = row[3], g.w = row[4], g.h = row[5];
    const int flags = static_cast<int>(row[6]);
    g.crowd = (flags & kCrowd) != 0;
    g.difficult = (flags & kDifficult) != 0;
    g.group_of = (flags & kGroupOf) != 0;
    return g;
  }
};

// A detection ("coco_detections").
struct EvalDetection {
  static constexpr int64_t kColumns = 7;
  int64_t image_id = 0, class_id = 0;
  double score = 0;
  double x = 0, y = 0, w = 0, h = 0;  // top-left corner and size
  void to_row(double* row) const {
    const double values[kColumns] = {static_cast<double>(image_id), static_cast<double>(class_id), score, x, y, w, h};
    std::copy_n(values, kColumns, row);
  }
  static EvalDetection from_row(const double* row) {
    EvalDetection d;
    d.image_id = static_cast<int64_t>(row[0]);
    d.class_id = static_cast<int64_t>(row[1]);
    d.score = row[2];
    d.x = row[3], d.y = row[4], d.w = row[5], d.h = row[6];
    return d;
  }
};

// A class verified present in an image ("image_labels"; Open Images).
struct EvalImageLabel {
  static constexpr int64_t kColumns = 2;
  int64_t image_id = 0, class_id = 0;
  void to_row(double* row) const {
    row[0] = static_cast<double>(image_id);
    row[1] = static_cast<double>(class_id);
  }
  static EvalImageLabel from_row(const double* row) {
    return {static_cast<int64_t>(row[0]), static_cast<int64_t>(row[1])};
  }
};

template <class Record>
void append_records(const std::string& name, const std::vector<Record>& records, MetricSums* sums) {
  const at::Tensor rows = torch::empty({static_cast<int64_t>(records.size()), Record::kColumns}, torch::kDouble);
  double* row = rows.data_ptr<double>();
  for (const auto& r : records) {
    r.to_row(row);
    row += Record::kColumns;
  }
  sums->append_rows(name, rows);
}

template <class Record>
std::vector<Record> read_records(const MetricSums& sums, const std::string& name) {
  std::vector<Record> out;
  const auto rows = sums.rows(name);
  if (!rows.defined()) return out;
  if (rows.size(1) != Record::kColumns)
    throw Error(fmt::format("evaluation rows {}: {} columns, not {}", name, rows.size(1), Record::kColumns));
  const auto v = rows.contiguous();
  const double* row = v.data_ptr<double>();
  for (int64_t i = 0; i < v.size(0); ++i, row += Record::kColumns) out.push_back(Record::from_row(row));
  return out;
}

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
    throw Error(
        "eval_config.metrics_set coco_mask_metrics needs a model that predicts instance masks (Mask R-CNN: "
        "mask_rcnn_box_predictor.predict_instance_masks); " +
        meta_->name() + " predicts boxes only");
  for (auto& p : meta_->module()->parameters())
    if (p.dim() == 4) l2_params_.push_back(p);  // conv kernels: conv_hyperparams' l2_regularizer
}

std::unique_ptr<Outputs> DetectionTask::forward(const torch::Tensor& images, const InputShape& input) {
  return meta_->forward(images, input, nullptr);
}

std::unique_ptr<Outputs> DetectionTask::forward(const data::Batch& batch, Pass pass) {
  if (pass == Pass::kTrain) return meta_->forward(batch.images, input_shape(batch), &batch);
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

Loss DetectionTask::loss(const Outputs& outputs, const data::Batch& batch, int64_t global_batch_size) {
  auto counts = batch.field("num_boxes").to(torch::kCPU);
  const auto& boxes = batch.field("boxes");
  const auto& classes = batch.field("classes");
  const auto& crowd = batch.field("is_crowd");
  const InputShape shape = input_shape(batch);
  std::vector<at::Tensor> gt_boxes, gt_classes;
  for (int64_t i = 0; i < batch.images.size(0); ++i) {
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
  const auto losses = meta_->loss(outputs, shape, gt_boxes, gt_classes);  // in float32
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

std::vector<ImageDetections> DetectionTask::postprocess(const Outputs& outputs, const InputShape& input) const {
  return meta_->postprocess(outputs, input);
}

void DetectionTask::train_metrics(const Outputs&, const data::Batch& batch, const Loss& loss, MetricSums* sums) const {
  sums->add("count", static_cast<double>(batch.size));
  add_training_loss(loss, sums);
  for (const auto& [name, value] : loss.terms)  // the meta-architecture's losses, as shares
    if (name.rfind("batch_", 0) != 0) sums->add("Loss/" + name, value);
}

void DetectionTask::eval_step(const Outputs& outputs, const data::Batch& batch, const Loss& loss, MetricSums* sums) {
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
  std::vector<EvalImage> images;
  std::vector<EvalGroundTruth> gts;
  std::vector<EvalDetection> dets;
  std::vector<EvalImageLabel> labels;
  for (int64_t i = 0; i < batch.size; ++i) {
    const int64_t key = ids[i].item<int64_t>();
    const double h = static_cast<double>(sizes[i][0].item<int64_t>()),
                 w = static_cast<double>(sizes[i][1].item<int64_t>());
    images.push_back({key});
    const int64_t count = counts[i].item<int64_t>();
    for (int64_t j = 0; j < count; ++j) {
      EvalGroundTruth g;
      g.image_id = key;
      g.class_id = cls[i][j];
      g.x = box[i][j][1] * w, g.y = box[i][j][0] * h;
      g.w = (box[i][j][3] - box[i][j][1]) * w, g.h = (box[i][j][2] - box[i][j][0]) * h;
      g.crowd = is_crowd[i][j], g.difficult = is_difficult[i][j], g.group_of = is_group_of[i][j];
      gts.push_back(g);
    }
    for (int64_t k = 1; k < labels_field.size(1); ++k)
      if (image_labels[i][k]) labels.push_back({key, k});
    const auto& d = detections[static_cast<size_t>(i)];
    auto b = d.boxes.accessor<float, 2>();
    auto s = d.scores.accessor<float, 1>();
    auto c = d.classes.accessor<int64_t, 1>();
    for (int64_t k = 0; k < d.boxes.size(0); ++k) {
      EvalDetection e;
      e.image_id = key;
      e.class_id = c[k];
      e.score = static_cast<double>(s[k]);
      e.x = b[k][1] * w, e.y = b[k][0] * h;
      e.w = (b[k][3] - b[k][1]) * w, e.h = (b[k][2] - b[k][0]) * h;
      dets.push_back(e);
    }
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
      std::copy_n(left.pixels.data() + static_cast<size_t>(y) * row, row,
                  both.pixels.data() + 2 * static_cast<size_t>(y) * row);
      std::copy_n(right.pixels.data() + static_cast<size_t>(y) * row, row,
                  both.pixels.data() + (2 * static_cast<size_t>(y) + 1) * row);
    }
    visualizations_.push_back({"Detections_Left_Groundtruth_Right/" + std::to_string(visualizations_.size()),
                               both.height, both.width, data::encode_png(both)});
  }
  // The instance masks' run-length streams (append_rle), one column.
  auto as_stream = [](std::vector<double>& v) {
    return torch::from_blob(v.data(), {static_cast<int64_t>(v.size()), 1}, torch::kDouble).clone();
  };
  if (has_metrics_set(config_, "coco_mask_metrics")) {
    // The masks in the original images' pixels, in the order of the box rows: the ground truth's
    // cut from the sample buffer to the resized image and resized back (nearest neighbour), the
    // detections' pasted from their boxes and thresholded at 0.5 (the OD API's eval_util).
    if (!batch.fields.count("masks"))
      throw Error(
          "eval_config.metrics_set coco_mask_metrics needs the evaluation records' instance masks: set "
          "load_instance_masks: true and mask_type: PNG_MASKS in eval_input_reader");
    const auto gt_masks = batch.field("masks").to(torch::kCPU);
    std::vector<double> gt_runs, det_runs;
    for (int64_t i = 0; i < batch.size; ++i) {
      const int64_t h0 = sizes[i][0].item<int64_t>(), w0 = sizes[i][1].item<int64_t>();
      int64_t h = shape.height > 0 ? shape.height : gt_masks.size(2),
              w = shape.height > 0 ? shape.width : gt_masks.size(3);
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
      if (found > 0 && !d.masks.defined())
        throw Error("coco_mask_metrics: the model returned detections without masks");
      for (int64_t k0 = 0; k0 < found; k0 += 16) {  // a few full-size masks at a time
        const int64_t n = std::min<int64_t>(16, found - k0);
        const auto pasted = detect::paste_box_masks(d.masks.narrow(0, k0, n), d.boxes.narrow(0, k0, n), h0, w0);
        for (int64_t k = 0; k < n; ++k) append_rle(encode_mask(pasted[k] > 0.5f), &det_runs);
      }
    }
    sums->append_rows("coco_mask_groundtruth", as_stream(gt_runs));
    sums->append_rows("coco_mask_detections", as_stream(det_runs));
  }
  append_records("coco_images", images, sums);
  append_records("coco_groundtruth", gts, sums);
  append_records("coco_detections", dets, sums);
  if (!labels.empty()) append_records("image_labels", labels, sums);
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
  const auto image_rows = read_records<EvalImage>(s, "coco_images");
  const auto gt_rows = read_records<EvalGroundTruth>(s, "coco_groundtruth");
  const auto det_rows = read_records<EvalDetection>(s, "coco_detections");
  const auto label_rows = read_records<EvalImageLabel>(s, "image_labels");
  for (const auto& metrics_set : config_.metrics_sets) {
    if (metrics_set == "coco_mask_metrics") {
      // pycocotools' segm evaluation of the masks, each in the order of its box row.
      const auto gt_masks = read_rles(s.rows("coco_mask_groundtruth"), "coco_mask_groundtruth");
      const auto det_masks = read_rles(s.rows("coco_mask_detections"), "coco_mask_detections");
      if (gt_masks.size() != gt_rows.size() || det_masks.size() != det_rows.size())
        throw Error(fmt::format("coco_mask_metrics: {} ground-truth masks for {} boxes, {} detection masks for {}",
                                gt_masks.size(), gt_rows.size(), det_masks.size(), det_rows.size()));
      detect::CocoEvaluator coco(detect::CocoIouType::kSegm);
      for (const auto& r : image_rows) coco.add_image(r.image_id);
      for (size_t i = 0; i < gt_rows.size(); ++i) {
        const auto& r = gt_rows[i];
        detect::CocoGroundTruth g;
        g.image_id = r.image_id;
        g.category_id = r.class_id;
        g.x = r.x, g.y = r.y, g.w = r.w, g.h = r.h;
        g.iscrowd = r.crowd;
        g.mask = gt_masks[i];
        coco.add_ground_truth(g);
      }
      for (size_t i = 0; i < det_rows.size(); ++i) {
        const auto& r = det_rows[i];
        detect::CocoDetection d;
        d.image_id = r.image_id;
        d.category_id = r.class_id;
        d.score = r.score;
        d.x = r.x, d.y = r.y, d.w = r.w, d.h = r.h;
        d.mask = det_masks[i];
        coco.add_detection(d);
      }
      std::map<int64_t, std::string> names;
      if (config_.per_category_metrics)
        for (size_t c = 0; c < config_.class_names.size(); ++c)
          names[static_cast<int64_t>(c + 1)] = config_.class_names[c];
      const auto result = coco.evaluate();
      for (const auto& [name, value] : config_.per_category_metrics ? result.named(names) : result.named())
        m[name] = value;
      continue;
    }
    if (metrics_set == "coco_detection_metrics") {
      detect::CocoEvaluator coco;
      for (const auto& r : image_rows) coco.add_image(r.image_id);
      for (const auto& r : gt_rows) {
        detect::CocoGroundTruth g;
        g.image_id = r.image_id;
        g.category_id = r.class_id;
        g.x = r.x, g.y = r.y, g.w = r.w, g.h = r.h;
        g.iscrowd = r.crowd;
        coco.add_ground_truth(g);
      }
      for (const auto& r : det_rows) {
        detect::CocoDetection d;
        d.image_id = r.image_id;
        d.category_id = r.class_id;
        d.score = r.score;
        d.x = r.x, d.y = r.y, d.w = r.w, d.h = r.h;
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
      g.category_id = r.class_id;
      g.xmin = r.x, g.ymin = r.y, g.xmax = r.x + r.w, g.ymax = r.y + r.h;
      g.difficult = r.difficult;  // crowd regions are ordinary boxes here, as the OD API's
      g.group_of = r.group_of;
      boxes[r.image_id].push_back(g);
    }
    for (const auto& r : det_rows) {
      detect::VocDetection d;
      d.category_id = r.class_id;
      d.score = r.score;
      d.xmin = r.x, d.ymin = r.y, d.xmax = r.x + r.w, d.ymax = r.y + r.h;
      found[r.image_id].push_back(d);
    }
    for (const auto& r : label_rows) verified[r.image_id].push_back(r.class_id);
    for (const auto& r : image_rows) {
      const auto id = r.image_id;
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
