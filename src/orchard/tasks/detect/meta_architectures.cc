// The meta-architecture registry and the shipped meta-architectures: one line each. A new one
// adds its folder under tasks/detect/ and its line here (docs/ARCHITECTURE.md, "Adding a
// detection meta-architecture").
#include <utility>

#include "orchard/core/error.h"
#include "orchard/proto/object_detection/pipeline.pb.h"
#include "orchard/tasks/detect/meta_architecture.h"
#include "orchard/tasks/detect/faster_rcnn/faster_rcnn.h"
#include "orchard/tasks/detect/ssd/ssd.h"

namespace orchard::tasks {
namespace {

std::vector<MetaArchitectureEntry>& entries() {
  static std::vector<MetaArchitectureEntry> list;
  return list;
}

}  // namespace

void register_builtin_meta_architectures() {
  static bool done = false;
  if (done) return;
  done = true;
  register_meta_architecture(ssd_meta_architecture());
  register_meta_architecture(faster_rcnn_meta_architecture());
}

void register_meta_architecture(MetaArchitectureEntry entry) {
  for (const auto& e : entries())
    if (e.name == entry.name) throw Error("meta-architecture '" + entry.name + "' is registered twice");
  entries().push_back(std::move(entry));
}

const MetaArchitectureEntry& meta_architecture_for(const object_detection::protos::TrainEvalPipelineConfig& pipeline) {
  const auto& model = pipeline.model();
  const auto* oneof = model.GetDescriptor()->FindOneofByName("model");
  const auto* set = model.GetReflection()->GetOneofFieldDescriptor(model, oneof);
  std::string known;
  for (const auto& e : entries()) {
    if (set && e.name == set->name()) return e;
    known += (known.empty() ? "" : " or ") + e.name;
  }
  throw Error(set ? "model." + set->name() + " is not supported; Orchard implements " + known
                  : "model is not set; Orchard implements " + known);
}

}  // namespace orchard::tasks
