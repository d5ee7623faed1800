#include "orchard/detect/config/shapes_config.h"

#include <algorithm>

namespace orchard::detect {
namespace {

// Placeholders: DATA_DIR, IMAGE_SIZE.
constexpr const char* kTemplate = R"(# SSD with a MobileNetV2 feature extractor for the synthetic shapes set
# (`orchard data shapes --task detection`): 3 classes (circle, square, triangle).
# Small enough to train on a laptop CPU; the layout follows ssd_mobilenet_v2_coco.config.
# The input is at least 96x96 so that the stride-16 feature map is 6x6.
model {
  ssd {
    num_classes: 3
    image_resizer {
      fixed_shape_resizer {
        height: IMAGE_SIZE
        width: IMAGE_SIZE
      }
    }
    feature_extractor {
      type: "ssd_mobilenet_v2"
      depth_multiplier: 0.35
      min_depth: 8
      conv_hyperparams {
        regularizer {
          l2_regularizer {
            weight: 4e-05
          }
        }
        initializer {
          truncated_normal_initializer {
            mean: 0.0
            stddev: 0.03
          }
        }
        activation: RELU_6
        batch_norm {
          decay: 0.9
          center: true
          scale: true
          epsilon: 0.001
          train: true
        }
      }
    }
    box_coder {
      faster_rcnn_box_coder {
        y_scale: 10.0
        x_scale: 10.0
        height_scale: 5.0
        width_scale: 5.0
      }
    }
    matcher {
      argmax_matcher {
        matched_threshold: 0.5
        unmatched_threshold: 0.5
        ignore_thresholds: false
        negatives_lower_than_unmatched: true
        force_match_for_each_row: true
      }
    }
    similarity_calculator {
      iou_similarity {
      }
    }
    box_predictor {
      convolutional_box_predictor {
        min_depth: 0
        max_depth: 0
        num_layers_before_predictor: 0
        use_dropout: false
        dropout_keep_probability: 0.8
        kernel_size: 3
        box_code_size: 4
        apply_sigmoid_to_scores: false
        conv_hyperparams {
          regularizer {
            l2_regularizer {
              weight: 4e-05
            }
          }
          initializer {
            truncated_normal_initializer {
              mean: 0.0
              stddev: 0.03
            }
          }
          activation: RELU_6
          batch_norm {
            decay: 0.9
            center: true
            scale: true
            epsilon: 0.001
            train: true
          }
        }
      }
    }
    anchor_generator {
      ssd_anchor_generator {
        num_layers: 6
        min_scale: 0.15
        max_scale: 0.95
        # Every shape has a square box: one aspect ratio (plus the interpolated scale), on
        # every layer including the lowest.
        aspect_ratios: 1.0
        reduce_boxes_in_lowest_layer: false
      }
    }
    post_processing {
      batch_non_max_suppression {
        score_threshold: 0.01
        iou_threshold: 0.6
        max_detections_per_class: 20
        max_total_detections: 20
      }
      score_converter: SIGMOID
    }
    normalize_loss_by_num_matches: true
    loss {
      localization_loss {
        weighted_smooth_l1 {
        }
      }
      classification_loss {
        weighted_sigmoid {
        }
      }
      hard_example_miner {
        num_hard_examples: 3000
        iou_threshold: 0.99
        loss_type: CLASSIFICATION
        max_negatives_per_positive: 3
        min_negatives_per_image: 3
      }
      classification_weight: 1.0
      localization_weight: 1.0
    }
  }
}
train_config {
  batch_size: 32
  data_augmentation_options {
    random_horizontal_flip {
    }
  }
  optimizer {
    adam_optimizer {
      learning_rate {
        cosine_decay_learning_rate {
          learning_rate_base: 0.01
          total_steps: 1200
          warmup_learning_rate: 0.001
          warmup_steps: 50
        }
      }
    }
    use_moving_average: false
  }
  num_steps: 1200
}
train_input_reader {
  tf_record_input_reader {
    input_path: "DATA_DIR/train-?????-of-?????"
  }
  label_map_path: "DATA_DIR/label_map.pbtxt"
}
eval_config {
  metrics_set: "coco_detection_metrics"
  include_metrics_per_category: true
}
eval_input_reader {
  tf_record_input_reader {
    input_path: "DATA_DIR/validation-?????-of-?????"
  }
  label_map_path: "DATA_DIR/label_map.pbtxt"
  shuffle: false
  num_epochs: 1
}
)";

std::string replace_all(std::string text, const std::string& from, const std::string& to) {
  for (size_t pos = text.find(from); pos != std::string::npos; pos = text.find(from, pos + to.size()))
    text.replace(pos, from.size(), to);
  return text;
}

}  // namespace

std::string shapes_pipeline_config(const std::string& data_dir, int image_size) {
  return replace_all(replace_all(kTemplate, "DATA_DIR", data_dir), "IMAGE_SIZE",
                     std::to_string(std::max(96, image_size)));
}

}  // namespace orchard::detect
