// ssd_inception_v3 (SSDInceptionV3FeatureExtractor): TF-Slim's inception_v3_base(final_endpoint=
// 'Mixed_7c', min_depth, depth_multiplier) as models::InceptionV3 without the classifier, three
// base maps, under the config's conv_hyperparams (the OD API requires
// override_base_feature_extractor_hyperparams): its batch norm (with gamma), ReLU6 and truncated
// normal initializer; TF-Slim's 'SAME' average pools. Its 'VALID' stem and reductions make the map
// sizes other than ceil(side / stride).
#include <torch/nn/modules/conv.h>
#include <torch/utils.h>

#include <algorithm>

#include "orchard/detect/feature_extractors/registry.h"
#include "orchard/layers/init.h"
#include "orchard/models/inception_v3.h"
#include "orchard/models/mobilenet_v2.h"

namespace orchard::detect::feature_extractors {
namespace {

class InceptionV3Extractor : public SsdFeatureExtractor {
 public:
  explicit InceptionV3Extractor(const SsdFeatureExtractorOptions& o) {
    models::InceptionV3Options io;
    io.num_classes = 0;
    io.depth_multiplier = o.depth_multiplier;
    io.min_depth = o.min_depth;
    io.batch_norm_momentum = o.bn_momentum;
    io.bn_eps = o.bn_eps;
    io.relu6 = true;
    io.tf_avg_pool = true;
    net_ = models::InceptionV3(io);
    endpoints_ = o.endpoints;
    const auto c = net_->mixed_5d_6e_7c_channels();
    channels_.assign(c.begin(), c.begin() + static_cast<std::ptrdiff_t>(endpoints_.size()));
    torch::NoGradGuard no_grad;
    for (auto& m : net_->modules(/*include_self=*/false))
      if (auto* conv = m->as<torch::nn::Conv2d>()) layers::truncated_normal_(conv->weight, o.init_stddev);
  }
  std::shared_ptr<torch::nn::Module> module() const override { return net_.ptr(); }
  std::vector<FeatureMap> extract(const torch::Tensor& images) override {
    return feature_maps(net_->mixed_5d_6e_7c(images));
  }
  std::vector<std::pair<int64_t, int64_t>> feature_map_sizes(int64_t height, int64_t width) const override {
    // Mixed_5d, then (x - 3) / 2 + 1 twice (Mixed_6a, Mixed_7a): 300 -> 35, 17, 8.
    height = models::InceptionV3Impl::mixed_5d_size(height);
    width = models::InceptionV3Impl::mixed_5d_size(width);
    std::vector<std::pair<int64_t, int64_t>> sizes{{height, width}};
    for (size_t i = 1; i < endpoints_.size(); ++i) {
      height = (height - 3) / 2 + 1;
      width = (width - 3) / 2 + 1;
      sizes.emplace_back(height, width);
    }
    return sizes;
  }
  std::optional<models::TfName> tf_name(const std::string& name, const std::string& scope) const override {
    // TF-Slim's names under the scope; the config's batch norm has gamma (scale: true).
    auto n = models::inception_v3_tf_name(name);
    if (n) {
      n->name = scope + n->name.substr(n->name.find('/'));
      n->default_value.reset();
    }
    return n;
  }

 private:
  models::InceptionV3 net_{nullptr};
};

}  // namespace

void register_ssd_inception_v3(FeatureExtractorRegistry& r) {
  SsdLayout l;
  l.scope = "InceptionV3";
  l.from_layer = {{"Mixed_5d", 8}, {"Mixed_6e", 16}, {"Mixed_7c", 32}};
  l.layer_depth = {-1, -1, -1, 512, 256, 128};
  r.add({"ssd_inception_v3", l,
         [](const SsdFeatureExtractorOptions& o) { return std::make_unique<InceptionV3Extractor>(o); }});
}

}  // namespace orchard::detect::feature_extractors
