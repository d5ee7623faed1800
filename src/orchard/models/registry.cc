#include "orchard/models/registry.h"

#include <algorithm>
#include <map>

#include "orchard/core/error.h"
#include "orchard/models/inception_v3.h"
#include "orchard/models/mobilenet_v2.h"
#include "orchard/models/resnet_ml_images.h"

namespace orchard::models {
namespace {

using ResNetFactory = std::function<ResNetOptions(const ModelConfig&)>;
using ModelFactory = std::function<ImageModel(const ModelConfig&)>;

struct Registry {
  std::map<std::string, ResNetFactory> resnets;
  std::map<std::string, ModelFactory> others;
};

void register_builtin_models(Registry& r) {
  struct Depth {
    const char* name;
    const char* block;
    std::vector<int64_t> layers;
  };
  const Depth depths[] = {{"resnet18", "basic", {2, 2, 2, 2}},
                          {"resnet34", "basic", {3, 4, 6, 3}},
                          {"resnet50", "bottleneck", {3, 4, 6, 3}},
                          {"resnet101", "bottleneck", {3, 4, 23, 3}},
                          {"resnet152", "bottleneck", {3, 8, 36, 3}}};
  for (const auto& d : depths) {
    for (bool small : {false, true}) {
      r.resnets[std::string(d.name) + (small ? "_small" : "")] = [d, small](const ModelConfig& c) {
        ResNetOptions o;
        o.block = d.block;
        o.layers = d.layers;
        o.small_input = small;
        o.num_classes = c.num_classes;
        if (c.width > 0) o.base_width = c.width;
        o.zero_init_residual = c.zero_init_residual;
        o.initialize = c.initialize;
        return o;
      };
    }
  }
  // TensorFlow's ResNets, for their checkpoints (resnet.h's ResNetLayout): TF-Slim's resnet_v1
  // and TF Model Garden's Keras ResNet-50.
  for (const auto& d : depths) {
    if (std::string(d.block) != "bottleneck") continue;
    const std::string depth = std::string(d.name).substr(6);  // "50"
    r.resnets["resnet_v1_" + depth] = [d](const ModelConfig& c) {
      ResNetOptions o;
      o.layers = d.layers;
      o.num_classes = c.num_classes;
      o.initialize = c.initialize;
      o.zero_init_residual = c.zero_init_residual;
      o.layout = ResNetLayout::kSlim;
      o.bn_momentum = 0.003;  // resnet_arg_scope's batch_norm_decay 0.997
      return o;
    };
  }
  r.resnets["resnet50_garden"] = [](const ModelConfig& c) {
    ResNetOptions o;
    o.num_classes = c.num_classes;
    o.initialize = c.initialize;
    o.zero_init_residual = c.zero_init_residual;
    o.layout = ResNetLayout::kKeras;
    return o;
  };
  r.resnets["resnet_tiny"] = [](const ModelConfig& c) {
    ResNetOptions o;
    o.block = "basic";
    o.layers = {1, 1, 1, 1};
    o.small_input = true;
    o.base_width = c.width > 0 ? c.width : 8;
    o.num_classes = c.num_classes;
    o.zero_init_residual = c.zero_init_residual;
    o.initialize = c.initialize;
    return o;
  };
  // TF-Slim's Inception-v3 differs from torchvision's in its branches' average pools alone
  // (padding left out of the border averages) and its batch-norm decay (0.9997).
  for (const bool slim : {false, true}) {
    r.others[slim ? "inception_v3_slim" : "inception_v3"] = [slim](const ModelConfig& c) -> ImageModel {
      if (c.width > 0) throw Error("--width applies to the ResNets, not " + c.arch);
      InceptionV3Options o;
      o.num_classes = c.num_classes;
      o.torchvision_init = c.init == "torchvision";
      o.depth_multiplier = c.depth_multiplier;
      o.tf_avg_pool = slim;
      if (slim) o.batch_norm_momentum = 0.0003;
      return std::make_shared<InceptionV3Impl>(o);
    };
  }
  // Tencent ML-Images' pre-activation ResNets (its published ResNet-101 checkpoints).
  for (const auto& d : depths) {
    if (std::string(d.block) != "bottleneck") continue;
    r.others[std::string(d.name) + "_ml_images"] = [d](const ModelConfig& c) -> ImageModel {
      if (c.width > 0) throw Error("--width does not apply to ML-Images' ResNets");
      MlImagesResNetOptions o;
      o.layers = d.layers;
      o.num_classes = c.num_classes;
      o.initialize = c.initialize;
      return std::make_shared<MlImagesResNetImpl>(o);
    };
  }
  r.others["mobilenet_v2"] = [](const ModelConfig& c) -> ImageModel {
    if (c.width > 0) throw Error("--width applies to the ResNets, not mobilenet_v2");
    MobileNetV2Options o;  // torchvision's: width 1.0, last layer 1280, dropout 0.2
    o.num_classes = c.num_classes;
    return std::make_shared<MobileNetV2Impl>(o);
  };
  // TF-Slim's mobilenet_v2 (its published checkpoints): the same network with the strided
  // convolutions padded as TF's 'SAME', slim.batch_norm's epsilon 0.001 and training_scope's
  // decay 0.997; it takes [-1, 1] inputs (takes_unit_range_inputs).
  r.others["mobilenet_v2_slim"] = [](const ModelConfig& c) -> ImageModel {
    if (c.width > 0) throw Error("--width applies to the ResNets, not mobilenet_v2_slim");
    MobileNetV2Options o;
    o.num_classes = c.num_classes;
    o.tf_same_padding = true;
    o.bn_eps = 1e-3;
    o.bn_momentum = 0.003;
    return std::make_shared<MobileNetV2Impl>(o);
  };
}

const Registry& registry() {
  static const Registry r = [] {
    Registry reg;
    register_builtin_models(reg);
    return reg;
  }();
  return r;
}

[[noreturn]] void unknown(const std::string& arch, const std::string& what) {
  std::string known;
  for (const auto& n : model_names()) known += (known.empty() ? "" : ", ") + n;
  throw Error("unknown " + what + " '" + arch + "'; registered models: " + known);
}

void check(const ModelConfig& config) {
  if (config.num_classes < 1) throw Error("--num_classes must be positive");
  if (!(config.depth_multiplier > 0 && config.depth_multiplier <= 1))
    throw Error("--depth_multiplier must be in (0, 1]");
  if (config.depth_multiplier != 1 && config.arch.rfind("inception_v3", 0) != 0)
    throw Error("--depth_multiplier applies to inception_v3, not " + config.arch);
}

}  // namespace

TfNameMap tf_name_map(const std::string& arch) {
  if (arch == "mobilenet_v2" || arch == "mobilenet_v2_slim")
    return [](const std::string& name) { return mobilenet_v2_tf_name(name); };
  if (arch == "inception_v3" || arch == "inception_v3_slim")
    return [](const std::string& name) { return inception_v3_tf_name(name); };
  if (arch.rfind("resnet_v1_", 0) == 0 && registry().resnets.count(arch))
    return [arch](const std::string& name) { return resnet_v1_slim_tf_name(name, arch); };
  if (arch == "resnet50_garden") return [](const std::string& name) { return resnet_keras_tf_name(name); };
  if (arch.size() > 10 && arch.compare(arch.size() - 10, 10, "_ml_images") == 0 && registry().others.count(arch))
    return [](const std::string& name) { return resnet_ml_images_tf_name(name); };
  return {};
}

bool takes_unit_range_inputs(const std::string& arch) {
  const std::string ml_images = "_ml_images";
  return arch == "inception_v3" || arch == "inception_v3_slim" || arch == "mobilenet_v2_slim" ||
         (arch.size() > ml_images.size() &&
          arch.compare(arch.size() - ml_images.size(), ml_images.size(), ml_images) == 0);
}

std::vector<std::string> model_names() {
  std::vector<std::string> names;
  for (const auto& [name, _] : registry().resnets) names.push_back(name);
  for (const auto& [name, _] : registry().others) names.push_back(name);
  std::sort(names.begin(), names.end());
  return names;
}

ResNetOptions resnet_options(const ModelConfig& config) {
  auto it = registry().resnets.find(config.arch);
  if (it == registry().resnets.end()) unknown(config.arch, "ResNet");
  check(config);
  return it->second(config);
}

ResNet build_resnet(const ModelConfig& config) { return ResNet(resnet_options(config)); }

ImageModel build_model(const ModelConfig& config) {
  if (registry().resnets.count(config.arch)) return build_resnet(config).ptr();
  auto it = registry().others.find(config.arch);
  if (it == registry().others.end()) unknown(config.arch, "model");
  check(config);
  return it->second(config);
}

}  // namespace orchard::models
