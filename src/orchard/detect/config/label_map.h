// label_map.pbtxt: the TF Object Detection API's class names (StringIntLabelMap, text format).
// Ids start at 1 (0 is the background) and index the model's classes: id k is class logit column
// k of Orchard's detectors (column 0 the background, also under the SSD's
// encode_background_as_zeros, which changes only the loss's targets) and Detections::classes k.
#pragma once

#include <string>
#include <vector>

namespace orchard::detect {

struct LabelMapItem {
  int id = 0;
  std::string name, display_name;
};

struct LabelMap {
  std::vector<LabelMapItem> items;  // in file order

  // display_name, else name, else "class <id>" (also for an id not in the map).
  std::string display(int id) const;
  int max_id() const;  // 0 for an empty map
};

// Throws orchard::Error for a missing file or a syntax error ("<file>:<line>:<column>: <what>");
// a missing file still named by a sample config's PATH_TO_BE_CONFIGURED placeholder is named so.
// Fields outside the schema are skipped with a warning. An item with id 0 named "background"
// (allowed by TF) is dropped; check_label_map rejects any other id < 1.
LabelMap load_label_map(const std::string& path);
LabelMap parse_label_map(const std::string& text, const std::string& source_name);
std::string label_map_to_text(const LabelMap& map);

// Throws orchard::Error naming `source_name` for an id < 1 ("label map ids start at 1; 0 is
// reserved for the background"), a duplicate id or name, or an id above num_classes
// ("... has id 91 but model.ssd.num_classes is 90").
void check_label_map(const LabelMap& map, int num_classes, const std::string& source_name);

}  // namespace orchard::detect
