#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include "orchard/engine/clock.h"
#include "orchard/engine/hooks/hooks.h"
#include "orchard/train/distributed.h"

namespace orchard::engine {

DataParallelHook::DataParallelHook(train::Distributed& distributed, tasks::Task& task)
    : dist_(distributed), task_(task) {}

DataParallelHook::~DataParallelHook() = default;

void DataParallelHook::before_train(TrainState&) {
  auto module = task_.module();
  dist_.broadcast(*module);  // every replica starts from rank 0's variables
  std::vector<at::Tensor> params;
  for (auto& p : module->parameters())
    if (p.requires_grad()) params.push_back(p);
  reducer_ = dist_.gradient_reducer(params);
  started_ = monotonic_seconds();
}

void DataParallelHook::before_backward(TrainState&, at::Tensor&) { reducer_->start(); }

bool DataParallelHook::after_backward(TrainState&) {
  reducer_->finish();
  return true;
}

void DataParallelHook::after_train(TrainState&) {
  if (!reducer_ || reducer_->steps() == 0) return;
  spdlog::info(
      "gradient all-reduce: {} buckets, {:.2f} ms per step not hidden by the backward pass ({:.1f}% of "
      "the step)",
      reducer_->num_buckets(), 1000 * reducer_->finish_seconds() / reducer_->steps(),
      100 * reducer_->finish_seconds() / std::max(1e-9, monotonic_seconds() - started_));
}

}  // namespace orchard::engine
