#include "orchard/models/registry.h"

#include <map>

#include "orchard/core/error.h"

namespace orchard::models {
namespace {

using Registry = std::map<std::string, ResNetFactory>;

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
      r[std::string(d.name) + (small ? "_small" : "")] = [d, small](const ModelConfig& c) {
        ResNetOptions o;
        o.block = d.block;
        o.layers = d.layers;
        o.small_input = small;
        o.num_classes = c.num_classes;
        if (c.width > 0) o.base_width = c.width;
        o.zero_init_residual = c.zero_init_residual;
        return o;
      };
    }
  }
  r["resnet_tiny"] = [](const ModelConfig& c) {
    ResNetOptions o;
    o.block = "basic";
    o.layers = {1, 1, 1, 1};
    o.small_input = true;
    o.base_width = c.width > 0 ? c.width : 8;
    o.num_classes = c.num_classes;
    o.zero_init_residual = c.zero_init_residual;
    return o;
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

}  // namespace

std::vector<std::string> model_names() {
  std::vector<std::string> names;
  for (const auto& [name, _] : registry()) names.push_back(name);
  return names;
}

ResNetOptions model_options(const ModelConfig& config) {
  auto it = registry().find(config.arch);
  if (it == registry().end()) {
    std::string known;
    for (const auto& n : model_names()) known += (known.empty() ? "" : ", ") + n;
    throw Error("unknown model '" + config.arch + "'; registered models: " + known);
  }
  if (config.num_classes < 1) throw Error("--num_classes must be positive");
  return it->second(config);
}

ResNet build_model(const ModelConfig& config) { return ResNet(model_options(config)); }

}  // namespace orchard::models
