// Orchard's models walked by module path (torchvision's names) into a GraphWriter, once for
// every export format: the image classifiers (ResNets in torchvision's layout, MobileNetV2,
// Inception-v3) and the MobileNet bodies the SSD exports share. Batch norms are folded into the
// convolutions before them (inference statistics), as serving graphs do.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/conv.h>

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "orchard/core/error.h"
#include "orchard/export/graph_writer.h"
#include "orchard/layers/fake_quant.h"
#include "orchard/models/image_model.h"
#include "orchard/models/mobilenet_v2.h"

namespace orchard::detect {
class SsdModelImpl;
}

namespace orchard::exporting {

// A model's modules by their dotted path.
class ModuleIndex {
 public:
  explicit ModuleIndex(torch::nn::Module& model) {
    for (const auto& m : model.named_modules()) modules_[m.key()] = m.value();
  }
  template <typename T>
  T& get(const std::string& path) const {
    auto it = modules_.find(path);
    T* t = it == modules_.end() ? nullptr : it->second->as<T>();
    if (!t) throw Error("export: the model has no " + path + " of the expected type");
    return *t;
  }
  bool has(const std::string& path) const { return modules_.count(path) > 0; }

 private:
  std::map<std::string, std::shared_ptr<torch::nn::Module>> modules_;
};

ConvSpec conv_spec(const torch::nn::detail::ConvNdOptions<2>& o);
// The module's own (symmetric, numeric) padding; string padding is an Error naming `name`.
Pads symmetric_pads(const std::string& name, const torch::nn::detail::ConvNdOptions<2>& o);
// TF 'SAME' padding of a window over an input of h x w, as layers::conv2d_tf_same pads: output
// ceil(in / stride), the odd pixel after.
Pads same_pads(int64_t h, int64_t w, const ConvSpec& s);
Pads same_pads(int64_t h, int64_t w, const torch::nn::detail::ConvNdOptions<2>& o);
// The output size of a window over h x w padded by `pads`.
std::pair<int64_t, int64_t> conv_output_size(int64_t h, int64_t w, const ConvSpec& s, const Pads& pads);
std::pair<int64_t, int64_t> conv_output_size(int64_t h, int64_t w, const torch::nn::detail::ConvNdOptions<2>& o,
                                             const Pads& pads);

// A bias-free convolution and the batch norm after it, folded (computed in double):
// W * g / sqrt(v + eps), beta - m * g / sqrt(v + eps). `spec`: instead of the conv's own (its
// stride changed).
std::string conv_bn(GraphWriter& g, const std::string& name, torch::nn::Conv2dImpl& conv,
                    torch::nn::BatchNorm2dImpl& bn, const std::string& x, const Pads& pads,
                    const ConvSpec* spec = nullptr);

// Tells g the range `quantizer` (quantization-aware training) gives tensor x.
void quantization_range(GraphWriter& g, const std::string& x, const layers::FakeQuantImpl& quantizer);

// The layers::ConvNormActivation `name` (conv, BN, ReLU6) on x, an h x w map (TF 'SAME'
// padding depends on it); h and w become the output's size.
std::string conv_bn_relu6(GraphWriter& g, const ModuleIndex& modules, const std::string& name, const std::string& x,
                          int64_t& h, int64_t& w);

// MobileNetV1's features under `prefix` (models::MobileNetV1) on an height x width input: the
// outputs of `layers` (features.N).
std::vector<std::string> mobilenet_v1_features(GraphWriter& g, const ModuleIndex& modules, const std::string& prefix,
                                               const std::string& input, int64_t height, int64_t width,
                                               const std::vector<int64_t>& layers);

// MobileNetV2's features under `prefix` (torchvision's names), as far as the deepest of
// `wanted` (TF-Slim's endpoints); returns their outputs.
std::vector<std::string> mobilenet_v2_features(GraphWriter& g, const ModuleIndex& modules, const std::string& prefix,
                                               const std::string& input, int64_t height, int64_t width,
                                               const std::vector<models::MobileNetV2Endpoint>& wanted);

// An image classifier (eval mode) on `input` (preprocessed, image_size x image_size): its body,
// the global average pool and, unless feature_vector, the classifier. Names the output
// "features" [N, C] or "logits" [N, classes]; returns its width.
int64_t image_model_graph(GraphWriter& g, models::ImageModelImpl& model, const std::string& input, int64_t image_size,
                          bool feature_vector);

// The SSDs with a graph here (ssd_mobilenet_v1/v2, their FPN variants, the convolutional and the
// weight-shared box predictors): an Error naming what is not, `format` ("ONNX", "TensorFlow") in
// the message.
void check_ssd_exportable(detect::SsdModelImpl& model, int64_t height, int64_t width,
                          const std::string& score_converter, const std::string& format);

// The SSD's feature maps on a height x width input, in the anchor generator's order: the
// backbone's endpoints, then the extra layers; with FPN the top-down maps, then the bottom-up
// layers.
std::vector<std::string> ssd_feature_maps(GraphWriter& g, detect::SsdModelImpl& model, const std::string& input,
                                          int64_t height, int64_t width);

// The box predictor's outputs: box encodings [N, A, 4] and class logits [N, A, classes + 1].
struct SsdPredictions {
  std::string box_encodings, class_logits;
  int64_t num_anchors = 0;
};

// The SSD's box predictor on its feature maps, by the OD API's names: the convolutional one
// (BoxPredictor_<i>/BoxEncodingPredictor and /ClassPredictor; SSDLite's depthwise conv + BN +
// ReLU6 first) or the weight-shared one (WeightSharedConvolutionalBoxPredictor[_<i>]/
// {BoxPredictionTower,ClassPredictionTower}/conv2d_<j>, /BoxPredictor, /ClassPredictor), each
// head flattened to [N, h * w * anchors, code] and concatenated over the maps into
// `box_encodings` and `class_logits`.
SsdPredictions ssd_box_predictor(GraphWriter& g, detect::SsdModelImpl& model, const std::vector<std::string>& maps,
                                 int64_t height, int64_t width, const std::string& box_encodings,
                                 const std::string& class_logits);

}  // namespace orchard::exporting
