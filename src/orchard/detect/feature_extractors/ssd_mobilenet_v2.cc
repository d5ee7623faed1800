// ssd_mobilenet_v2 (SSDMobileNetV2FeatureExtractor, also _fpn and _mnasfpn): TF's mobilenet_base
// as models::MobileNetV2 (torchvision's features.* without the classifier), min_depth from the
// arg scope and the last layer scaled too, batch norm decay 0.9997 / epsilon 0.001.
#include "orchard/detect/feature_extractors/registry.h"
#include "orchard/models/mobilenet_v2.h"

namespace orchard::detect::feature_extractors {
namespace {

class MobileNetV2Extractor : public SsdFeatureExtractor {
 public:
  explicit MobileNetV2Extractor(const SsdFeatureExtractorOptions& o) {
    models::MobileNetV2Options bo;
    bo.width_mult = o.depth_multiplier;
    bo.min_depth = o.min_depth;
    bo.finegrain_classification_mode = false;
    bo.include_top = false;
    bo.bn_momentum = o.bn_momentum;
    bo.bn_eps = o.bn_eps;
    bo.tf_same_padding = !o.use_explicit_padding;              // TF 'SAME', or fixed_padding then 'VALID'
    bo.include_last_conv = o.variant != SsdVariant::kMnasFpn;  // mnasfpn: final_endpoint='layer_18'
    net_ = models::MobileNetV2(bo);
    endpoints_ = o.endpoints;
    for (const auto& e : endpoints_) {
      wanted_.push_back(models::parse_mobilenet_v2_endpoint(e.name));
      channels_.push_back(net_->endpoint_channels(wanted_.back()));
    }
  }
  std::shared_ptr<torch::nn::Module> module() const override { return net_.ptr(); }
  std::vector<FeatureMap> extract(const torch::Tensor& images) override {
    return feature_maps(net_->endpoints(images, wanted_));
  }
  std::optional<models::TfName> tf_name(const std::string& name, const std::string& scope) const override {
    return models::mobilenet_v2_tf_name(name, scope);
  }

 private:
  models::MobileNetV2 net_{nullptr};
  std::vector<models::MobileNetV2Endpoint> wanted_;
};

}  // namespace

void register_ssd_mobilenet_v2(FeatureExtractorRegistry& r) {
  SsdLayout l;
  l.scope = "MobilenetV2";
  l.from_layer = {{"layer_15/expansion_output", 16}, {"layer_19", 32}};
  l.layer_depth = {-1, -1, 512, 256, 256, 128};
  l.fpn_blocks = {{"layer_4", 4}, {"layer_7", 8}, {"layer_14", 16}, {"layer_19", 32}};
  l.fpn_bottom_up = "bottom_up_Conv2d_";
  l.fpn_bottom_up_first = 20;
  l.mnasfpn_maps = {{"layer_7", 8}, {"layer_14", 16}, {"layer_18", 32}};
  r.add({"ssd_mobilenet_v2", l,
         [](const SsdFeatureExtractorOptions& o) { return std::make_unique<MobileNetV2Extractor>(o); },
         /*keras=*/true});
}

}  // namespace orchard::detect::feature_extractors
