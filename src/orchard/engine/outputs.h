// What a task's (and a detection meta-architecture's) forward pass returns: a struct of named,
// typed fields per task, which its loss, metrics and predictions read by name. Kept apart from
// task.h so that headers describing outputs need no libtorch module headers.
#pragma once

#include <stdexcept>

namespace orchard::tasks {

// The base of every task's outputs (ImageModelOutputs, CaptionOutputs, and detection's
// SsdOutputs and FasterRcnnOutputs); it holds nothing itself.
struct Outputs {
  virtual ~Outputs() = default;
};

// `outputs` as the task's own type T; std::invalid_argument when they are another task's or
// meta-architecture's (a programming error).
template <class T>
const T& outputs_as(const Outputs& outputs) {
  const auto* typed = dynamic_cast<const T*>(&outputs);
  if (!typed) throw std::invalid_argument("outputs of another task or meta-architecture");
  return *typed;
}

// Which forward pass: training's (the module in train mode; a task may read the batch's targets,
// e.g. a two-stage detector samples its proposals with them) or evaluation's (inference's outputs,
// plus what the evaluation loss needs of the targets, e.g. Mask R-CNN's mask loss on its
// detections).
enum class Pass { kTrain, kEval };

}  // namespace orchard::tasks
