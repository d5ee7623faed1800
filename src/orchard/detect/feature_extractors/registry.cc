#include "orchard/detect/feature_extractors/registry.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <stdexcept>

namespace orchard::detect::feature_extractors {

void FeatureExtractorRegistry::add(SsdEntry entry) {
  if (find_ssd(entry.name)) throw std::invalid_argument("SSD feature extractor '" + entry.name + "' registered twice");
  ssd_.push_back(std::move(entry));
}

const SsdEntry* FeatureExtractorRegistry::find_ssd(const std::string& name) const {
  for (const auto& e : ssd_)
    if (e.name == name) return &e;
  return nullptr;
}

const SsdEntry& FeatureExtractorRegistry::ssd(const std::string& name) const {
  const SsdEntry* e = find_ssd(name);
  TORCH_CHECK(e, "SSD feature extractor '", name, "' is not one of ", join_names(ssd_names()));
  return *e;
}

std::vector<std::string> FeatureExtractorRegistry::ssd_names() const {
  std::vector<std::string> names;
  for (const auto& e : ssd_) names.push_back(e.name);
  return names;
}

std::vector<std::string> FeatureExtractorRegistry::ssd_types() const {
  std::vector<std::string> types;
  for (const auto& e : ssd_) {
    const auto with_keras = [&](const std::string& type) {
      types.push_back(type);
      if (e.keras) types.push_back(type + "_keras");
    };
    if (!e.layout.from_layer.empty()) with_keras(e.name);
    if (!e.layout.fpn_blocks.empty()) with_keras(e.name + "_fpn");
    if (e.layout.ppn_map) types.push_back(e.name + "_ppn");
    if (!e.layout.mnasfpn_maps.empty()) types.push_back(e.name + "_mnasfpn");
  }
  return types;
}

void FeatureExtractorRegistry::add(FasterRcnnEntry entry) {
  if (find_faster_rcnn(entry.name))
    throw std::invalid_argument("Faster R-CNN feature extractor '" + entry.name + "' registered twice");
  faster_rcnn_.push_back(std::move(entry));
}

const FasterRcnnEntry* FeatureExtractorRegistry::find_faster_rcnn(const std::string& name) const {
  for (const auto& e : faster_rcnn_)
    if (e.name == name) return &e;
  return nullptr;
}

const FasterRcnnEntry& FeatureExtractorRegistry::faster_rcnn(const std::string& name) const {
  const FasterRcnnEntry* e = find_faster_rcnn(name);
  TORCH_CHECK(e, "Faster R-CNN feature extractor '", name, "' is not one of ", join_names(faster_rcnn_names()));
  return *e;
}

std::vector<std::string> FeatureExtractorRegistry::faster_rcnn_names() const {
  std::vector<std::string> names;
  for (const auto& e : faster_rcnn_) names.push_back(e.name);
  return names;
}

std::string join_names(const std::vector<std::string>& names) {
  std::string s;
  for (size_t i = 0; i < names.size(); ++i) s += (i == 0 ? "" : i + 1 == names.size() ? " and " : ", ") + names[i];
  return s;
}

std::vector<FeatureMap> SsdFeatureExtractor::feature_maps(std::vector<torch::Tensor> tensors) const {
  std::vector<FeatureMap> maps;
  for (size_t i = 0; i < std::min(tensors.size(), channels_.size()); ++i)
    maps.push_back({std::move(tensors[i]), endpoints_[i].stride, channels_[i]});
  return maps;
}

std::vector<std::pair<int64_t, int64_t>> SsdFeatureExtractor::feature_map_sizes(int64_t height, int64_t width) const {
  std::vector<std::pair<int64_t, int64_t>> sizes;
  for (const auto& e : endpoints_)
    sizes.emplace_back((height + e.stride - 1) / e.stride, (width + e.stride - 1) / e.stride);
  return sizes;
}

}  // namespace orchard::detect::feature_extractors
