// CRC-32C (Castagnoli), as TFRecord framing uses it.
#pragma once

#include <cstddef>
#include <cstdint>

namespace orchard::crc32c {

// CRC-32C of data[0, n), continuing from `crc` (0 for a fresh checksum).
uint32_t extend(uint32_t crc, const void* data, size_t n);
inline uint32_t value(const void* data, size_t n) { return extend(0, data, n); }

// TFRecord's masking: rotate right by 15 and add a constant.
inline uint32_t mask(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }
inline uint32_t unmask(uint32_t masked) {
  uint32_t rot = masked - 0xa282ead8u;
  return (rot >> 17) | (rot << 15);
}

}  // namespace orchard::crc32c
