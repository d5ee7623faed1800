// ssd_mobilenet_v3_large|small (SSDMobileNetV3{Large,Small}FeatureExtractor, V3_*_DETECTION) and
// ssd_mobilenet_edgetpu (SSDMobileNetEdgeTPUFeatureExtractor, V3_EDGETPU to layer_23):
// mobilenet_v3.mobilenet_base(final_endpoint = the last base map) as models::MobileNetV3 under
// training_scope(bn_decay=0.9997) and min_depth from the config (whose conv_hyperparams give the
// batch norm; the conv_defs keep their activations). No FPN variant.
#include "orchard/detect/feature_extractors/registry.h"
#include "orchard/models/mobilenet_v3.h"

namespace orchard::detect::feature_extractors {
namespace {

class MobileNetV3Extractor : public SsdFeatureExtractor {
 public:
  explicit MobileNetV3Extractor(const SsdFeatureExtractorOptions& o) {
    models::MobileNetV3Options bo;
    bo.small = o.type == "ssd_mobilenet_v3_small";
    bo.edgetpu = o.type == "ssd_mobilenet_edgetpu";
    bo.detection = true;
    bo.depth_multiplier = o.depth_multiplier;
    bo.min_depth = o.min_depth;
    bo.bn_momentum = o.bn_momentum;
    bo.bn_eps = o.bn_eps;
    bo.tf_same_padding = !o.use_explicit_padding;
    net_ = models::MobileNetV3(bo);
    endpoints_ = o.endpoints;
    for (const auto& e : endpoints_) {
      wanted_.push_back(net_->parse_endpoint(e.name));
      channels_.push_back(net_->endpoint_channels(wanted_.back()));
    }
  }
  std::shared_ptr<torch::nn::Module> module() const override { return net_.ptr(); }
  std::vector<FeatureMap> extract(const torch::Tensor& images) override {
    return feature_maps(net_->endpoints(images, wanted_));
  }
  std::optional<models::TfName> tf_name(const std::string& name, const std::string& scope) const override {
    return net_->tf_name(name, scope);
  }

 private:
  models::MobileNetV3 net_{nullptr};
  std::vector<models::MobileNetV3Endpoint> wanted_;
};

std::unique_ptr<SsdFeatureExtractor> make(const SsdFeatureExtractorOptions& o) {
  return std::make_unique<MobileNetV3Extractor>(o);
}

SsdLayout layout(const char* scope, const char* expansion, const char* last) {
  SsdLayout l;
  l.scope = scope;
  l.from_layer = {{expansion, 16}, {last, 32}};
  l.layer_depth = {-1, -1, 512, 256, 256, 128};
  return l;
}

}  // namespace

void register_ssd_mobilenet_v3(FeatureExtractorRegistry& r) {
  r.add({"ssd_mobilenet_v3_large", layout("MobilenetV3", "layer_14/expansion_output", "layer_17"), make});
  r.add({"ssd_mobilenet_v3_small", layout("MobilenetV3", "layer_10/expansion_output", "layer_13"), make});
  r.add({"ssd_mobilenet_edgetpu", layout("MobilenetEdgeTPU", "layer_18/expansion_output", "layer_23"), make});
}

}  // namespace orchard::detect::feature_extractors
