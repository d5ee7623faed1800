// TensorFlow's immutable sorted string table (tensorflow/core/lib/io/table*, LevelDB's
// format): the `.index` file of a V2 checkpoint and the whole of a V1 (TensorSlice) one.
//
//   file   = data block* metaindex block, index block, footer
//   block  = entry* restart[fixed32]* num_restarts[fixed32], then a 5-byte trailer:
//            type (0 raw, 1 snappy) and the masked CRC-32C of the block bytes and type
//   entry  = shared[varint32] non_shared[varint32] value_len[varint32] key_delta value
//            (the key is the previous key's first `shared` bytes + key_delta)
//   index  = one entry per data block: a key >= the block's last key, value = its handle
//   handle = offset[varint64] size[varint64] (size without the trailer)
//   footer = metaindex handle, index handle, zero padding to 40 bytes, magic
//            0xdb4775248b80fb57 (fixed64): the last 48 bytes
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace orchard::tf {

using TableEntries = std::vector<std::pair<std::string, std::string>>;

// Every entry of the table file `path`, in key order. Block checksums are verified;
// truncated or damaged files throw DataError naming the file and the offset.
TableEntries read_table(const std::string& path);
// The same, from the file's bytes (`path` only names it in errors).
TableEntries parse_table(const std::string& bytes, const std::string& path);

// A table's bytes from entries in strictly increasing key order, as TensorFlow's BundleWriter
// writes its index: uncompressed blocks of about `block_size` bytes, a restart point every 16
// keys, index keys shortened (LevelDB's FindShortestSeparator / FindShortSuccessor). (Older
// TensorFlow versions snappy-compressed blocks; the reader takes both.)
std::string build_table(const TableEntries& entries, size_t block_size = 262144);

}  // namespace orchard::tf
