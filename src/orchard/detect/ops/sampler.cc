#include "orchard/detect/ops/sampler.h"

#include <torch/torch.h>

#include "orchard/core/error.h"

namespace orchard::detect {
namespace {

// minibatch_sampler.subsample_indicator: `count` of the set entries of `candidates`, at random.
at::Tensor subsample(const at::Tensor& candidates, int64_t count) {
  const auto where = candidates.nonzero().view(-1);
  auto picked = torch::zeros_like(candidates);
  if (count <= 0 || where.numel() == 0) return picked;
  const auto order = torch::randperm(where.numel(), torch::TensorOptions().dtype(torch::kLong));
  const auto chosen = where.index_select(0, order.narrow(0, 0, std::min(count, where.numel())));
  picked.index_fill_(0, chosen, true);
  return picked;
}

}  // namespace

at::Tensor balanced_sample(const at::Tensor& indicator, const at::Tensor& labels, int64_t batch_size,
                           float positive_fraction) {
  if (indicator.dim() != 1 || labels.sizes() != indicator.sizes())
    throw Error("balanced_sample: indicator and labels must be [N] alike");
  if (batch_size < 0 || !(positive_fraction >= 0.0f && positive_fraction <= 1.0f))
    throw Error("balanced_sample: batch_size must be >= 0 and positive_fraction in [0, 1]");
  const auto ind = indicator.to(torch::kCPU, torch::kBool);
  const auto lab = labels.to(torch::kCPU, torch::kBool);
  const auto positives =
      subsample(ind & lab, static_cast<int64_t>(static_cast<double>(positive_fraction) * batch_size));
  const int64_t taken = positives.sum().item<int64_t>();
  const auto negatives = subsample(ind & lab.logical_not(), batch_size - taken);
  return (positives | negatives).to(indicator.device());
}

}  // namespace orchard::detect
