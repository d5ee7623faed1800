#include "orchard/detect/meta_arch/ssd_model.h"

#include <torch/nn/functional.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/conv.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <stdexcept>

#include "orchard/layers/init.h"
#include "orchard/layers/conv_norm_activation.h"
#include "orchard/layers/depth.h"
#include "orchard/layers/tf_same.h"

namespace orchard::detect {
namespace {

namespace F = torch::nn::functional;

using layers::truncated_normal_;

// TF's feature_map_layout of each feature extractor: the base layers taken as the first feature
// maps, and the depths of the extra layers.
struct Layout {
  const char* type;
  const char* scope;          // TF-Slim's scope of the base network
  const char* from_layer[3];  // feature_map_layout's from_layer (the base network's maps)
  int64_t layer_depth[6];     // feature_map_layout's layer_depth (-1: a base map)
  const char* fpn_blocks[4];  // the FPN extractor's feature_blocks: levels 2..5
  const char* fpn_bottom_up;  // TF's name of the layers above level 5: <this><first + j>
  int fpn_bottom_up_first;
  int resnet_depth;           // ssd_resnet*_v1: 50 or 101 (FPN only); 0: a MobileNet
  int64_t conv_kernel_size[6];  // feature_map_layout's conv_kernel_size (0: the default 3)
};
int64_t extra_kernel(const Layout& l, size_t index) { return l.conv_kernel_size[index] ? l.conv_kernel_size[index] : 3; }
constexpr Layout kLayouts[] = {
    {"ssd_mobilenet_v2", "MobilenetV2", {"layer_15/expansion_output", "layer_19"}, {-1, -1, 512, 256, 256, 128},
     {"layer_4", "layer_7", "layer_14", "layer_19"}, "bottom_up_Conv2d_", 20, 0},
    {"ssd_mobilenet_v1", "MobilenetV1", {"Conv2d_11_pointwise", "Conv2d_13_pointwise"}, {-1, -1, 512, 256, 256, 128},
     {"Conv2d_3_pointwise", "Conv2d_5_pointwise", "Conv2d_11_pointwise", "Conv2d_13_pointwise"}, "bottom_up_Conv2d_",
     14, 0},
    // EmbeddedSSDMobileNetV1FeatureExtractor: five maps, the last extra layer 2x2 (no kernel
    // larger than its 2x2 input); the OD API requires 256x256 inputs (checked with the config).
    {"embedded_ssd_mobilenet_v1", "MobilenetV1", {"Conv2d_11_pointwise", "Conv2d_13_pointwise"},
     {-1, -1, 512, 256, 256, 0}, {nullptr, nullptr, nullptr, nullptr}, nullptr, 0, 0, {0, 0, 3, 3, 2, 0}},
    // SSDResnetV1FpnFeatureExtractor: TF-Slim's resnet_v1 with store_non_strided_activations,
    // block1..block4 at levels 2..5, bottom_up_block5, bottom_up_block6.
    {"ssd_resnet50_v1", "resnet_v1_50", {}, {}, {"block1", "block2", "block3", "block4"},
     "bottom_up_block", 5, 50},
    {"ssd_resnet101_v1", "resnet_v1_101", {}, {}, {"block1", "block2", "block3", "block4"},
     "bottom_up_block", 5, 101},
    // SSDMobileNetV3{Large,Small}FeatureExtractor: V3_*_DETECTION, no FPN variant.
    {"ssd_mobilenet_v3_large", "MobilenetV3", {"layer_14/expansion_output", "layer_17"}, {-1, -1, 512, 256, 256, 128},
     {nullptr, nullptr, nullptr, nullptr}, nullptr, 0, 0},
    {"ssd_mobilenet_v3_small", "MobilenetV3", {"layer_10/expansion_output", "layer_13"}, {-1, -1, 512, 256, 256, 128},
     {nullptr, nullptr, nullptr, nullptr}, nullptr, 0, 0},
    // SSDMobileNetEdgeTPUFeatureExtractor: V3_EDGETPU to layer_23.
    {"ssd_mobilenet_edgetpu", "MobilenetEdgeTPU", {"layer_18/expansion_output", "layer_23"},
     {-1, -1, 512, 256, 256, 128}, {nullptr, nullptr, nullptr, nullptr}, nullptr, 0, 0},
    // SSDMobileDet{CPU,DSP,EdgeTPU,GPU}FeatureExtractor: C4 (stride 16) and C5 (stride 32).
    {"ssd_mobiledet_cpu", "MobileDetCPU", {"C4", "C5"}, {-1, -1, 512, 256, 256, 128},
     {nullptr, nullptr, nullptr, nullptr}, nullptr, 0, 0},
    {"ssd_mobiledet_dsp", "MobileDetDSP", {"C4", "C5"}, {-1, -1, 512, 256, 256, 128},
     {nullptr, nullptr, nullptr, nullptr}, nullptr, 0, 0},
    {"ssd_mobiledet_edgetpu", "MobileDetEdgeTPU", {"C4", "C5"}, {-1, -1, 512, 256, 256, 128},
     {nullptr, nullptr, nullptr, nullptr}, nullptr, 0, 0},
    {"ssd_mobiledet_gpu", "MobileDetGPU", {"C4", "C5"}, {-1, -1, 512, 256, 256, 128},
     {nullptr, nullptr, nullptr, nullptr}, nullptr, 0, 0},
    // SSDInceptionV2FeatureExtractor: TF-Slim's inception_v2_base (separable first layer).
    {"ssd_inception_v2", "InceptionV2", {"Mixed_4c", "Mixed_5c"}, {-1, -1, 512, 256, 256, 128},
     {nullptr, nullptr, nullptr, nullptr}, nullptr, 0, 0},
    // SSDInceptionV3FeatureExtractor: TF-Slim's inception_v3_base, three base maps.
    {"ssd_inception_v3", "InceptionV3", {"Mixed_5d", "Mixed_6e", "Mixed_7c"}, {-1, -1, -1, 512, 256, 128},
     {nullptr, nullptr, nullptr, nullptr}, nullptr, 0, 0},
};
constexpr int kFpnBaseMaxLevel = 5;  // the base network's coarsest FPN level (stride 32)
constexpr size_t kMaxFeatureMaps = 6;

// The number of base network maps in feature_map_layout.
size_t num_base_maps(const Layout& l) {
  size_t n = 0;
  while (n < 3 && l.from_layer[n]) ++n;
  return n;
}

const Layout& layout_of(const std::string& type) {
  for (const Layout& l : kLayouts)
    if (type == l.type) return l;
  TORCH_CHECK(false, "SSD feature extractor '", type,
              "' is not one of ssd_mobilenet_v2, ssd_mobilenet_v1, ssd_mobilenet_v3_large, ssd_mobilenet_v3_small, "
              "ssd_mobilenet_edgetpu, ssd_mobiledet_cpu|dsp|edgetpu|gpu, embedded_ssd_mobilenet_v1, ssd_inception_v2, ssd_inception_v3, "
              "ssd_resnet50_v1, ssd_resnet101_v1");
}

}  // namespace

bool is_ssd_mobilenet_feature_extractor(const std::string& type) {
  for (const Layout& l : kLayouts)
    if (type == l.type) return true;
  return false;
}

std::string SsdModelImpl::backbone_scope() const { return layout_of(options_.feature_extractor).scope; }

bool is_prediction_head_parameter(const std::string& name) {
  // The OD API's "detection" restore_map is the feature extractor's variables: the whole box
  // predictor (the weight-shared towers too) starts afresh.
  for (const char* prefix : {"box_heads.", "class_heads.", "box_depthwise.", "class_depthwise.", "predictor."})
    if (name.rfind(prefix, 0) == 0) return true;
  return false;
}

SsdModelImpl::SsdModelImpl(const SsdModelOptions& o) : options_(o) {
  const size_t n = o.anchors_per_location.size();
  const Layout& layout = layout_of(o.feature_extractor);
  TORCH_CHECK(n >= 1, "SSD needs at least one feature map; anchors_per_location is empty");
  TORCH_CHECK(o.num_classes >= 1, "SSD num_classes must be >= 1, got ", o.num_classes);
  TORCH_CHECK(o.box_code_size >= 1 && o.kernel_size >= 1, "SSD box_code_size and kernel_size must be >= 1");
  TORCH_CHECK(o.depth_multiplier > 0, "SSD depth_multiplier must be positive, got ", o.depth_multiplier);
  TORCH_CHECK(o.pad_to_multiple >= 1, "SSD pad_to_multiple must be >= 1, got ", o.pad_to_multiple);
  TORCH_CHECK(!o.use_dropout || (o.dropout_keep_probability > 0 && o.dropout_keep_probability <= 1),
              "SSD dropout_keep_probability must be in (0, 1], got ", o.dropout_keep_probability);
  for (int64_t a : o.anchors_per_location) TORCH_CHECK(a >= 1, "SSD anchors_per_location must be >= 1, got ", a);
  const SsdFpnOptions& fpn = o.fpn;
  // The base network's maps: feature_map_layout's two layers, or the FPN's levels up to 5.
  std::vector<std::string> from;
  if (fpn.enabled) {
    TORCH_CHECK(layout.fpn_blocks[0] != nullptr, "SSD ", o.feature_extractor, " has no FPN variant in the OD API");
    TORCH_CHECK(fpn.min_level >= 2 && fpn.min_level <= kFpnBaseMaxLevel && fpn.max_level >= fpn.min_level &&
                    fpn.max_level <= 12,
                "SSD FPN levels must satisfy 2 <= min_level <= 5, min_level <= max_level <= 12; got ",
                fpn.min_level, "..", fpn.max_level);
    TORCH_CHECK(static_cast<int>(n) == fpn.max_level - fpn.min_level + 1, "SSD FPN levels ", fpn.min_level, "..",
                fpn.max_level, " need ", fpn.max_level - fpn.min_level + 1, " anchor layers, got ", n);
    for (int level = fpn.min_level; level <= std::min(fpn.max_level, kFpnBaseMaxLevel); ++level)
      from.push_back(layout.fpn_blocks[level - 2]);
  } else if (o.ppn) {
    TORCH_CHECK(o.feature_extractor == "ssd_mobilenet_v1", "SSD PPN: the OD API's is ssd_mobilenet_v1_ppn, not ",
                o.feature_extractor, "_ppn");
    from.push_back("Conv2d_11_pointwise");
  } else if (o.mnasfpn) {
    TORCH_CHECK(o.feature_extractor == "ssd_mobilenet_v2", "SSD MnasFPN: the OD API's is ssd_mobilenet_v2_mnasfpn, not ",
                o.feature_extractor, "_mnasfpn");
    TORCH_CHECK(fpn.min_level == 3 && fpn.max_level == 6 && n == 4, "SSD MnasFPN has levels 3..6 (4 feature maps), got ",
                fpn.min_level, "..", fpn.max_level, " and ", n, " anchor layers");
    TORCH_CHECK(!o.use_explicit_padding, "SSD MnasFPN: use_explicit_padding is not implemented");
    from = {"layer_7", "layer_14", "layer_18"};
  } else {
    TORCH_CHECK(layout.resnet_depth == 0, "SSD ", o.feature_extractor, " is an FPN feature extractor (",
                o.feature_extractor, "_fpn)");
    TORCH_CHECK(n <= kMaxFeatureMaps, "SSD MobileNet has 1 to ", kMaxFeatureMaps, " feature maps; anchors_per_location has ",
                n, " entries");
    for (size_t i = 0; i < std::min(n, num_base_maps(layout)); ++i) from.push_back(layout.from_layer[i]);
  }

  if (o.feature_extractor == "ssd_mobilenet_v2") {
    // TF: mobilenet_base with min_depth from the arg scope and the last layer scaled too;
    // batch norm from training_scope(bn_decay=0.9997) with slim's epsilon 0.001.
    MobileNetV2Options bo;
    bo.width_mult = o.depth_multiplier;
    bo.min_depth = o.min_depth;
    bo.finegrain_classification_mode = false;
    bo.include_top = false;
    bo.bn_momentum = o.bn_momentum;
    bo.bn_eps = o.bn_eps;
    bo.tf_same_padding = !o.use_explicit_padding;  // TF 'SAME', or fixed_padding then 'VALID'
    bo.include_last_conv = !o.mnasfpn;              // mnasfpn: final_endpoint='layer_18'
    backbone_ = register_module("backbone", MobileNetV2(bo));
    for (const auto& layer : from) {
      base_endpoints_.push_back(parse_mobilenet_v2_endpoint(layer));
      channels_.push_back(backbone_->endpoint_channels(base_endpoints_.back()));
    }
    if (o.mnasfpn) {
      MnasFpnOptions mo;
      mo.in_channels = channels_;
      mo.depth = layers::make_divisible(static_cast<double>(fpn.additional_layer_depth) * o.depth_multiplier, 8,
                                        o.min_depth);
      mo.depth_multiplier = o.depth_multiplier;
      mo.min_depth = o.min_depth;
      mo.bn_momentum = o.bn_momentum;
      mo.bn_eps = o.bn_eps;
      mnasfpn_ = register_module("mnasfpn", MnasFpn(mo));
      channels_.assign(n, mo.depth);
    }
  } else if (std::string(layout.scope) == "MobilenetV3" || std::string(layout.scope) == "MobilenetEdgeTPU") {
    // mobilenet_v3.mobilenet_base(conv_defs=V3_*_DETECTION or V3_EDGETPU,
    // final_endpoint=from_layer[1]) under training_scope(bn_decay=0.9997) and min_depth from the
    // config (whose conv_hyperparams give the batch norm; the conv_defs keep their activations).
    models::MobileNetV3Options bo;
    bo.small = o.feature_extractor == "ssd_mobilenet_v3_small";
    bo.edgetpu = o.feature_extractor == "ssd_mobilenet_edgetpu";
    bo.detection = true;
    bo.depth_multiplier = o.depth_multiplier;
    bo.min_depth = o.min_depth;
    bo.bn_momentum = o.bn_momentum;
    bo.bn_eps = o.bn_eps;
    bo.tf_same_padding = !o.use_explicit_padding;
    backbone_v3_ = register_module("backbone", models::MobileNetV3(bo));
    for (const auto& layer : from) {
      base_endpoints_v3_.push_back(backbone_v3_->parse_endpoint(layer));
      channels_.push_back(backbone_v3_->endpoint_channels(base_endpoints_v3_.back()));
    }
  } else if (o.feature_extractor.rfind("ssd_mobiledet_", 0) == 0) {
    // ssd_mobiledet_feature_extractor: the backbone under its own batch norm scope (epsilon
    // 0.01, decay 0.99); the config's conv_hyperparams reach only the extra layers. The OD API
    // raises NotImplementedError for use_explicit_padding.
    TORCH_CHECK(!o.use_explicit_padding, "SSD ", o.feature_extractor,
                " does not implement use_explicit_padding (nor does the OD API)");
    models::MobileDetOptions mo;
    mo.variant = o.feature_extractor.substr(std::string("ssd_mobiledet_").size());
    mo.depth_multiplier = o.depth_multiplier;
    backbone_mobiledet_ = register_module("backbone", models::MobileDet(mo));
    channels_ = {backbone_mobiledet_->c4_channels(), backbone_mobiledet_->c5_channels()};
    channels_.resize(from.size());
  } else if (o.feature_extractor == "ssd_inception_v2") {
    // inception_v2_base(final_endpoint='Mixed_5c', min_depth, depth_multiplier) under the
    // config's conv_hyperparams (the OD API requires override_base_feature_extractor_hyperparams).
    models::InceptionV2Options io;
    io.depth_multiplier = o.depth_multiplier;
    io.min_depth = o.min_depth;
    io.bn_momentum = o.bn_momentum;
    io.bn_eps = o.bn_eps;
    io.init_stddev = o.init_stddev;
    backbone_inception_v2_ = register_module("backbone", models::InceptionV2(io));
    channels_ = {backbone_inception_v2_->mixed_4c_channels(), backbone_inception_v2_->mixed_5c_channels()};
    channels_.resize(from.size());
  } else if (o.feature_extractor == "ssd_inception_v3") {
    // inception_v3_base(final_endpoint='Mixed_7c', min_depth, depth_multiplier) under the
    // config's conv_hyperparams (the OD API requires override_base_feature_extractor_hyperparams):
    // its batch norm (with gamma), ReLU6 and initializer; TF-Slim's 'SAME' average pools.
    models::InceptionV3Options io;
    io.num_classes = 0;
    io.depth_multiplier = o.depth_multiplier;
    io.min_depth = o.min_depth;
    io.batch_norm_momentum = o.bn_momentum;
    io.bn_eps = o.bn_eps;
    io.relu6 = true;
    io.tf_avg_pool = true;
    backbone_inception_ = register_module("backbone", models::InceptionV3(io));
    const auto c = backbone_inception_->mixed_5d_6e_7c_channels();
    channels_.assign(c.begin(), c.begin() + static_cast<std::ptrdiff_t>(from.size()));
    torch::NoGradGuard no_grad;
    for (auto& m : backbone_inception_->modules(/*include_self=*/false))
      if (auto* conv = m->as<torch::nn::Conv2d>()) truncated_normal_(conv->weight, o.init_stddev);
  } else if (layout.resnet_depth > 0) {
    // TF-Slim's resnet_v1_50/101 (stride in each stage's last unit), the configs' batch norm
    // (override_base_feature_extractor_hyperparams), no classifier. depth_multiplier 1 only.
    TORCH_CHECK(o.depth_multiplier == 1.0, "SSD ", o.feature_extractor, " implements depth_multiplier 1 only, got ",
                o.depth_multiplier);
    models::ResNetOptions ro;
    ro.layers = layout.resnet_depth == 50 ? std::vector<int64_t>{3, 4, 6, 3} : std::vector<int64_t>{3, 4, 23, 3};
    ro.layout = models::ResNetLayout::kSlim;
    ro.include_top = false;
    ro.bn_momentum = o.bn_momentum;
    ro.bn_eps = o.bn_eps;
    backbone_resnet_ = register_module("backbone", models::ResNet(ro));
    for (const auto& block : from) {
      resnet_stages_.push_back(block[5] - '0');  // "blockN"
      channels_.push_back(backbone_resnet_->stage_channels(resnet_stages_.back()));
    }
  } else {
    // TF: mobilenet_v1_base(final_endpoint='Conv2d_13_pointwise', min_depth, depth_multiplier)
    // under mobilenet_v1_arg_scope (batch norm decay 0.9997, epsilon 0.001, as the configs).
    models::MobileNetV1Options bo;
    bo.depth_multiplier = o.depth_multiplier;
    bo.min_depth = o.min_depth;
    bo.bn_momentum = o.bn_momentum;
    bo.bn_eps = o.bn_eps;
    bo.tf_same_padding = !o.use_explicit_padding;
    backbone_v1_ = register_module("backbone", models::MobileNetV1(bo));
    for (const auto& layer : from) {
      base_layers_.push_back(models::parse_mobilenet_v1_endpoint(layer));
      channels_.push_back(backbone_v1_->layer_channels(base_layers_.back()));
    }
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
      else
        bottom_up_->push_back(ConvNormActivation(conv(d, d, 3).stride(2).tf_same_padding(!o.use_explicit_padding)));
      channels_.push_back(d);
    }
  } else if (o.ppn) {
    channels_.assign(n, channels_.front());  // max pools keep the depth
  } else if (o.mnasfpn) {
    // the four levels come out of MnasFPN
  } else {
    extras_ = register_module("extras", torch::nn::ModuleList());
    for (size_t i = from.size(); i < n; ++i) {
      TORCH_CHECK(layout.layer_depth[i] > 0, "SSD ", o.feature_extractor, " has ", i, " feature maps, not ", n);
      const int64_t in = channels_.back(), mid = depth(layout.layer_depth[i] / 2.0), out = depth(layout.layer_depth[i]);
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
      TORCH_CHECK(channels_[i] == channels_[0], "weight_shared_convolutional_box_predictor needs feature maps of one "
                  "depth; map ", i, " has ", channels_[i], " channels, map 0 ", channels_[0]);
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

std::optional<models::TfName> SsdModelImpl::tf_name(const std::string& name,
                                                          const std::string& backbone_scope) const {
  const auto bad = [&] { return std::invalid_argument("not an SSD MobileNet variable: '" + name + "'"); };
  const std::string feature_extractor_scope = "FeatureExtractor/" + this->backbone_scope();
  if (name.rfind("backbone.", 0) == 0) {
    const std::string scope = backbone_scope.empty() ? feature_extractor_scope : backbone_scope;
    if (backbone_resnet_) return models::resnet_v1_slim_tf_name(name.substr(9), scope);
    if (backbone_v3_) return backbone_v3_->tf_name(name.substr(9), scope);
    if (backbone_mobiledet_) return backbone_mobiledet_->tf_name(name.substr(9), scope);
    if (backbone_inception_v2_) return backbone_inception_v2_->tf_name(name.substr(9), scope);
    if (backbone_inception_) {
      // TF-Slim's names under the scope; the config's batch norm has gamma (scale: true).
      auto n = models::inception_v3_tf_name(name.substr(9));
      if (n) {
        n->name = scope + n->name.substr(n->name.find('/'));
        n->default_value.reset();
      }
      return n;
    }
    return backbone_v1_ ? models::mobilenet_v1_tf_name(name.substr(9), scope)
                        : models::mobilenet_v2_tf_name(name.substr(9), scope);
  }
  if (predictor_ && name.rfind("predictor.", 0) == 0) return predictor_->tf_name(name.substr(10));
  if (fpn_ && name.rfind("fpn.", 0) == 0) return fpn_->tf_name(name.substr(4), feature_extractor_scope + "/fpn");
  if (mnasfpn_ && name.rfind("mnasfpn.", 0) == 0) return mnasfpn_->tf_name(name.substr(8), "FeatureExtractor/MnasFPN");
  int j = -1, used = 0;
  if (bottom_up_ && std::sscanf(name.c_str(), "bottom_up.%d%n", &j, &used) == 1 && j >= 0) {
    const Layout& layout = layout_of(options_.feature_extractor);
    const std::string scope =
        feature_extractor_scope + "/fpn/" + layout.fpn_bottom_up + std::to_string(layout.fpn_bottom_up_first + j);
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
    const std::string scope = "BoxPredictor_" + std::to_string(i) +
                              (head == "box_depthwise" ? "/BoxEncodingPredictor_depthwise" : "/ClassPredictor_depthwise");
    const std::string module = name.substr(0, dot);
    if (module.size() > 2 && module.compare(module.size() - 2, 2, ".0") == 0) {
      if (field != "weight") throw bad();
      return models::TfName{scope + "/depthwise_weights", models::TfLayout::kDepthwise};
    }
    return models::tf_batch_norm_name(scope, field);
  }
  if (head == "box_heads" || head == "class_heads") {
    const std::string scope = "BoxPredictor_" + std::to_string(i) +
                              (head == "box_heads" ? "/BoxEncodingPredictor/" : "/ClassPredictor/");
    if (field == "weight") return models::TfName{scope + "weights", models::TfLayout::kConv};
    if (field == "bias") return models::TfName{scope + "biases"};
    throw bad();
  }
  if (head != "extras" || std::sscanf(name.c_str() + consumed, ".%d.", &j) != 1) throw bad();
  // feature_map_generators.multi_resolution_feature_maps: names from the last base layer,
  // the feature map's index and its depths (get_depth_fn).
  const Layout& fl = layout_of(options_.feature_extractor);
  const size_t index = static_cast<size_t>(i) + num_base_maps(fl);
  if (index >= kMaxFeatureMaps) throw bad();
  const auto depth = [&](double d) {
    return std::max(static_cast<int64_t>(d * options_.depth_multiplier), options_.min_depth);
  };
  const std::string base = feature_extractor_scope + "/" + fl.from_layer[num_base_maps(fl) - 1] + "_";
  std::string scope;
  models::TfLayout layout = models::TfLayout::kConv;
  if (j == 0) {
    scope = base + "1_Conv2d_" + std::to_string(index) + "_1x1_" + std::to_string(depth(fl.layer_depth[index] / 2.0));
  } else {
    const std::string k = std::to_string(extra_kernel(fl, index));
    scope = base + "2_Conv2d_" + std::to_string(index) + "_" + k + "x" + k + "_s2_" +
            std::to_string(depth(fl.layer_depth[index]));
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
      m > 1 ? F::pad(input, F::PadFuncOptions({0, (m - input.size(3) % m) % m, 0, (m - input.size(2) % m) % m})) : input;
  if (backbone_resnet_) {
    // The ResNets take RGB minus the channel means in [0, 255] (SSDResnetV1FpnFeatureExtractor's
    // preprocess), the input here is scaled to [-1, 1]: (x + 1) * 127.5 - mean.
    const auto mean = torch::tensor({123.68f, 116.779f, 103.939f}, images.options()).view({1, 3, 1, 1});
    auto stages = backbone_resnet_->slim_stage_outputs((images + 1) * 127.5 - mean, resnet_stages_.back());
    for (int s : resnet_stages_) maps.push_back(stages[static_cast<size_t>(s - 1)]);
  } else if (backbone_v3_) {
    maps = backbone_v3_->endpoints(images, base_endpoints_v3_);
  } else if (backbone_inception_v2_) {
    maps = backbone_inception_v2_->forward(images);
    maps.resize(std::min(maps.size(), channels_.size()));
  } else if (backbone_mobiledet_) {
    maps = backbone_mobiledet_->forward(images);
    maps.resize(std::min(maps.size(), channels_.size()));
  } else if (backbone_inception_) {
    maps = backbone_inception_->mixed_5d_6e_7c(images);
    maps.resize(channels_.size() < maps.size() ? channels_.size() : maps.size());
  } else {
    maps = backbone_v1_ ? backbone_v1_->endpoints(images, base_layers_) : backbone_->endpoints(images, base_endpoints_);
  }
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

torch::Tensor SsdModelImpl::forward(const torch::Tensor& images) {
  const auto maps = feature_maps(images);
  if (predictor_) return predictor_->forward(maps);
  const int64_t batch = images.size(0);
  std::vector<torch::Tensor> boxes, classes;
  for (size_t i = 0; i < maps.size(); ++i) {
    // [B, A * code, H, W] -> [B, H, W, A * code] -> [B, H * W * A, code].
    const auto box_in =
        options_.depthwise_heads ? box_depthwise_[i]->as<ConvNormActivationImpl>()->forward(maps[i]) : maps[i];
    const auto box = conv2d_tf_same(*box_heads_[i]->as<torch::nn::Conv2d>(), box_in);
    const int64_t anchors = maps[i].size(2) * maps[i].size(3) * options_.anchors_per_location[i];
    boxes.push_back(box.permute({0, 2, 3, 1}).reshape({batch, anchors, options_.box_code_size}));
    auto x = maps[i];
    if (options_.use_dropout)
      x = F::dropout(x, F::DropoutFuncOptions().p(1 - options_.dropout_keep_probability).training(is_training()));
    if (options_.depthwise_heads) x = class_depthwise_[i]->as<ConvNormActivationImpl>()->forward(x);
    const auto cls = conv2d_tf_same(*class_heads_[i]->as<torch::nn::Conv2d>(), x);
    classes.push_back(cls.permute({0, 2, 3, 1}).reshape({batch, anchors, options_.num_classes + 1}));
  }
  return torch::cat({torch::cat(boxes, 1), torch::cat(classes, 1)}, 2);
}

std::vector<std::pair<int64_t, int64_t>> SsdModelImpl::feature_map_sizes(int64_t height, int64_t width) const {
  TORCH_CHECK(height >= 1 && width >= 1, "SSD input size must be positive, got ", height, "x", width);
  const int64_t m = options_.pad_to_multiple;
  height = (height + m - 1) / m * m;
  width = (width + m - 1) / m * m;
  // Every stride-2 layer (torchvision's 3x3 with padding 1, TF 'SAME', TF-Slim's subsampling
  // x[::2]) gives ceil(x / 2):
  // four before layer_15's expansion (V2) or Conv2d_11_pointwise (V1), at stride 16, one per
  // later feature map.
  const auto half = [](int64_t x) { return (x + 1) / 2; };
  if (backbone_inception_) {
    // Inception-v3's 'VALID' stem and reductions: Mixed_5d, then (x - 3) / 2 + 1 twice
    // (Mixed_6a, Mixed_7a); 300 -> 35, 17, 8; the extra layers halve (ceil).
    height = models::InceptionV3Impl::mixed_5d_size(height);
    width = models::InceptionV3Impl::mixed_5d_size(width);
    std::vector<std::pair<int64_t, int64_t>> sizes{{height, width}};
    for (size_t i = 1; i < options_.anchors_per_location.size(); ++i) {
      height = i < 3 ? (height - 3) / 2 + 1 : half(height);
      width = i < 3 ? (width - 3) / 2 + 1 : half(width);
      sizes.emplace_back(height, width);
    }
    return sizes;
  }
  for (int i = 0; i < (options_.fpn.enabled || options_.mnasfpn ? options_.fpn.min_level : 4); ++i) {
    height = half(height);
    width = half(width);
  }
  std::vector<std::pair<int64_t, int64_t>> sizes{{height, width}};
  for (size_t i = 1; i < options_.anchors_per_location.size(); ++i) {
    height = half(height);
    width = half(width);
    sizes.emplace_back(height, width);
  }
  return sizes;
}

}  // namespace orchard::detect
