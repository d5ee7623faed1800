// ssd_mobilenet_v1 (SSDMobileNetV1FeatureExtractor, also _fpn and _ppn) and
// embedded_ssd_mobilenet_v1: TF's mobilenet_v1_base(final_endpoint='Conv2d_13_pointwise',
// min_depth, depth_multiplier) as models::MobileNetV1, under mobilenet_v1_arg_scope (batch norm
// decay 0.9997, epsilon 0.001, as the configs).
#include "orchard/detect/feature_extractors/registry.h"
#include "orchard/models/mobilenet_v1.h"

namespace orchard::detect::feature_extractors {
namespace {

class MobileNetV1Extractor : public SsdFeatureExtractor {
 public:
  explicit MobileNetV1Extractor(const SsdFeatureExtractorOptions& o) {
    models::MobileNetV1Options bo;
    bo.depth_multiplier = o.depth_multiplier;
    bo.min_depth = o.min_depth;
    bo.bn_momentum = o.bn_momentum;
    bo.bn_eps = o.bn_eps;
    bo.tf_same_padding = !o.use_explicit_padding;
    net_ = models::MobileNetV1(bo);
    endpoints_ = o.endpoints;
    for (const auto& e : endpoints_) {
      layers_.push_back(models::parse_mobilenet_v1_endpoint(e.name));
      channels_.push_back(net_->layer_channels(layers_.back()));
    }
  }
  std::shared_ptr<torch::nn::Module> module() const override { return net_.ptr(); }
  std::vector<FeatureMap> extract(const torch::Tensor& images) override {
    return feature_maps(net_->endpoints(images, layers_));
  }
  std::optional<models::TfName> tf_name(const std::string& name, const std::string& scope) const override {
    return models::mobilenet_v1_tf_name(name, scope);
  }

 private:
  models::MobileNetV1 net_{nullptr};
  std::vector<int64_t> layers_;
};

std::unique_ptr<SsdFeatureExtractor> make(const SsdFeatureExtractorOptions& o) {
  return std::make_unique<MobileNetV1Extractor>(o);
}

}  // namespace

void register_ssd_mobilenet_v1(FeatureExtractorRegistry& r) {
  SsdLayout l;
  l.scope = "MobilenetV1";
  l.from_layer = {{"Conv2d_11_pointwise", 16}, {"Conv2d_13_pointwise", 32}};
  l.layer_depth = {-1, -1, 512, 256, 256, 128};
  l.fpn_blocks = {
      {"Conv2d_3_pointwise", 4}, {"Conv2d_5_pointwise", 8}, {"Conv2d_11_pointwise", 16}, {"Conv2d_13_pointwise", 32}};
  l.fpn_bottom_up = "bottom_up_Conv2d_";
  l.fpn_bottom_up_first = 14;
  // pooling_pyramid_feature_maps (base_feature_map_depth 0): Conv2d_11_pointwise, then max pools.
  l.ppn_map = Endpoint{"Conv2d_11_pointwise", 16};
  r.add({"ssd_mobilenet_v1", l, make, /*keras=*/true});

  // EmbeddedSSDMobileNetV1FeatureExtractor: five maps, the last extra layer 2x2 (no kernel
  // larger than its 2x2 input); the OD API requires 256x256 inputs (checked with the config).
  SsdLayout e;
  e.scope = "MobilenetV1";
  e.from_layer = l.from_layer;
  e.layer_depth = {-1, -1, 512, 256, 256};
  e.conv_kernel_size = {0, 0, 3, 3, 2};
  r.add({"embedded_ssd_mobilenet_v1", e, make});
}

}  // namespace orchard::detect::feature_extractors
