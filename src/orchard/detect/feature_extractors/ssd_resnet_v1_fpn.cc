// ssd_resnet50_v1 / ssd_resnet101_v1, FPN only (SSDResnetV1FpnFeatureExtractor, RetinaNet):
// TF-Slim's resnet_v1_50/101 as models::ResNet (kSlim: the stride in each stage's last unit,
// store_non_strided_activations), no classifier, the configs' batch norm
// (override_base_feature_extractor_hyperparams); block1..block4 at levels 2..5, bottom_up_block5,
// bottom_up_block6 above. depth_multiplier 1 only.
#include <c10/util/Exception.h>
#include <torch/types.h>

#include "orchard/detect/feature_extractors/registry.h"
#include "orchard/models/resnet.h"

namespace orchard::detect::feature_extractors {
namespace {

class ResNetV1Extractor : public SsdFeatureExtractor {
 public:
  ResNetV1Extractor(const SsdFeatureExtractorOptions& o, int depth) {
    TORCH_CHECK(o.depth_multiplier == 1.0, "SSD ", o.type, " implements depth_multiplier 1 only, got ",
                o.depth_multiplier);
    models::ResNetOptions ro;
    ro.layers = depth == 50 ? std::vector<int64_t>{3, 4, 6, 3} : std::vector<int64_t>{3, 4, 23, 3};
    ro.layout = models::ResNetLayout::kSlim;
    ro.include_top = false;
    ro.bn_momentum = o.bn_momentum;
    ro.bn_eps = o.bn_eps;
    net_ = models::ResNet(ro);
    endpoints_ = o.endpoints;
    for (const auto& block : endpoints_) {
      stages_.push_back(block.name[5] - '0');  // "blockN"
      channels_.push_back(net_->stage_channels(stages_.back()));
    }
  }
  std::shared_ptr<torch::nn::Module> module() const override { return net_.ptr(); }
  std::vector<FeatureMap> extract(const torch::Tensor& images) override {
    // The ResNets take RGB minus the channel means in [0, 255] (SSDResnetV1FpnFeatureExtractor's
    // preprocess), the input here is scaled to [-1, 1]: (x + 1) * 127.5 - mean.
    const auto& m = kResNetV1ChannelMeans;
    const auto mean = torch::tensor({m[0], m[1], m[2]}, images.options()).view({1, 3, 1, 1});
    auto stages = net_->slim_stage_outputs((images + 1) * 127.5 - mean, stages_.back());
    std::vector<FeatureMap> maps;
    for (size_t i = 0; i < stages_.size(); ++i)
      maps.push_back({stages[static_cast<size_t>(stages_[i] - 1)], endpoints_[i].stride, channels_[i]});
    return maps;
  }
  std::optional<models::TfName> tf_name(const std::string& name, const std::string& scope) const override {
    return models::resnet_v1_slim_tf_name(name, scope);
  }

 private:
  models::ResNet net_{nullptr};
  std::vector<int> stages_;  // the stages (1..4) taken as the FPN's base maps
};

SsdLayout layout(const char* scope) {
  SsdLayout l;
  l.scope = scope;
  l.fpn_blocks = {{"block1", 4}, {"block2", 8}, {"block3", 16}, {"block4", 32}};
  l.fpn_bottom_up = "bottom_up_block";
  l.fpn_bottom_up_first = 5;
  return l;
}

}  // namespace

void register_ssd_resnet_v1_fpn(FeatureExtractorRegistry& r) {
  r.add({"ssd_resnet50_v1", layout("resnet_v1_50"),
         [](const SsdFeatureExtractorOptions& o) { return std::make_unique<ResNetV1Extractor>(o, 50); },
         /*keras=*/true});
  r.add({"ssd_resnet101_v1", layout("resnet_v1_101"),
         [](const SsdFeatureExtractorOptions& o) { return std::make_unique<ResNetV1Extractor>(o, 101); },
         /*keras=*/true});
}

}  // namespace orchard::detect::feature_extractors
