// Orchard's ResNet variable names (torchvision's: conv1, bn1, layerL.B.{conv,bn}{1,2,3},
// layerL.B.downsample.{0,1}, fc) -> three TensorFlow ResNet families' names. Names only: the
// three differ from Orchard's ResNet v1.5 in architecture too (stride placement, padding,
// pre-activation); see each map's comment; resnet.h's ResNetLayout builds the first two.
//
// 1. TF-Slim (tensorflow/models research/slim/nets/resnet_v1.py + resnet_utils.py), the
//    published resnet_v1_{50,101,152}_2016_08_28 checkpoints (converted from MSRA's Caffe
//    models; 1000 classes, no background class):
//      <scope>/conv1/weights, <scope>/conv1/BatchNorm/{gamma,beta,moving_mean,moving_variance}
//      <scope>/blockL/unit_U/bottleneck_v1/{shortcut,conv1,conv2,conv3}/weights (+ /BatchNorm/...)
//      <scope>/logits/{weights [1,1,2048,1000], biases}
//    (the checkpoints also hold global_step and <scope>/mean_rgb, which Orchard does not use).
//    resnet_arg_scope: batch_norm scale=True (gamma present), epsilon 1e-5, decay 0.997.
//    Architecture: the stride-2 sits in the LAST unit of blocks 1-3 (conv2, 3x3, explicit
//    symmetric padding, with a parameter-free 1x1/2 max-pool "subsample" shortcut) and block4
//    has stride 1; the projection shortcut of unit_1 is stride 1; pool1 is a 3x3/2 max-pool with
//    SAME padding. Orchard computes the same function only with a "stride in the last block"
//    option and a SAME max-pool (see the report).
// 2. TF Model Garden's Keras ResNet-50 (official/legacy/image_classification/resnet/
//    resnet_model.py, = official/vision/image_classification/resnet/resnet_model.py), the
//    checkpoint the ResNet CTL README links (built with NUM_CLASSES = 1001): Keras layer names
//      conv1/kernel, bn_conv1/{gamma,beta,moving_mean,moving_variance},
//      res{S}{b}_branch2{a,b,c}/kernel, bn{S}{b}_branch2{a,b,c}/..., res{S}{b}_branch1/kernel,
//      bn{S}{b}_branch1/..., fc1000/{kernel [2048, classes], bias}
//    with stage S = L + 1 (2..5) and block letter b = 'a' + B. ResNet v1.5 like Orchard, but its
//    strided 3x3 convolutions and max-pool use TF 'same' padding (asymmetric on even inputs).
// 3. Tencent ML-Images' ResNet-101 (github.com/Tencent/tencent-ml-images models/resnet.py) is
//    a PRE-ACTIVATION network (BN-ReLU before every convolution, a BN on the projection
//    shortcut's input, a final BN, no stem BN or max-pool): no map here, since Orchard's
//    post-activation ResNet cannot compute it (docs/import.md).
#include <cstdio>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>

#include "orchard/models/tf_names.h"

namespace orchard::models {

namespace {

TfName make(std::string name, TfLayout layout = TfLayout::kSame) {
  return TfName{std::move(name), layout, std::nullopt};
}

// A parsed Orchard ResNet variable name.
struct ResNetVar {
  enum Kind { kStemConv, kStemBn, kConv, kBn, kShortcutConv, kShortcutBn, kFc } kind;
  int layer = 0;      // 1..4 (layerL)
  int block = 0;      // 0-based block index in the layer (layerL.B)
  int index = 0;      // 1..3: convK / bnK inside the block
  std::string field;  // weight, bias, running_mean, running_var, num_batches_tracked
};

bool is_bn_field(const std::string& f) {
  return f == "weight" || f == "bias" || f == "running_mean" || f == "running_var" || f == "num_batches_tracked";
}

// Parses torchvision's ResNet names; nullopt for anything else (the caller throws, naming it).
std::optional<ResNetVar> parse(const std::string& name) {
  const size_t dot = name.rfind('.');
  if (dot == std::string::npos || dot == 0 || dot + 1 == name.size()) return std::nullopt;
  const std::string module = name.substr(0, dot);
  ResNetVar v;
  v.field = name.substr(dot + 1);
  if (module == "conv1") {
    if (v.field != "weight") return std::nullopt;
    v.kind = ResNetVar::kStemConv;
    return v;
  }
  if (module == "bn1") {
    if (!is_bn_field(v.field)) return std::nullopt;
    v.kind = ResNetVar::kStemBn;
    return v;
  }
  if (module == "fc") {
    if (v.field != "weight" && v.field != "bias") return std::nullopt;
    v.kind = ResNetVar::kFc;
    return v;
  }
  int consumed = 0;
  if (std::sscanf(module.c_str(), "layer%d.%d%n", &v.layer, &v.block, &consumed) != 2 || v.layer < 1 || v.layer > 4 ||
      v.block < 0)
    return std::nullopt;
  // Reject what sscanf tolerates ("layer01", "layer1. 2", "layer1.+2").
  if (module.compare(0, 7, "layer" + std::to_string(v.layer) + ".") != 0 ||
      module.substr(7, static_cast<size_t>(consumed) - 7) != std::to_string(v.block))
    return std::nullopt;
  const std::string rest = module.substr(static_cast<size_t>(consumed));
  if (rest == ".downsample.0") {
    if (v.field != "weight") return std::nullopt;
    v.kind = ResNetVar::kShortcutConv;
    return v;
  }
  if (rest == ".downsample.1") {
    if (!is_bn_field(v.field)) return std::nullopt;
    v.kind = ResNetVar::kShortcutBn;
    return v;
  }
  if (rest.size() == 6 && (rest.compare(0, 5, ".conv") == 0) && rest[5] >= '1' && rest[5] <= '3') {
    if (v.field != "weight") return std::nullopt;
    v.kind = ResNetVar::kConv;
    v.index = rest[5] - '0';
    return v;
  }
  if (rest.size() == 4 && rest.compare(0, 3, ".bn") == 0 && rest[3] >= '1' && rest[3] <= '3') {
    if (!is_bn_field(v.field)) return std::nullopt;
    v.kind = ResNetVar::kBn;
    v.index = rest[3] - '0';
    return v;
  }
  return std::nullopt;
}

[[noreturn]] void unknown(const char* map, const std::string& name, const std::string& why = "") {
  throw std::invalid_argument(std::string(map) + ": no TensorFlow name for ResNet variable '" + name + "'" +
                              (why.empty() ? "" : " (" + why + ")"));
}

// A Keras BatchNormalization layer's variable (no "/BatchNorm" level, unlike TF-Slim).
std::optional<TfName> keras_batch_norm_name(const std::string& layer, const std::string& field) {
  if (field == "weight") return make(layer + "/gamma");
  if (field == "bias") return make(layer + "/beta");
  if (field == "running_mean") return make(layer + "/moving_mean");
  if (field == "running_var") return make(layer + "/moving_variance");
  return std::nullopt;  // num_batches_tracked (parse() admits nothing else)
}

}  // namespace

// TF-Slim's resnet_v1_{50,101,152} (bottleneck blocks only; slim's resnet_v1 has no basic
// block). `scope`: the model's variable scope, e.g. "resnet_v1_50".
std::optional<TfName> resnet_v1_slim_tf_name(const std::string& orchard_name, const std::string& scope) {
  constexpr const char* kMap = "resnet_v1_slim_tf_name";
  const auto v = parse(orchard_name);
  if (!v) unknown(kMap, orchard_name);
  const std::string unit =
      scope + "/block" + std::to_string(v->layer) + "/unit_" + std::to_string(v->block + 1) + "/bottleneck_v1/";
  switch (v->kind) {
    case ResNetVar::kStemConv: return make(scope + "/conv1/weights", TfLayout::kConv);
    case ResNetVar::kStemBn: return tf_batch_norm_name(scope + "/conv1", v->field, /*scale=*/true);
    case ResNetVar::kConv: return make(unit + "conv" + std::to_string(v->index) + "/weights", TfLayout::kConv);
    case ResNetVar::kBn: return tf_batch_norm_name(unit + "conv" + std::to_string(v->index), v->field, true);
    case ResNetVar::kShortcutConv: return make(unit + "shortcut/weights", TfLayout::kConv);
    case ResNetVar::kShortcutBn: return tf_batch_norm_name(unit + "shortcut", v->field, true);
    case ResNetVar::kFc:
      // A 1x1 convolution with biases and no batch norm: [1, 1, 2048, classes].
      if (v->field == "weight") return make(scope + "/logits/weights", TfLayout::kConvDense);
      return make(scope + "/logits/biases");
  }
  unknown(kMap, orchard_name);
}

// TF Model Garden's Keras ResNet-50 (resnet_model.resnet50): the variables' creation names
// (the TF2 object graph's full_name), e.g. "res2a_branch2a/kernel". Block letters 'a'..'z'.
std::optional<TfName> resnet_keras_tf_name(const std::string& orchard_name) {
  constexpr const char* kMap = "resnet_keras_tf_name";
  const auto v = parse(orchard_name);
  if (!v) unknown(kMap, orchard_name);
  auto bn = [&](const std::string& layer) -> std::optional<TfName> { return keras_batch_norm_name(layer, v->field); };
  if (v->kind == ResNetVar::kStemConv) return make("conv1/kernel", TfLayout::kConv);
  if (v->kind == ResNetVar::kStemBn) return bn("bn_conv1");
  if (v->kind == ResNetVar::kFc) {
    if (v->field == "weight") return make("fc1000/kernel", TfLayout::kDense);
    return make("fc1000/bias");
  }
  if (v->block >= 26) unknown(kMap, orchard_name, "Keras block letters stop at 'z'");
  // res{stage}{letter}_branch..., stage = layer + 1 (conv1 is stage 1).
  const std::string id = std::to_string(v->layer + 1) + static_cast<char>('a' + v->block) + "_branch";
  const std::string branch2 = std::string("2") + static_cast<char>('a' + v->index - 1);  // conv1..3 -> 2a..2c
  switch (v->kind) {
    case ResNetVar::kConv: return make("res" + id + branch2 + "/kernel", TfLayout::kConv);
    case ResNetVar::kBn: return bn("bn" + id + branch2);
    case ResNetVar::kShortcutConv: return make("res" + id + "1/kernel", TfLayout::kConv);
    case ResNetVar::kShortcutBn: return bn("bn" + id + "1");
    default: break;
  }
  unknown(kMap, orchard_name);
}

}  // namespace orchard::models
