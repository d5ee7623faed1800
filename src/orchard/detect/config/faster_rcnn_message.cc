// model.faster_rcnn (Faster R-CNN, R-FCN, Mask R-CNN): the fields FasterRcnnMetaArchitecture
// implements and the checks of the message (detect/meta_arch/faster_rcnn.cc registers
// check_faster_rcnn_model with its extractors' types).
#include <algorithm>
#include <string>
#include <vector>

#include "orchard/detect/config/config.h"
#include "orchard/detect/config/model_messages.h"
#include "orchard/proto/object_detection/pipeline.pb.h"

namespace orchard::detect {
namespace {

namespace odp = object_detection::protos;

// The ResNet-v1, Inception-v2 and Inception-ResNet-v2 extractors; the l2 weights of the samples
// (0) only.
const char* const kFasterRcnnImplemented[] = {
    "model.faster_rcnn.num_classes",
    "model.faster_rcnn.number_of_stages=2",
    "model.faster_rcnn.number_of_stages=3",
    "model.faster_rcnn.image_resizer.fixed_shape_resizer.height",
    "model.faster_rcnn.image_resizer.fixed_shape_resizer.width",
    "model.faster_rcnn.image_resizer.keep_aspect_ratio_resizer.min_dimension",
    "model.faster_rcnn.image_resizer.keep_aspect_ratio_resizer.max_dimension",
    "model.faster_rcnn.image_resizer.keep_aspect_ratio_resizer.pad_to_max_dimension",
    "model.faster_rcnn.image_resizer.keep_aspect_ratio_resizer.per_channel_pad_value",
    "model.faster_rcnn.image_resizer.keep_aspect_ratio_resizer.resize_method=BILINEAR",
    "model.faster_rcnn.feature_extractor.type",
    "model.faster_rcnn.feature_extractor.first_stage_features_stride",
    "model.faster_rcnn.feature_extractor.batch_norm_trainable",
    "model.faster_rcnn.first_stage_anchor_generator.grid_anchor_generator",
    "model.faster_rcnn.first_stage_atrous_rate",
    "model.faster_rcnn.first_stage_box_predictor_kernel_size",
    "model.faster_rcnn.first_stage_box_predictor_depth",
    "model.faster_rcnn.first_stage_minibatch_size",
    "model.faster_rcnn.first_stage_positive_balance_fraction",
    "model.faster_rcnn.first_stage_nms_score_threshold",
    "model.faster_rcnn.first_stage_nms_iou_threshold",
    "model.faster_rcnn.first_stage_max_proposals",
    "model.faster_rcnn.first_stage_localization_loss_weight",
    "model.faster_rcnn.first_stage_objectness_loss_weight",
    "model.faster_rcnn.initial_crop_size",
    "model.faster_rcnn.maxpool_kernel_size",
    "model.faster_rcnn.maxpool_stride",
    "model.faster_rcnn.second_stage_box_predictor.mask_rcnn_box_predictor.use_dropout",
    "model.faster_rcnn.second_stage_box_predictor.mask_rcnn_box_predictor.dropout_keep_probability",
    "model.faster_rcnn.second_stage_box_predictor.mask_rcnn_box_predictor.predict_instance_masks",
    "model.faster_rcnn.second_stage_box_predictor.mask_rcnn_box_predictor.mask_height",
    "model.faster_rcnn.second_stage_box_predictor.mask_rcnn_box_predictor.mask_width",
    "model.faster_rcnn.second_stage_box_predictor.mask_rcnn_box_predictor.mask_prediction_conv_depth",
    "model.faster_rcnn.second_stage_box_predictor.mask_rcnn_box_predictor.mask_prediction_num_conv_layers",
    "model.faster_rcnn.second_stage_box_predictor.mask_rcnn_box_predictor.masks_are_class_agnostic",
    "model.faster_rcnn.second_stage_box_predictor.mask_rcnn_box_predictor.convolve_then_upsample_masks",
    "model.faster_rcnn.second_stage_box_predictor.mask_rcnn_box_predictor.conv_hyperparams.op=CONV",
    "model.faster_rcnn.second_stage_box_predictor.mask_rcnn_box_predictor.conv_hyperparams.regularizer.l2_regularizer."
    "weight=0",
    "model.faster_rcnn.second_stage_box_predictor.mask_rcnn_box_predictor.conv_hyperparams.initializer.truncated_"
    "normal_initializer",
    "model.faster_rcnn.second_stage_mask_prediction_loss_weight",
    "model.faster_rcnn.second_stage_box_predictor.rfcn_box_predictor.conv_hyperparams.op=CONV",
    "model.faster_rcnn.second_stage_box_predictor.rfcn_box_predictor.conv_hyperparams.regularizer.l2_regularizer."
    "weight=0",
    "model.faster_rcnn.second_stage_box_predictor.rfcn_box_predictor.conv_hyperparams.initializer.truncated_normal_"
    "initializer",
    "model.faster_rcnn.second_stage_box_predictor.rfcn_box_predictor.conv_hyperparams.activation=RELU",
    "model.faster_rcnn.second_stage_box_predictor.rfcn_box_predictor.num_spatial_bins_height",
    "model.faster_rcnn.second_stage_box_predictor.rfcn_box_predictor.num_spatial_bins_width",
    "model.faster_rcnn.second_stage_box_predictor.rfcn_box_predictor.depth",
    "model.faster_rcnn.second_stage_box_predictor.rfcn_box_predictor.box_code_size=4",
    "model.faster_rcnn.second_stage_box_predictor.rfcn_box_predictor.crop_height",
    "model.faster_rcnn.second_stage_box_predictor.rfcn_box_predictor.crop_width",
    "model.faster_rcnn.second_stage_box_predictor.mask_rcnn_box_predictor.fc_hyperparams.op=FC",
    "model.faster_rcnn.second_stage_box_predictor.mask_rcnn_box_predictor.fc_hyperparams.regularizer.l2_regularizer."
    "weight=0",
    "model.faster_rcnn.second_stage_box_predictor.mask_rcnn_box_predictor.fc_hyperparams.initializer.variance_scaling_"
    "initializer.factor=1",
    "model.faster_rcnn.second_stage_box_predictor.mask_rcnn_box_predictor.fc_hyperparams.initializer.variance_scaling_"
    "initializer.uniform=true",
    "model.faster_rcnn.second_stage_box_predictor.mask_rcnn_box_predictor.fc_hyperparams.initializer.variance_scaling_"
    "initializer.mode=FAN_AVG",
    "model.faster_rcnn.second_stage_batch_size",
    "model.faster_rcnn.second_stage_balance_fraction",
    "model.faster_rcnn.second_stage_post_processing.batch_non_max_suppression.score_threshold",
    "model.faster_rcnn.second_stage_post_processing.batch_non_max_suppression.iou_threshold",
    "model.faster_rcnn.second_stage_post_processing.batch_non_max_suppression.max_detections_per_class",
    "model.faster_rcnn.second_stage_post_processing.batch_non_max_suppression.max_total_detections",
    "model.faster_rcnn.second_stage_post_processing.score_converter",
    "model.faster_rcnn.second_stage_localization_loss_weight",
    "model.faster_rcnn.second_stage_classification_loss_weight",
    // anchorwise_output only shapes the loss tensor the OD API sums over the classes.
    "model.faster_rcnn.second_stage_classification_loss.weighted_sigmoid",
    "model.faster_rcnn.second_stage_classification_loss.weighted_softmax",
    // The OD API's Faster R-CNN mines without matches: the negative ratios have no effect there.
    "model.faster_rcnn.hard_example_miner",
    "model.faster_rcnn.first_stage_box_predictor_conv_hyperparams.op=CONV",
    "model.faster_rcnn.first_stage_box_predictor_conv_hyperparams.regularizer.l2_regularizer.weight=0",
    "model.faster_rcnn.first_stage_box_predictor_conv_hyperparams.initializer.truncated_normal_initializer",
};

// model.faster_rcnn: what FasterRcnnMetaArchitecture builds, and the OD API's own checks.
void validate_faster_rcnn(const odp::FasterRcnn& f, const std::vector<std::string>& types,
                          std::vector<std::string>* problems) {
  const std::string at = "model.faster_rcnn";
  if (f.num_classes() <= 0)
    problems->push_back(at + ".num_classes must be > 0 (got " + std::to_string(f.num_classes()) + ")");
  if (f.number_of_stages() != 2 && f.number_of_stages() != 3)
    problems->push_back(at + ".number_of_stages " + std::to_string(f.number_of_stages()) +
                        " is not supported; Orchard implements 2 (proposals and box classifier) and 3 (Mask R-CNN's "
                        "masks on the final detections)");
  const auto& mask_predictor = f.second_stage_box_predictor().mask_rcnn_box_predictor();
  if (mask_predictor.predict_instance_masks()) {
    if (mask_predictor.mask_height() <= 0 || mask_predictor.mask_width() <= 0 ||
        mask_predictor.mask_prediction_num_conv_layers() < 1)
      problems->push_back(at +
                          ".second_stage_box_predictor.mask_rcnn_box_predictor: mask_height, mask_width and "
                          "mask_prediction_num_conv_layers must be positive");
  }
  const std::string& type = f.feature_extractor().type();
  if (std::find(types.begin(), types.end(), type) == types.end())
    problems->push_back(at + ".feature_extractor.type '" + type + "' is not supported; Orchard implements " +
                        join_with_and(types));
  const int stride = f.feature_extractor().first_stage_features_stride();
  if (stride != 8 && stride != 16)  // the extractors' own check
    problems->push_back(at + ".feature_extractor.first_stage_features_stride must be 8 or 16 (got " +
                        std::to_string(stride) + ")");
  else if (type == "faster_rcnn_inception_v2" && stride != 16)  // accepted by the OD API but not applied
    problems->push_back(at +
                        ".feature_extractor.first_stage_features_stride 8: faster_rcnn_inception_v2's first "
                        "stage (to Mixed_4e) has stride 16 whatever this field says; set 16");
  check_image_resizer(f.image_resizer(), at + ".image_resizer", problems);
  check_oneof(f.first_stage_anchor_generator(), "anchor_generator_oneof", at + ".first_stage_anchor_generator",
              {"grid_anchor_generator"}, problems);
  check_oneof(f.second_stage_box_predictor(), "box_predictor_oneof", at + ".second_stage_box_predictor",
              {"mask_rcnn_box_predictor", "rfcn_box_predictor"}, problems);
  if (f.second_stage_box_predictor().has_rfcn_box_predictor()) {
    const auto& r = f.second_stage_box_predictor().rfcn_box_predictor();
    if (type != "faster_rcnn_resnet50" && type != "faster_rcnn_resnet101" && type != "faster_rcnn_resnet152")
      problems->push_back(at +
                          ".second_stage_box_predictor.rfcn_box_predictor: Orchard implements R-FCN with the "
                          "ResNet-v1 extractors (as the samples), not " +
                          type);
    // position_sensitive_crop_regions' own check.
    if (r.num_spatial_bins_height() <= 0 || r.num_spatial_bins_width() <= 0 || r.depth() <= 0 ||
        r.crop_height() % std::max(1, r.num_spatial_bins_height()) != 0 ||
        r.crop_width() % std::max(1, r.num_spatial_bins_width()) != 0)
      problems->push_back(at +
                          ".second_stage_box_predictor.rfcn_box_predictor: crop_height and crop_width must be "
                          "multiples of the positive num_spatial_bins_height and num_spatial_bins_width");
  }
  if (f.second_stage_box_predictor().has_rfcn_box_predictor()) return;  // R-FCN crops position-sensitively
  if (f.initial_crop_size() <= 0)
    problems->push_back(at + ".initial_crop_size must be > 0 (got " + std::to_string(f.initial_crop_size()) + ")");
  if (f.maxpool_kernel_size() <= 0 || f.maxpool_stride() <= 0)
    problems->push_back(at + ".maxpool_kernel_size and maxpool_stride must be > 0");
  if (f.first_stage_max_proposals() <= 0 || f.second_stage_batch_size() <= 0)
    problems->push_back(at + ".first_stage_max_proposals and second_stage_batch_size must be > 0");
  // The OD API (faster_rcnn_meta_arch): in training the second stage sees at most as many
  // proposals as the first stage keeps.
  if (f.has_second_stage_classification_loss())
    check_oneof(f.second_stage_classification_loss(), "classification_loss", at + ".second_stage_classification_loss",
                {"weighted_sigmoid", "weighted_softmax"}, problems);
  if (f.second_stage_batch_size() > f.first_stage_max_proposals())
    problems->push_back(at + ".second_stage_batch_size (" + std::to_string(f.second_stage_batch_size()) +
                        ") must not exceed first_stage_max_proposals (" +
                        std::to_string(f.first_stage_max_proposals()) + ")");
}

}  // namespace

const std::vector<std::string>& faster_rcnn_implemented_fields() {
  static const std::vector<std::string> fields(std::begin(kFasterRcnnImplemented), std::end(kFasterRcnnImplemented));
  return fields;
}

void check_faster_rcnn_model(const odp::TrainEvalPipelineConfig& config,
                             const std::vector<std::string>& extractor_types, std::vector<std::string>* problems) {
  validate_faster_rcnn(config.model().faster_rcnn(), extractor_types, problems);
}

}  // namespace orchard::detect
