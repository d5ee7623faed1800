// Feature extractors (SSD's, Faster R-CNN's) by feature_extractor.type. Registration is explicit (builtin.cc, one line
// per base network family), not by static initialisers that static libraries drop; a failed
// lookup lists what is registered.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "orchard/detect/feature_extractors/faster_rcnn_feature_extractor.h"
#include "orchard/detect/feature_extractors/ssd_feature_extractor.h"

namespace orchard::detect::feature_extractors {

// An SSD feature extractor type: its layout (known before building, for the model's checks and
// TF names) and its factory.
struct SsdEntry {
  std::string name;  // feature_extractor.type without _fpn / _ppn / _mnasfpn / _keras
  SsdLayout layout;
  std::function<std::unique_ptr<SsdFeatureExtractor>(const SsdFeatureExtractorOptions&)> make;
  // The OD API also names its plain and FPN variants with "_keras" (its TF2 Keras extractors,
  // which build the same networks): ssd_mobilenet_v2_keras, ssd_resnet50_v1_fpn_keras.
  bool keras = false;
};

// A Faster R-CNN (R-FCN, Mask R-CNN) feature extractor type and its factory.
struct FasterRcnnEntry {
  std::string name;  // feature_extractor.type
  std::function<std::unique_ptr<FasterRcnnFeatureExtractor>(const FasterRcnnFeatureExtractorOptions&)> make;
};

class FeatureExtractorRegistry {
 public:
  // Throws std::invalid_argument for a name registered twice.
  void add(SsdEntry entry);
  void add(FasterRcnnEntry entry);
  // Throws c10::Error (TORCH_CHECK) naming every registered SSD type for an unknown one.
  const SsdEntry& ssd(const std::string& name) const;
  const SsdEntry* find_ssd(const std::string& name) const;
  // The registered SSD types in registration order.
  std::vector<std::string> ssd_names() const;
  // Every model.ssd.feature_extractor.type these build, in registration order: each name with
  // base maps (from_layer), then its _fpn, _ppn and _mnasfpn variants where its layout has them,
  // and the _keras names of the plain and FPN variants where `keras` (the validator's list).
  std::vector<std::string> ssd_types() const;
  // The same for Faster R-CNN's.
  const FasterRcnnEntry& faster_rcnn(const std::string& name) const;
  const FasterRcnnEntry* find_faster_rcnn(const std::string& name) const;
  std::vector<std::string> faster_rcnn_names() const;

 private:
  std::vector<SsdEntry> ssd_;
  std::vector<FasterRcnnEntry> faster_rcnn_;
};

// The registry with every built-in extractor (builtin.cc), built on first use.
const FeatureExtractorRegistry& registry();

// "a, b, c and d" of the names, for messages.
std::string join_names(const std::vector<std::string>& names);

}  // namespace orchard::detect::feature_extractors
