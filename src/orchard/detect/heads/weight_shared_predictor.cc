#include "orchard/detect/heads/weight_shared_predictor.h"

#include <torch/nn/functional.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/container/sequential.h>

#include <cstdio>
#include <stdexcept>

#include "orchard/layers/batch_norm.h"
#include "orchard/layers/conv_norm_activation.h"
#include "orchard/layers/init.h"
#include "orchard/layers/tf_same.h"

namespace orchard::detect {
namespace {

namespace F = torch::nn::functional;

torch::nn::Conv2d conv(int64_t in, int64_t out, int64_t kernel, bool bias) {
  return torch::nn::Conv2d(torch::nn::Conv2dOptions(in, out, kernel).bias(bias));
}

// A kernel x kernel convolution, or with `separable` slim.separable_conv2d(depth_multiplier=1):
// "0" the depthwise conv (no bias), "1" the 1x1 conv (bias as asked).
std::shared_ptr<torch::nn::Module> layer(int64_t in, int64_t out, int64_t kernel, bool bias, bool separable) {
  if (!separable) return conv(in, out, kernel, bias).ptr();
  return torch::nn::Sequential(torch::nn::Conv2d(torch::nn::Conv2dOptions(in, in, kernel).groups(in).bias(false)),
                               conv(in, out, 1, bias))
      .ptr();
}

torch::Tensor run_layer(torch::nn::Module& m, const torch::Tensor& x) {
  if (auto* c = m.as<torch::nn::Conv2d>()) return layers::conv2d_tf_same(*c, x);
  auto& seq = *m.as<torch::nn::Sequential>();
  return seq[1]->as<torch::nn::Conv2d>()->forward(layers::conv2d_tf_same(*seq[0]->as<torch::nn::Conv2d>(), x));
}

// A layer under quantization: the depthwise conv quantized first (separable), then the last
// conv with quantized weights, folded with `bn` when there is one. Not activated.
torch::Tensor run_quantized_layer(torch::nn::Module& m, torch::nn::Module& q, torch::nn::BatchNorm2dImpl* bn,
                                  const torch::Tensor& x) {
  torch::Tensor h = x;
  torch::nn::Conv2dImpl* conv = m.as<torch::nn::Conv2d>();
  if (!conv) {
    auto& seq = *m.as<torch::nn::Sequential>();
    auto& d = *q.named_children()["depthwise"];
    h = layers::quantizer(d, "act_quant")
            .forward(layers::quantized_conv(*seq[0]->as<torch::nn::Conv2d>(), layers::quantizer(d, "weights_quant"), h,
                                            /*tf_same_padding=*/true));
    conv = seq[1]->as<torch::nn::Conv2d>();
  }
  auto& weights = layers::quantizer(q, "weights_quant");
  return bn ? layers::quantized_conv_bn(*conv, *bn, weights, h, /*tf_same_padding=*/true)
            : layers::quantized_conv(*conv, weights, h, /*tf_same_padding=*/true);
}

// The layer's last convolution (the one with the bias).
torch::nn::Conv2dImpl& last_conv(torch::nn::Module& m) {
  if (auto* c = m.as<torch::nn::Conv2d>()) return *c;
  return *(*m.as<torch::nn::Sequential>())[1]->as<torch::nn::Conv2d>();
}

}  // namespace

WeightSharedPredictorImpl::WeightSharedPredictorImpl(const WeightSharedPredictorOptions& o) : options_(o) {
  TORCH_CHECK(o.num_levels >= 1 && o.anchors_per_location >= 1 && o.num_class_slots >= 1 && o.box_code_size >= 1,
              "weight_shared_convolutional_box_predictor: levels, anchors, classes and box_code_size must be >= 1");
  TORCH_CHECK(o.depth >= 1 && o.kernel_size >= 1 && o.num_layers_before_predictor >= 0,
              "weight_shared_convolutional_box_predictor: depth and kernel_size must be >= 1, "
              "num_layers_before_predictor >= 0");
  TORCH_CHECK(!o.use_dropout || (o.dropout_keep_probability > 0 && o.dropout_keep_probability <= 1),
              "weight_shared_convolutional_box_predictor.dropout_keep_probability must be in (0, 1]");
  const auto build_tower = [&](const std::string& name, torch::nn::ModuleList& convs, torch::nn::ModuleList& norms) {
    convs = register_module(name, torch::nn::ModuleList());
    norms = register_module(name + "_bn", torch::nn::ModuleList());
    int64_t in = o.in_channels;
    for (int64_t i = 0; i < o.num_layers_before_predictor; ++i) {
      convs->push_back(layer(in, o.depth, o.kernel_size, !o.apply_batch_norm, o.use_depthwise));
      torch::nn::ModuleList per_level;
      if (o.apply_batch_norm)
        for (int64_t l = 0; l < o.num_levels; ++l)
          per_level->push_back(
              torch::nn::BatchNorm2d(torch::nn::BatchNorm2dOptions(o.depth).momentum(o.bn_momentum).eps(o.bn_eps)));
      norms->push_back(per_level);
      in = o.depth;
    }
  };
  build_tower("box_tower", box_tower_, box_tower_bn_);
  if (!o.share_prediction_tower) build_tower("class_tower", class_tower_, class_tower_bn_);
  const int64_t head_in = o.num_layers_before_predictor > 0 ? o.depth : o.in_channels;
  box_head_ = register_module(
      "box_head", layer(head_in, o.anchors_per_location * o.box_code_size, o.kernel_size, true, o.use_depthwise));
  class_head_ = register_module(
      "class_head", layer(head_in, o.anchors_per_location * o.num_class_slots, o.kernel_size, true, o.use_depthwise));

  // conv_hyperparams' initializer for every convolution; biases 0, the class head's
  // class_prediction_bias_init; batch norms gamma 1, beta 0.
  torch::NoGradGuard no_grad;
  for (auto& m : modules(/*include_self=*/false)) {
    if (auto* c = m->as<torch::nn::Conv2d>()) {
      if (o.truncated_init) layers::truncated_normal_(c->weight, o.init_stddev);
      else c->weight.normal_(0, o.init_stddev);
      if (c->bias.defined()) c->bias.zero_();
    } else if (auto* b = m->as<torch::nn::BatchNorm2d>()) {
      b->weight.fill_(1);
      b->bias.zero_();
    }
  }
  last_conv(*class_head_).bias.fill_(o.class_prediction_bias_init);
}

void WeightSharedPredictorImpl::enable_quantization(const std::shared_ptr<layers::QuantizationControl>& control) {
  auto pair = [&] {
    auto q = layers::conv_quantizers(control);
    if (options_.use_depthwise) q->register_module("depthwise", layers::conv_quantizers(control));
    return q;
  };
  auto per_level = [&] {
    torch::nn::ModuleList levels;
    for (int64_t l = 0; l < options_.num_levels; ++l) levels->push_back(pair());
    return levels;
  };
  auto tower = [&](const std::string& name, torch::nn::ModuleList& convs, torch::nn::ModuleList& quantizers) {
    if (!convs) return;
    quantizers = register_module(name, torch::nn::ModuleList());
    for (size_t i = 0; i < convs->size(); ++i) quantizers->push_back(per_level());
  };
  tower("box_tower_quant", box_tower_, box_tower_quant_);
  tower("class_tower_quant", class_tower_, class_tower_quant_);
  box_head_quant_ = register_module("box_head_quant", per_level());
  class_head_quant_ = register_module("class_head_quant", per_level());
}

torch::Tensor WeightSharedPredictorImpl::tower(torch::nn::ModuleList& convs, torch::nn::ModuleList& norms,
                                               torch::nn::ModuleList& quantizers, const torch::Tensor& x,
                                               size_t level) {
  torch::Tensor h = x;
  for (size_t i = 0; i < convs->size(); ++i) {
    auto* bn = options_.apply_batch_norm
                   ? norms[i]->as<torch::nn::ModuleListImpl>()->ptr(level)->as<torch::nn::BatchNorm2dImpl>()
                   : nullptr;
    if (quantizers) {
      auto& q = *quantizers[i]->as<torch::nn::ModuleListImpl>()->ptr(level);
      h = layers::quantizer(q, "act_quant").forward(torch::clamp(run_quantized_layer(*convs[i], q, bn, h), 0.0, 6.0));
      continue;
    }
    h = run_layer(*convs[i], h);
    if (bn) h = layers::batch_norm(*bn, h);
    h = torch::clamp(h, 0.0, 6.0);  // ReLU6 (see ConvNormActivation on clamp)
  }
  return h;
}

torch::Tensor WeightSharedPredictorImpl::head(torch::nn::Module& layer, torch::nn::ModuleList& quantizers,
                                              const torch::Tensor& x, size_t level) {
  if (!quantizers) return run_layer(layer, x);
  auto& q = *quantizers->ptr(level);
  return layers::quantizer(q, "act_quant").forward(run_quantized_layer(layer, q, nullptr, x));
}

torch::Tensor WeightSharedPredictorImpl::forward(const std::vector<torch::Tensor>& maps) {
  TORCH_CHECK(static_cast<int64_t>(maps.size()) == options_.num_levels, "weight-shared predictor: ", maps.size(),
              " feature maps for ", options_.num_levels, " levels");
  std::vector<torch::Tensor> boxes, classes;
  for (size_t l = 0; l < maps.size(); ++l) {
    TORCH_CHECK(maps[l].size(1) == options_.in_channels, "weight-shared predictor: feature map ", l, " has ",
                maps[l].size(1), " channels, the predictor ", options_.in_channels,
                " (every level must have the same depth)");
    const int64_t batch = maps[l].size(0);
    const int64_t anchors = maps[l].size(2) * maps[l].size(3) * options_.anchors_per_location;
    const auto box_features = tower(box_tower_, box_tower_bn_, box_tower_quant_, maps[l], l);
    auto class_features = options_.share_prediction_tower
                              ? box_features
                              : tower(class_tower_, class_tower_bn_, class_tower_quant_, maps[l], l);
    if (options_.use_dropout)
      class_features = F::dropout(
          class_features, F::DropoutFuncOptions().p(1 - options_.dropout_keep_probability).training(is_training()));
    const auto box = head(*box_head_, box_head_quant_, box_features, l);
    const auto cls = head(*class_head_, class_head_quant_, class_features, l);
    boxes.push_back(box.permute({0, 2, 3, 1}).reshape({batch, anchors, options_.box_code_size}));
    classes.push_back(cls.permute({0, 2, 3, 1}).reshape({batch, anchors, options_.num_class_slots}));
  }
  return torch::cat({torch::cat(boxes, 1), torch::cat(classes, 1)}, 2);
}

std::optional<models::TfName> WeightSharedPredictorImpl::tf_name(const std::string& name) const {
  const auto bad = [&] { return std::invalid_argument("not a weight-shared predictor variable: '" + name + "'"); };
  const std::string scope = "WeightSharedConvolutionalBoxPredictor/";
  if (const auto q = layers::parse_quantizer_variable(name)) {
    // <kind>_quant.[<i>.]<level>[.depthwise]: the layer's run on feature map <level>.
    char kind[32] = {0};
    int a = -1, b = -1, used = 0;
    const int n = std::sscanf(q->layer.c_str(), "%31[a-z_].%d%n.%d%n", kind, &a, &used, &b, &used);
    const std::string k = kind, rest = q->layer.substr(static_cast<size_t>(used));
    const bool head = k == "box_head_quant" || k == "class_head_quant";
    const bool tower = k == "box_tower_quant" || k == "class_tower_quant";
    if (!(head && n == 2) && !(tower && n == 3)) throw bad();
    if (!rest.empty() && rest != ".depthwise") throw bad();
    const int level = head ? a : b;
    const std::string run = "WeightSharedConvolutionalBoxPredictor" + (level ? "_" + std::to_string(level) : "") + "/";
    const bool box = k.rfind("box", 0) == 0;
    const std::string layer = head ? (box ? "BoxPredictor" : "ClassPredictor")
                                   : (options_.share_prediction_tower ? "PredictionTower"
                                      : box                           ? "BoxPredictionTower"
                                                                      : "ClassPredictionTower") +
                                         std::string("/conv2d_") + std::to_string(a);
    return models::TfName{run + layer + (rest.empty() ? "" : "/depthwise") + "/" + q->kind + "/" + q->tf_field};
  }
  const size_t dot = name.rfind('.');
  if (dot == std::string::npos) throw bad();
  const std::string module = name.substr(0, dot), field = name.substr(dot + 1);
  // A layer's variable: `module` is the layer, or with use_depthwise "<layer>.0" (depthwise) or
  // "<layer>.1" (pointwise).
  const auto conv_name = [&](const std::string& tf_scope, const std::string& part) -> std::optional<models::TfName> {
    if (part == ".0" && field == "weight")
      return models::TfName{tf_scope + "/depthwise_weights", models::TfLayout::kDepthwise};
    const bool plain = part.empty(), pointwise = part == ".1";
    if (!plain && !pointwise) throw bad();
    if (field == "weight")
      return models::TfName{tf_scope + (pointwise ? "/pointwise_weights" : "/weights"), models::TfLayout::kConv};
    if (field == "bias") return models::TfName{tf_scope + "/biases"};
    throw bad();
  };
  for (const char* head : {"box_head", "class_head"}) {
    if (module.rfind(head, 0) != 0) continue;
    const std::string part = module.substr(std::string(head).size());
    if (part.empty() == options_.use_depthwise) throw bad();
    return conv_name(scope + (head == std::string("box_head") ? "BoxPredictor" : "ClassPredictor"), part);
  }
  char kind[32] = {0};
  int i = -1, level = -1, consumed = 0;
  if (std::sscanf(module.c_str(), "%31[a-z_].%d%n", kind, &i, &consumed) != 2 || i < 0) throw bad();
  const std::string k = kind;
  const bool box = k == "box_tower" || k == "box_tower_bn";
  if (!box && k != "class_tower" && k != "class_tower_bn") throw bad();
  const std::string tower = scope +
                            (options_.share_prediction_tower ? "PredictionTower"
                             : box                           ? "BoxPredictionTower"
                                                             : "ClassPredictionTower") +
                            "/conv2d_" + std::to_string(i);
  if (k == "box_tower" || k == "class_tower") {
    const std::string part = module.substr(static_cast<size_t>(consumed));
    if (part.empty() == options_.use_depthwise) throw bad();
    return conv_name(tower, part);
  }
  if (std::sscanf(module.c_str() + consumed, ".%d", &level) != 1 || level < 0) throw bad();
  // TF: slim.batch_norm(scope='<tower>/conv2d_<i>/BatchNorm/feature_<level>').
  auto bn = models::tf_batch_norm_name(tower, field);
  if (bn) bn->name.replace(tower.size(), 11, "/BatchNorm/feature_" + std::to_string(level) + "/");
  return bn;
}

}  // namespace orchard::detect
