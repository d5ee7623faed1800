// The base network of an SSD feature extractor (the OD API's SSDFeatureExtractor without the
// feature map generator): one implementation per base network family, one file each, looked up
// by feature_extractor.type in the registry (registry.h). SsdModel (detect/meta_arch/ssd_model.h) builds the
// feature map generator on top of it from its SsdLayout: the extra layers
// (multi_resolution_feature_maps), the FPN (fpn_top_down_feature_maps + bottom-up layers), PPN's
// max pools or MnasFPN.
//
// Adding an SSD base network: one file here defining its SsdLayout row(s), a class implementing
// SsdFeatureExtractor and a `register_<family>(FeatureExtractorRegistry&)` function, plus its
// declaration and call in builtin.cc. SsdModel's TensorFlow names and ONNX export ask it; the
// validator's type list (detect/config/config.h, no libtorch) is checked against the registry by
// tests/detect/feature_extractors_test.cc.
#pragma once

#include <torch/nn/module.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "orchard/models/tf_names.h"

namespace orchard::detect::feature_extractors {

// The channel means SSDResnetV1FpnFeatureExtractor's preprocess subtracts from RGB in [0, 255].
inline constexpr float kResNetV1ChannelMeans[3] = {123.68f, 116.779f, 103.939f};

// A named map of the base network and its output stride (input side / map side, for inputs
// that are multiples of it; TF 'SAME' strided layers give ceil(side / stride)).
struct Endpoint {
  std::string name;  // TF's endpoint name: "layer_15/expansion_output", "Conv2d_11_pointwise", "C4", "block3"
  int64_t stride = 1;
};

// TF's feature_map_layout of an SSD feature extractor, and the names its FPN, PPN and MnasFPN
// variants use. Plain data, one row per registered type.
struct SsdLayout {
  std::string scope;  // TF-Slim's scope of the base network: "MobilenetV2", "resnet_v1_50", ...
  // feature_map_layout's from_layer: the base maps of the multi-resolution variant (empty: an FPN
  // extractor only, the ResNets).
  std::vector<Endpoint> from_layer;
  // feature_map_layout's layer_depth and conv_kernel_size by feature map index (index
  // from_layer.size() onwards: the extra layers; depth 0 or a missing entry: no such map; kernel 0:
  // the default 3). At most 6 maps.
  std::vector<int64_t> layer_depth;
  std::vector<int64_t> conv_kernel_size;
  // The FPN variant (<type>_fpn): the base maps of levels 2..5 (empty: no FPN variant) and TF's
  // name of the bottom-up layers above level 5: <fpn_bottom_up><fpn_bottom_up_first + j>.
  std::vector<Endpoint> fpn_blocks;
  std::string fpn_bottom_up;
  int fpn_bottom_up_first = 0;
  std::optional<Endpoint> ppn_map;     // the PPN variant's (<type>_ppn) base map; unset: none
  std::vector<Endpoint> mnasfpn_maps;  // the MnasFPN variant's (<type>_mnasfpn) base maps; empty: none
};

// Which feature map generator sits on the base network.
enum class SsdVariant { kMultiResolution, kFpn, kPpn, kMnasFpn };

struct SsdFeatureExtractorOptions {
  std::string type;  // the registered name, e.g. "ssd_mobilenet_v2"
  SsdVariant variant = SsdVariant::kMultiResolution;
  std::vector<Endpoint> endpoints;  // the base maps wanted, finest first (from the layout)
  double depth_multiplier = 1.0;
  int64_t min_depth = 16;
  double bn_momentum = 0.0003, bn_eps = 0.001;  // conv_hyperparams' batch norm (where the base takes it)
  double init_stddev = 0.03;                    // conv_hyperparams' truncated normal (where the base takes it)
  bool use_explicit_padding = false;            // fixed_padding then 'VALID' (where the base implements it)
};

// One base map of a forward pass.
struct FeatureMap {
  torch::Tensor tensor;  // [B, channels, H, W] float
  int64_t stride = 1;
  int64_t channels = 0;
};

class SsdFeatureExtractor {
 public:
  virtual ~SsdFeatureExtractor() = default;

  // The module holding the base network's parameters and buffers, with the base network's own
  // names (models::MobileNetV2's features.*, ...); SsdModel registers it as "backbone".
  virtual std::shared_ptr<torch::nn::Module> module() const = 0;
  // The base maps `extract` returns (the options' endpoints), with their channels.
  const std::vector<Endpoint>& endpoints() const { return endpoints_; }
  const std::vector<int64_t>& channels() const { return channels_; }
  // images [B, 3, H, W] float32 in [-1, 1] (the ResNets turn it into RGB minus the ImageNet means
  // themselves) -> the base maps, finest first.
  virtual std::vector<FeatureMap> extract(const torch::Tensor& images) = 0;
  // The base maps' (height, width) for a height x width input: ceil(side / stride) unless the
  // base network's padding says otherwise (Inception-v3's 'VALID' layers).
  virtual std::vector<std::pair<int64_t, int64_t>> feature_map_sizes(int64_t height, int64_t width) const;
  // The TensorFlow name of one of module()'s parameters or buffers (`name` without "backbone.")
  // under `scope` ("FeatureExtractor/MobilenetV2" in a detection checkpoint, "MobilenetV2" in
  // TF-Slim's classification checkpoint).
  virtual std::optional<models::TfName> tf_name(const std::string& name, const std::string& scope) const = 0;
  // Whether a fine_tune_checkpoint_type "classification" restores this parameter of module()
  // (the ImageNet classifier's variable of the same TF-Slim name): all of them unless a base
  // network says otherwise.
  virtual bool restored_by_classification(const std::string& /*name*/) const { return true; }

 protected:
  // `tensors` (the base network's maps, finest first; any beyond endpoints() dropped) with the
  // endpoints' strides and channels: what extract returns.
  std::vector<FeatureMap> feature_maps(std::vector<torch::Tensor> tensors) const;
  // Implementations fill these in their constructor.
  std::vector<Endpoint> endpoints_;
  std::vector<int64_t> channels_;
};

}  // namespace orchard::detect::feature_extractors
