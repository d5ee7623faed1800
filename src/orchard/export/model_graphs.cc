#include "orchard/export/model_graphs.h"

#include <torch/torch.h>

#include <algorithm>
#include <map>
#include <variant>

#include "orchard/detect/feature_extractors/fpn.h"
#include "orchard/detect/meta_arch/ssd_model.h"
#include "orchard/layers/conv_norm_activation.h"
#include "orchard/models/inception_v3.h"
#include "orchard/models/mobilenet_v1.h"
#include "orchard/models/resnet.h"

namespace orchard::exporting {

ConvSpec conv_spec(const torch::nn::detail::ConvNdOptions<2>& o) {
  ConvSpec s;
  for (int d = 0; d < 2; ++d) {
    s.kernel[d] = (*o.kernel_size())[d];
    s.stride[d] = (*o.stride())[d];
    s.dilation[d] = (*o.dilation())[d];
  }
  s.groups = o.groups();
  return s;
}

Pads symmetric_pads(const std::string& name, const torch::nn::detail::ConvNdOptions<2>& o) {
  // libtorch 1.13's padding is a c10::variant, 2.x's a std::variant: the unqualified call
  // finds c10::get_if by argument-dependent lookup on the former, std::get_if on the latter.
  using std::get_if;
  const auto* pad = get_if<torch::ExpandingArray<2>>(&o.padding());
  if (!pad) throw Error("export: " + name + " uses string padding");
  return {(**pad)[0], (**pad)[1], (**pad)[0], (**pad)[1]};
}

Pads same_pads(int64_t h, int64_t w, const ConvSpec& s) {
  Pads pads{};
  const int64_t in[2] = {h, w};
  for (int d = 0; d < 2; ++d) {
    const int64_t k = (s.kernel[d] - 1) * s.dilation[d] + 1;
    const int64_t total = std::max<int64_t>(((in[d] + s.stride[d] - 1) / s.stride[d] - 1) * s.stride[d] + k - in[d], 0);
    pads[d] = total / 2;
    pads[d + 2] = total - total / 2;
  }
  return pads;
}

Pads same_pads(int64_t h, int64_t w, const torch::nn::detail::ConvNdOptions<2>& o) {
  return same_pads(h, w, conv_spec(o));
}

std::pair<int64_t, int64_t> conv_output_size(int64_t h, int64_t w, const ConvSpec& s, const Pads& pads) {
  return {(h + pads[0] + pads[2] - (s.kernel[0] - 1) * s.dilation[0] - 1) / s.stride[0] + 1,
          (w + pads[1] + pads[3] - (s.kernel[1] - 1) * s.dilation[1] - 1) / s.stride[1] + 1};
}

std::pair<int64_t, int64_t> conv_output_size(int64_t h, int64_t w, const torch::nn::detail::ConvNdOptions<2>& o,
                                             const Pads& pads) {
  return conv_output_size(h, w, conv_spec(o), pads);
}

std::string conv_bn(GraphWriter& g, const std::string& name, torch::nn::Conv2dImpl& c, torch::nn::BatchNorm2dImpl& bn,
                    const std::string& x, const Pads& pads, const ConvSpec* spec) {
  if (c.options.bias()) throw Error("export: " + name + " is not a bias-free convolution");
  // In double, so that the folded weights are the nearest floats to the exact products.
  const auto inv_std = torch::rsqrt(bn.running_var.to(torch::kDouble) + bn.options.eps());
  const auto scale = bn.weight.to(torch::kDouble) * inv_std;
  const auto w = c.weight.to(torch::kDouble) * scale.view({-1, 1, 1, 1});
  const auto b = bn.bias.to(torch::kDouble) - bn.running_mean.to(torch::kDouble) * scale;
  return g.conv(name, spec ? *spec : conv_spec(c.options), w, b, x, pads);
}

std::string conv_bn_relu6(GraphWriter& g, const ModuleIndex& modules, const std::string& name, const std::string& x,
                          int64_t& h, int64_t& w) {
  auto& cna = modules.get<layers::ConvNormActivationImpl>(name);
  if (cna.options.activation() != layers::Activation::kRelu6) throw Error("export: " + name + " is not a ReLU6 layer");
  const auto& o = cna.conv->options;
  const Pads pads = cna.options.tf_same_padding() ? same_pads(h, w, o) : symmetric_pads(name, o);
  std::tie(h, w) = conv_output_size(h, w, o, pads);
  const std::string out = g.relu6(conv_bn(g, name, *cna.conv, *cna.bn, x, pads));
  if (cna.act_quant) quantization_range(g, out, *cna.act_quant);
  return out;
}

void quantization_range(GraphWriter& g, const std::string& x, const layers::FakeQuantImpl& quantizer) {
  const auto r = quantizer.range();
  g.quantization_range(x, r.min, r.max);
}

namespace {

// x's range from the quantizer at `path` where quantization-aware training put one.
std::string quantized(GraphWriter& g, const ModuleIndex& modules, const std::string& path, const std::string& x) {
  if (modules.has(path)) quantization_range(g, x, modules.get<layers::FakeQuantImpl>(path));
  return x;
}

}  // namespace

std::vector<std::string> mobilenet_v1_features(GraphWriter& g, const ModuleIndex& modules, const std::string& prefix,
                                               const std::string& input, int64_t height, int64_t width,
                                               const std::vector<int64_t>& layers) {
  const int64_t deepest = layers.empty() ? 0 : *std::max_element(layers.begin(), layers.end());
  std::vector<std::string> outputs;
  std::string x = input;
  for (int64_t i = 0; i <= deepest; ++i) {  // features.0, then features.N.{0: depthwise, 1: pointwise}
    const std::string layer = prefix + "features." + std::to_string(i);
    if (i == 0) {
      x = conv_bn_relu6(g, modules, layer, x, height, width);
    } else {
      x = conv_bn_relu6(g, modules, layer + ".0", x, height, width);
      x = conv_bn_relu6(g, modules, layer + ".1", x, height, width);
    }
    outputs.push_back(x);
  }
  std::vector<std::string> result;
  for (int64_t l : layers) result.push_back(outputs.at(static_cast<size_t>(l)));
  return result;
}

// features.0 (conv-BN-ReLU6), the inverted residuals (conv.{0: expansion, if any; next:
// depthwise; then the projection conv and its BN}, with the residual where stride 1 keeps the
// channels), the last 1x1 conv-BN-ReLU6.
std::vector<std::string> mobilenet_v2_features(GraphWriter& g, const ModuleIndex& modules, const std::string& prefix,
                                               const std::string& input, int64_t height, int64_t width,
                                               const std::vector<models::MobileNetV2Endpoint>& wanted) {
  int64_t h_in = height, w_in = width;
  auto cbr6 = [&](const std::string& p, const std::string& x) { return conv_bn_relu6(g, modules, p, x, h_in, w_in); };
  int64_t deepest = 0;
  for (const auto& e : wanted) deepest = std::max(deepest, e.index);
  std::map<std::pair<int64_t, bool>, std::string> outputs;
  std::string x = outputs[{0, false}] = cbr6(prefix + "features.0", input);
  for (int64_t i = 1; i <= deepest; ++i) {
    const std::string block = prefix + "features." + std::to_string(i);
    if (!modules.has(block + ".conv")) {  // the last 1x1 conv
      x = outputs[{i, false}] = cbr6(block, x);
      continue;
    }
    const std::string p = block + ".conv.";
    const bool expansion = modules.has(p + "3");  // conv.0 expand, .1 depthwise, .2 project, .3 BN
    std::string h = x;
    int c = 0;
    if (expansion) h = outputs[{i, true}] = cbr6(p + std::to_string(c++), h);
    auto& depthwise = modules.get<layers::ConvNormActivationImpl>(p + std::to_string(c));
    h = cbr6(p + std::to_string(c++), h);
    auto& project = modules.get<torch::nn::Conv2dImpl>(p + std::to_string(c));
    h = conv_bn(g, p + std::to_string(c), project, modules.get<torch::nn::BatchNorm2dImpl>(p + std::to_string(c + 1)),
                h, Pads{});
    if (modules.has(block + ".act_quant"))
      quantization_range(g, h, modules.get<layers::FakeQuantImpl>(block + ".act_quant"));
    const int64_t in = expansion ? modules.get<layers::ConvNormActivationImpl>(p + "0").options.in_channels()
                                 : depthwise.options.in_channels();
    if (depthwise.options.stride() == 1 && in == project.options.out_channels()) {
      h = g.add(p + "add", h, x);
      if (modules.has(block + ".add_quant"))
        quantization_range(g, h, modules.get<layers::FakeQuantImpl>(block + ".add_quant"));
    }
    x = outputs[{i, false}] = h;
  }
  std::vector<std::string> result;
  for (const auto& e : wanted) {
    auto it = outputs.find({e.index, e.expansion_output});
    if (it == outputs.end())
      throw Error("export: MobileNetV2 has no such endpoint (features." + std::to_string(e.index) +
                  (e.expansion_output ? " expansion)" : ")"));
    result.push_back(it->second);
  }
  return result;
}

namespace {

// ResNet body on an h x w input: conv1 .. layer4, returning the last feature map. The three
// layouts (models::ResNetLayout) differ in where blocks stride and how they pad: torchvision's
// symmetric padding; the Model Garden's Keras ResNet-50 with TF 'SAME' strided 3x3 convs and
// stem max-pool; TF-Slim's stride in each stage's last unit, whose shortcut subsamples
// (x[::2, ::2], a 1x1 max pool of stride 2), and the stem max-pool 'SAME'.
// `stage_outputs` (TF-Slim's layout): also each stage's output as models::ResNetImpl::
// slim_stage_outputs gives it (store_non_strided_activations: the last unit at stride 1, its
// output subsampled for the next stage).
std::string resnet_body(GraphWriter& g, models::ResNetImpl& model, const std::string& input, int64_t h, int64_t w,
                        std::vector<std::string>* stage_outputs = nullptr) {
  const auto layout = model.options().layout;
  if (stage_outputs && (layout != models::ResNetLayout::kSlim || model.options().block != "bottleneck"))
    throw Error("export: stage outputs of TF-Slim bottleneck ResNets only");
  const ModuleIndex modules(model);
  // conv `conv` and BN `bn` on x, an h x w map (then the output's size), TF 'SAME' or its own
  // padding; `unstrided`: at stride 1.
  auto cbn = [&](const std::string& conv, const std::string& bn, const std::string& x, int64_t& fh, int64_t& fw,
                 bool same, bool unstrided = false) {
    auto& c = modules.get<torch::nn::Conv2dImpl>(conv);
    ConvSpec spec = conv_spec(c.options);
    if (unstrided) spec.stride = {1, 1};
    const Pads pads = same ? same_pads(fh, fw, spec) : symmetric_pads(conv, c.options);
    std::tie(fh, fw) = conv_output_size(fh, fw, spec, pads);
    return conv_bn(g, conv, c, modules.get<torch::nn::BatchNorm2dImpl>(bn), x, pads, unstrided ? &spec : nullptr);
  };
  std::string x = g.relu(cbn("conv1", "bn1", input, h, w, false));
  if (layout != models::ResNetLayout::kTorchvision || !model.options().small_input) {
    ConvSpec pool;
    pool.kernel = {3, 3};
    pool.stride = {2, 2};
    const Pads pads = layout == models::ResNetLayout::kTorchvision ? Pads{1, 1, 1, 1} : same_pads(h, w, pool);
    x = g.max_pool("maxpool", x, 3, 2, pads, /*nonnegative=*/true);
    std::tie(h, w) = conv_output_size(h, w, pool, pads);
  }
  for (int l = 1; l <= 4; ++l) {
    const std::string layer = "layer" + std::to_string(l) + ".";
    for (int i = 0; modules.has(layer + std::to_string(i)); ++i) {
      const std::string p = layer + std::to_string(i) + ".";
      const bool bottleneck = modules.has(p + "conv3");
      const int64_t stride =
          (*modules.get<torch::nn::Conv2dImpl>(p + (bottleneck ? "conv2" : "conv1")).options.stride())[0];
      const bool last = !modules.has(layer + std::to_string(i + 1));
      const bool unstrided = stage_outputs && last && stride > 1;
      int64_t oh = h, ow = w;
      std::string out = g.relu(cbn(p + "conv1", p + "bn1", x, oh, ow, false));
      out = cbn(p + "conv2", p + "bn2", out, oh, ow, layout == models::ResNetLayout::kKeras && stride > 1, unstrided);
      if (bottleneck) out = cbn(p + "conv3", p + "bn3", g.relu(out), oh, ow, false);
      int64_t sh = h, sw = w;
      const std::string identity = modules.has(p + "downsample")
                                       ? cbn(p + "downsample.0", p + "downsample.1", x, sh, sw, false, unstrided)
                                   : stride > 1 && !unstrided ? g.max_pool(p + "subsample", x, 1, stride, Pads{}, false)
                                                              : x;
      x = g.relu(g.add(p + "add", out, identity));
      h = oh, w = ow;
      if (!stage_outputs || !last) continue;
      stage_outputs->push_back(x);
      if (unstrided) {  // the next stage's input: x[::stride, ::stride]
        ConvSpec subsample;
        subsample.stride = {stride, stride};
        x = g.max_pool(layer + "subsample", x, 1, stride, Pads{}, true);
        std::tie(h, w) = conv_output_size(h, w, subsample, Pads{});
      }
    }
  }
  return x;
}

// Inception-v3 body (torchvision's module names): the stem, Mixed_5b .. Mixed_7c. The blocks'
// classes live in inception_v3.cc; their structure is walked here by name.
class InceptionWriter {
 public:
  InceptionWriter(GraphWriter& g, models::InceptionV3Impl& model)
      : g_(g), modules_(model), exclude_pad_(model.options().tf_avg_pool) {}

  std::string body(const std::string& input) {
    std::string x = chain("", {"Conv2d_1a_3x3", "Conv2d_2a_3x3", "Conv2d_2b_3x3"}, input);
    x = g_.max_pool("maxpool1", x, 3, 2, Pads{}, true);
    x = g_.max_pool("maxpool2", chain("", {"Conv2d_3b_1x1", "Conv2d_4a_3x3"}, x), 3, 2, Pads{}, true);
    for (const char* name : {"Mixed_5b", "Mixed_5c", "Mixed_5d"}) x = block_a(name, x);
    x = block_b("Mixed_6a", x);
    for (const char* name : {"Mixed_6b", "Mixed_6c", "Mixed_6d", "Mixed_6e"}) x = block_c(name, x);
    x = block_d("Mixed_7a", x);
    for (const char* name : {"Mixed_7b", "Mixed_7c"}) x = block_e(name, x);
    return x;
  }

 private:
  // BasicConv2d `name`: conv -> batch norm (folded) -> ReLU.
  std::string basic(const std::string& name, const std::string& x) {
    auto& c = modules_.get<torch::nn::Conv2dImpl>(name + ".conv");
    return g_.relu(conv_bn(g_, name, c, modules_.get<torch::nn::BatchNorm2dImpl>(name + ".bn"), x,
                           symmetric_pads(name, c.options)));
  }
  std::string chain(const std::string& block, const std::vector<std::string>& names, std::string x) {
    for (const auto& n : names) x = basic(block.empty() ? n : block + "." + n, x);
    return x;
  }
  // TF-Slim's pools leave the padding out of the border averages, torchvision's count it.
  std::string avg_pool(const std::string& block, const std::string& x) {
    return g_.avg_pool(block + ".avg_pool", x, 3, 1, !exclude_pad_);
  }
  std::string block_a(const std::string& b, const std::string& x) {
    return g_.concat_channels(b, {chain(b, {"branch1x1"}, x), chain(b, {"branch5x5_1", "branch5x5_2"}, x),
                                  chain(b, {"branch3x3dbl_1", "branch3x3dbl_2", "branch3x3dbl_3"}, x),
                                  chain(b, {"branch_pool"}, avg_pool(b, x))});
  }
  std::string block_b(const std::string& b, const std::string& x) {
    return g_.concat_channels(
        b, {chain(b, {"branch3x3"}, x), chain(b, {"branch3x3dbl_1", "branch3x3dbl_2", "branch3x3dbl_3"}, x),
            g_.max_pool(b + ".max_pool", x, 3, 2, Pads{}, true)});
  }
  std::string block_c(const std::string& b, const std::string& x) {
    return g_.concat_channels(
        b, {chain(b, {"branch1x1"}, x), chain(b, {"branch7x7_1", "branch7x7_2", "branch7x7_3"}, x),
            chain(b, {"branch7x7dbl_1", "branch7x7dbl_2", "branch7x7dbl_3", "branch7x7dbl_4", "branch7x7dbl_5"}, x),
            chain(b, {"branch_pool"}, avg_pool(b, x))});
  }
  std::string block_d(const std::string& b, const std::string& x) {
    return g_.concat_channels(b, {chain(b, {"branch3x3_1", "branch3x3_2"}, x),
                                  chain(b, {"branch7x7x3_1", "branch7x7x3_2", "branch7x7x3_3", "branch7x7x3_4"}, x),
                                  g_.max_pool(b + ".max_pool", x, 3, 2, Pads{}, true)});
  }
  std::string block_e(const std::string& b, const std::string& x) {
    const std::string b3 = chain(b, {"branch3x3_1"}, x);
    const std::string b3dbl = chain(b, {"branch3x3dbl_1", "branch3x3dbl_2"}, x);
    return g_.concat_channels(b, {chain(b, {"branch1x1"}, x), chain(b, {"branch3x3_2a"}, b3),
                                  chain(b, {"branch3x3_2b"}, b3), chain(b, {"branch3x3dbl_3a"}, b3dbl),
                                  chain(b, {"branch3x3dbl_3b"}, b3dbl), chain(b, {"branch_pool"}, avg_pool(b, x))});
  }
  GraphWriter& g_;
  ModuleIndex modules_;
  bool exclude_pad_;
};

}  // namespace

int64_t image_model_graph(GraphWriter& g, models::ImageModelImpl& model, const std::string& input, int64_t image_size,
                          bool feature_vector) {
  std::string x;
  if (auto* resnet = dynamic_cast<models::ResNetImpl*>(&model)) {
    x = resnet_body(g, *resnet, input, image_size, image_size);
  } else if (auto* inception = dynamic_cast<models::InceptionV3Impl*>(&model)) {
    if (inception->options().transform_input) throw Error("export: Inception-v3 with transform_input");
    x = InceptionWriter(g, *inception).body(input);
  } else if (auto* mobilenet = dynamic_cast<models::MobileNetV2Impl*>(&model)) {
    if (!mobilenet->options().include_top) throw Error("export: MobileNetV2 without its classifier");
    const ModuleIndex modules(*mobilenet);
    int64_t last = 1;
    while (modules.has("features." + std::to_string(last + 1))) ++last;
    x = mobilenet_v2_features(g, modules, "", input, image_size, image_size, {models::MobileNetV2Endpoint{last, false}})
            .front();
  } else {
    throw Error("export supports the ResNets, MobileNetV2 and Inception-v3");
  }
  const ModuleIndex modules(model);
  auto& fc = modules.get<torch::nn::LinearImpl>(modules.has("fc") ? "fc" : "classifier.1");
  x = g.global_avg_pool(feature_vector ? "features" : "pooled", x);
  if (feature_vector) return fc.weight.size(1);
  g.dense("logits", x, fc.weight, fc.bias);  // (dropout before fc is the identity at inference)
  return fc.weight.size(0);
}

void check_ssd_exportable(detect::SsdModelImpl& model, int64_t height, int64_t width,
                          const std::string& score_converter, const std::string& format) {
  if (score_converter != "SIGMOID" && score_converter != "SOFTMAX" && score_converter != "IDENTITY_WITH_LOGITS")
    throw Error(format + " export: unknown score_converter '" + score_converter + "'");
  const auto& mo = model.options();
  if (mo.box_code_size != 4) throw Error(format + " export: the box coder needs box_code_size 4");
  if (mo.pad_to_multiple > 1 && (height % mo.pad_to_multiple || width % mo.pad_to_multiple))
    throw Error(format + " export: the input " + std::to_string(height) + "x" + std::to_string(width) +
                " is not a multiple of feature_extractor.pad_to_multiple " + std::to_string(mo.pad_to_multiple));
  const bool resnet = mo.feature_extractor == "ssd_resnet50_v1" || mo.feature_extractor == "ssd_resnet101_v1";
  if (mo.ppn || mo.mnasfpn ||
      (mo.feature_extractor != "ssd_mobilenet_v1" && mo.feature_extractor != "ssd_mobilenet_v2" && !resnet))
    throw Error(format + " export of " + mo.feature_extractor +
                (mo.fpn.enabled ? "_fpn"
                 : mo.ppn       ? "_ppn"
                 : mo.mnasfpn   ? "_mnasfpn"
                                : "") +
                " is not implemented yet (ssd_mobilenet_v1 and ssd_mobilenet_v2, with or without FPN, and the ResNet "
                "FPNs are); "
                "`detect export --format tf` writes the model as a TensorFlow checkpoint");
}

namespace {

// A conv-BN-ReLU6 layer of the FPN or its bottom-up layers: a layers::ConvNormActivation, or
// with `separable` a detect::SeparableConv (depthwise conv, then a 1x1 ConvNormActivation).
std::string fpn_layer(GraphWriter& g, const ModuleIndex& modules, const std::string& name, bool separable,
                      const std::string& x, int64_t& h, int64_t& w) {
  if (!separable) return conv_bn_relu6(g, modules, name, x, h, w);
  const auto& layer = modules.get<detect::SeparableConvImpl>(name);
  auto& depthwise = *layer.depthwise;
  const auto& o = depthwise.options;
  const Pads pads = layer.tf_same ? same_pads(h, w, o) : symmetric_pads(name, o);
  std::tie(h, w) = conv_output_size(h, w, o, pads);
  const std::string d =
      quantized(g, modules, name + ".act_quant",
                g.conv(name + ".0", conv_spec(o), depthwise.weight, torch::zeros({o.out_channels()}), x, pads));
  return conv_bn_relu6(g, modules, name + ".1", d, h, w);
}

}  // namespace

std::vector<std::string> ssd_feature_maps(GraphWriter& g, detect::SsdModelImpl& model, const std::string& input,
                                          int64_t height, int64_t width) {
  const ModuleIndex modules(model);
  const auto& mo = model.options();
  const auto sizes = model.feature_map_sizes(height, width);
  const size_t n = mo.anchors_per_location.size();
  // The backbone's endpoints (named in the base network's own terms, by its TF-Slim scope).
  const std::string& base = model.layout().scope;
  std::vector<int64_t> v1_layers;
  std::vector<models::MobileNetV2Endpoint> v2_endpoints;
  std::vector<std::string> maps;
  if (auto* resnet = dynamic_cast<models::ResNetImpl*>(model.feature_extractor().module().get())) {
    // The ResNets take RGB minus the channel means (the extractor's preprocess; the input here
    // is in [-1, 1]): x * 127.5 + 127.5 - mean, a 1x1 depthwise convolution; then TF-Slim's
    // stage outputs "block1" .. "block4".
    ConvSpec per_channel;
    per_channel.groups = 3;
    const auto& mean = detect::feature_extractors::kResNetV1ChannelMeans;
    const std::string rgb = g.conv("backbone.preprocess", per_channel, torch::full({3, 1, 1, 1}, 127.5),
                                   127.5 - torch::tensor({mean[0], mean[1], mean[2]}), input, Pads{});
    std::vector<std::string> stages;
    resnet_body(g, *resnet, rgb, height, width, &stages);
    for (const auto& e : model.feature_extractor().endpoints()) {
      const int stage = e.name.size() == 6 && e.name.rfind("block", 0) == 0 ? e.name[5] - '0' : 0;
      if (stage < 1 || stage > static_cast<int>(stages.size())) throw Error("export: no ResNet endpoint " + e.name);
      maps.push_back(stages[static_cast<size_t>(stage - 1)]);
    }
  } else {
    for (const auto& e : model.feature_extractor().endpoints()) {
      if (base == "MobilenetV1") v1_layers.push_back(models::parse_mobilenet_v1_endpoint(e.name));
      else v2_endpoints.push_back(models::parse_mobilenet_v2_endpoint(e.name));
    }
    maps = base == "MobilenetV1" ? mobilenet_v1_features(g, modules, "backbone.", input, height, width, v1_layers)
                                 : mobilenet_v2_features(g, modules, "backbone.", input, height, width, v2_endpoints);
  }
  if (mo.fpn.enabled) {
    // The top-down pathway (detect/fpn.h): the coarsest base map's 1x1 projection; each finer
    // level the 2x upsampling of the one above plus its own projection, then smoothed.
    const size_t levels = maps.size();
    auto projection = [&](size_t k) {
      const std::string name = "fpn.projection." + std::to_string(k);
      auto& c = modules.get<torch::nn::Conv2dImpl>(name);
      return quantized(g, modules, "fpn.projection_quant." + std::to_string(k) + ".act_quant",
                       g.conv(name, conv_spec(c.options), c.weight, c.bias, maps[k], Pads{}));
    };
    std::vector<std::string> out(levels);
    std::string top_down = out[levels - 1] = projection(levels - 1);
    for (size_t k = levels - 1; k-- > 0;) {
      const std::string up = g.upsample2x("fpn.upsample." + std::to_string(k), top_down, sizes[k + 1].first,
                                          sizes[k + 1].second, sizes[k].first, sizes[k].second);
      top_down = quantized(g, modules, "fpn.top_down_quant." + std::to_string(k) + ".add_quant",
                           g.add("fpn.add." + std::to_string(k), up, projection(k)));
      auto [h, w] = sizes[k];
      out[k] = fpn_layer(g, modules, "fpn.smoothing." + std::to_string(k), mo.use_depthwise, top_down, h, w);
    }
    maps = out;
    for (size_t j = 0; maps.size() < n; ++j) {
      auto [h, w] = sizes[maps.size() - 1];
      maps.push_back(fpn_layer(g, modules, "bottom_up." + std::to_string(j), mo.use_depthwise, maps.back(), h, w));
    }
    return maps;
  }
  // The extra layers: TF 'SAME' stride-2 convs, padded for the size each one sees.
  for (size_t k = 0; maps.size() < n; ++k) {
    const std::string layer = "extras." + std::to_string(k);
    auto [h, w] = sizes[maps.size() - 1];
    std::string x = maps.back();
    for (int j = 0; modules.has(layer + "." + std::to_string(j)); ++j)
      x = conv_bn_relu6(g, modules, layer + "." + std::to_string(j), x, h, w);
    maps.push_back(x);
  }
  return maps;
}

namespace {

// convolutional_box_predictor: per map a box head and a class head (SSDLite: a depthwise conv +
// BN + ReLU6 first), each quantized where quantization-aware training put its ranges.
void convolutional_box_predictor(GraphWriter& g, detect::SsdModelImpl& model, const std::vector<std::string>& maps,
                                 const std::vector<std::pair<int64_t, int64_t>>& sizes, std::vector<std::string>& boxes,
                                 std::vector<std::string>& classes, int64_t& num_anchors) {
  const ModuleIndex modules(model);
  const auto& mo = model.options();
  for (size_t i = 0; i < maps.size(); ++i) {
    const auto [h, w] = sizes[i];
    const int64_t a = h * w * mo.anchors_per_location[i];
    num_anchors += a;
    const std::string scope = "BoxPredictor_" + std::to_string(i) + "/";
    for (auto [head, predictor, outputs] :
         {std::tuple{"box", "BoxEncodingPredictor", &boxes}, std::tuple{"class", "ClassPredictor", &classes}}) {
      std::string in = maps[i];
      const std::string depthwise = std::string(head) + "_depthwise." + std::to_string(i);
      if (modules.has(depthwise)) {
        auto& cna = modules.get<layers::ConvNormActivationImpl>(depthwise);
        in = g.relu6(
            conv_bn(g, scope + predictor + "_depthwise", *cna.conv, *cna.bn, in, same_pads(h, w, cna.conv->options)));
        if (cna.act_quant) quantization_range(g, in, *cna.act_quant);
      }
      auto& conv = modules.get<torch::nn::Conv2dImpl>(std::string(head) + "_heads." + std::to_string(i));
      const int64_t code = conv.options.out_channels() / mo.anchors_per_location[i];
      const std::string out =
          g.conv(scope + predictor, conv_spec(conv.options), conv.weight, conv.bias, in, same_pads(h, w, conv.options));
      const std::string quantizer = std::string(head) + "_heads_quant." + std::to_string(i) + ".act_quant";
      if (modules.has(quantizer)) quantization_range(g, out, modules.get<layers::FakeQuantImpl>(quantizer));
      outputs->push_back(g.flatten_anchors(scope + (outputs == &boxes ? "Reshape" : "Reshape_1"), out, a, code));
    }
  }
}

// weight_shared_convolutional_box_predictor (detect/heads/weight_shared_predictor.h): the same
// towers and heads on every map, a batch norm per map.
void weight_shared_box_predictor(GraphWriter& g, detect::SsdModelImpl& model, const std::vector<std::string>& maps,
                                 const std::vector<std::pair<int64_t, int64_t>>& sizes, std::vector<std::string>& boxes,
                                 std::vector<std::string>& classes, int64_t& num_anchors) {
  const ModuleIndex modules(model);
  // The predictor's own options: the model fills in its levels, anchors and classes.
  const auto& po = modules.get<detect::WeightSharedPredictorImpl>("predictor").options();
  // A tower conv or head `path` (separable: ".0" depthwise, ".1" the 1x1 conv) named `name`, its
  // last conv folded with `bn` when there is one.
  // `quantizers`: the path of the layer's quantizers on this map (quantization-aware training).
  auto layer = [&](const std::string& path, const std::string& name, const std::string& x, int64_t h, int64_t w,
                   torch::nn::BatchNorm2dImpl* bn, const std::string& quantizers) {
    std::string in = x;
    std::string last = path;
    if (po.use_depthwise) {
      auto& d = modules.get<torch::nn::Conv2dImpl>(path + ".0");
      in = quantized(g, modules, quantizers + ".depthwise.act_quant",
                     g.conv(name + "/separable", conv_spec(d.options), d.weight,
                            torch::zeros({d.options.out_channels()}), in, same_pads(h, w, d.options)));
      last = path + ".1";
    }
    auto& c = modules.get<torch::nn::Conv2dImpl>(last);
    const Pads pads = same_pads(h, w, c.options);
    return bn ? conv_bn(g, name, c, *bn, in, pads) : g.conv(name, conv_spec(c.options), c.weight, c.bias, in, pads);
  };
  for (size_t l = 0; l < maps.size(); ++l) {
    const auto [h, w] = sizes[l];
    const int64_t a = h * w * po.anchors_per_location;
    num_anchors += a;
    const std::string scope =
        "WeightSharedConvolutionalBoxPredictor" + (l == 0 ? std::string() : "_" + std::to_string(l)) + "/";
    auto tower = [&](const std::string& path, const std::string& tf_scope) {
      std::string x = maps[l];
      for (int64_t i = 0; i < po.num_layers_before_predictor; ++i) {
        const std::string conv = "predictor." + path + "." + std::to_string(i);
        auto* bn = po.apply_batch_norm ? &modules.get<torch::nn::BatchNorm2dImpl>(
                                             "predictor." + path + "_bn." + std::to_string(i) + "." + std::to_string(l))
                                       : nullptr;
        const std::string q = "predictor." + path + "_quant." + std::to_string(i) + "." + std::to_string(l);
        x = quantized(g, modules, q + ".act_quant",
                      g.relu6(layer(conv, scope + tf_scope + "/conv2d_" + std::to_string(i), x, h, w, bn, q)));
      }
      return x;
    };
    const std::string box_features =
        tower("box_tower", po.share_prediction_tower ? "PredictionTower" : "BoxPredictionTower");
    const std::string class_features =
        po.share_prediction_tower ? box_features : tower("class_tower", "ClassPredictionTower");
    auto head = [&](const std::string& kind, const std::string& tf_name, const std::string& features) {
      const std::string q = "predictor." + kind + "_head_quant." + std::to_string(l);
      return quantized(g, modules, q + ".act_quant",
                       layer("predictor." + kind + "_head", scope + tf_name, features, h, w, nullptr, q));
    };
    const std::string box = head("box", "BoxPredictor", box_features);
    const std::string cls = head("class", "ClassPredictor", class_features);
    boxes.push_back(g.flatten_anchors(scope + "Reshape", box, a, po.box_code_size));
    classes.push_back(g.flatten_anchors(scope + "Reshape_1", cls, a, po.num_class_slots));
  }
}

}  // namespace

SsdPredictions ssd_box_predictor(GraphWriter& g, detect::SsdModelImpl& model, const std::vector<std::string>& maps,
                                 int64_t height, int64_t width, const std::string& box_encodings,
                                 const std::string& class_logits) {
  const auto sizes = model.feature_map_sizes(height, width);
  SsdPredictions p;
  std::vector<std::string> boxes, classes;
  if (model.options().weight_shared) weight_shared_box_predictor(g, model, maps, sizes, boxes, classes, p.num_anchors);
  else convolutional_box_predictor(g, model, maps, sizes, boxes, classes, p.num_anchors);
  p.box_encodings = g.concat_anchors(box_encodings, boxes);
  p.class_logits = g.concat_anchors(class_logits, classes);
  return p;
}

}  // namespace orchard::exporting
