// faster_rcnn_inception_resnet_v2 (FasterRCNNInceptionResnetV2FeatureExtractor):
// inception_resnet_v2_base as models::InceptionResnetV2 to PreAuxLogits at output stride 16 or 8
// (atrous), aligned feature maps; Mixed_7a .. Conv2d_7b_1x1 on the crops. Its preprocess
// (x * 2 / 255 - 1) is Orchard's input.
#include "orchard/detect/feature_extractors/registry.h"
#include "orchard/models/inception_resnet_v2.h"

namespace orchard::detect::feature_extractors {
namespace {

class InceptionResnetV2Extractor : public FasterRcnnFeatureExtractor {
 public:
  explicit InceptionResnetV2Extractor(const FasterRcnnFeatureExtractorOptions& o) {
    // Both parts are built up front (before the RPN's layers), as Orchard always built them.
    models::InceptionResnetV2Options io;
    io.output_stride = o.features_stride;
    first_ = models::InceptionResnetV2(io);
    io.part = models::InceptionResnetV2Part::kSecondStage;
    second_ = models::InceptionResnetV2(io);
  }
  std::string scope() const override { return "InceptionResnetV2"; }
  std::shared_ptr<torch::nn::Module> build_first_stage() override { return first_.ptr(); }
  std::shared_ptr<torch::nn::Module> build_second_stage() override { return second_.ptr(); }
  int64_t first_stage_channels() const override { return first_->output_channels(); }
  int64_t second_stage_channels() const override { return second_->output_channels(); }
  FeatureMap first_stage_features(const torch::Tensor& images) override {
    return {first_->forward(images), features_stride(), first_stage_channels()};
  }
  torch::Tensor second_stage_features(const torch::Tensor& crops) override { return second_->forward(crops); }
  int64_t features_stride() const override { return first_->options().output_stride; }
  std::optional<models::TfName> tf_name(const std::string& name, bool first_stage, bool classification) const override {
    return (first_stage ? first_ : second_)->tf_name(name, scope(), classification);
  }

 private:
  models::InceptionResnetV2 first_{nullptr}, second_{nullptr};  // to PreAuxLogits; Mixed_7a..
};

}  // namespace

void register_faster_rcnn_inception_resnet_v2(FeatureExtractorRegistry& r) {
  r.add(FasterRcnnEntry{"faster_rcnn_inception_resnet_v2", [](const FasterRcnnFeatureExtractorOptions& o) {
                          return std::make_unique<InceptionResnetV2Extractor>(o);
                        }});
}

}  // namespace orchard::detect::feature_extractors
