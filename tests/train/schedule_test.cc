// The seed's PiecewiseConstantDecayWithWarmup: values worked out by hand.
#include "orchard/train/schedule.h"

#include <gtest/gtest.h>

#include "orchard/core/error.h"

namespace orchard::train {
namespace {

// batch 512 -> rescaled 0.1 * 512 / 256 = 0.2; 10 steps per epoch -> warmup 50 steps,
// boundaries at steps 300, 600, 800.
PiecewiseWarmupConfig config() {
  PiecewiseWarmupConfig c;
  c.base_lr = 0.1;
  c.batch_size = 512;
  c.steps_per_epoch = 10;
  c.warmup_epochs = 5;
  c.boundary_epochs = {30, 60, 80};
  c.multipliers = {1.0, 0.1, 0.01, 0.001};
  return c;
}

TEST(PiecewiseConstantWithWarmup, LinearWarmup) {
  auto lr = piecewise_constant_with_warmup(config());
  EXPECT_DOUBLE_EQ(lr(0), 0.0);
  EXPECT_DOUBLE_EQ(lr(1), 0.2 / 50);
  EXPECT_DOUBLE_EQ(lr(25), 0.1);
  EXPECT_DOUBLE_EQ(lr(49), 0.2 * 49 / 50);
  EXPECT_DOUBLE_EQ(lr(50), 0.2);  // warm-up over: the first constant
  EXPECT_DOUBLE_EQ(lr(51), 0.2);
}

TEST(PiecewiseConstantWithWarmup, BoundariesTakeTheOldValueAtTheBoundary) {
  auto lr = piecewise_constant_with_warmup(config());
  // tf.compat.v1.train.piecewise_constant: x <= b[0] -> v[0], b[0] < x <= b[1] -> v[1], ...
  EXPECT_DOUBLE_EQ(lr(299), 0.2);
  EXPECT_DOUBLE_EQ(lr(300), 0.2);
  EXPECT_DOUBLE_EQ(lr(301), 0.02);
  EXPECT_DOUBLE_EQ(lr(600), 0.02);
  EXPECT_DOUBLE_EQ(lr(601), 0.002);
  EXPECT_DOUBLE_EQ(lr(800), 0.002);
  EXPECT_DOUBLE_EQ(lr(801), 0.0002);
  EXPECT_DOUBLE_EQ(lr(1000000), 0.0002);
}

TEST(PiecewiseConstantWithWarmup, BatchSizeScaling) {
  auto c = config();
  for (int64_t bs : {32, 256, 1024}) {
    c.batch_size = bs;
    auto lr = piecewise_constant_with_warmup(c);
    EXPECT_DOUBLE_EQ(lr(100), 0.1 * static_cast<double>(bs) / 256) << bs;
    EXPECT_DOUBLE_EQ(lr(25), 0.5 * 0.1 * static_cast<double>(bs) / 256) << bs;
  }
  c.batch_size = 256;
  c.base_lr = 0.4;
  EXPECT_DOUBLE_EQ(piecewise_constant_with_warmup(c)(100), 0.4);
}

TEST(PiecewiseConstantWithWarmup, FractionalEpochsAndNoWarmup) {
  auto c = config();
  c.warmup_epochs = 0;
  c.boundary_epochs = {0.5};
  c.multipliers = {1.0, 0.5};
  auto lr = piecewise_constant_with_warmup(c);
  EXPECT_DOUBLE_EQ(lr(0), 0.2);
  EXPECT_DOUBLE_EQ(lr(5), 0.2);
  EXPECT_DOUBLE_EQ(lr(6), 0.1);
}

TEST(PiecewiseConstantWithWarmup, BadConfigurations) {
  auto c = config();
  c.multipliers = {1.0, 0.1, 0.01};  // one short
  try {
    piecewise_constant_with_warmup(c);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("3 multipliers, 3 boundaries"), std::string::npos) << e.what();
  }
  c.multipliers = {1.0, 0.1, 0.01, 0.001, 0.0001};  // one too many
  EXPECT_THROW(piecewise_constant_with_warmup(c), Error);
  c = config();
  c.boundary_epochs = {30, 30, 80};
  EXPECT_THROW(piecewise_constant_with_warmup(c), Error);
}

TEST(ParseDoubleList, NumbersAndErrors) {
  EXPECT_EQ(parse_double_list("30,60,80", "--lr_boundaries"), (std::vector<double>{30, 60, 80}));
  EXPECT_EQ(parse_double_list("1.0,0.1,", "--x"), (std::vector<double>{1.0, 0.1}));
  EXPECT_TRUE(parse_double_list("", "--x").empty());
  try {
    parse_double_list("30,6o", "--lr_boundaries");
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("--lr_boundaries"), std::string::npos) << msg;
    EXPECT_NE(msg.find("6o"), std::string::npos) << msg;
  }
}

}  // namespace
}  // namespace orchard::train
