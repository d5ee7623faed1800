// pipeline.config -> DetectionConfig: the one place that reads the TF OD API messages
// (detectron2's from_config step); everything downstream takes plain options.
#include "orchard/proto/object_detection/pipeline.pb.h"
#include "orchard/tasks/detect/detection.h"

namespace orchard::tasks {

DetectionConfig detection_config(const object_detection::protos::TrainEvalPipelineConfig& pipeline,
                                 bool channels_last) {
  namespace pb = object_detection::protos;
  const pb::Ssd& ssd = pipeline.model().ssd();
  DetectionConfig c;
  c.num_classes = ssd.num_classes();

  const auto& fe = ssd.feature_extractor();
  c.model.depth_multiplier = fe.depth_multiplier();
  c.model.min_depth = fe.min_depth();
  c.model.use_depthwise = fe.use_depthwise();
  const auto& hyper = fe.conv_hyperparams();
  if (hyper.has_batch_norm()) {
    c.model.bn_momentum = 1.0 - hyper.batch_norm().decay();
    c.model.bn_eps = hyper.batch_norm().epsilon();
  }
  if (hyper.initializer().has_truncated_normal_initializer())
    c.model.init_stddev = hyper.initializer().truncated_normal_initializer().stddev();
  else if (hyper.initializer().has_random_normal_initializer())
    c.model.init_stddev = hyper.initializer().random_normal_initializer().stddev();
  c.l2_weight = hyper.regularizer().has_l2_regularizer() ? hyper.regularizer().l2_regularizer().weight() : 0.0;

  const auto& predictor = ssd.box_predictor().convolutional_box_predictor();
  c.model.kernel_size = predictor.kernel_size();
  c.model.box_code_size = predictor.box_code_size();
  c.model.use_dropout = predictor.use_dropout();
  c.model.dropout_keep_probability = predictor.dropout_keep_probability();
  c.model.class_prediction_bias_init = predictor.class_prediction_bias_init();

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

  const auto& post = ssd.post_processing();
  const auto& nms = post.batch_non_max_suppression();
  c.nms.score_threshold = nms.score_threshold();
  c.nms.iou_threshold = nms.iou_threshold();
  c.nms.max_detections_per_class = nms.max_detections_per_class();
  c.nms.max_total_detections = nms.max_total_detections();
  c.score_converter = pb::PostProcessing::ScoreConverter_Name(post.score_converter());

  const auto& resizer = ssd.image_resizer().fixed_shape_resizer();
  c.input.height = resizer.height();
  c.input.width = resizer.width();
  c.input.channels_last = channels_last;
  c.input.max_boxes = pipeline.train_input_reader().max_number_of_boxes();
  for (const auto& step : pipeline.train_config().data_augmentation_options()) {
    if (step.has_random_horizontal_flip()) {
      c.input.augmentation.random_horizontal_flip = true;
      c.input.augmentation.flip_probability = step.random_horizontal_flip().probability();
    }
    if (step.has_ssd_random_crop()) {
      const auto& crop = step.ssd_random_crop();
      if (crop.operations_size() == 0) {
        c.input.augmentation.ssd_random_crop = data::default_ssd_random_crop();
      } else {
        c.input.augmentation.ssd_random_crop.clear();
        for (const auto& op : crop.operations()) {
          data::SsdRandomCropOperation o;
          o.min_object_covered = op.min_object_covered();
          o.min_aspect_ratio = op.min_aspect_ratio();
          o.max_aspect_ratio = op.max_aspect_ratio();
          o.min_area = op.min_area();
          o.max_area = op.max_area();
          o.overlap_thresh = op.overlap_thresh();
          o.clip_boxes = op.clip_boxes();
          o.random_coef = op.random_coef();
          c.input.augmentation.ssd_random_crop.push_back(o);
        }
      }
    }
  }
  c.per_category_metrics = pipeline.eval_config().include_metrics_per_category();
  c.num_visualizations = static_cast<int>(pipeline.eval_config().num_visualizations());
  c.visualization_min_score = pipeline.eval_config().min_score_threshold();
  return c;
}

}  // namespace orchard::tasks
