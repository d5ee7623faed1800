// TensorFlow checkpoints (issue 32): the table format (tf::parse_table), V2 bundles
// (tf::CheckpointReader over `<prefix>.index` + `<prefix>.data-00000-of-00001`) and V1
// TensorSlice files. The input is
//
//   header[4]  little-endian uint32: low 24 bits = the index part's length L (clamped to what
//              is there), high 8 bits = flags
//   index[L]   the `.index` table (also opened alone as a V1 file)
//   data[...]  the rest: the data shard
//
// The whole input goes through parse_table as it is. Every block of the formats is guarded by
// a CRC-32C, which random mutation almost never gets right, so the flags let the harness
// recompute them (the seeds set both; mutations clear them at times, which keeps the checksum
// checks themselves fuzzed):
//   0x01  the index part's table block trailers (data blocks, metaindex, index) are rewritten
//         with the right masked CRC-32C of their bytes
//   0x02  each V2 entry's crc32c is recomputed from the data part (for strings, also the
//         length checksum inside the data), and the index rebuilt with build_table
// Every variable is then read (and tracked_variables()); what reads must have the size its
// shape and dtype say.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "orchard/core/crc32c.h"
#include "orchard/core/error.h"
#include "orchard/core/tf_checkpoint.h"
#include "orchard/core/tf_table.h"
#include "orchard/proto/tensorflow/checkpoint.pb.h"

namespace {

namespace tf = orchard::tf;

constexpr uint32_t kFixTableCrcs = 0x01;
constexpr uint32_t kFixDataCrcs = 0x02;
constexpr uint64_t kTableMagic = 0xdb4775248b80fb57ull;

// A varint at [p, end); false when it runs past the end or is too long.
bool varint(const char*& p, const char* end, uint64_t* v) {
  *v = 0;
  for (int shift = 0; shift < 64 && p < end; shift += 7) {
    const auto b = static_cast<uint8_t>(*p++);
    *v |= static_cast<uint64_t>(b & 0x7f) << shift;
    if (!(b & 0x80)) return true;
  }
  return false;
}

struct Handle {
  uint64_t offset = 0, size = 0;
};

// Rewrites the trailer of the block at `h` (type byte kept) with the right checksum.
void fix_block_crc(std::string& t, const Handle& h) {
  if (h.offset > t.size() || h.size > t.size() - h.offset || t.size() - h.offset - h.size < 5) return;
  const char* block = t.data() + h.offset;
  const uint32_t crc =
      orchard::crc32c::mask(orchard::crc32c::extend(orchard::crc32c::value(block, h.size), block + h.size, 1));
  std::memcpy(&t[h.offset + h.size + 1], &crc, 4);
}

// The handles an uncompressed index block lists (best effort: stops at the first malformed entry).
std::vector<Handle> index_handles(const std::string& t, const Handle& h) {
  std::vector<Handle> out;
  if (h.offset > t.size() || h.size > t.size() - h.offset || t.size() - h.offset - h.size < 5 || h.size < 4) return out;
  const char* block = t.data() + h.offset;
  if (block[h.size] != 0) return out;  // snappy: left alone
  uint32_t restarts;
  std::memcpy(&restarts, block + h.size - 4, 4);
  if (restarts > (h.size - 4) / 4) return out;
  const char* p = block;
  const char* end = block + h.size - 4 - 4 * size_t{restarts};
  while (p < end && out.size() < 4096) {
    uint64_t shared, non_shared, value_len;
    if (!varint(p, end, &shared) || !varint(p, end, &non_shared) || !varint(p, end, &value_len)) break;
    if (non_shared > static_cast<uint64_t>(end - p)) break;
    p += non_shared;
    if (value_len > static_cast<uint64_t>(end - p)) break;
    const char* v = p;
    p += value_len;
    Handle d;
    if (!varint(v, p, &d.offset) || !varint(v, p, &d.size)) continue;
    out.push_back(d);
  }
  return out;
}

void fix_table_crcs(std::string& t) {
  if (t.size() < 48) return;
  uint64_t magic;
  std::memcpy(&magic, t.data() + t.size() - 8, 8);
  if (magic != kTableMagic) return;
  const char* p = t.data() + t.size() - 48;
  const char* end = p + 40;
  Handle meta, index;
  if (!varint(p, end, &meta.offset) || !varint(p, end, &meta.size) || !varint(p, end, &index.offset) ||
      !varint(p, end, &index.size))
    return;
  // Data blocks first, the index last: a trailer of one may overlap another block.
  for (const Handle& h : index_handles(t, index)) fix_block_crc(t, h);
  fix_block_crc(t, meta);
  fix_block_crc(t, index);
}

int64_t elements(const tensorflow::TensorShapeProto& s) {
  int64_t n = 1;
  for (const auto& d : s.dim()) {
    if (d.size() < 0 || (d.size() > 0 && n > (int64_t{1} << 40) / d.size())) return -1;
    n *= d.size();
  }
  return n;
}

// A string tensor's checksum as TensorFlow computes it; also fixes the length checksum stored
// in `data` (the bytes of the tensor). False when the bytes do not hold n lengths + checksum.
bool string_crc(std::string& data, size_t offset, size_t size, int64_t n, uint32_t* out) {
  const char* p = data.data() + offset;
  const char* end = p + size;
  uint32_t crc = 0;
  std::vector<uint64_t> lengths;
  for (int64_t i = 0; i < n; ++i) {
    uint64_t len;
    if (!varint(p, end, &len)) return false;
    lengths.push_back(len);
    const auto n32 = static_cast<uint32_t>(len);
    crc = orchard::crc32c::extend(crc, &n32, 4);
  }
  if (end - p < 4) return false;
  const uint32_t length_crc = orchard::crc32c::mask(crc);
  std::memcpy(&data[p - data.data()], &length_crc, 4);
  crc = orchard::crc32c::extend(crc, &length_crc, 4);
  p += 4;
  for (uint64_t len : lengths) {
    if (len > static_cast<uint64_t>(end - p)) return false;
    crc = orchard::crc32c::extend(crc, p, len);
    p += len;
  }
  *out = crc;
  return true;
}

// Recomputes every V2 entry's checksum from `data` and rebuilds the index table.
void fix_data_crcs(std::string& index, std::string& data) {
  tf::TableEntries entries;
  try {
    entries = tf::parse_table(index, "index");
  } catch (const orchard::Error&) {
    return;
  }
  bool changed = false;
  for (size_t i = 1; i < entries.size(); ++i) {
    auto& [key, value] = entries[i];
    if (!key.empty() && key[0] == '\0') continue;
    tensorflow::BundleEntryProto e;
    if (!e.ParseFromString(value)) continue;
    if (e.offset() < 0 || e.size() < 0 || static_cast<uint64_t>(e.offset()) > data.size() ||
        static_cast<uint64_t>(e.size()) > data.size() - e.offset())
      continue;
    uint32_t crc;
    if (e.dtype() == tensorflow::DT_STRING) {
      const int64_t n = elements(e.shape());
      if (n < 0 || !string_crc(data, e.offset(), e.size(), n, &crc)) continue;
    } else {
      crc = orchard::crc32c::value(data.data() + e.offset(), e.size());
    }
    e.set_crc32c(orchard::crc32c::mask(crc));
    value = e.SerializeAsString();
    changed = true;
  }
  if (!changed) return;
  try {
    index = tf::build_table(entries);
  } catch (const orchard::Error&) {
  }
}

// The size a tensor read from a checkpoint must have.
void check_tensor(const tf::VariableInfo& info, const tf::Tensor& t) {
  bool ok = t.dtype == info.dtype && t.shape == info.shape;
  const int64_t n = t.num_elements();
  if (ok && t.dtype == tf::kString) ok = n >= 0 && t.strings.size() == static_cast<uint64_t>(n) && t.data.empty();
  else if (ok) ok = n >= 0 && t.data.size() == static_cast<uint64_t>(n) * tf::dtype_size(t.dtype);
  if (!ok) {
    std::fprintf(stderr, "variable '%s': read a %s tensor %s with %zu bytes, %zu strings; listed as %s %s\n",
                 info.name.c_str(), tf::dtype_name(t.dtype).c_str(), tf::shape_string(t.shape).c_str(), t.data.size(),
                 t.strings.size(), tf::dtype_name(info.dtype).c_str(), tf::shape_string(info.shape).c_str());
    std::abort();
  }
  if (t.dtype != tf::kString && t.floats().size() != static_cast<uint64_t>(n)) std::abort();
}

void read_checkpoint(const std::string& path, int version) {
  orchard::fuzz::expect_clean([&] {
    const tf::CheckpointReader reader(path);
    if (reader.version() != version) {
      std::fprintf(stderr, "%s opened as V%d, expected V%d\n", path.c_str(), reader.version(), version);
      std::abort();
    }
    for (const auto& info : reader.variables()) {
      if (reader.find(info.name) == nullptr) std::abort();  // every listed variable can be found
      orchard::fuzz::expect_clean([&] { check_tensor(info, reader.read(info.name)); });
    }
    orchard::fuzz::expect_clean([&] { reader.tracked_variables(); });
  });
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  orchard::fuzz::quiet_logging();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* bytes, size_t size) {
  const std::string input(reinterpret_cast<const char*>(bytes), size);
  orchard::fuzz::expect_clean([&] { tf::parse_table(input, "input"); });

  uint32_t header = 0;
  std::memcpy(&header, input.data(), std::min<size_t>(size, 4));
  const std::string rest = size > 4 ? input.substr(4) : std::string();
  const size_t index_len = std::min<size_t>(header & 0xffffff, rest.size());
  const uint32_t flags = header >> 24;
  std::string index = rest.substr(0, index_len), data = rest.substr(index_len);
  if (flags & kFixTableCrcs) fix_table_crcs(index);
  if (flags & kFixDataCrcs) fix_data_crcs(index, data);

  const std::string& dir = orchard::fuzz::scratch_path("tf_checkpoint");
  static const bool made = std::filesystem::create_directories(dir) || std::filesystem::is_directory(dir);
  if (!made) std::abort();
  orchard::fuzz::write_scratch(dir + "/m.index", reinterpret_cast<const uint8_t*>(index.data()), index.size());
  orchard::fuzz::write_scratch(dir + "/m.data-00000-of-00001", reinterpret_cast<const uint8_t*>(data.data()),
                               data.size());
  orchard::fuzz::write_scratch(dir + "/v1.ckpt", reinterpret_cast<const uint8_t*>(index.data()), index.size());

  if (!tf::is_tensorflow_checkpoint(dir + "/m")) std::abort();  // m.index exists
  read_checkpoint(dir + "/m", 2);
  read_checkpoint(dir + "/v1.ckpt", 1);
  return 0;
}
