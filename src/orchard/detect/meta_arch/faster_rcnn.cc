#include "orchard/detect/meta_arch/faster_rcnn.h"

#include <spdlog/fmt/fmt.h>
#include <torch/torch.h>

#include "orchard/core/error.h"
#include "orchard/detect/config/config.h"
#include "orchard/detect/feature_extractors/registry.h"
#include "orchard/proto/object_detection/pipeline.pb.h"

namespace orchard::tasks {
namespace {

namespace pb = object_detection::protos;

// model.faster_rcnn -> FasterRcnnConfig (the message is validated by detect::validate_pipeline_config).
ParsedModel parse_faster_rcnn(const pb::TrainEvalPipelineConfig& pipeline) {
  const pb::FasterRcnn& f = pipeline.model().faster_rcnn();
  auto config = std::make_shared<FasterRcnnConfig>();
  FasterRcnnConfig& c = *config;
  ParsedModel parsed;
  parsed.num_classes = f.num_classes();

  c.model.feature_extractor = f.feature_extractor().type();
  c.model.features_stride = f.feature_extractor().first_stage_features_stride();
  c.model.batch_norm_trainable = f.feature_extractor().batch_norm_trainable();
  c.model.rpn_depth = f.first_stage_box_predictor_depth();
  c.model.rpn_kernel_size = f.first_stage_box_predictor_kernel_size();
  c.model.rpn_atrous_rate = f.first_stage_atrous_rate();
  const auto& init = f.first_stage_box_predictor_conv_hyperparams().initializer();
  if (init.has_truncated_normal_initializer()) c.model.rpn_init_stddev = init.truncated_normal_initializer().stddev();
  c.model.initial_crop_size = f.initial_crop_size();
  c.model.maxpool_kernel_size = f.maxpool_kernel_size();
  c.model.maxpool_stride = f.maxpool_stride();
  const auto& predictor = f.second_stage_box_predictor().mask_rcnn_box_predictor();
  c.model.use_dropout = predictor.use_dropout();
  c.model.dropout_keep_probability = predictor.dropout_keep_probability();
  if (f.second_stage_box_predictor().has_rfcn_box_predictor()) {
    const auto& rfcn = f.second_stage_box_predictor().rfcn_box_predictor();
    c.model.rfcn = true;
    c.model.rfcn_depth = rfcn.depth();
    c.model.rfcn_crop_height = rfcn.crop_height();
    c.model.rfcn_crop_width = rfcn.crop_width();
    c.model.rfcn_bins_height = rfcn.num_spatial_bins_height();
    c.model.rfcn_bins_width = rfcn.num_spatial_bins_width();
    const auto& rfcn_init = rfcn.conv_hyperparams().initializer();
    if (rfcn_init.has_truncated_normal_initializer())
      c.model.rfcn_init_stddev = rfcn_init.truncated_normal_initializer().stddev();
  }
  c.model.predict_instance_masks = predictor.predict_instance_masks();
  c.model.mask_height = predictor.mask_height();
  c.model.mask_width = predictor.mask_width();
  c.model.mask_conv_depth = predictor.mask_prediction_conv_depth();
  c.model.mask_num_conv_layers = predictor.mask_prediction_num_conv_layers();
  c.model.masks_are_class_agnostic = predictor.masks_are_class_agnostic();
  c.model.convolve_then_upsample = predictor.convolve_then_upsample_masks();
  const auto& mask_init = predictor.conv_hyperparams().initializer();
  if (mask_init.has_truncated_normal_initializer())
    c.model.mask_init_stddev = mask_init.truncated_normal_initializer().stddev();
  c.mask_loss_weight = f.second_stage_mask_prediction_loss_weight();

  const auto& grid = f.first_stage_anchor_generator().grid_anchor_generator();
  if (grid.scales_size() > 0) c.anchors.scales.assign(grid.scales().begin(), grid.scales().end());
  if (grid.aspect_ratios_size() > 0)
    c.anchors.aspect_ratios.assign(grid.aspect_ratios().begin(), grid.aspect_ratios().end());
  c.anchors.base_height = grid.height();
  c.anchors.base_width = grid.width();
  c.anchors.stride_height = grid.height_stride();
  c.anchors.stride_width = grid.width_stride();
  c.anchors.offset_height = grid.height_offset();
  c.anchors.offset_width = grid.width_offset();
  c.model.anchors_per_location = detect::anchors_per_location(c.anchors);

  c.rpn.minibatch_size = f.first_stage_minibatch_size();
  c.rpn.positive_fraction = f.first_stage_positive_balance_fraction();
  c.rpn.nms_score_threshold = f.first_stage_nms_score_threshold();
  c.rpn.nms_iou_threshold = f.first_stage_nms_iou_threshold();
  c.rpn.max_proposals = f.first_stage_max_proposals();
  c.rpn.localization_weight = f.first_stage_localization_loss_weight();
  c.rpn.objectness_weight = f.first_stage_objectness_loss_weight();

  c.second_stage.batch_size = f.second_stage_batch_size();
  c.second_stage.balance_fraction = f.second_stage_balance_fraction();
  c.second_stage.localization_weight = f.second_stage_localization_loss_weight();
  c.second_stage.classification_weight = f.second_stage_classification_loss_weight();
  // build_faster_rcnn_classification_loss: weighted_softmax when unset.
  const auto& cls_loss = f.second_stage_classification_loss();
  c.second_stage.sigmoid = cls_loss.has_weighted_sigmoid();
  if (cls_loss.has_weighted_softmax()) c.second_stage.logit_scale = cls_loss.weighted_softmax().logit_scale();
  c.merge_multiple_label_boxes = pipeline.train_config().merge_multiple_label_boxes();
  if (f.has_hard_example_miner()) {
    // model_builder's build_hard_example_miner: the proto's defaults (64 examples, NMS 0.7, BOTH).
    const auto& m = f.hard_example_miner();
    c.second_stage.miner.enabled = true;
    c.second_stage.miner.num_hard_examples = m.num_hard_examples();
    c.second_stage.miner.iou_threshold = m.iou_threshold();
    c.second_stage.miner.loss_type =
        detect::miner_loss_type_from_name(pb::HardExampleMiner::LossType_Name(m.loss_type()));
    c.second_stage.miner.max_negatives_per_positive = 0;
    c.second_stage.miner.min_negatives_per_image = 0;
  }

  c.score_converter = parse_post_processing(f.second_stage_post_processing(), &c.nms);
  parse_image_resizer(f.image_resizer(), &parsed);
  parsed.config = config;
  return parsed;
}

at::Tensor pixels(int64_t height, int64_t width, const at::TensorOptions& options) {
  return torch::tensor(
      {static_cast<float>(height), static_cast<float>(width), static_cast<float>(height), static_cast<float>(width)},
      options.dtype(torch::kFloat));
}

}  // namespace

// One image's ground truth that is trained on (crowd regions left out), boxes in pixels of the
// image (top-left in the input), masks [n, H, W] where the batch has them.
struct FasterRcnnMetaArchitecture::ImageTruth {
  at::Tensor boxes, classes, masks;
};

FasterRcnnMetaArchitecture::ImageTruth FasterRcnnMetaArchitecture::image_truth(const data::Batch& batch, int64_t i,
                                                                               int64_t height, int64_t width,
                                                                               bool masks) {
  const int64_t n = batch.field("num_boxes")[i].item<int64_t>();
  const auto trained = batch.field("is_crowd")[i].narrow(0, 0, n).logical_not().to(torch::kCPU);
  FasterRcnnMetaArchitecture::ImageTruth t;
  t.boxes = batch.field("boxes")[i].narrow(0, 0, n).to(torch::kCPU, torch::kFloat).index({trained}) *
            pixels(height, width, torch::TensorOptions());
  t.classes = batch.field("classes")[i].narrow(0, 0, n).to(torch::kCPU).index({trained});
  if (masks) t.masks = batch.field("masks")[i].narrow(0, 0, n).to(torch::kCPU).index({trained});
  return t;
}

std::unique_ptr<MetaArchitecture> FasterRcnnConfig::build(int64_t num_classes,
                                                          const data::DetectionInputOptions& input) const {
  return std::make_unique<FasterRcnnMetaArchitecture>(*this, num_classes, input);
}

FasterRcnnMetaArchitecture::FasterRcnnMetaArchitecture(const FasterRcnnConfig& config, int64_t num_classes,
                                                       const data::DetectionInputOptions& input)
    : config_(config), input_(input) {
  config_.model.num_classes = num_classes;
  try {
    model_ = detect::FasterRcnnModel(config_.model);
  } catch (const c10::Error& e) {
    throw Error("model.faster_rcnn: " + std::string(e.what_without_backtrace()));
  }
}

std::string FasterRcnnMetaArchitecture::name() const { return config_.model.feature_extractor; }

std::shared_ptr<torch::nn::Module> FasterRcnnMetaArchitecture::module() { return model_.ptr(); }

at::Tensor FasterRcnnMetaArchitecture::anchors(int64_t height, int64_t width) const {
  std::lock_guard<std::mutex> lock(anchors_mutex_);
  auto& a = anchors_by_size_[{height, width}];
  if (!a.defined()) {
    const auto [fh, fw] = model_->feature_map_size(height, width);
    a = detect::generate_grid_anchors(config_.anchors, fh, fw);
  }
  return a;
}

std::unique_ptr<Outputs> FasterRcnnMetaArchitecture::forward(const at::Tensor& images, const InputShape& input,
                                                             const data::Batch* targets) {
  return run(images, input, targets, nullptr);
}

std::unique_ptr<Outputs> FasterRcnnMetaArchitecture::forward_eval(const at::Tensor& images, const InputShape& input,
                                                                  const data::Batch& batch) {
  const bool truth = config_.model.predict_instance_masks && batch.fields.count("masks");
  return run(images, input, nullptr, truth ? &batch : nullptr);
}

std::unique_ptr<FasterRcnnOutputs> FasterRcnnMetaArchitecture::run(const at::Tensor& input_images,
                                                                   const InputShape& input, const data::Batch* targets,
                                                                   const data::Batch* eval_truth) {
  auto images = input_images;
  if (images.dim() == 4 && images.size(1) != 3 && images.size(3) == 3) images = images.permute({0, 3, 1, 2});
  const int64_t batch = images.size(0), height = images.size(2), width = images.size(3);
  const bool training = targets != nullptr;
  const bool masks = config_.model.predict_instance_masks;
  if (training && masks && !targets->fields.count("masks"))
    throw Error(
        "model.faster_rcnn predicts instance masks (Mask R-CNN) but the training records' masks are not "
        "loaded: set load_instance_masks: true and mask_type: PNG_MASKS in train_input_reader");
  auto first = model_->first_stage(images);
  const auto all_anchors = anchors(height, width);
  TORCH_CHECK(first.box_encodings.size(1) == all_anchors.size(0), "Faster R-CNN: ", first.box_encodings.size(1),
              " RPN predictions for ", all_anchors.size(0), " anchors");

  // Proposals from the (pruned in training, clipped at inference) anchors, without gradient.
  const auto kept = detect::rpn_anchors(all_anchors, height, width, training, config_.rpn);
  const auto index = kept.index.to(images.device());
  // Each image's size inside the input (the OD API's true_image_shapes): proposals, and the
  // third stage's detections, are clipped to it.
  std::vector<std::pair<int64_t, int64_t>> image_sizes(static_cast<size_t>(batch), {height, width});
  if (!input.image_sizes.empty()) {
    TORCH_CHECK(static_cast<int64_t>(input.image_sizes.size()) == batch, "Faster R-CNN: ", input.image_sizes.size(),
                " image sizes for a batch of ", batch);
    image_sizes = input.image_sizes;
  }
  const auto proposals =
      detect::rpn_proposals(first.box_encodings.detach().index_select(1, index).to(torch::kCPU, torch::kFloat),
                            first.objectness.detach().index_select(1, index).to(torch::kCPU, torch::kFloat),
                            kept.boxes.to(torch::kCPU, torch::kFloat), image_sizes, config_.rpn);

  // The second stage's proposals: training's balanced minibatch against the ground truth (in
  // pixels of each image, crowd regions left out), or all of them.
  const int64_t slots = proposal_slots(training);
  const int64_t mh = config_.model.mask_height, mw = config_.model.mask_width;
  std::vector<at::Tensor> boxes(static_cast<size_t>(batch)), sampled_classes, sampled_mask_targets;
  for (int64_t i = 0; i < batch; ++i) {
    const auto& p = proposals[static_cast<size_t>(i)].boxes;
    if (!training) {
      boxes[static_cast<size_t>(i)] = p;
      continue;
    }
    const auto [h, w] = image_sizes[static_cast<size_t>(i)];
    const ImageTruth gt = image_truth(*targets, i, h, w, masks);
    // With a hard example miner the OD API samples nothing: every proposal goes on, mined in the loss.
    const auto sample = config_.second_stage.miner.enabled
                            ? detect::assign_proposals(p, gt.boxes, gt.classes)
                            : detect::sample_proposals(p, gt.boxes, gt.classes, config_.second_stage);
    boxes[static_cast<size_t>(i)] = sample.boxes;
    if (masks) {
      // The masks share the proposals' pixel frame: the image top-left in the sample buffer.
      sampled_classes.push_back(sample.classes);
      sampled_mask_targets.push_back(detect::mask_targets(gt.masks, sample.boxes, sample.match, mh, mw));
    }
  }
  std::vector<at::Tensor> image_index, slot;
  for (int64_t i = 0; i < batch; ++i) {
    const int64_t n = boxes[static_cast<size_t>(i)].size(0);
    TORCH_CHECK(n <= slots, "Faster R-CNN: ", n, " proposals for ", slots, " slots");
    image_index.push_back(torch::full({n}, i, torch::kLong));
    slot.push_back(torch::arange(n, torch::kLong) + i * slots);
  }
  const auto all_boxes = torch::cat(boxes).to(images.device(), torch::kFloat);
  const auto box_index = torch::cat(image_index).to(images.device());
  const int64_t k = config_.model.num_classes;
  const int64_t m = all_boxes.size(0);
  const auto slot_index = torch::cat(slot).to(images.device());
  // Zeros [batch, slots, width] float32 holding each proposal's row of `rows` ([m, width]; m 0:
  // none) in its slot.
  const auto in_slots = [&](const at::Tensor& rows, int64_t width) {
    auto all = torch::zeros({batch * slots, width}, images.options().dtype(torch::kFloat));
    if (m > 0) all = all.index_copy(0, slot_index, rows);
    return all.view({batch, slots, width});
  };
  auto out = std::make_unique<FasterRcnnOutputs>();
  out->training = training;
  {
    // The RPN's two outputs are views of one [batch, 6 * anchors] float32 buffer (box encodings,
    // then objectness): the layout of the gradient that reaches the RPN's convolutions, and so the
    // order in which their bias gradients are summed, stays what it was when every output was
    // packed in one tensor (the golden checkpoints, tests/golden, are bit for bit).
    const int64_t a = first.box_encodings.size(1);
    const auto rpn = torch::cat({first.box_encodings.reshape({batch, -1}).to(torch::kFloat),
                                 first.objectness.reshape({batch, -1}).to(torch::kFloat)},
                                1);
    out->rpn_box_encodings = rpn.narrow(1, 0, 4 * a).view({batch, a, 4});
    out->rpn_objectness = rpn.narrow(1, 4 * a, 2 * a).view({batch, a, 2});
  }
  out->proposal_boxes = in_slots(all_boxes, 4);
  out->proposal_valid = in_slots(torch::ones({m, 1}, all_boxes.options()), 1).select(2, 0);
  at::Tensor refined, logits;
  at::Tensor mask_logits, mask_targets, mask_weights;  // training's, per sampled proposal [m, ...]
  if (all_boxes.size(0) > 0) {
    const auto normalised = all_boxes / pixels(height, width, all_boxes.options());
    at::Tensor box_features;  // the box classifier's maps of the crops (not R-FCN's: it crops scores)
    if (config_.model.rfcn) {
      std::tie(refined, logits) = model_->second_stage(first.features, normalised, box_index);
    } else {
      box_features = model_->box_classifier_features(first.features, normalised, box_index);
      std::tie(refined, logits) = model_->box_predictor(box_features);
    }
    if (training && masks) {
      // The mask of each proposal's target class. The OD API predicts masks for every sampled
      // proposal and weighs the background ones 0 in the loss; the head (convolutions and ReLUs,
      // each crop on its own) runs here on the positives only, which gives the same loss and
      // gradients at a quarter or less of the cost. Background rows stay 0 (weight 0).
      const auto classes = torch::cat(sampled_classes).to(images.device(), torch::kLong);
      const auto rows = (classes > 0).nonzero().squeeze(1);
      const int64_t r = rows.size(0);
      auto chosen = torch::zeros({m, mh * mw}, box_features.options().dtype(torch::kFloat));
      if (r > 0) {
        const auto positive = classes.index_select(0, rows);
        const auto channel = config_.model.masks_are_class_agnostic ? torch::zeros_like(positive) : positive - 1;
        const auto predicted = model_->mask_predictor(box_features.index_select(0, rows))
                                   .gather(1, channel.view({r, 1, 1, 1}).expand({r, 1, mh, mw}))
                                   .reshape({r, mh * mw});
        chosen = chosen.index_copy(0, rows, predicted.to(torch::kFloat));
      }
      mask_logits = chosen;
      mask_targets = torch::cat(sampled_mask_targets).reshape({m, mh * mw}).to(images.device(), torch::kFloat);
      mask_weights = (classes > 0).to(torch::kFloat).unsqueeze(1);
    }
  }
  out->refined_box_encodings =
      in_slots(m > 0 ? refined.reshape({m, 4 * k}).to(torch::kFloat) : refined, 4 * k).view({batch, slots, k, 4});
  out->class_logits = in_slots(m > 0 ? logits.to(torch::kFloat) : logits, k + 1);
  if (training && masks) {
    // Background and unused slots weigh 0.
    out->mask_logits = in_slots(mask_logits, mh * mw);
    out->mask_targets = in_slots(mask_targets, mh * mw);
    out->mask_weights = in_slots(mask_weights, 1).select(2, 0);
  }
  if (!training && masks) {
    const bool mask_truth = eval_truth != nullptr;
    std::vector<ImageTruth> truth;
    if (mask_truth)
      for (int64_t i = 0; i < batch; ++i) {
        const auto [h, w] = image_sizes[static_cast<size_t>(i)];
        truth.push_back(image_truth(*eval_truth, i, h, w, true));
      }
    third_stage(first.features, proposals, refined, logits, height, width, image_sizes, mask_truth ? &truth : nullptr,
                out.get());
  }
  return out;
}

void FasterRcnnMetaArchitecture::third_stage(const at::Tensor& features,
                                             const std::vector<detect::Proposals>& proposals, const at::Tensor& refined,
                                             const at::Tensor& logits, int64_t height, int64_t width,
                                             const std::vector<std::pair<int64_t, int64_t>>& image_sizes,
                                             const std::vector<ImageTruth>* truth, FasterRcnnOutputs* out) {
  // _predict_third_stage: the box classifier's detections (normalised to the input), crops of
  // the features at them through the second stage again, and the mask of each one's class.
  // With the ground truth (evaluation), _get_mask_proposal_boxes_and_classes: each detection
  // matched by the detector's target assigner (IoU 0.5), the mask logits of the matched class and
  // the matched mask cropped at the detection, for the mask loss.
  const int64_t batch = features.size(0), d = config_.nms.max_total_detections;
  const int64_t mh = config_.model.mask_height, mw = config_.model.mask_width;
  std::vector<at::Tensor> boxes, scores, image_index, classes, slot, matched_classes, mask_targets;
  int64_t offset = 0;
  for (int64_t i = 0; i < batch; ++i) {
    const int64_t n = proposals[static_cast<size_t>(i)].boxes.size(0);
    auto det = detect::Detections();
    // Clipped to the image and normalised to it, then to the input (the crops' frame). The OD
    // API clips to true_image_shapes too, but crops at the boxes normalised to the image,
    // which under padding is another place of the map; Orchard crops where the box is.
    const auto [h, w] = image_sizes[static_cast<size_t>(i)];
    if (n > 0)
      det = detect::box_classifier_detections(refined.narrow(0, offset, n), logits.narrow(0, offset, n),
                                              proposals[static_cast<size_t>(i)].boxes, h, w, config_.nms,
                                              config_.score_converter);
    offset += n;
    if (!det.boxes.defined() || det.boxes.size(0) == 0) continue;
    if (h != height || w != width) {
      const float sy = static_cast<float>(h) / static_cast<float>(height);
      const float sx = static_cast<float>(w) / static_cast<float>(width);
      det.boxes = det.boxes * torch::tensor({sy, sx, sy, sx});
    }
    const int64_t found = std::min(det.boxes.size(0), d);
    boxes.push_back(det.boxes.narrow(0, 0, found));
    scores.push_back(det.scores.narrow(0, 0, found));
    classes.push_back(det.classes.narrow(0, 0, found));
    image_index.push_back(torch::full({found}, i, torch::kLong));
    slot.push_back(torch::arange(found, torch::kLong) + i * d);
    if (truth) {
      const auto& gt = (*truth)[static_cast<size_t>(i)];
      const auto in_pixels = det.boxes.narrow(0, 0, found) * pixels(height, width, torch::TensorOptions());
      const auto t = detect::assign_proposals(in_pixels, gt.boxes, gt.classes);
      matched_classes.push_back(t.classes);
      mask_targets.push_back(detect::mask_targets(gt.masks, in_pixels, t.match, mh, mw).reshape({found, mh * mw}));
    }
  }
  const auto device = features.device();
  const bool found_any = !boxes.empty();
  const auto slot_index = found_any ? torch::cat(slot).to(device) : at::Tensor();
  // Zeros [batch, d, width] of `type` holding each detection's row of `rows` ([m, width]) in its
  // slot.
  const auto in_slots = [&](const at::Tensor& rows, int64_t width, at::ScalarType type) {
    auto all = torch::zeros({batch * d, width}, features.options().dtype(type));
    if (found_any) all = all.index_copy(0, slot_index, rows);
    return all.view({batch, d, width});
  };
  at::Tensor all_boxes, all_classes, mask_probabilities, matched_logits, matched, targets;
  if (found_any) {
    all_boxes = torch::cat(boxes).to(device);
    const auto box_features = model_->box_classifier_features(features, all_boxes, torch::cat(image_index).to(device));
    all_classes = torch::cat(classes).to(device);
    const int64_t m = all_boxes.size(0);
    const auto channel_of = [&](const at::Tensor& cls) {
      return config_.model.masks_are_class_agnostic ? torch::zeros_like(cls) : (cls - 1).clamp_min(0);
    };
    const auto channel = channel_of(all_classes);
    matched = truth ? torch::cat(matched_classes).to(device) : at::Tensor();
    const auto matched_channel = truth ? channel_of(matched) : at::Tensor();
    // The mask head on 32 detections at a time: the samples' 300 detections at once would hold
    // gigabytes of 33x33 maps.
    std::vector<at::Tensor> chunks, matched_chunks;
    for (int64_t start = 0; start < m; start += 32) {
      const int64_t len = std::min<int64_t>(32, m - start);
      const auto all = model_->mask_predictor(box_features.narrow(0, start, len));
      const auto pick = [&](const at::Tensor& ch) {
        return all.gather(1, ch.narrow(0, start, len).view({len, 1, 1, 1}).expand({len, 1, mh, mw}))
            .reshape({len, mh * mw});
      };
      chunks.push_back(pick(channel).sigmoid());
      if (truth) matched_chunks.push_back(pick(matched_channel));
    }
    mask_probabilities = torch::cat(chunks).to(torch::kFloat);
    if (truth) {
      matched_logits = torch::cat(matched_chunks).to(torch::kFloat);
      targets = torch::cat(mask_targets).to(device, torch::kFloat);
    }
  }
  out->detection_boxes = in_slots(all_boxes, 4, torch::kFloat);
  out->detection_scores =
      in_slots(found_any ? torch::cat(scores).to(device).unsqueeze(1) : at::Tensor(), 1, torch::kFloat).select(2, 0);
  out->detection_classes = in_slots(found_any ? all_classes.unsqueeze(1) : at::Tensor(), 1, torch::kLong).select(2, 0);
  const int64_t found_rows = found_any ? all_boxes.size(0) : 0;
  out->detection_valid =
      in_slots(torch::ones({found_rows, 1}, features.options().dtype(torch::kFloat)), 1, torch::kFloat).select(2, 0);
  out->detection_masks = in_slots(mask_probabilities, mh * mw, torch::kFloat).view({batch, d, mh, mw});
  if (truth) {
    out->mask_logits = in_slots(matched_logits, mh * mw, torch::kFloat);
    out->mask_targets = in_slots(targets, mh * mw, torch::kFloat);
    out->mask_weights =
        in_slots(found_any ? (matched > 0).to(torch::kFloat).unsqueeze(1) : at::Tensor(), 1, torch::kFloat)
            .select(2, 0);
  }
}

std::map<std::string, at::Tensor> FasterRcnnMetaArchitecture::loss(const Outputs& outputs, const InputShape& input,
                                                                   const std::vector<at::Tensor>& gt_boxes,
                                                                   const std::vector<at::Tensor>& gt_classes) {
  const auto& u = outputs_as<FasterRcnnOutputs>(outputs);
  const int64_t a = anchors(input.height, input.width).size(0);
  TORCH_CHECK(u.rpn_box_encodings.size(1) == a, "Faster R-CNN outputs of ", u.rpn_box_encodings.size(1),
              " anchors do not fit the ", a, " anchors of a ", input.height, "x", input.width, " input");
  const auto& options = u.rpn_box_encodings.options();
  const auto scale = pixels(input.height, input.width, options);
  std::vector<at::Tensor> gt;
  for (const auto& b : gt_boxes) gt.push_back(b.to(options.device(), torch::kFloat) * scale);
  const auto kept =
      detect::rpn_anchors(anchors(input.height, input.width), input.height, input.width, u.training, config_.rpn);
  const auto index = kept.index.to(options.device());
  auto losses = detect::rpn_loss(u.rpn_box_encodings.index_select(1, index), u.rpn_objectness.index_select(1, index),
                                 kept.boxes.to(options.device()), gt, config_.rpn);
  std::vector<detect::ProposalTargets> targets;
  std::vector<at::Tensor> refined, logits;
  const int64_t k = config_.model.num_classes;
  for (int64_t i = 0; i < u.proposal_boxes.size(0); ++i) {
    const auto rows = (u.proposal_valid[i] > 0.5f).nonzero().view(-1);
    const auto proposals = u.proposal_boxes[i].index_select(0, rows).detach();
    const auto classes = gt_classes[static_cast<size_t>(i)].to(options.device());
    if (u.training && config_.merge_multiple_label_boxes) {
      // The OD API merges the training input's boxes (inputs.transform_input_data); merged here,
      // where only this loss tells one box with two labels from two boxes. (The RPN's loss above
      // is the same either way: identical boxes match the same anchors.)
      const auto merged = detect::merge_boxes_with_multiple_labels(gt_boxes[static_cast<size_t>(i)], classes, k);
      auto t =
          detect::assign_proposals(proposals, merged.boxes.to(options.device(), torch::kFloat) * scale, merged.classes);
      const auto matched = (t.match >= 0).unsqueeze(1).to(torch::kFloat);
      const auto hot = merged.labels.size(0) > 0
                           ? merged.labels.index_select(0, t.match.clamp_min(0)) * matched
                           : torch::zeros({proposals.size(0), k}, proposals.options().dtype(torch::kFloat));
      t.class_targets = torch::cat({1 - matched, hot}, 1);
      targets.push_back(t);
    } else {
      targets.push_back(detect::assign_proposals(proposals, gt[static_cast<size_t>(i)], classes));
    }
    refined.push_back(u.refined_box_encodings[i].index_select(0, rows));
    logits.push_back(u.class_logits[i].index_select(0, rows));
  }
  for (auto& [name, value] :
       detect::box_classifier_loss(torch::cat(refined), torch::cat(logits), targets, config_.second_stage))
    losses[name] = value;
  // The mask loss of training's sampled proposals, or of evaluation's detections (forward_eval).
  if (u.mask_logits.defined()) {
    const int64_t mh = config_.model.mask_height, mw = config_.model.mask_width;
    losses["BoxClassifierLoss/mask_loss"] =
        detect::mask_loss(u.mask_logits.reshape({-1, mh, mw}), u.mask_targets.reshape({-1, mh, mw}).detach(),
                          u.mask_weights.reshape({-1}), config_.mask_loss_weight);
  }
  return losses;
}

std::vector<detect::Detections> FasterRcnnMetaArchitecture::postprocess(const Outputs& outputs,
                                                                        const InputShape& input) const {
  torch::NoGradGuard no_grad;
  const auto& u = outputs_as<FasterRcnnOutputs>(outputs);
  const auto cpu = [](const at::Tensor& t) { return t.to(torch::kCPU, torch::kFloat); };
  const int64_t height = input.height > 0 ? input.height : input_.height;  // unset: the configured size
  const int64_t width = input.height > 0 ? input.width : input_.width;
  const bool has_detections = u.detection_boxes.defined();  // Mask R-CNN: detections normalised to the input
  at::Tensor valid, boxes, refined, logits, scores, classes, masks;
  if (has_detections) {
    valid = cpu(u.detection_valid);
    boxes = cpu(u.detection_boxes);
    scores = cpu(u.detection_scores);
    classes = u.detection_classes.to(torch::kCPU);
    masks = cpu(u.detection_masks);
  } else {
    valid = cpu(u.proposal_valid);
    boxes = cpu(u.proposal_boxes);
    refined = cpu(u.refined_box_encodings);
    logits = cpu(u.class_logits);
  }
  std::vector<detect::Detections> result;
  for (int64_t i = 0; i < valid.size(0); ++i) {
    int64_t h = height, w = width;
    if (static_cast<size_t>(i) < input.image_sizes.size()) std::tie(h, w) = input.image_sizes[static_cast<size_t>(i)];
    const auto rows = (valid[i] > 0.5f).nonzero().view(-1);
    if (has_detections) {
      const float sy = static_cast<float>(height) / static_cast<float>(h);
      const float sx = static_cast<float>(width) / static_cast<float>(w);
      detect::Detections det;
      det.boxes = (boxes[i].index_select(0, rows) * torch::tensor({sy, sx, sy, sx})).clamp(0, 1).contiguous();
      det.scores = scores[i].index_select(0, rows).contiguous();
      det.classes = classes[i].index_select(0, rows).contiguous();
      det.masks = masks[i].index_select(0, rows).contiguous();
      result.push_back(det);
      continue;
    }
    result.push_back(detect::box_classifier_detections(refined[i].index_select(0, rows),
                                                       logits[i].index_select(0, rows), boxes[i].index_select(0, rows),
                                                       h, w, config_.nms, config_.score_converter));
  }
  return result;
}

bool FasterRcnnMetaArchitecture::is_prediction_head_parameter(const std::string& name) const {
  return model_->is_prediction_head_parameter(name);
}

// The extractor's first- and second-stage layers that the classifier has (e.g. resnet_v1_50's
// blocks 1-3 and block4); not the RPN, the box predictor or the mask head.
bool FasterRcnnMetaArchitecture::restored_by_classification(const std::string& name) const {
  for (const bool first_stage : {true, false}) {
    const std::string prefix = first_stage ? "first_stage_extractor." : "second_stage_extractor.";
    if (name.rfind(prefix, 0) == 0)
      return model_->feature_extractor().restored_by_classification(name.substr(prefix.size()), first_stage);
  }
  return false;
}

models::TfNameMap FasterRcnnMetaArchitecture::tf_name_map(const std::string& checkpoint_type) const {
  const bool classification = checkpoint_type == "classification";
  const detect::FasterRcnnModel model = model_;
  return [model, classification](const std::string& name) { return model->tf_name(name, classification); };
}

std::map<std::string, std::string> FasterRcnnMetaArchitecture::signature() const {
  std::map<std::string, std::string> s = {{"model", name()},
                                          {"features_stride", std::to_string(config_.model.features_stride)},
                                          {"anchors_per_location", std::to_string(config_.model.anchors_per_location)}};
  if (config_.model.rfcn) s["box_predictor"] = "rfcn";
  if (config_.model.predict_instance_masks)
    s["masks"] = std::to_string(config_.model.mask_height) + "x" + std::to_string(config_.model.mask_width);
  return s;
}

std::string FasterRcnnMetaArchitecture::describe() const {
  return fmt::format("{} {} ({} classes, stride {}, {} anchors per location, {} proposals{})",
                     config_.model.rfcn ? "faster_rcnn (R-FCN)" : "faster_rcnn", name(), config_.model.num_classes,
                     config_.model.features_stride, config_.model.anchors_per_location, config_.rpn.max_proposals,
                     config_.model.predict_instance_masks
                         ? fmt::format(", {}x{} masks", config_.model.mask_height, config_.model.mask_width)
                         : std::string());
}

void FasterRcnnMetaArchitecture::export_graph(const std::string& format, const std::string&,
                                              const GraphExportOptions&) {
  throw Error(std::string(format == "onnx"     ? "ONNX"
                          : format == "tflite" ? "TFLite"
                                               : "TensorFlow graph") +
              " export of faster_rcnn is not implemented: its second stage crops a data-dependent number of "
              "proposals (export the TensorFlow checkpoint, or use an SSD config)");
}

// model.faster_rcnn: what FasterRcnnMetaArchitecture builds (detect/config's checks of the
// message), with the registered feature extractors' types.
void validate_faster_rcnn(const object_detection::protos::TrainEvalPipelineConfig& pipeline,
                          std::vector<std::string>* problems) {
  detect::check_faster_rcnn_model(pipeline, detect::feature_extractors::registry().faster_rcnn_names(), problems);
}

MetaArchitectureEntry faster_rcnn_meta_architecture() {
  return {"faster_rcnn", parse_faster_rcnn, validate_faster_rcnn};
}

}  // namespace orchard::tasks
