#include "orchard/detect/meta_arch/ssd_model.h"

#include <torch/nn/functional.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/conv.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <stdexcept>

#include "orchard/detect/feature_extractors/registry.h"
#include "orchard/layers/conv_norm_activation.h"
#include "orchard/layers/depth.h"
#include "orchard/layers/init.h"
#include "orchard/layers/tf_same.h"
#include "orchard/models/mobilenet_v1.h"

namespace orchard::detect {
namespace {

namespace F = torch::nn::functional;

using layers::truncated_normal_;

namespace fx = feature_extractors;

constexpr int kFpnBaseMaxLevel = 5;  // the base network's coarsest FPN level (stride 32)
constexpr size_t kMaxFeatureMaps = 6;

// feature_map_layout's layer_depth / conv_kernel_size of map `index` (0: no such map; kernel: 3
// unless the layout says).
int64_t extra_depth(const fx::SsdLayout& l, size_t index) {
  return index < l.layer_depth.size() ? std::max<int64_t>(l.layer_depth[index], 0) : 0;
}
int64_t extra_kernel(const fx::SsdLayout& l, size_t index) {
  return index < l.conv_kernel_size.size() && l.conv_kernel_size[index] ? l.conv_kernel_size[index] : 3;
}

}  // namespace

std::vector<MobileNetV2Endpoint> SsdModelImpl::base_endpoints() const {
  std::vector<MobileNetV2Endpoint> out;
  if (layout_.scope == "MobilenetV2")
    for (const auto& e : extractor_->endpoints()) out.push_back(models::parse_mobilenet_v2_endpoint(e.name));
  return out;
}

std::vector<int64_t> SsdModelImpl::base_layers() const {
  std::vector<int64_t> out;
  if (layout_.scope == "MobilenetV1")
    for (const auto& e : extractor_->endpoints()) out.push_back(models::parse_mobilenet_v1_endpoint(e.name));
  return out;
}

bool is_prediction_head_parameter(const std::string& name) {
  // The OD API's "detection" restore_map is the feature extractor's variables: the whole box
  // predictor (the weight-shared towers too) starts afresh.
  for (const char* prefix : {"box_heads.", "class_heads.", "box_depthwise.", "class_depthwise.", "predictor."})
    if (name.rfind(prefix, 0) == 0) return true;
  return false;
}

SsdModelImpl::SsdModelImpl(const SsdModelOptions& o) : options_(o) {
  const size_t n = o.anchors_per_location.size();
  layout_ = fx::registry().ssd(o.feature_extractor).layout;
  const fx::SsdLayout& layout = layout_;
  TORCH_CHECK(n >= 1, "SSD needs at least one feature map; anchors_per_location is empty");
  TORCH_CHECK(o.num_classes >= 1, "SSD num_classes must be >= 1, got ", o.num_classes);
  TORCH_CHECK(o.box_code_size >= 1 && o.kernel_size >= 1, "SSD box_code_size and kernel_size must be >= 1");
  TORCH_CHECK(o.depth_multiplier > 0, "SSD depth_multiplier must be positive, got ", o.depth_multiplier);
  TORCH_CHECK(o.pad_to_multiple >= 1, "SSD pad_to_multiple must be >= 1, got ", o.pad_to_multiple);
  TORCH_CHECK(!o.use_dropout || (o.dropout_keep_probability > 0 && o.dropout_keep_probability <= 1),
              "SSD dropout_keep_probability must be in (0, 1], got ", o.dropout_keep_probability);
  for (int64_t a : o.anchors_per_location) TORCH_CHECK(a >= 1, "SSD anchors_per_location must be >= 1, got ", a);
  const SsdFpnOptions& fpn = o.fpn;
  // The base network's maps: feature_map_layout's layers, or the FPN's levels up to 5, or the
  // PPN's or MnasFPN's.
  fx::SsdFeatureExtractorOptions eo;
  eo.type = o.feature_extractor;
  std::vector<fx::Endpoint>& from = eo.endpoints;
  if (fpn.enabled) {
    TORCH_CHECK(!layout.fpn_blocks.empty(), "SSD ", o.feature_extractor, " has no FPN variant in the OD API");
    TORCH_CHECK(fpn.min_level >= 2 && fpn.min_level <= kFpnBaseMaxLevel && fpn.max_level >= fpn.min_level &&
                    fpn.max_level <= 12,
                "SSD FPN levels must satisfy 2 <= min_level <= 5, min_level <= max_level <= 12; got ", fpn.min_level,
                "..", fpn.max_level);
    TORCH_CHECK(static_cast<int>(n) == fpn.max_level - fpn.min_level + 1, "SSD FPN levels ", fpn.min_level, "..",
                fpn.max_level, " need ", fpn.max_level - fpn.min_level + 1, " anchor layers, got ", n);
    eo.variant = fx::SsdVariant::kFpn;
    for (int level = fpn.min_level; level <= std::min(fpn.max_level, kFpnBaseMaxLevel); ++level)
      from.push_back(layout.fpn_blocks[static_cast<size_t>(level - 2)]);
  } else if (o.ppn) {
    TORCH_CHECK(layout.ppn_map.has_value(), "SSD PPN: the OD API's is ssd_mobilenet_v1_ppn, not ", o.feature_extractor,
                "_ppn");
    eo.variant = fx::SsdVariant::kPpn;
    from.push_back(*layout.ppn_map);
  } else if (o.mnasfpn) {
    TORCH_CHECK(!layout.mnasfpn_maps.empty(), "SSD MnasFPN: the OD API's is ssd_mobilenet_v2_mnasfpn, not ",
                o.feature_extractor, "_mnasfpn");
    TORCH_CHECK(fpn.min_level == 3 && fpn.max_level == 6 && n == 4,
                "SSD MnasFPN has levels 3..6 (4 feature maps), got ", fpn.min_level, "..", fpn.max_level, " and ", n,
                " anchor layers");
    TORCH_CHECK(!o.use_explicit_padding, "SSD MnasFPN: use_explicit_padding is not implemented");
    eo.variant = fx::SsdVariant::kMnasFpn;
    from = layout.mnasfpn_maps;
  } else {
    TORCH_CHECK(!layout.from_layer.empty(), "SSD ", o.feature_extractor, " is an FPN feature extractor (",
                o.feature_extractor, "_fpn)");
    TORCH_CHECK(n <= kMaxFeatureMaps, "SSD MobileNet has 1 to ", kMaxFeatureMaps,
                " feature maps; anchors_per_location has ", n, " entries");
    for (size_t i = 0; i < std::min(n, layout.from_layer.size()); ++i) from.push_back(layout.from_layer[i]);
  }
  eo.depth_multiplier = o.depth_multiplier;
  eo.min_depth = o.min_depth;
  eo.bn_momentum = o.bn_momentum;
  eo.bn_eps = o.bn_eps;
  eo.init_stddev = o.init_stddev;
  eo.use_explicit_padding = o.use_explicit_padding;
  extractor_ = fx::registry().ssd(o.feature_extractor).make(eo);
  backbone_ = register_module("backbone", extractor_->module());
  channels_ = extractor_->channels();
  if (o.mnasfpn) {
    MnasFpnOptions mo;
    mo.in_channels = channels_;
    mo.depth =
        layers::make_divisible(static_cast<double>(fpn.additional_layer_depth) * o.depth_multiplier, 8, o.min_depth);
    mo.depth_multiplier = o.depth_multiplier;
    mo.min_depth = o.min_depth;
    mo.bn_momentum = o.bn_momentum;
    mo.bn_eps = o.bn_eps;
    mnasfpn_ = register_module("mnasfpn", MnasFpn(mo));
    channels_.assign(n, mo.depth);
  }

  // feature_map_generators.get_depth_fn.
  const auto depth = [&](double d) { return std::max(static_cast<int64_t>(d * o.depth_multiplier), o.min_depth); };
  const auto conv = [&](int64_t in, int64_t out, int64_t k) {
    return ConvNormActivationOptions(in, out, k).bn_momentum(o.bn_momentum).bn_eps(o.bn_eps);
  };
  if (fpn.enabled) {
    // SSDMobileNetV{1,2}FpnFeatureExtractor: fpn_top_down_feature_maps over the base maps, then
    // bottom_up_Conv2d_N (3x3 stride 2, 'SAME', BN + ReLU6) from the coarsest top-down map.
    const int64_t d = depth(static_cast<double>(fpn.additional_layer_depth));
    FpnOptions fo;
    fo.in_channels = channels_;
    fo.depth = d;
    fo.bn_momentum = o.bn_momentum;
    fo.bn_eps = o.bn_eps;
    fo.use_depthwise = o.use_depthwise;
    fpn_ = register_module("fpn", FpnTopDown(fo));
    channels_.assign(channels_.size(), d);
    bottom_up_ = register_module("bottom_up", torch::nn::ModuleList());
    for (int level = kFpnBaseMaxLevel + 1; level <= fpn.max_level; ++level) {
      if (o.use_depthwise)
        bottom_up_->push_back(SeparableConv(d, d, 3, 2, o.bn_momentum, o.bn_eps, !o.use_explicit_padding));
      else bottom_up_->push_back(ConvNormActivation(conv(d, d, 3).stride(2).tf_same_padding(!o.use_explicit_padding)));
      channels_.push_back(d);
    }
  } else if (o.ppn) {
    channels_.assign(n, channels_.front());  // max pools keep the depth
  } else if (o.mnasfpn) {
    // the four levels come out of MnasFPN
  } else {
    extras_ = register_module("extras", torch::nn::ModuleList());
    for (size_t i = from.size(); i < n; ++i) {
      const int64_t layer_depth = extra_depth(layout, i);
      TORCH_CHECK(layer_depth > 0, "SSD ", o.feature_extractor, " has ", i, " feature maps, not ", n);
      const int64_t in = channels_.back(), mid = depth(layer_depth / 2.0), out = depth(layer_depth);
      const int64_t k = extra_kernel(layout, i);
      torch::nn::Sequential layer(ConvNormActivation(conv(in, mid, 1)));
      if (o.use_depthwise) {
        layer->push_back(
            ConvNormActivation(conv(mid, mid, k).stride(2).groups(mid).tf_same_padding(!o.use_explicit_padding)));
        layer->push_back(ConvNormActivation(conv(mid, out, 1)));
      } else {
        layer->push_back(ConvNormActivation(conv(mid, out, k).stride(2).tf_same_padding(!o.use_explicit_padding)));
      }
      extras_->push_back(layer);
      channels_.push_back(out);
    }
  }

  if (o.weight_shared) {
    WeightSharedPredictorOptions po = *o.weight_shared;
    for (size_t i = 0; i < n; ++i) {
      TORCH_CHECK(channels_[i] == channels_[0],
                  "weight_shared_convolutional_box_predictor needs feature maps of one "
                  "depth; map ",
                  i, " has ", channels_[i], " channels, map 0 ", channels_[0]);
      TORCH_CHECK(o.anchors_per_location[i] == o.anchors_per_location[0],
                  "weight_shared_convolutional_box_predictor needs the same number of anchors per location on "
                  "every feature map");
    }
    po.in_channels = channels_[0];
    po.num_levels = static_cast<int64_t>(n);
    po.anchors_per_location = o.anchors_per_location[0];
    po.num_class_slots = o.num_classes + 1;
    po.box_code_size = o.box_code_size;
    predictor_ = register_module("predictor", WeightSharedPredictor(po));
    init_extra_layers_(o.init_stddev);
    return;
  }

  box_heads_ = register_module("box_heads", torch::nn::ModuleList());
  class_heads_ = register_module("class_heads", torch::nn::ModuleList());
  if (o.depthwise_heads) {
    box_depthwise_ = register_module("box_depthwise", torch::nn::ModuleList());
    class_depthwise_ = register_module("class_depthwise", torch::nn::ModuleList());
  }
  // SSDLite: slim.separable_conv2d(num_outputs=None) under the predictor's arg scope, so a
  // depthwise conv with its batch norm and ReLU6, no bias; the 1x1 conv after it predicts.
  const int64_t head_kernel = o.depthwise_heads ? 1 : o.kernel_size;
  for (size_t i = 0; i < n; ++i) {
    const int64_t a = o.anchors_per_location[i], c = channels_[i];
    if (o.depthwise_heads) {
      for (auto* list : {&box_depthwise_, &class_depthwise_})
        (*list)->push_back(ConvNormActivation(ConvNormActivationOptions(c, c, o.kernel_size)
                                                  .groups(c)
                                                  .tf_same_padding(true)
                                                  .bn_momentum(o.head_bn_momentum)
                                                  .bn_eps(o.head_bn_eps)));
    }
    box_heads_->push_back(torch::nn::Conv2d(torch::nn::Conv2dOptions(c, a * o.box_code_size, head_kernel)));
    class_heads_->push_back(torch::nn::Conv2d(torch::nn::Conv2dOptions(c, a * (o.num_classes + 1), head_kernel)));
  }

  init_extra_layers_(o.init_stddev);
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < n; ++i) class_heads_[i]->as<torch::nn::Conv2d>()->bias.fill_(o.class_prediction_bias_init);
}

void SsdModelImpl::init_extra_layers_(double stddev) {
  // The backbone keeps its own initialisation; the layers TF builds with conv_hyperparams get
  // its truncated normal (BN: gamma 1, beta 0 as the backbone's).
  torch::NoGradGuard no_grad;
  std::vector<std::shared_ptr<torch::nn::Module>> layers;
  for (const auto* list : {&extras_, &box_heads_, &class_heads_, &box_depthwise_, &class_depthwise_, &bottom_up_})
    if (!list->is_empty()) layers.push_back(list->ptr());
  if (!fpn_.is_empty()) layers.push_back(fpn_.ptr());
  for (const auto& m : layers) {
    for (auto& child : m->modules(/*include_self=*/false)) {
      if (auto* c = child->as<torch::nn::Conv2d>()) {
        truncated_normal_(c->weight, stddev);
        if (c->bias.defined()) c->bias.zero_();
      } else if (auto* b = child->as<torch::nn::BatchNorm2d>()) {
        b->weight.fill_(1);
        b->bias.zero_();
      }
    }
  }
}

std::optional<models::TfName> SsdModelImpl::tf_name(const std::string& name, const std::string& backbone_scope) const {
  const auto bad = [&] { return std::invalid_argument("not an SSD MobileNet variable: '" + name + "'"); };
  // The quantizers' ranges, as contrib.quantize names them: "<layer scope>/weights_quant/min",
  // ".../act_quant/max", the moving averages' ".../act_quant/min/biased" and ".../min/local_step".
  if (name == "quantization_step") return std::nullopt;  // TF's global_step
  const auto quantizer = layers::parse_quantizer_variable(name);
  if (name.find("_quant.") != std::string::npos && !quantizer) throw bad();
  // (The FPN's, its bottom-up layers' and the weight-shared predictor's are named by their modules, below.)
  const bool own_names =
      name.rfind("fpn.", 0) == 0 || name.rfind("bottom_up.", 0) == 0 || name.rfind("predictor.", 0) == 0;
  if (quantizer && !own_names) {
    const std::string &layer = quantizer->layer, &kind = quantizer->kind;
    // The layer's scope: its convolution's variable name less the variable.
    std::string scope;
    int i = -1;
    if (std::sscanf(layer.c_str(), "box_heads_quant.%d", &i) == 1 ||
        std::sscanf(layer.c_str(), "class_heads_quant.%d", &i) == 1) {
      scope = "BoxPredictor_" + std::to_string(i) +
              (layer.rfind("box", 0) == 0 ? "/BoxEncodingPredictor" : "/ClassPredictor");
    } else {
      std::optional<models::TfName> conv;
      if (kind == "add_quant") {  // the inverted residual block's own scope: <block>/<layer>/<variable>
        for (const std::string child : {".conv.1.0.weight", ".project.0.weight"}) {
          try {
            conv = tf_name(layer + child, backbone_scope);
          } catch (const std::exception&) {
            continue;
          }
          if (conv) break;
        }
        if (!conv) throw bad();
        scope = conv->name.substr(0, conv->name.rfind('/'));  // <block>/<layer>
      } else {
        for (const std::string child : {".0.weight", ".conv.2.weight", ".conv.1.weight"}) {
          try {
            conv = tf_name(layer + child, backbone_scope);
          } catch (const std::exception&) {
            continue;
          }
          if (conv && (child == ".0.weight" || conv->name.find("/project/") != std::string::npos)) break;
          conv.reset();
        }
        if (!conv) throw bad();
        scope = conv->name;
      }
      scope = scope.substr(0, scope.rfind('/'));
    }
    return models::TfName{scope + "/" + kind + "/" + quantizer->tf_field};
  }
  const std::string feature_extractor_scope = "FeatureExtractor/" + this->backbone_scope();
  if (name.rfind("backbone.", 0) == 0) {
    const std::string scope = backbone_scope.empty() ? feature_extractor_scope : backbone_scope;
    return extractor_->tf_name(name.substr(9), scope);
  }
  if (predictor_ && name.rfind("predictor.", 0) == 0) return predictor_->tf_name(name.substr(10));
  if (fpn_ && name.rfind("fpn.", 0) == 0) return fpn_->tf_name(name.substr(4), feature_extractor_scope + "/fpn");
  if (mnasfpn_ && name.rfind("mnasfpn.", 0) == 0) return mnasfpn_->tf_name(name.substr(8), "FeatureExtractor/MnasFPN");
  int j = -1, used = 0;
  if (bottom_up_ && std::sscanf(name.c_str(), "bottom_up.%d%n", &j, &used) == 1 && j >= 0) {
    const std::string scope =
        feature_extractor_scope + "/fpn/" + layout_.fpn_bottom_up + std::to_string(layout_.fpn_bottom_up_first + j);
    return conv_layer_tf_name(scope, name.substr(static_cast<size_t>(used)), options_.use_depthwise);
  }
  const size_t dot = name.rfind('.');
  if (dot == std::string::npos) throw bad();
  const std::string field = name.substr(dot + 1);
  int i = -1, consumed = 0;
  j = -1;
  char kind[16] = {0};
  if (std::sscanf(name.c_str(), "%15[a-z_].%d%n", kind, &i, &consumed) != 2 || i < 0) throw bad();
  const std::string head = kind;
  if (head == "box_depthwise" || head == "class_depthwise") {
    const std::string scope =
        "BoxPredictor_" + std::to_string(i) +
        (head == "box_depthwise" ? "/BoxEncodingPredictor_depthwise" : "/ClassPredictor_depthwise");
    const std::string module = name.substr(0, dot);
    if (module.size() > 2 && module.compare(module.size() - 2, 2, ".0") == 0) {
      if (field != "weight") throw bad();
      return models::TfName{scope + "/depthwise_weights", models::TfLayout::kDepthwise};
    }
    return models::tf_batch_norm_name(scope, field);
  }
  if (head == "box_heads" || head == "class_heads") {
    const std::string scope =
        "BoxPredictor_" + std::to_string(i) + (head == "box_heads" ? "/BoxEncodingPredictor/" : "/ClassPredictor/");
    if (field == "weight") return models::TfName{scope + "weights", models::TfLayout::kConv};
    if (field == "bias") return models::TfName{scope + "biases"};
    throw bad();
  }
  if (head != "extras" || std::sscanf(name.c_str() + consumed, ".%d.", &j) != 1) throw bad();
  // feature_map_generators.multi_resolution_feature_maps: names from the last base layer,
  // the feature map's index and its depths (get_depth_fn).
  const fx::SsdLayout& fl = layout_;
  const size_t index = static_cast<size_t>(i) + fl.from_layer.size();
  if (index >= kMaxFeatureMaps) throw bad();
  const auto depth = [&](double d) {
    return std::max(static_cast<int64_t>(d * options_.depth_multiplier), options_.min_depth);
  };
  if (fl.from_layer.empty()) throw bad();
  const std::string base = feature_extractor_scope + "/" + fl.from_layer.back().name + "_";
  std::string scope;
  models::TfLayout layout = models::TfLayout::kConv;
  if (j == 0) {
    scope = base + "1_Conv2d_" + std::to_string(index) + "_1x1_" + std::to_string(depth(extra_depth(fl, index) / 2.0));
  } else {
    const std::string k = std::to_string(extra_kernel(fl, index));
    scope = base + "2_Conv2d_" + std::to_string(index) + "_" + k + "x" + k + "_s2_" +
            std::to_string(depth(extra_depth(fl, index)));
    if (options_.use_depthwise && j == 1) {
      scope += "_depthwise";
      layout = models::TfLayout::kDepthwise;
    }
  }
  const std::string module = name.substr(0, dot);
  if (module.size() > 2 && module.compare(module.size() - 2, 2, ".0") == 0) {  // the convolution
    if (field != "weight") throw bad();
    return models::TfName{scope + (layout == models::TfLayout::kDepthwise ? "/depthwise_weights" : "/weights"), layout};
  }
  return models::tf_batch_norm_name(scope, field);
}

void SsdModelImpl::train(bool on) {
  torch::nn::Module::train(on);
  if (!on || !options_.freeze_batchnorm) return;
  for (auto& m : modules(/*include_self=*/false))
    if (auto* bn = m->as<torch::nn::BatchNorm2d>()) bn->eval();
}

std::vector<torch::Tensor> SsdModelImpl::feature_maps(const torch::Tensor& input) {
  TORCH_CHECK(input.dim() == 4 && input.size(1) == 3, "SSD expects images [B, 3, H, W], got ", input.sizes());
  std::vector<torch::Tensor> maps;
  const int64_t m = options_.pad_to_multiple;
  const torch::Tensor images =
      m > 1 ? F::pad(input, F::PadFuncOptions({0, (m - input.size(3) % m) % m, 0, (m - input.size(2) % m) % m}))
            : input;
  for (auto& map : extractor_->extract(images)) maps.push_back(std::move(map.tensor));
  if (fpn_) {
    maps = fpn_->forward(maps);
    for (const auto& layer : *bottom_up_)
      maps.push_back(options_.use_depthwise ? layer->as<SeparableConvImpl>()->forward(maps.back())
                                            : layer->as<ConvNormActivationImpl>()->forward(maps.back()));
    return maps;
  }
  if (mnasfpn_) return mnasfpn_->forward(maps);
  if (options_.ppn) {
    // slim.max_pool2d([2, 2], stride 2, 'SAME'): an odd side pads one pixel at the bottom/right,
    // where zero padding is -inf padding (the map is a ReLU6 output, >= 0).
    while (maps.size() < options_.anchors_per_location.size()) {
      const auto& x = maps.back();
      maps.push_back(F::max_pool2d(F::pad(x, F::PadFuncOptions({0, x.size(3) % 2, 0, x.size(2) % 2})),
                                   F::MaxPool2dFuncOptions(2).stride(2)));
    }
    return maps;
  }
  for (const auto& layer : *extras_) maps.push_back(layer->as<torch::nn::Sequential>()->forward(maps.back()));
  return maps;
}

namespace {

// A box predictor head: its convolution, with quantized weights and output under quantization.
torch::Tensor head(torch::nn::ModuleList& heads, torch::nn::ModuleList& quantizers, size_t i, const torch::Tensor& x) {
  auto& conv = *heads[i]->as<torch::nn::Conv2d>();
  if (!quantizers) return conv2d_tf_same(conv, x);
  auto& q = *quantizers[i];
  return layers::quantizer(q, "act_quant")
      .forward(layers::quantized_conv(conv, layers::quantizer(q, "weights_quant"), x, /*tf_same_padding=*/true));
}

}  // namespace

std::string SsdModelImpl::quantization_unsupported() const {
  const std::string base = layout_.scope;
  if (base != "MobilenetV1" && base != "MobilenetV2" && base != "MobilenetEdgeTPU") return "the " + base + " base";
  if (mnasfpn_) return "MnasFPN feature maps";
  return "";
}

void SsdModelImpl::enable_quantization(const layers::QuantizationOptions& options) {
  const std::string missing = quantization_unsupported();
  if (!missing.empty())
    throw std::invalid_argument(
        "graph_rewriter quantization: quantization-aware training of " + missing +
        " is not implemented yet (ssd_mobilenet_v1 / v2 / edgetpu, their FPNs and both box predictors "
        "are; docs/deploy.md)");
  if (options.weight_bits < 2 || options.weight_bits > 8 || options.activation_bits < 2 || options.activation_bits > 8)
    throw std::invalid_argument("graph_rewriter quantization: weight_bits and activation_bits must be 2..8");
  quantization_ = std::make_shared<layers::QuantizationControl>();
  quantization_->options = options;
  layers::enable_quantization(*this, quantization_);
  quantization_step_ = register_buffer("quantization_step", torch::zeros({}, torch::kLong));
  if (predictor_) return;  // quantized by layers::enable_quantization
  box_heads_quant_ = register_module("box_heads_quant", torch::nn::ModuleList());
  class_heads_quant_ = register_module("class_heads_quant", torch::nn::ModuleList());
  for (auto* list : {&box_heads_quant_, &class_heads_quant_})
    for (size_t i = 0; i < box_heads_->size(); ++i) {
      auto q = std::make_shared<torch::nn::Module>();
      q->register_module("weights_quant", layers::FakeQuant(quantization_, true));
      q->register_module("act_quant", layers::FakeQuant(quantization_, false));
      (*list)->push_back(q);
    }
}

torch::Tensor SsdModelImpl::forward(const torch::Tensor& images) {
  if (quantization_ && is_training()) {  // quantizing from training step `delay` on
    quantization_->active = quantization_step_.item<int64_t>() >= quantization_->options.delay;
    quantization_step_.add_(1);
  }
  const auto maps = feature_maps(images);
  if (predictor_) return predictor_->forward(maps);
  const int64_t batch = images.size(0);
  std::vector<torch::Tensor> boxes, classes;
  for (size_t i = 0; i < maps.size(); ++i) {
    // [B, A * code, H, W] -> [B, H, W, A * code] -> [B, H * W * A, code].
    const auto box_in =
        options_.depthwise_heads ? box_depthwise_[i]->as<ConvNormActivationImpl>()->forward(maps[i]) : maps[i];
    const auto box = head(box_heads_, box_heads_quant_, i, box_in);
    const int64_t anchors = maps[i].size(2) * maps[i].size(3) * options_.anchors_per_location[i];
    boxes.push_back(box.permute({0, 2, 3, 1}).reshape({batch, anchors, options_.box_code_size}));
    auto x = maps[i];
    if (options_.use_dropout)
      x = F::dropout(x, F::DropoutFuncOptions().p(1 - options_.dropout_keep_probability).training(is_training()));
    if (options_.depthwise_heads) x = class_depthwise_[i]->as<ConvNormActivationImpl>()->forward(x);
    const auto cls = head(class_heads_, class_heads_quant_, i, x);
    classes.push_back(cls.permute({0, 2, 3, 1}).reshape({batch, anchors, options_.num_classes + 1}));
  }
  return torch::cat({torch::cat(boxes, 1), torch::cat(classes, 1)}, 2);
}

std::vector<std::pair<int64_t, int64_t>> SsdModelImpl::feature_map_sizes(int64_t height, int64_t width) const {
  TORCH_CHECK(height >= 1 && width >= 1, "SSD input size must be positive, got ", height, "x", width);
  const int64_t m = options_.pad_to_multiple;
  height = (height + m - 1) / m * m;
  width = (width + m - 1) / m * m;
  // The base maps' sizes from the feature extractor; every later map (extra layers, FPN bottom-up
  // layers, PPN's pools, MnasFPN's level 6) halves the one before, ceil(x / 2) as TF's 'SAME'.
  const auto half = [](int64_t x) { return (x + 1) / 2; };
  auto sizes = extractor_->feature_map_sizes(height, width);
  sizes.resize(std::min(sizes.size(), options_.anchors_per_location.size()));
  while (sizes.size() < options_.anchors_per_location.size())
    sizes.emplace_back(half(sizes.back().first), half(sizes.back().second));
  return sizes;
}

}  // namespace orchard::detect
