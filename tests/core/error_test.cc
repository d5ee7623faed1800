#include "orchard/core/error.h"

#include <gtest/gtest.h>

namespace orchard {
namespace {

TEST(Where, FormatsTheKnownParts) {
  EXPECT_EQ(where("a.tfrecord", 3, 120, "bad"), "a.tfrecord: record 3 (byte offset 120): bad");
  EXPECT_EQ(where("a.tfrecord", 3, -1, "bad"), "a.tfrecord: record 3: bad");
  EXPECT_EQ(where("a.tfrecord", -1, 120, "bad"), "a.tfrecord: byte offset 120: bad");
  EXPECT_EQ(where("a.tfrecord", -1, -1, "bad"), "a.tfrecord: bad");
}

TEST(Errors, DataErrorIsAnError) {
  try {
    throw DataError("x");
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "x");
    return;
  }
  FAIL() << "DataError was not caught as Error";
}

}  // namespace
}  // namespace orchard
