#include "orchard/detect/config/label_map.h"

#include <google/protobuf/text_format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <map>

#include "orchard/core/error.h"
#include "orchard/core/files.h"
#include "orchard/detect/config/config.h"
#include "orchard/proto/object_detection/string_int_label_map.pb.h"

namespace orchard::detect {
namespace {

std::string describe(const LabelMapItem& item) {
  return "item '" + (item.name.empty() ? item.display_name : item.name) + "'";
}

}  // namespace

std::string LabelMap::display(int id) const {
  for (const auto& item : items) {
    if (item.id != id) continue;
    if (!item.display_name.empty()) return item.display_name;
    if (!item.name.empty()) return item.name;
    break;
  }
  return "class " + std::to_string(id);
}

int LabelMap::max_id() const {
  int m = 0;
  for (const auto& item : items) m = std::max(m, item.id);
  return m;
}

LabelMap parse_label_map(const std::string& text, const std::string& source_name) {
  object_detection::protos::StringIntLabelMap proto;
  std::vector<std::string> unknown;
  parse_text_proto(text, source_name, &proto, &unknown);
  if (!unknown.empty()) {
    std::string list;
    for (const auto& u : unknown) list += (list.empty() ? "" : ", ") + u;
    spdlog::warn("{}: fields not in the label map schema (ignored): {}", source_name, list);
  }
  LabelMap map;
  for (const auto& p : proto.item()) {
    if (p.id() == 0 && (p.name() == "background" || p.display_name() == "background")) continue;
    map.items.push_back({p.id(), p.name(), p.display_name()});
  }
  return map;
}

LabelMap load_label_map(const std::string& path) {
  if (is_placeholder_path(path) && !file_exists(path))
    throw Error(placeholder_message("label_map_path", path, "your label map (a StringIntLabelMap .pbtxt)"));
  return parse_label_map(read_file(path), path);
}

std::string label_map_to_text(const LabelMap& map) {
  object_detection::protos::StringIntLabelMap proto;
  for (const auto& item : map.items) {
    auto* p = proto.add_item();
    p->set_id(item.id);
    if (!item.name.empty()) p->set_name(item.name);
    if (!item.display_name.empty()) p->set_display_name(item.display_name);
  }
  std::string out;
  if (!google::protobuf::TextFormat::PrintToString(proto, &out)) throw Error("cannot print the label map");
  return out;
}

void check_label_map(const LabelMap& map, int num_classes, const std::string& source_name) {
  std::map<int, const LabelMapItem*> ids;
  std::map<std::string, const LabelMapItem*> names;
  for (const auto& item : map.items) {
    if (item.id < 1)
      throw Error(source_name + ": " + describe(item) + " has id " + std::to_string(item.id) +
                  ": label map ids start at 1; 0 is reserved for the background");
    if (!ids.emplace(item.id, &item).second)
      throw Error(source_name + ": id " + std::to_string(item.id) + " is used twice (" + describe(*ids[item.id]) +
                  " and " + describe(item) + ")");
    if (!item.name.empty() && !names.emplace(item.name, &item).second)
      throw Error(source_name + ": name '" + item.name + "' is used twice (ids " +
                  std::to_string(names[item.name]->id) + " and " + std::to_string(item.id) + ")");
    if (item.id > num_classes)
      throw Error(source_name + ": " + describe(item) + " has id " + std::to_string(item.id) +
                  " but model.ssd.num_classes is " + std::to_string(num_classes));
  }
}

}  // namespace orchard::detect
