#include "orchard/core/tf_checkpoint.h"

#include <google/protobuf/text_format.h>
#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>

#include "orchard/core/crc32c.h"
#include "orchard/core/error.h"
#include "orchard/core/files.h"
#include "orchard/core/filesystem.h"
#include "orchard/core/tf_table.h"
#include "orchard/proto/tensorflow/checkpoint.pb.h"

namespace orchard::tf {
namespace {

constexpr char kObjectGraphKey[] = "_CHECKPOINTABLE_OBJECT_GRAPH";

bool exists_file(const std::string& p) { return file_exists(p); }

bool is_absolute(const std::string& p) { return !p.empty() && (p[0] == '/' || !is_local_path(p)); }

std::vector<int64_t> to_shape(const tensorflow::TensorShapeProto& s) {
  std::vector<int64_t> shape;
  for (const auto& d : s.dim()) shape.push_back(d.size());
  return shape;
}

int64_t element_count(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0 || (d > 0 && n > (int64_t{1} << 40) / d)) return -1;
    n *= d;
  }
  return n;
}

float half_to_float(uint16_t h) {
  const uint32_t sign = (h >> 15) & 1, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  float v;
  if (exp == 0) v = std::ldexp(static_cast<float>(mant), -24);
  else if (exp == 31) v = mant ? NAN : INFINITY;
  else v = std::ldexp(static_cast<float>(mant | 0x400), static_cast<int>(exp) - 25);
  return sign ? -v : v;
}

float bf16_to_float(uint16_t b) {
  const uint32_t bits = static_cast<uint32_t>(b) << 16;
  float v;
  std::memcpy(&v, &bits, 4);
  return v;
}

template <typename T>
void append_pod(std::string& out, T v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof(T));
}

uint64_t get_varint64(const char*& p, const char* end) {
  uint64_t v = 0;
  for (int shift = 0; shift < 70 && p < end; shift += 7) {
    const auto b = static_cast<uint8_t>(*p++);
    v |= static_cast<uint64_t>(b & 0x7f) << shift;
    if (!(b & 0x80)) return v;
  }
  throw std::out_of_range("varint");
}

void put_varint64(std::string& s, uint64_t v) {
  while (v >= 0x80) {
    s.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  s.push_back(static_cast<char>(v));
}

// A string tensor's data: varint64 lengths, masked CRC-32C of the lengths (each as a
// little-endian uint32), the bytes. `crc` gets the CRC-32C of the whole as TensorFlow
// computes it (the lengths as uint32, the length checksum, the bytes).
std::string encode_strings(const std::vector<std::string>& values, uint32_t* crc) {
  std::string out;
  uint32_t c = 0;
  for (const auto& v : values) {
    put_varint64(out, v.size());
    const auto n = static_cast<uint32_t>(v.size());
    c = crc32c::extend(c, &n, 4);
  }
  const uint32_t length_crc = crc32c::mask(c);
  append_pod(out, length_crc);
  c = crc32c::extend(c, &length_crc, 4);
  for (const auto& v : values) {
    out += v;
    c = crc32c::extend(c, v.data(), v.size());
  }
  *crc = c;
  return out;
}

// Calls f(at, from, run) for each row of the block at `start` with `length` inside a tensor
// of `shape`, both row-major: `run` values from index `from` of the packed block go to index
// `at` of the tensor. Bounds checked by the callers.
template <typename F>
void for_each_run(const std::vector<int64_t>& shape, const std::vector<int64_t>& start,
                  const std::vector<int64_t>& length, F f) {
  const size_t rank = shape.size();
  const int64_t n = element_count(length);
  if (n == 0) return;
  if (rank == 0) return f(0, 0, 1);
  const int64_t run = length[rank - 1];
  std::vector<int64_t> idx(rank, 0);
  for (int64_t from = 0; from < n; from += run) {
    int64_t at = 0;
    for (size_t i = 0; i < rank; ++i) at = at * shape[i] + start[i] + idx[i];
    f(at, from, run);
    for (int64_t i = static_cast<int64_t>(rank) - 2; i >= 0; --i) {
      if (++idx[i] < length[i]) break;
      idx[i] = 0;
    }
  }
}

// Copies `values`, the block at `start` with `length` packed row-major, into `dst`, the
// whole tensor of `shape` (allocated).
void copy_block(const std::string& values, const std::vector<int64_t>& shape, const std::vector<int64_t>& start,
                const std::vector<int64_t>& length, size_t esize, std::string& dst) {
  for_each_run(shape, start, length, [&](int64_t at, int64_t from, int64_t run) {
    std::memcpy(&dst[at * esize], &values[from * esize], run * esize);
  });
}

// OrderedCode (TensorFlow's lib/strings/ordered_code): byte strings that sort as the values.
// An unsigned number: its byte count, then its bytes big-endian (0 is one zero byte).
void ordered_unsigned(std::string& out, uint64_t v) {
  std::string bytes;
  for (; v > 0; v >>= 8) bytes.insert(bytes.begin(), static_cast<char>(v & 0xff));
  out.push_back(static_cast<char>(bytes.size()));
  out += bytes;
}
// A string: 0x00 as 0x00 0xff, 0xff as 0xff 0x00, ended by 0x00 0x01.
void ordered_string(std::string& out, const std::string& s) {
  for (char c : s) {
    out.push_back(c);
    if (c == '\0') out.push_back('\xff');
    else if (c == '\xff') out.push_back('\0');
  }
  out += std::string("\0\x01", 2);
}
// A signed number in L bytes: its two's complement in 7L bits, after a header of L bits that
// are ones for a positive number (zeros for a negative one, whose sign bits follow): 5 is 0x85,
// -1 is 0x7f, 100 is 0xc0 0x64.
void ordered_signed(std::string& out, int64_t v) {
  const uint64_t x = v < 0 ? ~static_cast<uint64_t>(v) : static_cast<uint64_t>(v);
  int len = 1;
  while (len < 10 && (x >> (7 * len - 1)) != 0) ++len;
  // The value sign-extended to 10 bytes, big-endian; its last `len` bytes, the header xor-ed in.
  unsigned char buf[10];
  for (int i = 0; i < 10; ++i) {
    const int shift = 8 * (9 - i);
    buf[i] = shift >= 64 ? (v < 0 ? 0xff : 0x00) : static_cast<unsigned char>(static_cast<uint64_t>(v) >> shift);
  }
  unsigned char* p = buf + 10 - len;
  const int header_bits = len;  // ones from the top of the first two bytes
  const unsigned header0 = header_bits >= 8 ? 0xff : (0xff << (8 - header_bits)) & 0xff;
  const unsigned header1 = header_bits <= 8 ? 0 : (0xff << (16 - header_bits)) & 0xff;
  p[0] ^= header0;
  if (len > 1) p[1] ^= header1;
  out.append(reinterpret_cast<const char*>(p), len);
}

// Copies the values of a V1 slice into `t` (the whole tensor, allocated).
void copy_slice(const tensorflow::SavedSlice& s, const VariableInfo& info, Tensor& t, const std::string& file) {
  const auto fail = [&](const std::string& what) { throw DataError(file + ": variable '" + info.name + "': " + what); };
  const size_t rank = info.shape.size();
  std::vector<int64_t> start(rank, 0), length(info.shape);
  if (s.slice().extent_size() > 0 && static_cast<size_t>(s.slice().extent_size()) != rank)
    fail("a slice of rank " + std::to_string(s.slice().extent_size()) + " in a tensor of rank " + std::to_string(rank));
  for (int i = 0; i < s.slice().extent_size(); ++i) {
    const auto& e = s.slice().extent(i);
    start[i] = e.start();
    if (e.has_length_case() == tensorflow::TensorSliceProto::Extent::kLength) length[i] = e.length();
    if (start[i] < 0 || length[i] < 0 || start[i] > info.shape[i] || length[i] > info.shape[i] - start[i])
      fail("a slice outside the tensor's shape " + shape_string(info.shape));
  }
  const int64_t n = element_count(length);
  if (info.dtype != kString && t.data.size() != static_cast<size_t>(element_count(info.shape)) * dtype_size(info.dtype))
    fail("holds " + std::to_string(t.data.size()) + " bytes for shape " + shape_string(info.shape));
  const auto& d = s.data();
  if (info.dtype == kString) {
    if (n != element_count(info.shape)) fail("a partial slice of a string tensor (not supported)");
    if (d.string_val_size() != n)
      fail("holds " + std::to_string(d.string_val_size()) + " strings, not " + std::to_string(n));
    t.strings.assign(d.string_val().begin(), d.string_val().end());
    return;
  }
  // The slice's values, packed row-major in the tensor's dtype.
  std::string values;
  const size_t esize = dtype_size(info.dtype);
  if (!d.tensor_content().empty()) {
    values = d.tensor_content();
  } else {
    switch (info.dtype) {
      case kFloat:
        for (float v : d.float_val()) append_pod(values, v);
        break;
      case kDouble:
        for (double v : d.double_val()) append_pod(values, v);
        break;
      case kInt32:
        for (int32_t v : d.int_val()) append_pod(values, v);
        break;
      case kInt16:
        for (int32_t v : d.int_val()) append_pod(values, static_cast<int16_t>(v));
        break;
      case kInt8:
        for (int32_t v : d.int_val()) append_pod(values, static_cast<int8_t>(v));
        break;
      case kUInt8:
        for (int32_t v : d.int_val()) append_pod(values, static_cast<uint8_t>(v));
        break;
      case kInt64:
        for (int64_t v : d.int64_val()) append_pod(values, v);
        break;
      case kBool:
        for (bool v : d.bool_val()) append_pod(values, static_cast<uint8_t>(v));
        break;
      case kHalf:
      case kBFloat16:
        for (int32_t v : d.half_val()) append_pod(values, static_cast<uint16_t>(v));
        break;
      default: fail("dtype " + dtype_name(info.dtype) + " is not supported in V1 checkpoints");
    }
  }
  if (values.size() != static_cast<size_t>(n) * esize)
    fail("a slice holds " + std::to_string(values.size() / std::max<size_t>(esize, 1)) + " values, its extent " +
         std::to_string(n));
  copy_block(values, info.shape, start, length, esize, t.data);
}

}  // namespace

std::string tensor_slice_key(const std::string& name, const std::vector<int64_t>& start,
                             const std::vector<int64_t>& length) {
  if (start.size() != length.size()) throw Error("tensor_slice_key: " + name + ": start and length differ in rank");
  std::string key;
  ordered_unsigned(key, 0);
  ordered_string(key, name);
  ordered_unsigned(key, start.size());
  for (size_t d = 0; d < start.size(); ++d) {
    ordered_signed(key, start[d]);
    ordered_signed(key, length[d]);
  }
  return key;
}

std::string dtype_name(int dtype) {
  switch (dtype) {
    case kFloat: return "float32";
    case kDouble: return "float64";
    case kInt32: return "int32";
    case kUInt8: return "uint8";
    case kInt16: return "int16";
    case kInt8: return "int8";
    case kString: return "string";
    case kInt64: return "int64";
    case kBool: return "bool";
    case kBFloat16: return "bfloat16";
    case kUInt16: return "uint16";
    case kHalf: return "float16";
    case kUInt32: return "uint32";
    case kUInt64: return "uint64";
    default: return "DT_" + std::to_string(dtype);
  }
}

size_t dtype_size(int dtype) {
  switch (dtype) {
    case kDouble:
    case kInt64:
    case kUInt64: return 8;
    case kFloat:
    case kInt32:
    case kUInt32: return 4;
    case kInt16:
    case kUInt16:
    case kHalf:
    case kBFloat16: return 2;
    case kUInt8:
    case kInt8:
    case kBool: return 1;
    default: return 0;
  }
}

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

int64_t Tensor::num_elements() const { return element_count(shape); }

std::vector<float> Tensor::floats() const {
  const int64_t n = num_elements();
  std::vector<float> out(static_cast<size_t>(std::max<int64_t>(n, 0)));
  const char* p = data.data();
  auto get = [&](auto tag, int64_t i) {
    decltype(tag) v;
    std::memcpy(&v, p + i * sizeof(v), sizeof(v));
    return v;
  };
  if (dtype_size(dtype) == 0 || data.size() != out.size() * dtype_size(dtype))
    throw Error("a " + dtype_name(dtype) + " tensor has no float values");
  for (int64_t i = 0; i < n; ++i) {
    switch (dtype) {
      case kFloat: out[i] = get(float{}, i); break;
      case kDouble: out[i] = static_cast<float>(get(double{}, i)); break;
      case kHalf: out[i] = half_to_float(get(uint16_t{}, i)); break;
      case kBFloat16: out[i] = bf16_to_float(get(uint16_t{}, i)); break;
      case kInt32: out[i] = static_cast<float>(get(int32_t{}, i)); break;
      case kInt64: out[i] = static_cast<float>(get(int64_t{}, i)); break;
      case kInt16: out[i] = get(int16_t{}, i); break;
      case kInt8: out[i] = get(int8_t{}, i); break;
      case kUInt8:
      case kBool: out[i] = get(uint8_t{}, i); break;
      case kUInt16: out[i] = get(uint16_t{}, i); break;
      case kUInt32: out[i] = static_cast<float>(get(uint32_t{}, i)); break;
      case kUInt64: out[i] = static_cast<float>(get(uint64_t{}, i)); break;
    }
  }
  return out;
}

// ---- naming a checkpoint ----

std::string resolve_checkpoint(const std::string& path) {
  std::string p = path;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  // A folder; over http(s), which has no folders, a URL with a `checkpoint` state file under it.
  if (dir_exists(p) || (!is_local_path(p) && !exists_file(p + ".index") && exists_file(join_path(p, "checkpoint")))) {
    const std::string state_file = join_path(p, "checkpoint");
    if (exists_file(state_file)) {
      tensorflow::CheckpointState state;
      if (!google::protobuf::TextFormat::ParseFromString(read_file(state_file), &state) ||
          state.model_checkpoint_path().empty())
        throw DataError(state_file + ": not a TensorFlow checkpoint state (no model_checkpoint_path)");
      const std::string& named = state.model_checkpoint_path();
      // Relative paths are relative to the directory; an absolute one may be from the machine
      // that trained it (a downloaded model): then its file name in this directory.
      std::string prefix = is_absolute(named) ? named : join_path(p, named);
      if (!exists_file(prefix + ".index") && !exists_file(prefix)) {
        // Its last component; TensorFlow on Windows writes backslashes ("C:\\train\\model.ckpt",
        // "/tmp/train\\model.ckpt").
        const std::string& named_path = state.model_checkpoint_path();
        const size_t slash = named_path.find_last_of("/\\");
        prefix = join_path(p, slash == std::string::npos ? named_path : named_path.substr(slash + 1));
      }
      if (!exists_file(prefix + ".index") && !exists_file(prefix))
        throw Error(state_file + " names " + state.model_checkpoint_path() + ", which is not in " + p);
      return prefix;
    }
    // A SavedModel directory: its variables/variables checkpoint.
    const std::string saved_model = join_path(join_path(p, "variables"), "variables");
    if (exists_file(saved_model + ".index")) return saved_model;
    std::vector<std::string> indexes;
    if (dir_exists(p))
      for (const auto& file : list_dir(p))
        if (file.size() > 6 && file.compare(file.size() - 6, 6, ".index") == 0) indexes.push_back(file);
    if (indexes.size() == 1) return indexes[0].substr(0, indexes[0].size() - 6);
    throw Error(p + ": no TensorFlow checkpoint in that directory (no 'checkpoint' file" +
                (indexes.empty() ? std::string(" and no *.index file)") : ", and several *.index files: name one)"));
  }
  if (exists_file(p + ".index")) return p;
  static const std::regex data_file(R"((.*)\.data-\d{5}-of-\d{5})");
  std::smatch m;
  for (const char* suffix : {".index", ".meta"})
    if (p.size() > std::strlen(suffix) && p.compare(p.size() - std::strlen(suffix), std::string::npos, suffix) == 0) {
      const std::string prefix = p.substr(0, p.size() - std::strlen(suffix));
      if (exists_file(prefix + ".index")) return prefix;
    }
  if (std::regex_match(p, m, data_file) && exists_file(m[1].str() + ".index")) return m[1].str();
  if (exists_file(p)) return p;  // a V1 file (checked when read)
  throw Error(path + ": no TensorFlow checkpoint there (neither " + p + ".index nor " + p + " exists)");
}

bool is_tensorflow_checkpoint(const std::string& path) {
  try {
    const std::string p = resolve_checkpoint(path);
    if (exists_file(p + ".index")) return true;
    const auto st = orchard::fs::stat(p);
    if (!st || st->size < 48) return false;
    const std::string tail = orchard::fs::read_range(p, static_cast<uint64_t>(st->size) - 8, 8);
    if (tail.size() != 8) return false;
    uint64_t magic = 0;
    std::memcpy(&magic, tail.data(), 8);
    return magic == 0xdb4775248b80fb57ull;
  } catch (const std::exception&) {
    return false;
  }
}

// ---- reading ----

struct CheckpointReader::Impl {
  std::string prefix;
  int version = 2;
  std::vector<VariableInfo> variables;
  std::map<std::string, size_t> by_name;
  int num_shards = 1;
  std::map<std::string, tensorflow::BundleEntryProto> entries;  // V2, partitions' slices included
  std::map<std::string, Tensor> v1_values;                      // V1: assembled on open

  std::string shard_path(int shard) const {
    char buf[64];
    std::snprintf(buf, sizeof buf, ".data-%05d-of-%05d", shard, num_shards);
    return prefix + buf;
  }
  void open_v2();
  void open_v1();
  // A V2 entry's bytes from its shard, range-checked (CRCs are the caller's).
  std::string entry_bytes(const tensorflow::BundleEntryProto& e, const std::string& name) const;
  Tensor read_partitioned(const VariableInfo& info, const tensorflow::BundleEntryProto& e) const;
};

void CheckpointReader::Impl::open_v2() {
  const std::string index = prefix + ".index";
  const TableEntries table = read_table(index);
  if (table.empty() || !table.front().first.empty())
    throw DataError(index + ": not a TensorFlow V2 checkpoint index (no header entry)");
  tensorflow::BundleHeaderProto header;
  if (!header.ParseFromString(table.front().second))
    throw DataError(index + ": the header entry is not a BundleHeaderProto");
  if (header.endianness() != tensorflow::BundleHeaderProto::LITTLE)
    throw DataError(index + ": a big-endian checkpoint (not supported)");
  if (header.num_shards() < 1) throw DataError(index + ": num_shards " + std::to_string(header.num_shards()));
  num_shards = header.num_shards();
  for (size_t i = 1; i < table.size(); ++i) {
    const auto& [key, value] = table[i];
    const bool slice = !key.empty() && key[0] == '\0';  // a slice of a partitioned variable
    const std::string what = slice ? "a partition slice's entry" : "the entry of '" + key + "'";
    tensorflow::BundleEntryProto e;
    if (!e.ParseFromString(value)) throw DataError(index + ": " + what + " is not a BundleEntryProto");
    if (e.shard_id() < 0 || e.shard_id() >= num_shards || e.offset() < 0 || e.size() < 0)
      throw DataError(index + ": " + what + " names shard " + std::to_string(e.shard_id()) + ", offset " +
                      std::to_string(e.offset()) + ", size " + std::to_string(e.size()));
    if (!slice) variables.push_back({key, static_cast<int>(e.dtype()), to_shape(e.shape())});
    entries.emplace(key, std::move(e));
  }
}

void CheckpointReader::Impl::open_v1() {
  version = 1;
  const TableEntries table = read_table(prefix);
  if (table.empty() || !table.front().first.empty())
    throw DataError(prefix + ": not a TensorFlow checkpoint (no V1 metadata entry)");
  tensorflow::SavedTensorSlices meta;
  if (!meta.ParseFromString(table.front().second) || !meta.has_meta())
    throw DataError(prefix + ": the V1 metadata entry is not a SavedTensorSlices");
  for (const auto& t : meta.meta().tensor()) {
    VariableInfo info{t.name(), static_cast<int>(t.type()), to_shape(t.shape())};
    const int64_t n = element_count(info.shape);
    if (n < 0 || (info.dtype != kString && dtype_size(info.dtype) == 0))
      throw DataError(prefix + ": variable '" + t.name() + "': shape " + shape_string(info.shape) + " dtype " +
                      dtype_name(info.dtype) + " not supported");
    if (by_name.count(info.name)) throw DataError(prefix + ": the metadata lists variable '" + t.name() + "' twice");
    by_name[info.name] = variables.size();
    variables.push_back(std::move(info));
  }
  // The slices, checked to cover each tensor before its values are allocated (so a shape
  // claiming more values than the file holds is an error, not an allocation).
  std::vector<tensorflow::SavedTensorSlices> slices(table.size() > 0 ? table.size() - 1 : 0);
  std::vector<int64_t> covered(variables.size(), 0);
  for (size_t i = 1; i < table.size(); ++i) {
    auto& s = slices[i - 1];
    if (!s.ParseFromString(table[i].second) || !s.has_data())
      throw DataError(prefix + ": entry " + std::to_string(i) + " is not a SavedTensorSlices with data");
    auto it = by_name.find(s.data().name());
    if (it == by_name.end())
      throw DataError(prefix + ": a slice of '" + s.data().name() + "', which the metadata does not list");
    const auto& info = variables[it->second];
    std::vector<int64_t> extent = info.shape;
    for (int d = 0; d < s.data().slice().extent_size() && d < static_cast<int>(extent.size()); ++d) {
      const auto& e = s.data().slice().extent(d);
      if (e.has_length_case() == tensorflow::TensorSliceProto::Extent::kLength) extent[d] = e.length();
    }
    const int64_t n = element_count(extent);
    if (n < 0) throw DataError(prefix + ": variable '" + info.name + "': a slice of extent " + shape_string(extent));
    covered[it->second] += n;
  }
  for (size_t i = 0; i < variables.size(); ++i) {
    const auto& info = variables[i];
    if (covered[i] != element_count(info.shape))
      throw DataError(prefix + ": variable '" + info.name + "' " + shape_string(info.shape) + ": its slices hold " +
                      std::to_string(covered[i]) + " of its " + std::to_string(element_count(info.shape)) +
                      " values (missing or overlapping slices)");
    Tensor value;
    value.dtype = info.dtype;
    value.shape = info.shape;
    if (info.dtype != kString) value.data.assign(static_cast<size_t>(covered[i]) * dtype_size(info.dtype), '\0');
    v1_values.emplace(info.name, std::move(value));
  }
  for (const auto& s : slices)
    copy_slice(s.data(), variables[by_name.at(s.data().name())], v1_values.at(s.data().name()), prefix);
}

std::string CheckpointReader::Impl::entry_bytes(const tensorflow::BundleEntryProto& e, const std::string& name) const {
  const std::string file = shard_path(e.shard_id());
  const auto fail = [&](const std::string& what) { throw DataError(file + ": variable '" + name + "': " + what); };
  const auto st = orchard::fs::stat(file);
  if (!st) fail("cannot open the data file (is it beside " + prefix + ".index?)");
  const auto file_size = static_cast<uint64_t>(st->size);
  if (static_cast<uint64_t>(e.offset()) > file_size || static_cast<uint64_t>(e.size()) > file_size - e.offset())
    fail("bytes " + std::to_string(e.offset()) + "+" + std::to_string(e.size()) + " run past the end of the file (" +
         std::to_string(file_size) + " bytes): truncated?");
  std::string bytes = orchard::fs::read_range(file, static_cast<uint64_t>(e.offset()), static_cast<uint64_t>(e.size()));
  if (bytes.size() != static_cast<size_t>(e.size())) fail("read error");
  return bytes;
}

// A partitioned variable (a PartitionedVariable saved by tf.train.Saver): its entry lists the
// slices, each stored as an entry of its own under tensor_slice_key; assembled here, each
// slice's CRC checked, and the slices must cover the tensor exactly once.
Tensor CheckpointReader::Impl::read_partitioned(const VariableInfo& info, const tensorflow::BundleEntryProto& e) const {
  const auto fail = [&](const std::string& what) {
    throw DataError(prefix + ".index: variable '" + info.name + "' (partitioned): " + what);
  };
  const size_t esize = dtype_size(info.dtype);
  if (info.dtype == kString || esize == 0) fail("dtype " + dtype_name(info.dtype) + " is not supported in slices");
  const int64_t n = element_count(info.shape);
  if (n < 0) fail("shape " + shape_string(info.shape) + " is too large");
  const size_t rank = info.shape.size();
  // The slices' extents add up to the tensor's before anything is allocated; then each value
  // is marked as its slice is copied, so an overlap (which hides a gap) is found too.
  struct Block {
    std::vector<int64_t> start, length;
    const tensorflow::BundleEntryProto* entry;
  };
  std::vector<Block> blocks;
  int64_t covered = 0;
  for (const auto& slice : e.slices()) {
    if (static_cast<size_t>(slice.extent_size()) != rank)
      fail("a slice of rank " + std::to_string(slice.extent_size()) + " in a tensor of rank " + std::to_string(rank));
    Block b;
    std::vector<int64_t> key_length;
    for (size_t d = 0; d < rank; ++d) {
      const auto& x = slice.extent(static_cast<int>(d));
      const bool whole = x.has_length_case() != tensorflow::TensorSliceProto::Extent::kLength;
      b.start.push_back(x.start());
      b.length.push_back(whole ? info.shape[d] : x.length());
      key_length.push_back(whole ? -1 : x.length());
      if (b.start[d] < 0 || b.length[d] < 0 || b.start[d] > info.shape[d] || b.length[d] > info.shape[d] - b.start[d])
        fail("a slice at " + shape_string(b.start) + " of " + shape_string(b.length) + " outside its shape " +
             shape_string(info.shape));
    }
    const std::string desc = "the slice at " + shape_string(b.start) + " of " + shape_string(b.length);
    auto it = entries.find(tensor_slice_key(info.name, b.start, key_length));
    if (it == entries.end()) fail(desc + " is listed but has no entry in the index");
    const auto& se = it->second;
    if (static_cast<int>(se.dtype()) != info.dtype || to_shape(se.shape()) != b.length)
      fail(desc + ": its entry holds " + dtype_name(se.dtype()) + " " + shape_string(to_shape(se.shape())));
    if (static_cast<uint64_t>(se.size()) != static_cast<uint64_t>(element_count(b.length)) * esize)
      fail(desc + ": " + std::to_string(se.size()) + " bytes for " + std::to_string(element_count(b.length)) +
           " values");
    covered += element_count(b.length);
    b.entry = &se;
    blocks.push_back(std::move(b));
  }
  if (covered != n)
    fail("its slices hold " + std::to_string(covered) + " of its " + std::to_string(n) +
         " values (missing or overlapping slices)");
  Tensor t;
  t.dtype = info.dtype;
  t.shape = info.shape;
  t.data.assign(static_cast<size_t>(n) * esize, '\0');
  std::vector<bool> seen(static_cast<size_t>(n), false);
  for (const auto& b : blocks) {
    const std::string bytes = entry_bytes(*b.entry, info.name);
    if (crc32c::mask(crc32c::value(bytes.data(), bytes.size())) != b.entry->crc32c())
      throw DataError(shard_path(b.entry->shard_id()) + ": variable '" + info.name + "': the slice at " +
                      shape_string(b.start) + ": checksum mismatch (the data file is corrupt)");
    for_each_run(info.shape, b.start, b.length, [&](int64_t at, int64_t, int64_t run) {
      for (int64_t i = at; i < at + run; ++i) {
        if (seen[i]) fail("two slices overlap");
        seen[i] = true;
      }
    });
    copy_block(bytes, info.shape, b.start, b.length, esize, t.data);
  }
  return t;
}

CheckpointReader::CheckpointReader(const std::string& path) : impl_(std::make_unique<Impl>()) {
  impl_->prefix = resolve_checkpoint(path);
  if (exists_file(impl_->prefix + ".index")) impl_->open_v2();
  else impl_->open_v1();
  auto& v = impl_->variables;
  std::sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  impl_->by_name.clear();
  for (size_t i = 0; i < v.size(); ++i) impl_->by_name[v[i].name] = i;
}

CheckpointReader::~CheckpointReader() = default;
const std::string& CheckpointReader::prefix() const { return impl_->prefix; }
int CheckpointReader::version() const { return impl_->version; }
const std::vector<VariableInfo>& CheckpointReader::variables() const { return impl_->variables; }

std::vector<std::string> CheckpointReader::missing_data_files() const {
  std::vector<std::string> out;
  if (impl_->version != 2) return out;
  for (int shard = 0; shard < impl_->num_shards; ++shard)
    if (!exists_file(impl_->shard_path(shard))) out.push_back(impl_->shard_path(shard));
  return out;
}

const VariableInfo* CheckpointReader::find(const std::string& name) const {
  auto it = impl_->by_name.find(name);
  return it == impl_->by_name.end() ? nullptr : &impl_->variables[it->second];
}

Tensor CheckpointReader::read(const std::string& name) const {
  const VariableInfo* info = find(name);
  if (!info) throw Error(impl_->prefix + ": no variable '" + name + "' in this checkpoint");
  if (impl_->version == 1) return impl_->v1_values.at(name);
  const auto& e = impl_->entries.at(name);
  if (e.slices_size() > 0) return impl_->read_partitioned(*info, e);
  const std::string file = impl_->shard_path(e.shard_id());
  const auto fail = [&](const std::string& what) { throw DataError(file + ": variable '" + name + "': " + what); };
  Tensor t;
  t.dtype = info->dtype;
  t.shape = info->shape;
  const int64_t n = element_count(t.shape);
  if (n < 0) fail("shape " + shape_string(t.shape) + " is too large");
  if (t.dtype != kString && dtype_size(t.dtype) == 0) fail("dtype " + dtype_name(t.dtype) + " is not supported");
  if (t.dtype != kString && static_cast<uint64_t>(e.size()) != static_cast<uint64_t>(n) * dtype_size(t.dtype))
    fail(std::to_string(e.size()) + " bytes for " + std::to_string(n) + " " + dtype_name(t.dtype) + " values");
  std::string bytes = impl_->entry_bytes(e, name);
  if (t.dtype != kString) {
    if (crc32c::mask(crc32c::value(bytes.data(), bytes.size())) != e.crc32c())
      fail("checksum mismatch: the data file is corrupt, or not the one written with this index");
    t.data = std::move(bytes);
    return t;
  }
  // Strings: lengths, their checksum, the bytes.
  const char* p = bytes.data();
  const char* end = p + bytes.size();
  std::vector<uint64_t> lengths;
  uint32_t crc = 0;
  try {
    for (int64_t i = 0; i < n; ++i) {
      lengths.push_back(get_varint64(p, end));
      const auto n32 = static_cast<uint32_t>(lengths.back());
      crc = crc32c::extend(crc, &n32, 4);
    }
  } catch (const std::out_of_range&) {
    fail("a string length runs past the tensor's bytes");
  }
  uint32_t length_crc;
  if (end - p < 4) fail("no checksum after the string lengths");
  std::memcpy(&length_crc, p, 4);
  p += 4;
  if (length_crc != crc32c::mask(crc)) fail("checksum mismatch in the string lengths");
  crc = crc32c::extend(crc, &length_crc, 4);
  for (uint64_t len : lengths) {
    if (len > static_cast<uint64_t>(end - p)) fail("a string runs past the tensor's bytes");
    t.strings.emplace_back(p, len);
    crc = crc32c::extend(crc, p, len);
    p += len;
  }
  if (crc32c::mask(crc) != e.crc32c()) fail("checksum mismatch: the data file is corrupt");
  return t;
}

std::vector<TrackedVariable> CheckpointReader::tracked_variables() const {
  std::vector<TrackedVariable> out;
  if (!find(kObjectGraphKey)) return out;
  const Tensor t = read(kObjectGraphKey);
  tensorflow::TrackableObjectGraph graph;
  if (t.strings.size() != 1 || !graph.ParseFromString(t.strings[0]))
    throw DataError(impl_->prefix + ": " + kObjectGraphKey + " is not a TrackableObjectGraph");
  // Depth-first from the root (node 0), each node once (the graph may share objects), with an
  // explicit stack: a damaged graph may be a chain as long as the file.
  std::vector<bool> seen(graph.nodes_size(), false);
  std::vector<std::pair<int, std::string>> stack{{0, ""}};
  size_t path_bytes = 0;
  while (!stack.empty()) {
    auto [id, path] = std::move(stack.back());
    stack.pop_back();
    if (id < 0 || id >= graph.nodes_size() || seen[id]) continue;
    seen[id] = true;
    const auto& node = graph.nodes(id);
    for (const auto& a : node.attributes()) out.push_back({a.checkpoint_key(), path, a.full_name()});
    for (int c = node.children_size() - 1; c >= 0; --c) {
      const auto& child = node.children(c);
      std::string child_path = path.empty() ? child.local_name() : path + "/" + child.local_name();
      path_bytes += child_path.size();
      if (path_bytes > (size_t{64} << 20))
        throw DataError(impl_->prefix + ": " + kObjectGraphKey + ": object paths over 64 MiB (a damaged graph)");
      stack.emplace_back(child.node_id(), std::move(child_path));
    }
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.key < b.key; });
  return out;
}

// ---- writing ----

BundleWriter::BundleWriter(std::string prefix) : prefix_(std::move(prefix)) {}

void BundleWriter::add(const std::string& name, int dtype, const std::vector<int64_t>& shape, std::string data) {
  const int64_t n = element_count(shape);
  if (dtype_size(dtype) == 0 || n < 0 || data.size() != static_cast<size_t>(n) * dtype_size(dtype))
    throw Error("BundleWriter: '" + name + "': " + std::to_string(data.size()) + " bytes do not hold a " +
                dtype_name(dtype) + " tensor of shape " + shape_string(shape));
  const uint32_t crc = crc32c::value(data.data(), data.size());
  items_[name] = Item{dtype, shape, std::move(data), crc};
}

void BundleWriter::add_slice(const std::string& name, int dtype, const std::vector<int64_t>& full_shape,
                             const std::vector<int64_t>& start, const std::vector<int64_t>& length, std::string data) {
  if (start.size() != full_shape.size() || length.size() != full_shape.size())
    throw Error("BundleWriter: '" + name + "': a slice's rank differs from " + shape_string(full_shape));
  std::vector<int64_t> extent(full_shape.size());
  for (size_t d = 0; d < full_shape.size(); ++d) {
    extent[d] = length[d] == -1 ? full_shape[d] : length[d];
    if (start[d] < 0 || extent[d] < 0 || start[d] + extent[d] > full_shape[d] || (length[d] == -1 && start[d] != 0))
      throw Error("BundleWriter: '" + name + "': a slice at " + shape_string(start) + " of " + shape_string(length) +
                  " outside " + shape_string(full_shape));
  }
  auto& full = items_[name];
  if (!full.bytes.empty() || (!full.slices.empty() && (full.dtype != dtype || full.shape != full_shape)))
    throw Error("BundleWriter: '" + name + "' added twice, or its slices differ in dtype or shape");
  full.dtype = dtype;
  full.shape = full_shape;
  full.slices.emplace_back(start, length);
  add(tensor_slice_key(name, start, length), dtype, extent, std::move(data));
}

void BundleWriter::add_string(const std::string& name, const std::string& value) {
  uint32_t crc = 0;
  std::string bytes = encode_strings({value}, &crc);
  items_[name] = Item{kString, {}, std::move(bytes), crc};
}

void BundleWriter::finish() {
  TableEntries table;
  tensorflow::BundleHeaderProto header;
  header.set_num_shards(1);
  header.mutable_version()->set_producer(1);
  table.emplace_back("", header.SerializeAsString());
  std::string data;
  for (const auto& [name, item] : items_) {
    tensorflow::BundleEntryProto e;
    e.set_dtype(static_cast<tensorflow::DataType>(item.dtype));
    auto* shape = e.mutable_shape();  // present even for scalars, as TensorFlow writes it
    for (int64_t d : item.shape) shape->add_dim()->set_size(d);
    if (!item.slices.empty()) {  // a partitioned variable: its slices, no bytes of its own
      for (const auto& [start, length] : item.slices) {
        auto* slice = e.add_slices();
        for (size_t d = 0; d < start.size(); ++d) {
          auto* x = slice->add_extent();  // a whole dimension: an empty extent
          if (length[d] != -1) x->set_start(start[d]), x->set_length(length[d]);
        }
      }
      table.emplace_back(name, e.SerializeAsString());
      continue;
    }
    e.set_offset(static_cast<int64_t>(data.size()));
    e.set_size(static_cast<int64_t>(item.bytes.size()));
    e.set_crc32c(crc32c::mask(item.crc));
    data += item.bytes;
    table.emplace_back(name, e.SerializeAsString());
  }
  const std::string dir = parent_path(prefix_);
  if (!dir.empty()) ensure_writable_dir(dir);
  atomic_write_file(prefix_ + ".data-00000-of-00001", data);
  atomic_write_file(prefix_ + ".index", build_table(table));
}

}  // namespace orchard::tf
