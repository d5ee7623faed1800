// BalancedPositiveNegativeSampler: the counts the OD API's sampler gives (at most
// floor(fraction * batch) positives, negatives filling the rest, never an entry outside the
// indicator), uniform choice, and repeatability under torch::manual_seed.
#include "orchard/detect/ops/sampler.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <vector>

namespace orchard::detect {
namespace {

TEST(BalancedSampler, CountsOfTheOdApiSampler) {
  torch::manual_seed(1);
  // 300 candidates: 40 positives, 200 negatives, 60 outside the indicator (ignored anchors).
  auto labels = torch::zeros({300}, torch::kBool), indicator = torch::ones({300}, torch::kBool);
  labels.narrow(0, 0, 40).fill_(true);
  indicator.narrow(0, 240, 60).fill_(false);
  auto count = [](const at::Tensor& t) { return t.sum().item<int64_t>(); };
  // RPN: 256 at half positive: 40 positives (all there are) + 200 negatives (all there are).
  auto s = balanced_sample(indicator, labels, 256, 0.5f);
  EXPECT_EQ(count(s & labels), 40);
  EXPECT_EQ(count(s & labels.logical_not()), 200);
  EXPECT_EQ(count(s & indicator.logical_not()), 0);
  // Box classifier: 64 at a quarter: 16 positives, 48 negatives.
  s = balanced_sample(indicator, labels, 64, 0.25f);
  EXPECT_EQ(count(s & labels), 16);
  EXPECT_EQ(count(s), 64);
  EXPECT_EQ(count(s & indicator.logical_not()), 0);
  // Few positives: the negatives fill the batch.
  auto few = torch::zeros({300}, torch::kBool);
  few[3] = true;
  s = balanced_sample(indicator, few, 64, 0.5f);
  EXPECT_TRUE(s[3].item<bool>());
  EXPECT_EQ(count(s), 64);
  // floor: 0.3 * 10 = 3 positives.
  EXPECT_EQ(count(balanced_sample(indicator, labels, 10, 0.3f) & labels), 3);
  // Nothing to sample.
  EXPECT_EQ(count(balanced_sample(torch::zeros({5}, torch::kBool), torch::ones({5}, torch::kBool), 4, 0.5f)), 0);
}

TEST(BalancedSampler, UniformAndRepeatable) {
  auto labels = torch::zeros({20}, torch::kBool);
  labels.narrow(0, 0, 10).fill_(true);
  const auto indicator = torch::ones({20}, torch::kBool);
  std::vector<int> hits(20, 0);
  torch::manual_seed(7);
  for (int t = 0; t < 2000; ++t) {
    const auto s = balanced_sample(indicator, labels, 4, 0.5f);  // 2 of 10 positives, 2 of 10 negatives
    for (int i = 0; i < 20; ++i) hits[static_cast<size_t>(i)] += s[i].item<bool>();
  }
  for (int i = 0; i < 20; ++i) {
    EXPECT_GT(hits[static_cast<size_t>(i)], 300) << i;  // 400 expected each
    EXPECT_LT(hits[static_cast<size_t>(i)], 500) << i;
  }
  torch::manual_seed(3);
  const auto a = balanced_sample(indicator, labels, 6, 0.5f);
  torch::manual_seed(3);
  EXPECT_TRUE(a.equal(balanced_sample(indicator, labels, 6, 0.5f)));
}

}  // namespace
}  // namespace orchard::detect
