// The feature extractor registry: every registered SSD base network builds, and its maps have the
// channels, strides and sizes it declares; an unknown name's error lists the registered ones.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <functional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "detect/extractor_types.h"
#include "orchard/detect/config/config.h"
#include "orchard/detect/feature_extractors/registry.h"
#include "orchard/detect/meta_arch/faster_rcnn_model.h"
#include "orchard/detect/meta_arch/meta_architecture.h"
#include "orchard/detect/meta_arch/ssd_model.h"
#include "orchard/proto/object_detection/pipeline.pb.h"

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
        if (entry.layout.scope == "InceptionV3") EXPECT_LE(t.size(2), side / endpoints[i].stride);
        else EXPECT_EQ(t.size(2), side / endpoints[i].stride);
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
  for (const auto& build : std::vector<std::function<void()>>{[] { fx::registry().ssd("ssd_mobilenet_v9"); },
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

// The types the meta-architectures' validation accepts come from the registry: each registered
// name with base maps, its _fpn / _ppn / _mnasfpn variants where the layout has them, and the
// _keras names; the config-only tests' lists (detect/extractor_types.h) are the same.
TEST(FeatureExtractorRegistry, TheValidatorAcceptsExactlyTheRegisteredExtractors) {
  const auto& registry = fx::registry();
  const auto types = registry.ssd_types();
  EXPECT_EQ(std::set<std::string>(types.begin(), types.end()),
            std::set<std::string>(registered::kSsdTypes.begin(), registered::kSsdTypes.end()));
  EXPECT_EQ(std::set<std::string>(types.begin(), types.end()).size(), types.size()) << "a type listed twice";
  for (const auto& name : registry.ssd_names()) {
    const auto& entry = registry.ssd(name);
    const auto has = [&](const std::string& type) { return std::count(types.begin(), types.end(), type) == 1; };
    EXPECT_EQ(has(name), !entry.layout.from_layer.empty()) << name;
    EXPECT_EQ(has(name + "_fpn"), !entry.layout.fpn_blocks.empty()) << name;
    EXPECT_EQ(has(name + "_ppn"), entry.layout.ppn_map.has_value()) << name;
    EXPECT_EQ(has(name + "_mnasfpn"), !entry.layout.mnasfpn_maps.empty()) << name;
    EXPECT_EQ(has(name + "_keras"), entry.keras && !entry.layout.from_layer.empty()) << name;
  }
  EXPECT_EQ(registry.faster_rcnn_names(), registered::kFasterRcnnTypes);

  // The registered meta-architectures validate with these lists: an unknown type is named with them.
  object_detection::protos::TrainEvalPipelineConfig pipeline;
  pipeline.mutable_model()->mutable_ssd()->mutable_feature_extractor()->set_type("ssd_mobilenet_v9");
  std::vector<std::string> problems;
  tasks::register_builtin_meta_architectures();
  tasks::meta_architecture_for(pipeline).validate(pipeline, &problems);
  std::string all;
  for (const auto& p : problems) all += p + "\n";
  EXPECT_NE(all.find("'ssd_mobilenet_v9' is not supported; Orchard implements " + fx::join_names(types)),
            std::string::npos)
      << all;
}

TEST(FeatureExtractorRegistry, UnknownFasterRcnnNameListsTheRegisteredOnes) {
  FasterRcnnModelOptions o;
  o.feature_extractor = "faster_rcnn_vgg16";
  try {
    FasterRcnnModel model(o);
    ADD_FAILURE() << "no error for faster_rcnn_vgg16";
  } catch (const c10::Error& e) {
    const std::string message = e.what();
    for (const auto& name : fx::registry().faster_rcnn_names())
      EXPECT_NE(message.find(name), std::string::npos) << name;
  }
}

}  // namespace
}  // namespace orchard::detect
