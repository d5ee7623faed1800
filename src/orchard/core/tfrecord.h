// TFRecord files, byte-compatible with TensorFlow's tf.io.TFRecordWriter / TFRecordDataset:
//   uint64 length (little-endian) | uint32 masked crc32c(length) | data | uint32 masked crc32c(data)
// Plain or GZIP-compressed (compression is detected on read from the gzip magic bytes).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace orchard {
namespace fs {
class ShardPrefetcher;
}

enum class Compression { kNone, kGzip };

// Parses "", "NONE", "GZIP" (TensorFlow's compression_type strings).
Compression parse_compression(const std::string& name);

struct TFRecordReaderOptions {
  bool verify_crc = true;
  // Skip a record whose CRC is wrong (and the rest of a file whose framing is broken)
  // instead of throwing; skipped records are counted in TFRecordReader::skipped().
  bool skip_corrupt_records = false;
};

class TFRecordReader {
 public:
  explicit TFRecordReader(std::string path, TFRecordReaderOptions options = {});
  // An object-store file read through `prefetcher` (which may hold its first blocks already),
  // starting the fetch of `next` (the file to be read after it, "" for none) before this one
  // ends, so that moving on to the next shard costs no round trip. Local files as above.
  TFRecordReader(std::string path, TFRecordReaderOptions options, fs::ShardPrefetcher* prefetcher,
                 const std::string& next);
  ~TFRecordReader();
  TFRecordReader(const TFRecordReader&) = delete;
  TFRecordReader& operator=(const TFRecordReader&) = delete;

  // Reads the next record into *record. Returns false at the end of the file.
  // Throws DataError naming the file, record index and byte offset for corrupt or
  // truncated data (unless skip_corrupt_records).
  bool next(std::string* record);

  const std::string& path() const { return path_; }
  int64_t records_read() const { return index_; }  // index of the next record
  int64_t skipped() const { return skipped_; }
  // One line per skipped record, "file: record N (byte offset X): why", in the order skipped.
  const std::vector<std::string>& skipped_log() const { return skipped_log_; }
  uint64_t offset() const { return offset_; }  // uncompressed byte offset of the next record

 private:
  // Reads exactly n bytes; returns the number read (< n only at end of file).
  size_t read_fully(void* dst, size_t n);
  void corrupt(const std::string& what, uint64_t at);

  struct ObjectSource;  // an object-store file: blocks by ranged reads, inflated when GZIP

  std::string path_;
  TFRecordReaderOptions options_;
  void* gz_ = nullptr;  // gzFile; zlib reads plain files transparently
  std::unique_ptr<ObjectSource> object_;
  uint64_t offset_ = 0;
  int64_t index_ = 0;
  int64_t skipped_ = 0;
  std::vector<std::string> skipped_log_;
  uint64_t plain_size_ = 0;  // an uncompressed file's size (0: compressed, or not a regular file)
  bool stop_ = false;
};

// Writes to "<path>.tmp-<pid>" and renames to path on close(), so a killed writer never
// leaves a half-written file under the final name. For an object-store path the records go to
// a local temporary file, uploaded as one object by close().
class TFRecordWriter {
 public:
  explicit TFRecordWriter(std::string path, Compression compression = Compression::kNone);
  ~TFRecordWriter();  // discards the temporary file if close() was not called
  TFRecordWriter(const TFRecordWriter&) = delete;
  TFRecordWriter& operator=(const TFRecordWriter&) = delete;

  void write(const void* data, size_t n);
  void write(const std::string& record) { write(record.data(), record.size()); }
  void close();  // flush, fsync, rename
  int64_t records_written() const { return count_; }

 private:
  void put(const void* data, size_t n);

  std::string path_;
  std::string tmp_path_;
  bool upload_ = false;  // path_ is on an object store: close() uploads tmp_path_
  Compression compression_;
  void* gz_ = nullptr;
  std::FILE* file_ = nullptr;
  int64_t count_ = 0;
};

// Encodes one framed record (for golden tests and in-memory use).
std::string frame_record(const std::string& data);

}  // namespace orchard

namespace orchard {
// Counts records by walking the length headers (data is skipped, CRCs not checked), so
// counting ImageNet's 1024 shards costs seeks, not reads. GZIP files are decompressed. Broken
// framing (a truncated file, a bad length CRC) throws DataError naming file, record and offset,
// or with stop_at_damage ends the count there (the records a skipping reader delivers).
int64_t count_records_fast(const std::string& path, bool stop_at_damage = false);
}  // namespace orchard
