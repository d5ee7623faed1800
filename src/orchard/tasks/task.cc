#include "orchard/tasks/task.h"

#include <ATen/ATen.h>

namespace orchard::tasks {

void MetricSums::add(const std::string& name, const at::Tensor& value) {
  auto v = value.detach().to(at::kDouble);
  auto it = sums_.find(name);
  if (it == sums_.end())
    sums_.emplace(name, v.clone());
  else
    it->second = it->second + v;
}

void MetricSums::add(const std::string& name, double value) { add(name, at::scalar_tensor(value, at::kDouble)); }

void MetricSums::merge(const MetricSums& other) {
  for (const auto& [k, v] : other.sums_) add(k, v);
}

double MetricSums::get(const std::string& name) const {
  auto it = sums_.find(name);
  return it == sums_.end() ? 0.0 : it->second.sum().item<double>();
}

at::Tensor MetricSums::tensor(const std::string& name) const {
  auto it = sums_.find(name);
  return it == sums_.end() ? at::Tensor() : it->second;
}

}  // namespace orchard::tasks
