#include "orchard/core/tf_table.h"

#include <snappy.h>

#include <cstring>

#include "orchard/core/crc32c.h"
#include "orchard/core/error.h"
#include "orchard/core/files.h"

namespace orchard::tf {
namespace {

constexpr uint64_t kMagic = 0xdb4775248b80fb57ull;
constexpr size_t kFooterSize = 48;
constexpr size_t kTrailerSize = 5;  // type byte + masked CRC-32C
constexpr int kRestartInterval = 16;

// A bounded reader over a byte range; every read checks what is left.
class Cursor {
 public:
  Cursor(const char* begin, const char* end, const std::string& path, uint64_t base)
      : p_(begin), begin_(begin), end_(end), path_(path), base_(base) {}
  bool done() const { return p_ >= end_; }
  size_t left() const { return static_cast<size_t>(end_ - p_); }
  uint64_t varint(int max_bytes = 10) {
    uint64_t v = 0;
    for (int shift = 0, i = 0; i < max_bytes; ++i, shift += 7) {
      if (p_ >= end_) fail("a varint runs past the end of its block");
      const auto b = static_cast<uint8_t>(*p_++);
      v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if (!(b & 0x80)) return v;
    }
    fail("a varint is longer than " + std::to_string(max_bytes) + " bytes");
  }
  const char* take(uint64_t n) {
    if (n > left()) fail("an entry claims " + std::to_string(n) + " bytes, " + std::to_string(left()) + " are left");
    const char* r = p_;
    p_ += n;
    return r;
  }
  [[noreturn]] void fail(const std::string& what) const {
    throw DataError(where(path_, -1, static_cast<int64_t>(base_ + (p_ - begin_)), "not a TensorFlow table: " + what));
  }

 private:
  const char* p_;
  const char* begin_;
  const char* end_;
  const std::string& path_;
  uint64_t base_;
};

uint32_t fixed32(const char* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;  // little-endian hosts only (x86-64, aarch64), as the rest of Orchard
}

struct Handle {
  uint64_t offset = 0, size = 0;
};

// The block at `h`, checksum verified and decompressed.
std::string read_block(const std::string& file, const Handle& h, const std::string& path) {
  if (h.offset > file.size() || h.size > file.size() - h.offset || kTrailerSize > file.size() - h.offset - h.size)
    throw DataError(where(path, -1, static_cast<int64_t>(h.offset),
                          "a block of " + std::to_string(h.size) + " bytes runs past the end of the file (" +
                              std::to_string(file.size()) + " bytes): truncated?"));
  const char* block = file.data() + h.offset;
  const char type = block[h.size];
  const uint32_t stored = crc32c::unmask(fixed32(block + h.size + 1));
  const uint32_t actual = crc32c::extend(crc32c::value(block, h.size), &type, 1);
  if (stored != actual)
    throw DataError(where(path, -1, static_cast<int64_t>(h.offset), "block checksum mismatch (corrupt file)"));
  if (type == 0) return std::string(block, h.size);
  if (type == 1) {
    std::string out;
    size_t n = 0;
    // Snappy expands at most ~32x (a 2-byte copy emits up to 64 bytes): a larger claim is damage,
    // refused before the output is allocated.
    if (!snappy::GetUncompressedLength(block, h.size, &n) || n > 64 * h.size + 1024 ||
        !snappy::Uncompress(block, h.size, &out))
      throw DataError(where(path, -1, static_cast<int64_t>(h.offset), "a snappy block does not decompress"));
    return out;
  }
  throw DataError(
      where(path, -1, static_cast<int64_t>(h.offset), "unknown block compression type " + std::to_string(type)));
}

// Appends the entries of one block. `offset` places errors in the file.
void parse_block(const std::string& block, const std::string& path, uint64_t offset, TableEntries& out) {
  if (block.size() < 4) Cursor(block.data(), block.data(), path, offset).fail("a block shorter than 4 bytes");
  const uint32_t restarts = fixed32(block.data() + block.size() - 4);
  if (restarts == 0 || restarts > (block.size() - 4) / 4)
    Cursor(block.data(), block.data(), path, offset).fail("a block with " + std::to_string(restarts) + " restarts");
  const char* end = block.data() + block.size() - 4 - 4 * size_t{restarts};
  Cursor c(block.data(), end, path, offset);
  std::string key;
  while (!c.done()) {
    const uint64_t shared = c.varint(5), non_shared = c.varint(5), value_len = c.varint(5);
    if (shared > key.size()) c.fail("an entry shares more bytes than the previous key has");
    key.resize(shared);
    key.append(c.take(non_shared), non_shared);
    if (!out.empty() && !(out.back().first < key)) c.fail("keys out of order ('" + key + "')");
    out.emplace_back(key, std::string(c.take(value_len), value_len));
  }
}

Handle read_handle(Cursor& c) {
  Handle h;
  h.offset = c.varint();
  h.size = c.varint();
  return h;
}

void put_varint(std::string& s, uint64_t v) {
  while (v >= 0x80) {
    s.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  s.push_back(static_cast<char>(v));
}

void put_fixed32(std::string& s, uint32_t v) { s.append(reinterpret_cast<const char*>(&v), 4); }

// Accumulates one block's entries (prefix-compressed, restart every 16 keys).
class BlockBuilder {
 public:
  explicit BlockBuilder(int restart_interval = kRestartInterval) : interval_(restart_interval) {}
  void add(const std::string& key, const std::string& value) {
    size_t shared = 0;
    if (count_ % interval_ == 0) {
      restarts_.push_back(static_cast<uint32_t>(bytes_.size()));
    } else {
      while (shared < key.size() && shared < last_.size() && key[shared] == last_[shared]) ++shared;
    }
    put_varint(bytes_, shared);
    put_varint(bytes_, key.size() - shared);
    put_varint(bytes_, value.size());
    bytes_.append(key, shared, std::string::npos);
    bytes_ += value;
    last_ = key;
    ++count_;
  }
  size_t size() const { return bytes_.size() + 4 * (restarts_.size() + 1); }
  bool empty() const { return count_ == 0; }
  std::string finish() {
    if (restarts_.empty()) restarts_.push_back(0);
    std::string b = std::move(bytes_);
    for (uint32_t r : restarts_) put_fixed32(b, r);
    put_fixed32(b, static_cast<uint32_t>(restarts_.size()));
    *this = BlockBuilder(interval_);
    return b;
  }

 private:
  std::string bytes_, last_;
  std::vector<uint32_t> restarts_;
  int count_ = 0;
  int interval_;
};

// Appends a block and its trailer (type 0: uncompressed, as TensorFlow's BundleWriter writes
// its index) to `file`; returns its handle.
std::string write_block(std::string& file, const std::string& block) {
  std::string handle;
  put_varint(handle, file.size());
  put_varint(handle, block.size());
  file += block;
  const char type = 0;
  file.push_back(type);
  put_fixed32(file, crc32c::mask(crc32c::extend(crc32c::value(block.data(), block.size()), &type, 1)));
  return handle;
}

// LevelDB's bytewise comparator: a short key k with start <= k < limit, and a short key >= key.
std::string shortest_separator(std::string start, const std::string& limit) {
  size_t i = 0;
  while (i < start.size() && i < limit.size() && start[i] == limit[i]) ++i;
  if (i < start.size() && i < limit.size()) {
    const auto b = static_cast<uint8_t>(start[i]);
    if (b < 0xff && b + 1 < static_cast<uint8_t>(limit[i])) {
      start[i] = static_cast<char>(b + 1);
      start.resize(i + 1);
    }
  }
  return start;
}

std::string short_successor(std::string key) {
  for (size_t i = 0; i < key.size(); ++i)
    if (static_cast<uint8_t>(key[i]) != 0xff) {
      key[i] = static_cast<char>(static_cast<uint8_t>(key[i]) + 1);
      key.resize(i + 1);
      return key;
    }
  return key;
}

}  // namespace

TableEntries parse_table(const std::string& file, const std::string& path) {
  if (file.size() < kFooterSize)
    throw DataError(path + ": not a TensorFlow table: " + std::to_string(file.size()) +
                    " bytes, shorter than its 48-byte footer (truncated?)");
  const char* footer = file.data() + file.size() - kFooterSize;
  uint64_t magic;
  std::memcpy(&magic, footer + 40, 8);
  if (magic != kMagic)
    throw DataError(path +
                    ": not a TensorFlow checkpoint table (its last 8 bytes are not the table magic; "
                    "truncated, or another kind of file)");
  Cursor fc(footer, footer + 40, path, file.size() - kFooterSize);
  read_handle(fc);  // metaindex: TensorFlow writes it empty
  const Handle index = read_handle(fc);
  TableEntries handles;
  parse_block(read_block(file, index, path), path, index.offset, handles);
  TableEntries out;
  // Data blocks follow one another in the file, before the index: each is read once, so the
  // work is bounded by the file's size.
  uint64_t next = 0;
  for (const auto& [last_key, value] : handles) {
    Cursor hc(value.data(), value.data() + value.size(), path, index.offset);
    const Handle h = read_handle(hc);
    if (h.offset < next || h.offset > index.offset || h.size > index.offset - h.offset)
      throw DataError(where(path, -1, static_cast<int64_t>(index.offset),
                            "not a TensorFlow table: the index names a block at offset " + std::to_string(h.offset) +
                                " out of order (overlapping another, or past the index)"));
    next = h.offset + h.size + kTrailerSize;
    parse_block(read_block(file, h, path), path, h.offset, out);
  }
  return out;
}

TableEntries read_table(const std::string& path) { return parse_table(read_file(path), path); }

std::string build_table(const TableEntries& entries, size_t block_size) {
  std::string file;
  BlockBuilder data, index(/*restart_interval=*/1);  // every index entry a restart, as LevelDB
  std::string pending_handle;                        // of the last full block, indexed once the next key is known
  for (size_t i = 0; i < entries.size(); ++i) {
    const std::string& key = entries[i].first;
    if (i > 0 && !(entries[i - 1].first < key))
      throw Error("build_table: keys not in strictly increasing order at '" + key + "'");
    if (!pending_handle.empty()) {
      index.add(shortest_separator(entries[i - 1].first, key), pending_handle);
      pending_handle.clear();
    }
    data.add(key, entries[i].second);
    if (data.size() >= block_size) pending_handle = write_block(file, data.finish());
  }
  if (!data.empty()) pending_handle = write_block(file, data.finish());
  if (!pending_handle.empty()) index.add(short_successor(entries.back().first), pending_handle);
  const std::string metaindex = write_block(file, BlockBuilder().finish());
  const std::string index_handle = write_block(file, index.finish());
  std::string footer = metaindex + index_handle;
  footer.resize(40, '\0');
  footer.append(reinterpret_cast<const char*>(&kMagic), 8);
  return file + footer;
}

}  // namespace orchard::tf
