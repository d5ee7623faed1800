// ssd_inception_v2 (SSDInceptionV2FeatureExtractor): TF-Slim's inception_v2_base(final_endpoint=
// 'Mixed_5c', min_depth, depth_multiplier; separable first layer) as models::InceptionV2, under the
// config's conv_hyperparams (the OD API requires override_base_feature_extractor_hyperparams).
#include <algorithm>

#include "orchard/detect/feature_extractors/registry.h"
#include "orchard/models/inception_v2.h"

namespace orchard::detect::feature_extractors {
namespace {

class InceptionV2Extractor : public SsdFeatureExtractor {
 public:
  explicit InceptionV2Extractor(const SsdFeatureExtractorOptions& o) {
    models::InceptionV2Options io;
    io.depth_multiplier = o.depth_multiplier;
    io.min_depth = o.min_depth;
    io.bn_momentum = o.bn_momentum;
    io.bn_eps = o.bn_eps;
    io.init_stddev = o.init_stddev;
    net_ = models::InceptionV2(io);
    endpoints_ = o.endpoints;
    channels_ = {net_->mixed_4c_channels(), net_->mixed_5c_channels()};
    channels_.resize(endpoints_.size());
  }
  std::shared_ptr<torch::nn::Module> module() const override { return net_.ptr(); }
  std::vector<FeatureMap> extract(const torch::Tensor& images) override {
    return feature_maps(net_->forward(images));  // Mixed_4c, Mixed_5c
  }
  std::optional<models::TfName> tf_name(const std::string& name, const std::string& scope) const override {
    return net_->tf_name(name, scope);
  }

 private:
  models::InceptionV2 net_{nullptr};
};

}  // namespace

void register_ssd_inception_v2(FeatureExtractorRegistry& r) {
  SsdLayout l;
  l.scope = "InceptionV2";
  l.from_layer = {{"Mixed_4c", 16}, {"Mixed_5c", 32}};
  l.layer_depth = {-1, -1, 512, 256, 256, 128};
  r.add({"ssd_inception_v2", l,
         [](const SsdFeatureExtractorOptions& o) { return std::make_unique<InceptionV2Extractor>(o); }});
}

}  // namespace orchard::detect::feature_extractors
