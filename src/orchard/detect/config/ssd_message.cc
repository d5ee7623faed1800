// model.ssd: the fields SsdMetaArchitecture implements and the checks of the message
// (detect/meta_arch/ssd.cc registers check_ssd_model with its extractors' types).
#include <algorithm>
#include <string>
#include <vector>

#include "orchard/detect/config/config.h"
#include "orchard/detect/config/model_messages.h"
#include "orchard/proto/object_detection/pipeline.pb.h"

namespace orchard::detect {
namespace {

namespace odp = object_detection::protos;

const char* const kSsdImplemented[] = {
    "model.ssd.num_classes",
    "model.ssd.image_resizer.fixed_shape_resizer.height",
    "model.ssd.image_resizer.fixed_shape_resizer.width",
    "model.ssd.image_resizer.keep_aspect_ratio_resizer.min_dimension",
    "model.ssd.image_resizer.keep_aspect_ratio_resizer.max_dimension",
    "model.ssd.image_resizer.keep_aspect_ratio_resizer.pad_to_max_dimension",
    "model.ssd.image_resizer.keep_aspect_ratio_resizer.per_channel_pad_value",
    "model.ssd.image_resizer.keep_aspect_ratio_resizer.resize_method=BILINEAR",
    "model.ssd.feature_extractor.type",
    "model.ssd.feature_extractor.depth_multiplier",
    "model.ssd.feature_extractor.min_depth",
    "model.ssd.feature_extractor.pad_to_multiple",
    "model.ssd.feature_extractor.use_explicit_padding",
    "model.ssd.feature_extractor.use_depthwise",
    "model.ssd.feature_extractor.override_base_feature_extractor_hyperparams",
    "model.ssd.feature_extractor.fpn.min_level",
    "model.ssd.feature_extractor.fpn.max_level",
    "model.ssd.feature_extractor.fpn.additional_layer_depth",
    "model.ssd.anchor_generator.multiscale_anchor_generator",
    "model.ssd.box_predictor.weight_shared_convolutional_box_predictor.num_layers_before_predictor",
    "model.ssd.box_predictor.weight_shared_convolutional_box_predictor.depth",
    "model.ssd.box_predictor.weight_shared_convolutional_box_predictor.kernel_size",
    "model.ssd.box_predictor.weight_shared_convolutional_box_predictor.box_code_size",
    "model.ssd.box_predictor.weight_shared_convolutional_box_predictor.class_prediction_bias_init",
    "model.ssd.box_predictor.weight_shared_convolutional_box_predictor.use_dropout",
    "model.ssd.box_predictor.weight_shared_convolutional_box_predictor.dropout_keep_probability",
    "model.ssd.box_predictor.weight_shared_convolutional_box_predictor.share_prediction_tower",
    "model.ssd.box_predictor.weight_shared_convolutional_box_predictor.use_depthwise",
    "model.ssd.box_predictor.weight_shared_convolutional_box_predictor.score_converter=IDENTITY",
    "model.ssd.box_coder.faster_rcnn_box_coder",
    "model.ssd.matcher.argmax_matcher.matched_threshold",
    "model.ssd.matcher.argmax_matcher.unmatched_threshold",
    "model.ssd.matcher.argmax_matcher.ignore_thresholds",
    "model.ssd.matcher.argmax_matcher.negatives_lower_than_unmatched",
    "model.ssd.matcher.argmax_matcher.force_match_for_each_row",
    "model.ssd.matcher.argmax_matcher.use_matmul_gather",
    "model.ssd.similarity_calculator.iou_similarity",
    "model.ssd.anchor_generator.ssd_anchor_generator",
    "model.ssd.box_predictor.convolutional_box_predictor.min_depth",
    "model.ssd.box_predictor.convolutional_box_predictor.max_depth",
    "model.ssd.box_predictor.convolutional_box_predictor.num_layers_before_predictor=0",
    "model.ssd.box_predictor.convolutional_box_predictor.use_dropout",
    "model.ssd.box_predictor.convolutional_box_predictor.dropout_keep_probability",
    "model.ssd.box_predictor.convolutional_box_predictor.kernel_size",
    "model.ssd.box_predictor.convolutional_box_predictor.box_code_size",
    "model.ssd.box_predictor.convolutional_box_predictor.apply_sigmoid_to_scores=false",
    "model.ssd.box_predictor.convolutional_box_predictor.class_prediction_bias_init",
    "model.ssd.box_predictor.convolutional_box_predictor.use_depthwise",
    "model.ssd.post_processing.batch_non_max_suppression.score_threshold",
    "model.ssd.post_processing.batch_non_max_suppression.iou_threshold",
    "model.ssd.post_processing.batch_non_max_suppression.max_detections_per_class",
    "model.ssd.post_processing.batch_non_max_suppression.max_total_detections",
    "model.ssd.post_processing.score_converter",
    "model.ssd.normalize_loss_by_num_matches",
    "model.ssd.inplace_batchnorm_update",  // no effect: batch norm statistics always update in place
    "model.ssd.freeze_batchnorm",
    "model.ssd.normalize_loc_loss_by_codesize",
    "model.ssd.encode_background_as_zeros",
    "model.ssd.loss.classification_loss.weighted_sigmoid",
    "model.ssd.loss.classification_loss.weighted_softmax",
    "model.ssd.loss.classification_loss.weighted_sigmoid_focal",
    "model.ssd.loss.localization_loss.weighted_smooth_l1",
    "model.ssd.loss.hard_example_miner",
    "model.ssd.loss.classification_weight",
    "model.ssd.loss.localization_weight",
    "model.ssd.post_processing.batch_non_max_suppression.use_static_shapes",  // same detections, unpadded
};

// Hyperparams (conv_hyperparams) fields Orchard implements, under each of these prefixes.
const char* const kHyperparamsAt[] = {
    "model.ssd.feature_extractor.conv_hyperparams",
    "model.ssd.box_predictor.convolutional_box_predictor.conv_hyperparams",
    "model.ssd.box_predictor.weight_shared_convolutional_box_predictor.conv_hyperparams",
};
const char* const kHyperparams[] = {
    "op=CONV",
    "activation",
    "regularizer.l2_regularizer.weight",
    "initializer.truncated_normal_initializer",
    "initializer.random_normal_initializer",
    "batch_norm.decay",
    "batch_norm.epsilon",
    "batch_norm.scale",
    "batch_norm.center",
    "batch_norm.train",
};

}  // namespace

const std::vector<std::string>& ssd_implemented_fields() {
  static const std::vector<std::string> fields = [] {
    std::vector<std::string> out(std::begin(kSsdImplemented), std::end(kSsdImplemented));
    for (const char* at : kHyperparamsAt)
      for (const char* e : kHyperparams) out.push_back(std::string(at) + "." + e);
    return out;
  }();
  return fields;
}

void check_ssd_model(const odp::TrainEvalPipelineConfig& config, const std::vector<std::string>& extractor_types,
                     std::vector<std::string>* problems_out) {
  std::vector<std::string>& problems = *problems_out;
  {
    const odp::Ssd& ssd = config.model().ssd();
    if (ssd.num_classes() <= 0)
      problems.push_back("model.ssd.num_classes must be > 0 (got " + std::to_string(ssd.num_classes()) + ")");
    const std::string& type = ssd.feature_extractor().type();
    if (std::find(extractor_types.begin(), extractor_types.end(), type) == extractor_types.end())
      problems.push_back("model.ssd.feature_extractor.type '" + type + "' is not supported; Orchard implements " +
                         join_with_and(extractor_types));
    // EmbeddedSSDMobileNetV1FeatureExtractor raises these itself: its layers are sized for 256x256.
    if (type == "embedded_ssd_mobilenet_v1") {
      const auto& resizer = ssd.image_resizer();
      if (!resizer.has_fixed_shape_resizer() || resizer.fixed_shape_resizer().height() != 256 ||
          resizer.fixed_shape_resizer().width() != 256)
        problems.push_back(
            "model.ssd.image_resizer: embedded_ssd_mobilenet_v1 needs a 256x256 fixed_shape_resizer "
            "(as the OD API)");
      if (ssd.feature_extractor().pad_to_multiple() > 1)
        problems.push_back(
            "model.ssd.feature_extractor.pad_to_multiple must be 1 for embedded_ssd_mobilenet_v1 "
            "(as the OD API)");
    }
    // SSDMobileNetV2MnasFPNFeatureExtractor's own checks: levels 3..6, sides multiples of 64.
    if (type == "ssd_mobilenet_v2_mnasfpn") {
      const auto& fe = ssd.feature_extractor();
      if (fe.fpn().min_level() != 3 || fe.fpn().max_level() != 6)
        problems.push_back("model.ssd.feature_extractor.fpn: ssd_mobilenet_v2_mnasfpn has levels 3..6 (as the OD API)");
      const auto& resizer = ssd.image_resizer();
      const auto& keep = resizer.keep_aspect_ratio_resizer();
      if ((resizer.has_fixed_shape_resizer() &&
           (resizer.fixed_shape_resizer().height() % 64 != 0 || resizer.fixed_shape_resizer().width() % 64 != 0)) ||
          (resizer.has_keep_aspect_ratio_resizer() && (!keep.pad_to_max_dimension() || keep.max_dimension() % 64 != 0)))
        problems.push_back(
            "model.ssd.image_resizer: ssd_mobilenet_v2_mnasfpn needs sides that are multiples of 64 "
            "(as the OD API)");
    }
    // SSDInceptionV3FeatureExtractor raises this itself: inception_v3 has no arg scope of its own.
    if ((type == "ssd_inception_v2" || type == "ssd_inception_v3") &&
        !ssd.feature_extractor().override_base_feature_extractor_hyperparams())
      problems.push_back("model.ssd.feature_extractor.override_base_feature_extractor_hyperparams must be true for " +
                         type + " (as the OD API: the base network takes conv_hyperparams)");
    check_image_resizer(ssd.image_resizer(), "model.ssd.image_resizer", &problems);
    check_oneof(ssd.box_coder(), "box_coder_oneof", "model.ssd.box_coder", {"faster_rcnn_box_coder"}, &problems);
    check_oneof(ssd.matcher(), "matcher_oneof", "model.ssd.matcher", {"argmax_matcher"}, &problems);
    check_oneof(ssd.similarity_calculator(), "region_similarity", "model.ssd.similarity_calculator", {"iou_similarity"},
                &problems);
    check_oneof(ssd.anchor_generator(), "anchor_generator_oneof", "model.ssd.anchor_generator",
                {"ssd_anchor_generator", "multiscale_anchor_generator"}, &problems);
    check_oneof(ssd.box_predictor(), "box_predictor_oneof", "model.ssd.box_predictor",
                {"convolutional_box_predictor", "weight_shared_convolutional_box_predictor"}, &problems);
    if (ssd.box_predictor().has_weight_shared_convolutional_box_predictor()) {
      const auto& h = ssd.box_predictor().weight_shared_convolutional_box_predictor().conv_hyperparams();
      if (h.activation() != odp::Hyperparams::RELU_6)
        problems.push_back(
            "model.ssd.box_predictor.weight_shared_convolutional_box_predictor.conv_hyperparams."
            "activation " +
            odp::Hyperparams::Activation_Name(h.activation()) + " is not supported; Orchard implements RELU_6");
    }
    // SSDLite's depthwise heads and the extra layers run ReLU6, as the samples configure them.
    for (const auto& [path, hyper] :
         {std::pair{std::string("model.ssd.feature_extractor.conv_hyperparams"),
                    &ssd.feature_extractor().conv_hyperparams()},
          std::pair{std::string("model.ssd.box_predictor.convolutional_box_predictor.conv_hyperparams"),
                    &ssd.box_predictor().convolutional_box_predictor().conv_hyperparams()}}) {
      const bool used = path.find("box_predictor") == std::string::npos ||
                        ssd.box_predictor().convolutional_box_predictor().use_depthwise();
      if (used && hyper->activation() != odp::Hyperparams::RELU_6)
        problems.push_back(path + ".activation " + odp::Hyperparams::Activation_Name(hyper->activation()) +
                           " is not supported; Orchard implements RELU_6");
    }
    check_oneof(ssd.loss().classification_loss(), "classification_loss", "model.ssd.loss.classification_loss",
                {"weighted_sigmoid", "weighted_softmax", "weighted_sigmoid_focal"}, &problems);
    check_oneof(ssd.loss().localization_loss(), "localization_loss", "model.ssd.loss.localization_loss",
                {"weighted_smooth_l1"}, &problems);
    if (config.train_config().merge_multiple_label_boxes())
      problems.push_back(
          "train_config.merge_multiple_label_boxes is not supported with model.ssd; Orchard implements "
          "it for faster_rcnn (the OD API's AVA sample)");
  }
}

}  // namespace orchard::detect
