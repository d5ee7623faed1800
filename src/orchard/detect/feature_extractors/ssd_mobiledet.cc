// ssd_mobiledet_cpu|dsp|edgetpu|gpu (SSDMobileDet*FeatureExtractor): models::MobileDet's C4
// (stride 16) and C5 (stride 32) under its own batch norm scope (epsilon 0.01, decay 0.99); the
// config's conv_hyperparams reach only the extra layers. The OD API raises NotImplementedError
// for use_explicit_padding; so does this. No FPN variant.
#include <c10/util/Exception.h>

#include <algorithm>

#include "orchard/detect/feature_extractors/registry.h"
#include "orchard/models/mobiledet.h"

namespace orchard::detect::feature_extractors {
namespace {

class MobileDetExtractor : public SsdFeatureExtractor {
 public:
  explicit MobileDetExtractor(const SsdFeatureExtractorOptions& o) {
    TORCH_CHECK(!o.use_explicit_padding, "SSD ", o.type,
                " does not implement use_explicit_padding (nor does the OD API)");
    models::MobileDetOptions mo;
    mo.variant = o.type.substr(std::string("ssd_mobiledet_").size());
    mo.depth_multiplier = o.depth_multiplier;
    net_ = models::MobileDet(mo);
    endpoints_ = o.endpoints;
    channels_ = {net_->c4_channels(), net_->c5_channels()};
    channels_.resize(endpoints_.size());
  }
  std::shared_ptr<torch::nn::Module> module() const override { return net_.ptr(); }
  std::vector<FeatureMap> extract(const torch::Tensor& images) override {
    return feature_maps(net_->forward(images));  // C4, C5
  }
  std::optional<models::TfName> tf_name(const std::string& name, const std::string& scope) const override {
    return net_->tf_name(name, scope);
  }

 private:
  models::MobileDet net_{nullptr};
};

std::unique_ptr<SsdFeatureExtractor> make(const SsdFeatureExtractorOptions& o) {
  return std::make_unique<MobileDetExtractor>(o);
}

}  // namespace

void register_ssd_mobiledet(FeatureExtractorRegistry& r) {
  const std::pair<const char*, const char*> kVariants[] = {
      {"cpu", "MobileDetCPU"}, {"dsp", "MobileDetDSP"}, {"edgetpu", "MobileDetEdgeTPU"}, {"gpu", "MobileDetGPU"}};
  for (const auto& [variant, scope] : kVariants) {
    SsdLayout l;
    l.scope = scope;
    l.from_layer = {{"C4", 16}, {"C5", 32}};
    l.layer_depth = {-1, -1, 512, 256, 256, 128};
    r.add({std::string("ssd_mobiledet_") + variant, l, make});
  }
}

}  // namespace orchard::detect::feature_extractors
