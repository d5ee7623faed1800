#include "orchard/engine/task.h"

#include <ATen/ATen.h>

#include <algorithm>

#include "orchard/core/error.h"

namespace orchard::tasks {

void MetricSums::add(const std::string& name, const at::Tensor& value) {
  auto v = value.detach().to(at::kDouble);
  auto it = sums_.find(name);
  if (it == sums_.end()) sums_.emplace(name, v.clone());
  else it->second = it->second + v;
}

void MetricSums::add(const std::string& name, double value) { add(name, at::scalar_tensor(value, at::kDouble)); }

void MetricSums::merge(const MetricSums& other) {
  for (const auto& [k, v] : other.sums_) add(k, v);
  for (const auto& [k, v] : other.rows_) append_rows(k, v);
}

void MetricSums::append_rows(const std::string& name, const at::Tensor& rows) {
  auto v = rows.detach().to(at::kDouble);
  if (v.dim() == 1) v = v.unsqueeze(0);
  auto it = rows_.find(name);
  if (it == rows_.end()) rows_.emplace(name, v.clone());
  else it->second = at::cat({it->second, v});
}

at::Tensor MetricSums::rows(const std::string& name) const {
  auto it = rows_.find(name);
  return it == rows_.end() ? at::Tensor() : it->second;
}

double MetricSums::get(const std::string& name) const {
  auto it = sums_.find(name);
  return it == sums_.end() ? 0.0 : it->second.sum().item<double>();
}

at::Tensor MetricSums::tensor(const std::string& name) const {
  auto it = sums_.find(name);
  return it == sums_.end() ? at::Tensor() : it->second;
}

void add_training_loss(const Loss& loss, MetricSums* sums) {
  sums->add("data_loss", loss.data);
  if (loss.regularizer.defined()) sums->add("regularization_loss", loss.regularizer);
  sums->add("steps", 1.0);
}

double training_loss(const MetricSums& s) {
  const double replicas = std::max(1.0, s.get("replicas"));
  const double steps = std::max(1.0, s.get("steps") / replicas);
  return (s.get("data_loss") + s.get("regularization_loss") / replicas) / steps;
}

double training_data_loss(const MetricSums& s) {
  return s.get("data_loss") * std::max(1.0, s.get("replicas")) / std::max(1.0, s.get("steps"));
}

double training_regularization_loss(const MetricSums& s) {
  const double replicas = std::max(1.0, s.get("replicas"));
  return s.get("regularization_loss") / replicas / std::max(1.0, s.get("steps") / replicas);
}

torch::Tensor Task::inference(const torch::Tensor&) {
  throw Error("task " + name() + " has no single prediction tensor to predict from images alone");
}

std::vector<std::vector<ClassScore>> ranked_class_scores(const torch::Tensor& probabilities, int64_t k,
                                                         double min_probability) {
  k = std::min<int64_t>(k, probabilities.size(1));
  const auto [probs, ids] = probabilities.to(torch::kCPU, torch::kFloat).topk(k, 1);
  const auto p = probs.accessor<float, 2>();
  const auto id = ids.accessor<int64_t, 2>();
  std::vector<std::vector<ClassScore>> out(static_cast<size_t>(probabilities.size(0)));
  for (int64_t i = 0; i < probabilities.size(0); ++i)
    for (int64_t j = 0; j < k && p[i][j] >= min_probability; ++j)
      out[static_cast<size_t>(i)].push_back({id[i][j], p[i][j]});
  return out;
}

}  // namespace orchard::tasks
