#include "orchard/detect/meta_arch/ssd.h"

#include <spdlog/fmt/fmt.h>
#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <cstdio>

#include "orchard/core/error.h"
#include "orchard/core/files.h"
#include "orchard/detect/config/config.h"
#include "orchard/detect/feature_extractors/registry.h"
#include "orchard/export/onnx_export.h"
#include "orchard/export/tf_graph_export.h"
#include "orchard/export/tflite_export.h"
#include "orchard/proto/object_detection/pipeline.pb.h"

namespace orchard::tasks {
namespace {

// model.ssd -> SsdConfig (the message is validated by detect::validate_pipeline_config).
ParsedModel parse_ssd(const object_detection::protos::TrainEvalPipelineConfig& pipeline) {
  namespace pb = object_detection::protos;
  const pb::Ssd& ssd = pipeline.model().ssd();
  auto config = std::make_shared<SsdConfig>();
  SsdConfig& c = *config;
  ParsedModel parsed;
  parsed.num_classes = ssd.num_classes();
  const auto& fe = ssd.feature_extractor();
  // The Keras feature extractors (ssd_mobilenet_v2_keras, ...) build the same networks.
  std::string type = fe.type();
  if (type.size() > 6 && type.compare(type.size() - 6, 6, "_keras") == 0) type.resize(type.size() - 6);
  // <registered extractor>[_mnasfpn | _ppn | _fpn]: the feature map generator on the base network.
  if (type.size() > 8 && type.compare(type.size() - 8, 8, "_mnasfpn") == 0) {
    type.resize(type.size() - 8);
    c.model.mnasfpn = true;
    c.model.fpn.min_level = fe.fpn().min_level();
    c.model.fpn.max_level = fe.fpn().max_level();
    c.model.fpn.additional_layer_depth = fe.fpn().additional_layer_depth();
  }
  if (type.size() > 4 && type.compare(type.size() - 4, 4, "_ppn") == 0) {
    type.resize(type.size() - 4);
    c.model.ppn = true;
  }
  if (type.size() > 4 && type.compare(type.size() - 4, 4, "_fpn") == 0) {
    type.resize(type.size() - 4);
    c.model.fpn.enabled = true;
    c.model.fpn.min_level = fe.fpn().min_level();
    c.model.fpn.max_level = fe.fpn().max_level();
    c.model.fpn.additional_layer_depth = fe.fpn().additional_layer_depth();
  }
  c.model.feature_extractor = type;
  if (pipeline.has_graph_rewriter() && pipeline.graph_rewriter().has_quantization()) {
    const auto& q = pipeline.graph_rewriter().quantization();
    c.quantization = layers::QuantizationOptions{q.delay(), q.weight_bits(), q.activation_bits(), q.symmetric()};
  }
  c.model.depth_multiplier = fe.depth_multiplier();
  c.model.min_depth = fe.min_depth();
  c.model.use_depthwise = fe.use_depthwise();
  c.model.use_explicit_padding = fe.use_explicit_padding();
  c.model.freeze_batchnorm = ssd.freeze_batchnorm();
  c.model.pad_to_multiple = fe.pad_to_multiple();
  const auto& hyper = fe.conv_hyperparams();
  if (c.model.mnasfpn) {  // its own training_scope: batch norm decay 0.99, epsilon 0.01 (conv_hyperparams unused)
    c.model.bn_momentum = 0.01;
    c.model.bn_eps = 0.01;
  } else if (hyper.has_batch_norm()) {
    c.model.bn_momentum = 1.0 - hyper.batch_norm().decay();
    c.model.bn_eps = hyper.batch_norm().epsilon();
  }
  if (hyper.initializer().has_truncated_normal_initializer())
    c.model.init_stddev = hyper.initializer().truncated_normal_initializer().stddev();
  else if (hyper.initializer().has_random_normal_initializer())
    c.model.init_stddev = hyper.initializer().random_normal_initializer().stddev();
  parsed.l2_weight = hyper.regularizer().has_l2_regularizer() ? hyper.regularizer().l2_regularizer().weight() : 0.0;

  if (ssd.box_predictor().has_weight_shared_convolutional_box_predictor()) {
    const auto& ws = ssd.box_predictor().weight_shared_convolutional_box_predictor();
    detect::WeightSharedPredictorOptions po;
    po.depth = ws.depth();
    po.num_layers_before_predictor = ws.num_layers_before_predictor();
    po.kernel_size = ws.kernel_size();
    po.box_code_size = ws.box_code_size();
    po.class_prediction_bias_init = ws.class_prediction_bias_init();
    po.use_dropout = ws.use_dropout();
    po.dropout_keep_probability = ws.dropout_keep_probability();
    po.share_prediction_tower = ws.share_prediction_tower();
    po.use_depthwise = ws.use_depthwise();
    const auto& h = ws.conv_hyperparams();
    po.apply_batch_norm = h.has_batch_norm();
    if (h.has_batch_norm()) {
      po.bn_momentum = 1.0 - h.batch_norm().decay();
      po.bn_eps = h.batch_norm().epsilon();
    }
    po.truncated_init = h.initializer().has_truncated_normal_initializer();
    po.init_stddev = po.truncated_init ? h.initializer().truncated_normal_initializer().stddev()
                                       : h.initializer().random_normal_initializer().stddev();
    c.model.weight_shared = po;
    c.model.box_code_size = ws.box_code_size();
  }
  const auto& predictor = ssd.box_predictor().convolutional_box_predictor();
  c.model.kernel_size = predictor.kernel_size();
  if (!c.model.weight_shared) c.model.box_code_size = predictor.box_code_size();
  c.model.use_dropout = predictor.use_dropout();
  c.model.dropout_keep_probability = predictor.dropout_keep_probability();
  c.model.class_prediction_bias_init = predictor.class_prediction_bias_init();
  c.model.depthwise_heads = predictor.use_depthwise();
  if (predictor.conv_hyperparams().has_batch_norm()) {
    c.model.head_bn_momentum = 1.0 - predictor.conv_hyperparams().batch_norm().decay();
    c.model.head_bn_eps = predictor.conv_hyperparams().batch_norm().epsilon();
  }

  if (ssd.anchor_generator().has_multiscale_anchor_generator()) {
    const auto& m = ssd.anchor_generator().multiscale_anchor_generator();
    detect::MultiscaleAnchorOptions mo;
    mo.min_level = m.min_level();
    mo.max_level = m.max_level();
    mo.anchor_scale = m.anchor_scale();
    if (m.aspect_ratios_size() > 0) mo.aspect_ratios.assign(m.aspect_ratios().begin(), m.aspect_ratios().end());
    mo.scales_per_octave = m.scales_per_octave();
    mo.normalize_coordinates = m.normalize_coordinates();
    c.multiscale_anchors = mo;
  }
  const auto& ag = ssd.anchor_generator().ssd_anchor_generator();
  c.anchors.num_layers = ag.num_layers();
  c.anchors.min_scale = ag.min_scale();
  c.anchors.max_scale = ag.max_scale();
  c.anchors.scales.assign(ag.scales().begin(), ag.scales().end());
  if (ag.aspect_ratios_size() > 0) c.anchors.aspect_ratios.assign(ag.aspect_ratios().begin(), ag.aspect_ratios().end());
  c.anchors.interpolated_scale_aspect_ratio = ag.interpolated_scale_aspect_ratio();
  c.anchors.base_anchor_height = ag.base_anchor_height();
  c.anchors.base_anchor_width = ag.base_anchor_width();
  c.anchors.height_stride.assign(ag.height_stride().begin(), ag.height_stride().end());
  c.anchors.width_stride.assign(ag.width_stride().begin(), ag.width_stride().end());
  c.anchors.height_offset.assign(ag.height_offset().begin(), ag.height_offset().end());
  c.anchors.width_offset.assign(ag.width_offset().begin(), ag.width_offset().end());
  c.anchors.reduce_boxes_in_lowest_layer = ag.reduce_boxes_in_lowest_layer();

  const auto& coder = ssd.box_coder().faster_rcnn_box_coder();
  c.loss.coder.y_scale = coder.y_scale();
  c.loss.coder.x_scale = coder.x_scale();
  c.loss.coder.height_scale = coder.height_scale();
  c.loss.coder.width_scale = coder.width_scale();
  const auto& matcher = ssd.matcher().argmax_matcher();
  c.loss.matcher.matched_threshold = matcher.matched_threshold();
  c.loss.matcher.unmatched_threshold = matcher.unmatched_threshold();
  c.loss.matcher.ignore_thresholds = matcher.ignore_thresholds();
  c.loss.matcher.negatives_lower_than_unmatched = matcher.negatives_lower_than_unmatched();
  c.loss.matcher.force_match_for_each_row = matcher.force_match_for_each_row();

  const auto& loss = ssd.loss();
  c.loss.classification = loss.classification_loss().has_weighted_softmax()
                              ? detect::ClassificationLoss::kWeightedSoftmax
                              : detect::ClassificationLoss::kWeightedSigmoid;
  if (loss.classification_loss().has_weighted_sigmoid_focal()) {
    const auto& focal = loss.classification_loss().weighted_sigmoid_focal();
    c.loss.classification = detect::ClassificationLoss::kWeightedSigmoidFocal;
    c.loss.focal_gamma = focal.gamma();
    c.loss.focal_alpha = focal.has_alpha() ? focal.alpha() : -1.0f;
  }
  c.loss.encode_background_as_zeros = ssd.encode_background_as_zeros();
  if (loss.localization_loss().has_weighted_smooth_l1())
    c.loss.smooth_l1_delta = loss.localization_loss().weighted_smooth_l1().delta();
  c.loss.classification_weight = loss.classification_weight();
  c.loss.localization_weight = loss.localization_weight();
  c.loss.normalize_loss_by_num_matches = ssd.normalize_loss_by_num_matches();
  c.loss.normalize_loc_loss_by_codesize = ssd.normalize_loc_loss_by_codesize();
  c.loss.miner.enabled = loss.has_hard_example_miner();
  if (loss.has_hard_example_miner()) {
    const auto& m = loss.hard_example_miner();
    c.loss.miner.num_hard_examples = m.num_hard_examples();
    c.loss.miner.iou_threshold = m.iou_threshold();
    c.loss.miner.loss_type = detect::miner_loss_type_from_name(pb::HardExampleMiner::LossType_Name(m.loss_type()));
    c.loss.miner.max_negatives_per_positive = m.max_negatives_per_positive();
    c.loss.miner.min_negatives_per_image = m.min_negatives_per_image();
  }

  c.score_converter = parse_post_processing(ssd.post_processing(), &c.nms);
  parse_image_resizer(ssd.image_resizer(), &parsed);
  parsed.config = config;
  return parsed;
}

}  // namespace

namespace {

// The model, its option checks as one-line configuration errors (not internal ones).
detect::SsdModel build_model(const detect::SsdModelOptions& options) {
  try {
    return detect::SsdModel(options);
  } catch (const c10::Error& e) {
    throw Error("model.ssd: " + std::string(e.what_without_backtrace()));
  }
}

}  // namespace

std::unique_ptr<MetaArchitecture> SsdConfig::build(int64_t num_classes,
                                                   const data::DetectionInputOptions& input) const {
  return std::make_unique<SsdMetaArchitecture>(*this, num_classes, input);
}

SsdMetaArchitecture::SsdMetaArchitecture(const SsdConfig& config, int64_t num_classes,
                                         const data::DetectionInputOptions& input)
    : config_(config), input_(input) {
  config_.model.num_classes = num_classes;
  const int64_t h = input.height, w = input.width;
  if (const auto& ms = config_.multiscale_anchors) {
    const bool pyramid = config_.model.fpn.enabled || config_.model.mnasfpn;
    if (!pyramid || ms->min_level != config_.model.fpn.min_level || ms->max_level != config_.model.fpn.max_level)
      throw Error("model.ssd.anchor_generator.multiscale_anchor_generator levels " + std::to_string(ms->min_level) +
                  ".." + std::to_string(ms->max_level) + " must be the feature extractor's FPN levels" +
                  (pyramid ? " (" + std::to_string(config_.model.fpn.min_level) + ".." +
                                 std::to_string(config_.model.fpn.max_level) + ")"
                           : " (it has no fpn)"));
    config_.model.anchors_per_location.assign(static_cast<size_t>(ms->max_level - ms->min_level + 1),
                                              detect::anchors_per_location(*ms));
    model_ = build_model(config_.model);
  } else {
    const auto& fpn = config_.model.fpn;
    if (fpn.enabled && config_.anchors.num_layers != fpn.max_level - fpn.min_level + 1)
      throw Error("model.ssd: the FPN feature extractor has levels " + std::to_string(fpn.min_level) + ".." +
                  std::to_string(fpn.max_level) + " (" + std::to_string(fpn.max_level - fpn.min_level + 1) +
                  " feature maps) but anchor_generator.ssd_anchor_generator.num_layers " +
                  std::to_string(config_.anchors.num_layers) +
                  " (the OD API's FPN configs use multiscale_anchor_generator with the same levels)");
    config_.model.anchors_per_location = detect::anchors_per_location(config_.anchors);
    model_ = build_model(config_.model);
  }
  if (config_.quantization) {
    // Where quantization-aware training is not written yet the model trains in float, as it did
    // before graph_rewriter was implemented (a warning says so; docs/deploy.md lists the models).
    const std::string missing = model_->quantization_unsupported();
    if (missing.empty()) model_->enable_quantization(*config_.quantization);
    else
      spdlog::warn(
          "graph_rewriter quantization: quantization-aware training of {} is not implemented yet "
          "(ssd_mobilenet_v1 / v2 / edgetpu, their FPNs and both box predictors are): this model trains and "
          "evaluates in float",
          missing);
  }
  anchors_ = generate_anchors(h, w);
}

at::Tensor SsdMetaArchitecture::generate_anchors(int64_t height, int64_t width) const {
  const auto sizes = model_->feature_map_sizes(height, width);
  if (const auto& ms = config_.multiscale_anchors)
    return detect::generate_multiscale_anchors(*ms, sizes, height, width);
  return detect::generate_ssd_anchors(config_.anchors, sizes, height, width);
}

at::Tensor SsdMetaArchitecture::anchors(int64_t height, int64_t width) const {
  if (height <= 0 || (height == input_.height && width == input_.width)) return anchors_;
  std::lock_guard<std::mutex> lock(anchors_mutex_);
  auto& a = anchors_by_size_[{height, width}];
  if (!a.defined()) a = generate_anchors(height, width);
  return a;
}

std::shared_ptr<torch::nn::Module> SsdMetaArchitecture::module() { return model_.ptr(); }

// The base network's parameters (SsdModel's "backbone." module), as the extractor says.
bool SsdMetaArchitecture::restored_by_classification(const std::string& name) const {
  const std::string prefix = "backbone.";
  return name.rfind(prefix, 0) == 0 &&
         model_->feature_extractor().restored_by_classification(name.substr(prefix.size()));
}

std::string SsdMetaArchitecture::classification_source_name(const std::string& name) const {
  return name.substr(std::string("backbone.").size());
}

models::TfNameMap SsdMetaArchitecture::tf_name_map(const std::string& checkpoint_type) const {
  // The OD API restores a classification checkpoint into the feature extractor by its names
  // without the "FeatureExtractor/" scope (TF-Slim's MobilenetV2/..., MobilenetV1/...).
  const std::string scope = checkpoint_type == "classification" ? model_->backbone_scope() : "";
  const detect::SsdModel model = model_;
  return [model, scope](const std::string& name) { return model->tf_name(name, scope); };
}

// The images' sizes matter to SSD's postprocess only (its clip window), which has them.
std::unique_ptr<Outputs> SsdMetaArchitecture::forward(const at::Tensor& images, const InputShape&, const data::Batch*) {
  // SsdModel's predictions hold each anchor's box code and then its class logits.
  const auto predictions = model_->forward(images);
  const int64_t code = config_.model.box_code_size;
  auto outputs = std::make_unique<SsdOutputs>();
  outputs->box_encodings = predictions.narrow(2, 0, code);
  outputs->class_logits = predictions.narrow(2, code, predictions.size(2) - code);
  return outputs;
}

std::map<std::string, at::Tensor> SsdMetaArchitecture::loss(const Outputs& outputs, const InputShape& input,
                                                            const std::vector<at::Tensor>& gt_boxes,
                                                            const std::vector<at::Tensor>& gt_classes) {
  const auto& ssd = outputs_as<SsdOutputs>(outputs);
  // In float32 even under autocast.
  const auto codes = ssd.box_encodings.to(torch::kFloat);
  const auto logits = ssd.class_logits.to(torch::kFloat);
  const auto a = anchors(input.height, input.width);
  return detect::ssd_loss(codes, logits, a.to(codes.device()), gt_boxes, gt_classes, config_.loss);
}

std::vector<detect::Detections> SsdMetaArchitecture::postprocess(const Outputs& outputs,
                                                                 const InputShape& input) const {
  torch::NoGradGuard no_grad;
  const auto& ssd = outputs_as<SsdOutputs>(outputs);
  // Unclipped into NMS, clipped after it (multiclass_nms), as the OD API does.
  auto boxes = detect::decode_boxes(ssd.box_encodings.to(torch::kCPU, torch::kFloat),
                                    anchors(input.height, input.width), config_.loss.coder);
  auto logits = ssd.class_logits.to(torch::kCPU, torch::kFloat);
  at::Tensor scores;
  if (config_.score_converter == "SIGMOID") scores = logits.sigmoid();
  else if (config_.score_converter == "SOFTMAX") scores = logits.softmax(2);
  else scores = logits;
  scores = scores.narrow(2, 1, scores.size(2) - 1);  // drop the background column
  std::vector<detect::Detections> result;
  for (int64_t i = 0; i < logits.size(0); ++i) {
    detect::BatchNmsOptions nms = config_.nms;
    if (static_cast<size_t>(i) < input.image_sizes.size()) {
      // SSDMetaArch's clip window (the image inside the padded input); the evaluation then
      // expresses the boxes in the image's frame (eval_util), done here.
      const auto [h, w] = input.image_sizes[static_cast<size_t>(i)];
      nms.clip_window = {0.0f, 0.0f, static_cast<float>(h) / static_cast<float>(input.height),
                         static_cast<float>(w) / static_cast<float>(input.width)};
      nms.change_coordinate_frame = true;
    }
    result.push_back(detect::multiclass_nms(boxes[i].contiguous(), scores[i].contiguous(), nms));
  }
  return result;
}

bool SsdMetaArchitecture::is_prediction_head_parameter(const std::string& name) const {
  return detect::is_prediction_head_parameter(name);
}

std::map<std::string, std::string> SsdMetaArchitecture::signature() const {
  char dm[32];
  std::snprintf(dm, sizeof dm, "%g", config_.model.depth_multiplier);
  return {{"model", name()}, {"depth_multiplier", dm}, {"num_anchors", std::to_string(anchors_.size(0))}};
}

std::string SsdMetaArchitecture::name() const {
  return config_.model.feature_extractor + (config_.model.fpn.enabled ? "_fpn" : "") +
         (config_.model.ppn ? "_ppn" : "") + (config_.model.mnasfpn ? "_mnasfpn" : "");
}

std::string SsdMetaArchitecture::describe() const {
  if (input_.keep_aspect_ratio && !input_.keep_aspect_ratio->pad_to_max_dimension)
    return fmt::format("{} ({} classes, anchors for each input size: {} at {}x{})", name(), config_.model.num_classes,
                       anchors_.size(0), input_.height, input_.width);
  return fmt::format("{} ({} classes, {} anchors)", name(), config_.model.num_classes, anchors_.size(0));
}

void SsdMetaArchitecture::export_graph(const std::string& format, const std::string& path,
                                       const GraphExportOptions& options) {
  if (input_.keep_aspect_ratio && !input_.keep_aspect_ratio->pad_to_max_dimension)
    throw Error(std::string(format == "onnx"     ? "ONNX"
                            : format == "tflite" ? "TFLite"
                                                 : "TensorFlow graph") +
                " export needs a fixed input size: keep_aspect_ratio_resizer without pad_to_max_dimension runs "
                "each image at its own size, with anchors of that size (export the TensorFlow checkpoint instead, or "
                "set pad_to_max_dimension: true)");
  model_->eval();
  const auto& coder = config_.loss.coder;
  if (format == "tflite") {
    // export_tflite_ssd_graph.py: the pipeline's NMS thresholds, the script's own detection counts.
    exporting::TfliteDetectionOptions o;
    o.height = input_.height;
    o.width = input_.width;
    o.score_converter = config_.score_converter;
    o.box_coder_scales = {coder.y_scale, coder.x_scale, coder.height_scale, coder.width_scale};
    o.add_postprocessing_op = options.add_postprocessing_op;
    o.max_detections = options.max_detections;
    o.max_classes_per_detection = options.max_classes_per_detection;
    o.detections_per_class = options.detections_per_class;
    o.use_regular_nms = options.use_regular_nms;
    o.nms_score_threshold = config_.nms.score_threshold;
    o.nms_iou_threshold = config_.nms.iou_threshold;
    const std::string type = options.inference_type.empty() ? (model_->quantization() ? "QUANTIZED_UINT8" : "FLOAT")
                                                            : options.inference_type;
    if (type != "FLOAT" && type != "QUANTIZED_UINT8")
      throw Error("--inference_type must be FLOAT or QUANTIZED_UINT8, not '" + type + "'");
    o.quantized = type == "QUANTIZED_UINT8";
    exporting::export_tflite_ssd(*model_, anchors_, o, path);
    if (o.add_postprocessing_op)
      spdlog::info(
          "wrote {} ({} TFLite as export_tflite_ssd_graph.py + the converter: input 'normalized_input_image_tensor' "
          "[1, {}, {}, 3] {}; TFLite_Detection_PostProcess: boxes [1, {}, 4], classes, scores, num_detections; {} "
          "NMS)",
          path, o.quantized ? "uint8" : "float", o.height, o.width,
          o.quantized ? "uint8, (q - 128) / 128" : "float scaled to [-1, 1]", o.max_detections,
          o.use_regular_nms ? "regular" : "fast");
    else
      spdlog::info(
          "wrote {} ({} TFLite: input 'normalized_input_image_tensor' [1, {}, {}, 3]; outputs "
          "'raw_outputs/box_encodings' [1, {}, 4], 'raw_outputs/class_predictions' [1, {}, {}] ({}))",
          path, o.quantized ? "uint8" : "float", o.height, o.width, anchors_.size(0), anchors_.size(0),
          config_.model.num_classes + 1, config_.score_converter);
    return;
  }
  if (format == "frozen_graph" || format == "inference_graph" || format == "saved_model") {
    exporting::DetectionGraphOptions o;
    o.height = input_.height;
    o.width = input_.width;
    o.score_converter = config_.score_converter;
    o.box_coder_scales = {coder.y_scale, coder.x_scale, coder.height_scale, coder.width_scale};
    const auto& nms = config_.nms;
    if (!nms.clip || nms.change_coordinate_frame || nms.max_detections_per_class <= 0 || nms.max_total_detections <= 0)
      throw Error(
          "TensorFlow graph export: post_processing with unlimited detections or without clipping is not "
          "written yet");
    o.score_threshold = nms.score_threshold;
    o.iou_threshold = nms.iou_threshold;
    o.max_detections_per_class = nms.max_detections_per_class;
    o.max_total_detections = nms.max_total_detections;
    if (format == "saved_model") {  // the SavedModel folder `path` alone
      exporting::export_detection_frozen_graph(*model_, anchors_, o, "", path);
      spdlog::info("wrote {}/saved_model.pb (TensorFlow SavedModel; docs/deploy.md)", path);
      return;
    }
    if (format == "inference_graph") {  // export_inference_graph.py's files in the directory `path`
      exporting::export_detection_frozen_graph(*model_, anchors_, o, join_path(path, "frozen_inference_graph.pb"),
                                               join_path(path, "saved_model"));
      spdlog::info("wrote {0}/frozen_inference_graph.pb and {0}/saved_model (TensorFlow; docs/deploy.md)", path);
      return;
    }
    exporting::export_detection_frozen_graph(*model_, anchors_, o, path);
    spdlog::info(
        "wrote {} (TensorFlow frozen graph as export_inference_graph.py lays it out: input 'image_tensor' uint8 "
        "[1, h, w, 3], resized to {}x{}; outputs 'detection_boxes', 'detection_scores', 'detection_classes' "
        "[1, {}], 'num_detections', and 'raw_detection_boxes' [1, {}, 4], 'raw_detection_scores' [1, {}, {}] ({}))",
        path, o.height, o.width, o.max_total_detections, anchors_.size(0), anchors_.size(0),
        config_.model.num_classes + 1, config_.score_converter);
    return;
  }
  exporting::DetectionOnnxOptions o;
  o.height = input_.height;
  o.width = input_.width;
  o.include_preprocessing = options.include_preprocessing;
  o.score_converter = config_.score_converter;
  o.box_coder_scales = {coder.y_scale, coder.x_scale, coder.height_scale, coder.width_scale};
  exporting::export_detection_onnx(*model_, anchors_, o, path);
  spdlog::info(
      "wrote {} (ONNX opset {}, input 'images' [batch, 3, {}, {}] {}, outputs 'raw_detection_boxes' "
      "[batch, {}, 4], 'raw_detection_scores' [batch, {}, {}] ({}; column 0 the background); no NMS)",
      path, exporting::kOnnxOpset, o.height, o.width, o.include_preprocessing ? "RGB in [0, 255]" : "scaled to [-1, 1]",
      anchors_.size(0), anchors_.size(0), config_.model.num_classes + 1, config_.score_converter);
}

// model.ssd: what SsdMetaArchitecture builds (detect/config's checks of the message), with the
// registered feature extractors' types.
void validate_ssd(const object_detection::protos::TrainEvalPipelineConfig& pipeline,
                  std::vector<std::string>* problems) {
  detect::check_ssd_model(pipeline, detect::feature_extractors::registry().ssd_types(), problems);
}

MetaArchitectureEntry ssd_meta_architecture() { return {"ssd", parse_ssd, validate_ssd}; }

}  // namespace orchard::tasks
