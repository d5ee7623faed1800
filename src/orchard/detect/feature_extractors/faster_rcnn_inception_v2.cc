// faster_rcnn_inception_v2 (models/faster_rcnn_inception_v2_feature_extractor.py): TF-Slim's
// inception_v2_base as models::InceptionV2 to Mixed_4e (stride 16, whatever
// first_stage_features_stride says), then Mixed_5a..5c on the crops; slim.conv2d's ReLU and
// initializer with the extractor's batch norm (decay 0.9997, epsilon 0.001, gamma). Its
// preprocess (x * 2 / 255 - 1) is Orchard's input.
#include "orchard/detect/feature_extractors/registry.h"
#include "orchard/models/inception_v2.h"

namespace orchard::detect::feature_extractors {
namespace {

class InceptionV2Extractor : public FasterRcnnFeatureExtractor {
 public:
  explicit InceptionV2Extractor(const FasterRcnnFeatureExtractorOptions&) {
    // Both parts are built up front (before the RPN's layers), as Orchard always built them.
    models::InceptionV2Options io;
    io.relu6 = false;
    io.final_endpoint = "Mixed_4e";
    first_ = models::InceptionV2(io);
    io.first_layer = "Mixed_5a";
    io.final_endpoint = "Mixed_5c";
    second_ = models::InceptionV2(io);
  }
  std::string scope() const override { return "InceptionV2"; }
  std::shared_ptr<torch::nn::Module> build_first_stage() override { return first_.ptr(); }
  std::shared_ptr<torch::nn::Module> build_second_stage() override { return second_.ptr(); }
  int64_t first_stage_channels() const override { return first_->output_channels(); }
  int64_t second_stage_channels() const override { return second_->output_channels(); }
  FeatureMap first_stage_features(const torch::Tensor& images) override {
    return {first_->forward_layers(images), features_stride(), first_stage_channels()};
  }
  torch::Tensor second_stage_features(const torch::Tensor& crops) override { return second_->forward_layers(crops); }
  int64_t features_stride() const override { return 16; }
  std::optional<models::TfName> tf_name(const std::string& name, bool first_stage, bool) const override {
    return (first_stage ? first_ : second_)->tf_name(name, scope());
  }

 private:
  models::InceptionV2 first_{nullptr}, second_{nullptr};  // to Mixed_4e; Mixed_5a..5c
};

}  // namespace

void register_faster_rcnn_inception_v2(FeatureExtractorRegistry& r) {
  r.add(FasterRcnnEntry{"faster_rcnn_inception_v2", [](const FasterRcnnFeatureExtractorOptions& o) {
                          return std::make_unique<InceptionV2Extractor>(o);
                        }});
}

}  // namespace orchard::detect::feature_extractors
