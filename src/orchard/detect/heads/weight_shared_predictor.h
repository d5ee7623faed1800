// The OD API's WeightSharedConvolutionalBoxPredictor (predictors/convolutional_box_predictor.py,
// the RetinaNet / FPN configs' weight_shared_convolutional_box_predictor): one box tower and one
// class tower of num_layers_before_predictor kernel_size x kernel_size convolutions (depth
// channels, ReLU6) whose weights every feature map shares; with batch norm each tower conv has
// no bias and a batch norm per feature map (TF: conv2d_<i>/BatchNorm/feature_<level>), without
// it a bias. Then one shared box head and one shared class head (kernel_size, with bias; the
// class head's bias starts at class_prediction_bias_init). share_prediction_tower: the class
// path reuses the box tower.
//
// Module names:
//   box_tower.<i>.weight (.bias without batch norm), box_tower_bn.<i>.<level>.*
//   class_tower.<i>..., class_tower_bn.<i>.<level>.* (absent with share_prediction_tower)
//   box_head.{weight,bias}, class_head.{weight,bias}: the prediction heads
// use_depthwise (FPN-lite): every tower conv and head is separable, a kernel_size depthwise conv
// then a 1x1 conv: box_tower.<i>.0.weight (TF conv2d_<i>/depthwise_weights), box_tower.<i>.1.*
// (pointwise_weights, biases without batch norm), box_head.0.weight, box_head.1.{weight,bias}.
// Quantization-aware training: each layer's quantizers per feature map (TF runs the shared
// layer once per map, WeightSharedConvolutionalBoxPredictor[_<level>]/...), the batch norm
// folded into the weights: box_tower_quant.<i>.<level>.{weights_quant,act_quant} (act_quant
// after the ReLU6), box_head_quant.<level>.*, class_... alike; with use_depthwise a
// ".depthwise" pair for the depthwise conv first.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/pimpl.h>

#include <optional>
#include <string>
#include <vector>

#include "orchard/layers/fake_quant.h"
#include "orchard/models/tf_names.h"

namespace orchard::detect {

struct WeightSharedPredictorOptions {
  int64_t in_channels = 256;  // every feature map's (the OD API adds a projection otherwise; not here)
  int64_t num_levels = 5;
  int64_t anchors_per_location = 6;  // the same at every level
  int64_t num_class_slots = 91;      // num_classes + 1 (background)
  int64_t box_code_size = 4;
  int64_t depth = 256;
  int64_t num_layers_before_predictor = 4;
  int64_t kernel_size = 3;
  bool apply_batch_norm = true;
  bool share_prediction_tower = false;
  bool use_depthwise = false;
  bool use_dropout = false;
  double dropout_keep_probability = 0.8;
  double class_prediction_bias_init = 0.0;
  double bn_momentum = 0.003, bn_eps = 0.001;  // the predictor's conv_hyperparams (decay 0.997)
  double init_stddev = 0.01;                   // random_normal_initializer of the samples
  bool truncated_init = false;                 // truncated_normal_initializer instead
};

class WeightSharedPredictorImpl : public torch::nn::Module, public layers::Quantizable {
 public:
  explicit WeightSharedPredictorImpl(const WeightSharedPredictorOptions& options);
  void enable_quantization(const std::shared_ptr<layers::QuantizationControl>& control) override;
  // maps: [B, in_channels, H_l, W_l] per level -> [B, sum H_l W_l A, box_code_size + num_class_slots]
  // (box codes, then class logits), anchors in the anchor generators' order.
  torch::Tensor forward(const std::vector<torch::Tensor>& maps);
  const WeightSharedPredictorOptions& options() const { return options_; }
  // The OD API's name of a variable under this module (without the module's own prefix):
  // "WeightSharedConvolutionalBoxPredictor/..." .
  std::optional<models::TfName> tf_name(const std::string& name) const;

 private:
  torch::Tensor tower(torch::nn::ModuleList& convs, torch::nn::ModuleList& norms, torch::nn::ModuleList& quantizers,
                      const torch::Tensor& x, size_t level);
  torch::Tensor head(torch::nn::Module& layer, torch::nn::ModuleList& quantizers, const torch::Tensor& x, size_t level);

  WeightSharedPredictorOptions options_;
  torch::nn::ModuleList box_tower_{nullptr}, box_tower_bn_{nullptr};
  torch::nn::ModuleList class_tower_{nullptr}, class_tower_bn_{nullptr};
  std::shared_ptr<torch::nn::Module> box_head_, class_head_;
  // Under quantization (see the top of this file).
  torch::nn::ModuleList box_tower_quant_{nullptr}, class_tower_quant_{nullptr};
  torch::nn::ModuleList box_head_quant_{nullptr}, class_head_quant_{nullptr};
};
TORCH_MODULE(WeightSharedPredictor);

}  // namespace orchard::detect
