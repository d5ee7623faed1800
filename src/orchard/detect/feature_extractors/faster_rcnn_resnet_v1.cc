// faster_rcnn_resnet50 / 101 / 152 (models/faster_rcnn_resnet_v1_feature_extractor.py): TF-Slim's
// resnet_v1 as models::ResNet (kSlim) to block3 at first_stage_features_stride 16 or 8 (atrous),
// block4 (stride 1) on the crops; resnet_arg_scope's batch norm (decay 0.997, epsilon 1e-5). The
// ResNets implement R-FCN too.
#include <torch/types.h>

#include "orchard/detect/feature_extractors/registry.h"
#include "orchard/models/resnet.h"

namespace orchard::detect::feature_extractors {
namespace {

class ResNetV1Extractor : public FasterRcnnFeatureExtractor {
 public:
  ResNetV1Extractor(const FasterRcnnFeatureExtractorOptions& o, int depth) : options_(o), depth_(depth) {}
  std::string scope() const override { return "resnet_v1_" + std::to_string(depth_); }
  std::shared_ptr<torch::nn::Module> build_first_stage() override {
    auto first = resnet_options();
    first.num_stages = 3;
    first_ = models::ResNet(first);
    return first_.ptr();
  }
  std::shared_ptr<torch::nn::Module> build_second_stage() override {
    second_ = models::resnet_stage(1024, 512, 3, 1, resnet_options());
    return second_.ptr();
  }
  bool second_stage_after_rpn() const override { return true; }
  int64_t first_stage_channels() const override { return 1024; }
  int64_t second_stage_channels() const override { return 2048; }
  FeatureMap first_stage_features(const torch::Tensor& images) override {
    // The ResNet-v1 extractor's preprocess: RGB in 0..255 minus the ImageNet channel means.
    const auto means = torch::tensor({123.68f, 116.779f, 103.939f}, images.options()).view({1, 3, 1, 1});
    const auto x = (images + 1) * 127.5 - means;
    return {first_->slim_block3(x, options_.features_stride), features_stride(), first_stage_channels()};
  }
  torch::Tensor second_stage_features(const torch::Tensor& crops) override { return second_->forward(crops); }
  int64_t features_stride() const override { return options_.features_stride; }
  bool implements_rfcn() const override { return true; }
  std::optional<models::TfName> tf_name(const std::string& name, bool first_stage, bool) const override {
    // block4 of the second stage: resnet_v1's layer4.
    return models::resnet_v1_slim_tf_name(first_stage ? name : "layer4." + name, scope());
  }

 private:
  models::ResNetOptions resnet_options() const {
    models::ResNetOptions r;
    r.block = "bottleneck";
    r.layers = depth_ == 50    ? std::vector<int64_t>{3, 4, 6, 3}
               : depth_ == 101 ? std::vector<int64_t>{3, 4, 23, 3}
                               : std::vector<int64_t>{3, 8, 36, 3};
    r.layout = models::ResNetLayout::kSlim;
    r.include_top = false;
    r.bn_momentum = 1.0 - 0.997;  // resnet_arg_scope: decay 0.997, epsilon 1e-5
    r.bn_eps = 1e-5;
    r.initialize = options_.initialize;
    // Without a checkpoint, batch norms frozen at their initial statistics do not normalise: each
    // residual branch starts at zero (gamma 0 in its last batch norm) so that the untrained
    // network is its shortcut path and trains stably from scratch (Goyal et al. 2017). A
    // checkpoint overwrites this.
    r.zero_init_residual = true;
    return r;
  }

  FasterRcnnFeatureExtractorOptions options_;
  int depth_;
  models::ResNet first_{nullptr};          // to block3
  torch::nn::Sequential second_{nullptr};  // block4
};

}  // namespace

void register_faster_rcnn_resnet_v1(FeatureExtractorRegistry& r) {
  for (int depth : {50, 101, 152})
    r.add(FasterRcnnEntry{
        "faster_rcnn_resnet" + std::to_string(depth),
        [depth](const FasterRcnnFeatureExtractorOptions& o) { return std::make_unique<ResNetV1Extractor>(o, depth); }});
}

}  // namespace orchard::detect::feature_extractors
