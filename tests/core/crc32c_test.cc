#include "orchard/core/crc32c.h"

#include <gtest/gtest.h>

#include <string>

#include "core/test_util.h"

namespace orchard {
namespace {

// Bit-at-a-time CRC-32C (reflected polynomial 0x82F63B78): the textbook definition, to
// check the table-driven and SSE4.2 paths against.
uint32_t reference_crc32c(const std::string& s) {
  uint32_t c = 0xffffffffu;
  for (unsigned char byte : s) {
    c ^= byte;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
  }
  return ~c;
}

uint32_t crc(const std::string& s) { return crc32c::value(s.data(), s.size()); }

TEST(Crc32c, CheckValue) {
  // The standard CRC-32C check value.
  EXPECT_EQ(crc("123456789"), 0xE3069283u);
  EXPECT_EQ(crc(""), 0u);
}

TEST(Crc32c, Rfc3720Vectors) {
  // RFC 3720 (iSCSI) appendix B.4.
  EXPECT_EQ(crc(std::string(32, '\0')), 0x8A9136AAu);
  EXPECT_EQ(crc(std::string(32, '\xff')), 0x62A8AB43u);
  std::string up, down;
  for (int i = 0; i < 32; ++i) {
    up += static_cast<char>(i);
    down += static_cast<char>(31 - i);
  }
  EXPECT_EQ(crc(up), 0x46DD794Eu);
  EXPECT_EQ(crc(down), 0x113FDB5Cu);
}

TEST(Crc32c, MatchesBitwiseReferenceAtAllLengthsAndAlignments) {
  const std::string data = test::random_bytes(300, 7);
  for (size_t start = 0; start < 9; ++start)
    for (size_t len = 0; start + len <= data.size(); len += (len < 40 ? 1 : 37)) {
      const std::string piece = data.substr(start, len);
      ASSERT_EQ(crc(piece), reference_crc32c(piece)) << "start " << start << " len " << len;
    }
}

TEST(Crc32c, ExtendEqualsWholeValue) {
  const std::string data = test::random_bytes(1000, 11);
  for (size_t split : {0, 1, 7, 8, 9, 500, 999, 1000}) {
    uint32_t c = crc32c::extend(0, data.data(), split);
    c = crc32c::extend(c, data.data() + split, data.size() - split);
    EXPECT_EQ(c, crc(data)) << "split at " << split;
  }
}

TEST(Crc32c, MaskIsTensorFlowsRotateAndAdd) {
  // masked = ((crc >> 15) | (crc << 17)) + 0xa282ead8, worked by hand for two values.
  EXPECT_EQ(crc32c::mask(0u), 0xa282ead8u);
  // 0x00008000 >> 15 = 1; << 17 overflows to 0 -> 1 + 0xa282ead8.
  EXPECT_EQ(crc32c::mask(0x00008000u), 0xa282ead9u);
  for (uint32_t v : {0u, 1u, 0xE3069283u, 0xffffffffu, 0x12345678u}) {
    EXPECT_EQ(crc32c::unmask(crc32c::mask(v)), v);
    if (v) {
      EXPECT_NE(crc32c::mask(v), v);
    }
  }
}

}  // namespace
}  // namespace orchard
