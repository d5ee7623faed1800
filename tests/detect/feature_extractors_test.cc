// The feature extractor registry: every registered SSD base network builds, and its maps have the
// channels, strides and sizes it declares; an unknown name's error lists the registered ones.
#include "orchard/detect/feature_extractors/registry.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <functional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "orchard/detect/config/config.h"
#include "orchard/detect/meta_arch/faster_rcnn_model.h"
#include "orchard/detect/meta_arch/ssd_model.h"

namespace orchard::detect {
namespace {

namespace fx = feature_extractors;

// Each variant a layout declares, with the base maps it asks for.
std::vector<std::pair<fx::SsdVariant, std::vector<fx::Endpoint>>> variants(const fx::SsdLayout& l) {
  std::vector<std::pair<fx::SsdVariant, std::vector<fx::Endpoint>>> v;
  if (!l.from_layer.empty()) v.emplace_back(fx::SsdVariant::kMultiResolution, l.from_layer);
  if (!l.fpn_blocks.empty()) v.emplace_back(fx::SsdVariant::kFpn, l.fpn_blocks);
  if (l.ppn_map) v.emplace_back(fx::SsdVariant::kPpn, std::vector<fx::Endpoint>{*l.ppn_map});
  if (!l.mnasfpn_maps.empty()) v.emplace_back(fx::SsdVariant::kMnasFpn, l.mnasfpn_maps);
  return v;
}

TEST(FeatureExtractorRegistry, EverySsdExtractorGivesTheMapsItDeclares) {
  torch::manual_seed(0);
  torch::NoGradGuard no_grad;
  const auto& registry = fx::registry();
  ASSERT_GE(registry.ssd_names().size(), 14u);
  for (const auto& name : registry.ssd_names()) {
    const auto& entry = registry.ssd(name);
    EXPECT_FALSE(entry.layout.scope.empty()) << name;
    const auto declared = variants(entry.layout);
    ASSERT_FALSE(declared.empty()) << name;
    for (const auto& [variant, endpoints] : declared) {
      fx::SsdFeatureExtractorOptions o;
      o.type = name;
      o.variant = variant;
      o.endpoints = endpoints;
      o.depth_multiplier = entry.layout.scope.rfind("resnet", 0) == 0 ? 1.0 : 0.5;  // the ResNets: 1 only
      const auto extractor = entry.make(o);
      ASSERT_EQ(extractor->endpoints().size(), endpoints.size()) << name;
      ASSERT_EQ(extractor->channels().size(), endpoints.size()) << name;
      extractor->module()->eval();
      const int64_t side = 128;
      const auto maps = extractor->extract(torch::rand({1, 3, side, side}) * 2 - 1);
      const auto sizes = extractor->feature_map_sizes(side, side);
      ASSERT_EQ(maps.size(), endpoints.size()) << name;
      ASSERT_EQ(sizes.size(), endpoints.size()) << name;
      for (size_t i = 0; i < maps.size(); ++i) {
        const auto& t = maps[i].tensor;
        SCOPED_TRACE(name + " map " + std::to_string(i) + " " + endpoints[i].name);
        EXPECT_EQ(maps[i].stride, endpoints[i].stride);
        EXPECT_EQ(maps[i].channels, extractor->channels()[i]);
        EXPECT_EQ(t.size(1), extractor->channels()[i]);
        EXPECT_EQ(std::make_pair(t.size(2), t.size(3)), sizes[i]);
        // 'SAME' bases: the stride divides a side that is a multiple of it; Inception-v3's 'VALID'
        // layers lose a border, so its maps are smaller.
        if (entry.layout.scope == "InceptionV3")
          EXPECT_LE(t.size(2), side / endpoints[i].stride);
        else
          EXPECT_EQ(t.size(2), side / endpoints[i].stride);
      }
      // Every parameter has a TensorFlow name under the scope.
      for (const auto& p : extractor->module()->named_parameters()) {
        const auto tf = extractor->tf_name(p.key(), "FeatureExtractor/" + entry.layout.scope);
        ASSERT_TRUE(tf.has_value()) << name << " " << p.key();
        EXPECT_EQ(tf->name.rfind("FeatureExtractor/" + entry.layout.scope + "/", 0), 0u) << tf->name;
      }
    }
  }
}

TEST(FeatureExtractorRegistry, UnknownNameListsTheRegisteredOnes) {
  const auto names = fx::registry().ssd_names();
  for (const auto& build : std::vector<std::function<void()>>{
           [] { fx::registry().ssd("ssd_mobilenet_v9"); },
           [] {
             SsdModelOptions o;
             o.feature_extractor = "ssd_mobilenet_v9";
             SsdModel model(o);
           }}) {
    try {
      build();
      ADD_FAILURE() << "no error for ssd_mobilenet_v9";
    } catch (const c10::Error& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find("'ssd_mobilenet_v9' is not one of"), std::string::npos) << message;
      for (const auto& name : names) EXPECT_NE(message.find(name), std::string::npos) << name;
    }
  }
}

TEST(FeatureExtractorRegistry, SsdModelRegistersTheExtractorModuleAsBackbone) {
  SsdModelOptions o;
  o.feature_extractor = "ssd_mobilenet_v1";
  o.depth_multiplier = 0.25;
  SsdModel model(o);
  const auto backbone = model->feature_extractor().module()->named_parameters();
  const auto all = model->named_parameters();
  for (const auto& p : backbone) {
    const auto* q = all.find("backbone." + p.key());
    ASSERT_NE(q, nullptr) << p.key();
    EXPECT_TRUE(q->is_same(p.value()));
  }
  EXPECT_EQ(model->backbone_scope(), "MobilenetV1");
}

// validate_pipeline_config's lists (detect/config/config.h links no libtorch) against the registry, both ways.
TEST(FeatureExtractorRegistry, TheValidatorAcceptsExactlyTheRegisteredExtractors) {
  const auto& registry = fx::registry();
  std::set<std::string> accepted(ssd_feature_extractor_types().begin(), ssd_feature_extractor_types().end());
  for (const auto& type : accepted) {
    std::string base = type;
    const auto strip = [&](const std::string& suffix) {
      const bool has = base.size() > suffix.size() && base.compare(base.size() - suffix.size(), suffix.size(), suffix) == 0;
      if (has) base.resize(base.size() - suffix.size());
      return has;
    };
    strip("_keras");
    const bool fpn = strip("_fpn"), ppn = !fpn && strip("_ppn"), mnasfpn = !fpn && !ppn && strip("_mnasfpn");
    const auto* entry = registry.find_ssd(base);
    ASSERT_NE(entry, nullptr) << type << " is accepted but " << base << " is not registered";
    if (fpn) { EXPECT_FALSE(entry->layout.fpn_blocks.empty()) << type; }
    if (ppn) { EXPECT_TRUE(entry->layout.ppn_map.has_value()) << type; }
    if (mnasfpn) { EXPECT_FALSE(entry->layout.mnasfpn_maps.empty()) << type; }
    if (!fpn && !ppn && !mnasfpn) { EXPECT_FALSE(entry->layout.from_layer.empty()) << type; }
  }
  for (const auto& name : registry.ssd_names()) {
    const auto& l = registry.ssd(name).layout;
    if (!l.from_layer.empty()) { EXPECT_TRUE(accepted.count(name)) << name; }
    if (!l.fpn_blocks.empty()) { EXPECT_TRUE(accepted.count(name + "_fpn")) << name; }
    if (l.ppn_map) { EXPECT_TRUE(accepted.count(name + "_ppn")) << name; }
    if (!l.mnasfpn_maps.empty()) { EXPECT_TRUE(accepted.count(name + "_mnasfpn")) << name; }
  }
  EXPECT_EQ(registry.faster_rcnn_names(), faster_rcnn_feature_extractor_types());
}

TEST(FeatureExtractorRegistry, UnknownFasterRcnnNameListsTheRegisteredOnes) {
  FasterRcnnModelOptions o;
  o.feature_extractor = "faster_rcnn_vgg16";
  try {
    FasterRcnnModel model(o);
    ADD_FAILURE() << "no error for faster_rcnn_vgg16";
  } catch (const c10::Error& e) {
    const std::string message = e.what();
    for (const auto& name : fx::registry().faster_rcnn_names()) EXPECT_NE(message.find(name), std::string::npos) << name;
  }
}

}  // namespace
}  // namespace orchard::detect
