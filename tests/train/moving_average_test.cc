#include "orchard/train/moving_average.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>

#include "core/test_util.h"
#include "orchard/core/error.h"
#include "orchard/train/checkpoint.h"

namespace orchard::train {
namespace {

// A parameter, a float buffer and an integer buffer: what batch norm has.
struct Tiny : torch::nn::Module {
  Tiny() {
    w = register_parameter("w", torch::tensor({1.0f, 2.0f}));
    stat = register_buffer("stat", torch::tensor({10.0f}));
    count = register_buffer("count", torch::tensor(int64_t{0}));
  }
  void set(float w0, float w1, float s, int64_t c) {
    torch::NoGradGuard no_grad;
    w.copy_(torch::tensor({w0, w1}));
    stat.fill_(s);
    count.fill_(c);
  }
  torch::Tensor w, stat, count;
};

TEST(MovingAverage, DecayRampsUpAsTensorFlowsNumUpdates) {
  Tiny m;
  MovingAverage avg(m, 0.99);
  EXPECT_DOUBLE_EQ(avg.decay_at(0), 0.1);
  EXPECT_DOUBLE_EQ(avg.decay_at(1), 2.0 / 11);
  EXPECT_DOUBLE_EQ(avg.decay_at(100), 101.0 / 110);
  EXPECT_DOUBLE_EQ(avg.decay_at(1000000), 0.99);
  EXPECT_THROW(MovingAverage(m, 1.0), Error);
  EXPECT_THROW(MovingAverage(m, 0.0), Error);
}

TEST(MovingAverage, UpdateSwapAndIntegerBuffers) {
  Tiny m;
  MovingAverage avg(m, 0.5);  // starts at w = (1, 2), stat = 10
  m.set(3, 6, 20, 1);
  avg.update(1);  // decay min(0.5, 2/11)
  const double d1 = 2.0 / 11;
  m.set(5, 10, 30, 2);
  avg.update(1000);  // decay 0.5
  const double w0 = 0.5 * (d1 * 1 + (1 - d1) * 3) + 0.5 * 5;
  const double w1 = 0.5 * (d1 * 2 + (1 - d1) * 6) + 0.5 * 10;
  const double s = 0.5 * (d1 * 10 + (1 - d1) * 20) + 0.5 * 30;

  const auto named = avg.averages();
  ASSERT_EQ(named.size(), 3u);
  EXPECT_EQ(named[0].first, "w");
  EXPECT_NEAR(named[0].second[0].item<double>(), w0, 1e-6);
  EXPECT_NEAR(named[0].second[1].item<double>(), w1, 1e-6);
  EXPECT_EQ(named[1].first, "stat");
  EXPECT_NEAR(named[1].second.item<double>(), s, 1e-5);
  EXPECT_EQ(named[2].second.item<int64_t>(), 2);  // integer buffers: the module's own

  {
    AveragedWeightsGuard in(&avg);
    EXPECT_NEAR(m.w[0].item<double>(), w0, 1e-6);
    EXPECT_NEAR(m.stat.item<double>(), s, 1e-5);
    EXPECT_EQ(m.count.item<int64_t>(), 2);
  }
  EXPECT_FLOAT_EQ(m.w[0].item<float>(), 5);  // swapped back
  EXPECT_FLOAT_EQ(m.w[1].item<float>(), 10);
  EXPECT_FLOAT_EQ(m.stat.item<float>(), 30);
  EXPECT_NEAR(avg.averages()[0].second[0].item<double>(), w0, 1e-6);

  avg.reset();
  EXPECT_FLOAT_EQ(avg.averages()[0].second[0].item<float>(), 5);
}

// A checkpoint of a run with averages: "model" is the averages (what eval, predict and
// fine-tuning restore), "training_weights" what a resumed run continues from, with its averages.
TEST(MovingAverage, CheckpointKeepsBothAndResumeRestoresBoth) {
  test::TempDir dir;
  Tiny a;
  MovingAverage avg_a(a, 0.9);
  a.set(3, 4, 5, 7);
  avg_a.update(100);  // 0.9 * (1, 2, 10) + 0.1 * (3, 4, 5)
  CheckpointManager manager(dir.str());
  const std::string path = manager.save(100, a, nullptr, {{"model", "tiny"}}, &avg_a);

  Tiny inference;
  auto [step, meta] = restore_checkpoint(path, inference, nullptr, RestoreOptions{});
  EXPECT_EQ(step, 100);
  EXPECT_EQ(meta.at("moving_average_decay"), std::to_string(0.9));
  EXPECT_NEAR(inference.w[0].item<double>(), 1.2, 1e-6);
  EXPECT_NEAR(inference.w[1].item<double>(), 2.2, 1e-6);
  EXPECT_NEAR(inference.stat.item<double>(), 9.5, 1e-5);
  EXPECT_EQ(inference.count.item<int64_t>(), 7);

  Tiny resumed;
  MovingAverage avg_b(resumed, 0.9);
  RestoreOptions ro;
  ro.training_weights = true;
  ro.average = &avg_b;
  restore_checkpoint(path, resumed, nullptr, ro);
  EXPECT_FLOAT_EQ(resumed.w[0].item<float>(), 3);
  EXPECT_FLOAT_EQ(resumed.stat.item<float>(), 5);
  EXPECT_NEAR(avg_b.averages()[0].second[1].item<double>(), 2.2, 1e-6);
  EXPECT_NEAR(avg_b.averages()[1].second.item<double>(), 9.5, 1e-5);

  // A checkpoint without averages: resuming with one starts it at the weights.
  const std::string plain = manager.save(200, a, nullptr, {{"model", "tiny"}});
  Tiny c;
  MovingAverage avg_c(c, 0.9);
  ro.average = &avg_c;
  restore_checkpoint(plain, c, nullptr, ro);
  EXPECT_FLOAT_EQ(avg_c.averages()[0].second[0].item<float>(), 3);
  EXPECT_FLOAT_EQ(c.w[0].item<float>(), 3);
}

}  // namespace
}  // namespace orchard::train
