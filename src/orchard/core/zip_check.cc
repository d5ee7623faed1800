#include "orchard/core/zip_check.h"

#include <zlib.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <vector>

#include "orchard/core/error.h"

namespace orchard {
namespace {

uint64_t le(const unsigned char* p, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

struct File {
  std::FILE* f = nullptr;
  ~File() {
    if (f) std::fclose(f);
  }
};

}  // namespace

void check_zip_crcs(const std::string& path) {
  File file;
  file.f = std::fopen(path.c_str(), "rb");
  if (!file.f) throw DataError(path + ": cannot open");
  std::FILE* f = file.f;
  auto fail = [&](const std::string& what) { throw DataError(path + ": " + what); };
  auto read_at = [&](uint64_t at, void* dst, size_t n) {
    if (::fseeko(f, static_cast<off_t>(at), SEEK_SET) != 0 || std::fread(dst, 1, n, f) != n)
      fail("truncated (cannot read " + std::to_string(n) + " bytes at byte " + std::to_string(at) + ")");
  };
  if (::fseeko(f, 0, SEEK_END) != 0) fail("cannot seek");
  const uint64_t size = static_cast<uint64_t>(::ftello(f));

  // The end-of-central-directory record: in the last 22 + 65535 bytes (its comment may follow).
  const uint64_t tail_len = std::min<uint64_t>(size, 22 + 65535);
  std::vector<unsigned char> tail(tail_len);
  read_at(size - tail_len, tail.data(), tail_len);
  int64_t eocd = -1;
  for (int64_t i = static_cast<int64_t>(tail_len) - 22; i >= 0; --i)
    if (le(&tail[i], 4) == 0x06054b50) {
      eocd = i;
      break;
    }
  if (eocd < 0) fail("no zip end-of-central-directory record (truncated?)");
  uint64_t entries = le(&tail[eocd + 10], 2);
  uint64_t dir_size = le(&tail[eocd + 12], 4);
  uint64_t dir_at = le(&tail[eocd + 16], 4);
  if (entries == 0xffff || dir_size == 0xffffffff || dir_at == 0xffffffff) {  // ZIP64: its locator precedes
    if (eocd < 20 || le(&tail[eocd - 20], 4) != 0x07064b50) fail("ZIP64 locator missing");
    unsigned char z[56];
    read_at(le(&tail[eocd - 20 + 8], 8), z, sizeof z);
    if (le(z, 4) != 0x06064b50) fail("bad ZIP64 end-of-central-directory record");
    entries = le(z + 32, 8);
    dir_size = le(z + 40, 8);
    dir_at = le(z + 48, 8);
  }
  if (dir_at > size || dir_size > size - dir_at) fail("central directory outside the file (truncated?)");
  std::vector<unsigned char> dir(dir_size);
  read_at(dir_at, dir.data(), dir.size());

  std::vector<unsigned char> buf(1 << 20), out(1 << 20);
  size_t p = 0;
  for (uint64_t e = 0; e < entries; ++e) {
    if (p + 46 > dir.size() || le(&dir[p], 4) != 0x02014b50) fail("corrupt central directory");
    const unsigned method = static_cast<unsigned>(le(&dir[p + 10], 2));
    const uint32_t crc = static_cast<uint32_t>(le(&dir[p + 16], 4));
    uint64_t csize = le(&dir[p + 20], 4), usize = le(&dir[p + 24], 4), local = le(&dir[p + 42], 4);
    const size_t name_len = le(&dir[p + 28], 2), extra_len = le(&dir[p + 30], 2), comment_len = le(&dir[p + 32], 2);
    if (p + 46 + name_len + extra_len + comment_len > dir.size()) fail("corrupt central directory");
    const std::string name(reinterpret_cast<const char*>(&dir[p + 46]), name_len);
    // ZIP64 extended information: the 64-bit values of the fields saturated above, in order.
    for (size_t x = p + 46 + name_len; x + 4 <= p + 46 + name_len + extra_len;) {
      const unsigned id = static_cast<unsigned>(le(&dir[x], 2));
      const size_t len = le(&dir[x + 2], 2);
      size_t v = x + 4;
      if (id == 1) {
        if (usize == 0xffffffff && v + 8 <= x + 4 + len) usize = le(&dir[v], 8), v += 8;
        if (csize == 0xffffffff && v + 8 <= x + 4 + len) csize = le(&dir[v], 8), v += 8;
        if (local == 0xffffffff && v + 8 <= x + 4 + len) local = le(&dir[v], 8);
      }
      x += 4 + len;
    }
    p += 46 + name_len + extra_len + comment_len;

    unsigned char lh[30];
    if (local > size || size - local < 30) fail("entry " + name + ": outside the file (truncated?)");
    read_at(local, lh, sizeof lh);
    if (le(lh, 4) != 0x04034b50) fail("entry " + name + ": bad local header");
    const uint64_t data_at = local + 30 + le(lh + 26, 2) + le(lh + 28, 2);
    if (data_at > size || csize > size - data_at) fail("entry " + name + ": data outside the file (truncated?)");
    if (method != 0 && method != 8) fail("entry " + name + ": unknown compression method " + std::to_string(method));

    uLong got = crc32(0, nullptr, 0);
    z_stream zs{};
    if (method == 8 && inflateInit2(&zs, -MAX_WBITS) != Z_OK) fail("zlib");
    std::unique_ptr<z_stream, void (*)(z_stream*)> guard(method == 8 ? &zs : nullptr,
                                                         [](z_stream* s) { inflateEnd(s); });
    uint64_t inflated = 0;
    for (uint64_t done = 0; done < csize;) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(csize - done, buf.size()));
      read_at(data_at + done, buf.data(), n);
      done += n;
      if (method == 0) {
        got = crc32(got, buf.data(), static_cast<uInt>(n));
        continue;
      }
      zs.next_in = buf.data();
      zs.avail_in = static_cast<uInt>(n);
      while (zs.avail_in > 0) {
        zs.next_out = out.data();
        zs.avail_out = static_cast<uInt>(out.size());
        const int rc = inflate(&zs, Z_NO_FLUSH);
        if (rc != Z_OK && rc != Z_STREAM_END) fail("entry " + name + ": corrupt compressed data");
        const size_t produced = out.size() - zs.avail_out;
        got = crc32(got, out.data(), static_cast<uInt>(produced));
        inflated += produced;
        if (rc == Z_STREAM_END) break;
      }
    }
    if ((method == 0 ? csize : inflated) != usize || got != crc)
      fail("entry " + name + ": fails its CRC-32 (the file is corrupt)");
  }
}

}  // namespace orchard
