#include "orchard/core/tfrecord.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "orchard/core/crc32c.h"
#include "orchard/core/error.h"
#include "orchard/core/files.h"
#include "orchard/core/filesystem.h"

namespace orchard {
namespace {

void put_u64(char* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<char>((v >> (8 * i)) & 0xff);
}
void put_u32(char* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<char>((v >> (8 * i)) & 0xff);
}
uint64_t get_u64(const unsigned char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}
uint32_t get_u32(const unsigned char* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// A record longer than this is framing garbage, not data (TF caps at 2 GiB as well in practice).
constexpr uint64_t kMaxRecordBytes = uint64_t{1} << 31;
// A compressed file's size says nothing of its content: a record is read in pieces of at most
// this many bytes, so a length field claiming gigabytes allocates only what the file holds.
constexpr uint64_t kReadPieceBytes = uint64_t{1} << 24;

// "expected L data bytes + 4 CRC bytes, R left in the file" for a record whose length field
// reaches past the end of the file.
std::string beyond_end(uint64_t len, uint64_t left) {
  return "truncated record: length field says " + std::to_string(len) + " data bytes + 4 CRC bytes, " +
         std::to_string(left) + " bytes left in the file";
}

}  // namespace

Compression parse_compression(const std::string& name) {
  if (name.empty() || name == "NONE" || name == "none") return Compression::kNone;
  if (name == "GZIP" || name == "gzip") return Compression::kGzip;
  throw Error("unknown TFRecord compression '" + name + "' (use NONE or GZIP)");
}

// A file on an object store, read front to back in blocks (fs::SequentialReader's ranged
// reads) and inflated when it starts with the gzip magic (several gzip members in a row are
// read as one stream, as gzread does).
struct TFRecordReader::ObjectSource {
  explicit ObjectSource(fs::SequentialReader r) : reader(std::move(r)) {
    in.resize(1 << 18);
    fill();
    gzip = avail >= 2 && static_cast<unsigned char>(in[0]) == 0x1f && static_cast<unsigned char>(in[1]) == 0x8b;
    if (gzip && inflateInit2(&z, 16 + MAX_WBITS) != Z_OK) throw DataError("cannot start gzip decoding");
  }
  ~ObjectSource() {
    if (gzip) inflateEnd(&z);
  }
  void fill() {
    pos = 0;
    avail = reader.read(in.data(), in.size());
  }
  // Up to n bytes (0 only at the end of the data).
  size_t read(char* dst, size_t n, const std::string& path) {
    if (!gzip) {
      size_t got = 0;
      while (got < n) {
        if (pos == avail) {
          fill();
          if (avail == 0) break;
        }
        const size_t take = std::min(n - got, avail - pos);
        std::memcpy(dst + got, in.data() + pos, take);
        pos += take;
        got += take;
      }
      return got;
    }
    z.next_out = reinterpret_cast<Bytef*>(dst);
    z.avail_out = static_cast<uInt>(std::min<size_t>(n, 1u << 30));
    while (z.avail_out > 0) {
      if (pos == avail) {
        fill();
        if (avail == 0) {
          if (!ended) throw DataError(path + ": gzip data ends early (truncated file)");
          break;
        }
      }
      if (ended) {  // another gzip member follows the one that ended
        if (inflateReset(&z) != Z_OK) throw DataError(path + ": gzip reset failed");
        ended = false;
      }
      z.next_in = reinterpret_cast<Bytef*>(in.data() + pos);
      z.avail_in = static_cast<uInt>(avail - pos);
      const int rc = inflate(&z, Z_NO_FLUSH);
      pos = avail - z.avail_in;
      if (rc == Z_STREAM_END) {
        ended = true;
      } else if (rc != Z_OK && rc != Z_BUF_ERROR) {
        throw DataError(path + ": gzip data corrupt: " + (z.msg ? z.msg : "inflate failed"));
      }
    }
    return static_cast<size_t>(reinterpret_cast<char*>(z.next_out) - dst);
  }

  fs::SequentialReader reader;
  std::string in;
  size_t pos = 0, avail = 0;
  bool gzip = false;
  bool ended = false;  // the current gzip member is complete
  z_stream z{};
};

TFRecordReader::TFRecordReader(std::string path, TFRecordReaderOptions options)
    : TFRecordReader(std::move(path), options, nullptr, "") {}

TFRecordReader::TFRecordReader(std::string path, TFRecordReaderOptions options, fs::ShardPrefetcher* prefetcher,
                               const std::string& next)
    : path_(std::move(path)), options_(options) {
  if (!is_local_path(path_)) {
    const auto st = fs::stat(path_);
    if (!st) throw DataError(path_ + ": cannot open: no such object");
    object_ = std::make_unique<ObjectSource>(prefetcher ? prefetcher->open(path_, next) : fs::SequentialReader(path_));
    if (!object_->gzip) plain_size_ = static_cast<uint64_t>(st->size);
    return;
  }
  path_ = local_path(path_);
  gzFile gz = gzopen(path_.c_str(), "rb");
  if (!gz) throw DataError(path_ + ": cannot open: " + std::strerror(errno));
  gzbuffer(gz, 1 << 18);
  gz_ = gz;
  // A plain file's size bounds every record: a length past it is an error before any allocation.
  struct stat st {};
  if (gzdirect(gz) == 1 && ::stat(path_.c_str(), &st) == 0 && S_ISREG(st.st_mode))
    plain_size_ = static_cast<uint64_t>(st.st_size);
}

TFRecordReader::~TFRecordReader() {
  if (gz_) gzclose(static_cast<gzFile>(gz_));
}

size_t TFRecordReader::read_fully(void* dst, size_t n) {
  auto* p = static_cast<char*>(dst);
  size_t got = 0;
  if (object_) {
    while (got < n) {
      const size_t r = object_->read(p + got, n - got, path_);
      if (r == 0) break;
      got += r;
    }
    return got;
  }
  while (got < n) {
    unsigned chunk = static_cast<unsigned>(std::min<size_t>(n - got, 1u << 30));
    int r = gzread(static_cast<gzFile>(gz_), p + got, chunk);
    if (r < 0) {
      int errnum = 0;
      const char* msg = gzerror(static_cast<gzFile>(gz_), &errnum);
      throw DataError(where(path_, index_, static_cast<int64_t>(offset_), std::string("read failed: ") + msg));
    }
    if (r == 0) break;
    got += static_cast<size_t>(r);
  }
  return got;
}

void TFRecordReader::corrupt(const std::string& what, uint64_t at) {
  if (!options_.skip_corrupt_records)
    throw DataError(where(path_, index_, static_cast<int64_t>(at),
                          what + " (not a TFRecord file, or corrupt; "
                                 "--skip_corrupt_records skips such records)"));
  ++skipped_;
  skipped_log_.push_back(where(path_, index_, static_cast<int64_t>(at), what));
}

bool TFRecordReader::next(std::string* record) {
  while (!stop_) {
    const uint64_t start = offset_;
    unsigned char header[12];
    size_t got = read_fully(header, sizeof header);
    if (got == 0) return false;
    if (got < sizeof header) {
      stop_ = true;
      corrupt("truncated record header (" + std::to_string(got) + " of 12 bytes)", start);
      return false;
    }
    const uint64_t len = get_u64(header);
    if (options_.verify_crc && crc32c::mask(crc32c::value(header, 8)) != get_u32(header + 8)) {
      // The length cannot be trusted, so nothing after it can be found: stop this file.
      stop_ = true;
      corrupt("length CRC mismatch", start);
      return false;
    }
    if (len > kMaxRecordBytes) {
      stop_ = true;
      corrupt("implausible record length " + std::to_string(len), start);
      return false;
    }
    if (plain_size_ && (plain_size_ - start - 12 < len || plain_size_ - start - 12 - len < 4)) {
      // start + 12 <= plain_size_ here: the header was read in full.
      stop_ = true;
      corrupt(beyond_end(len, plain_size_ - start - 12), start);
      return false;
    }
    record->clear();
    size_t body = 0;
    while (body < len) {
      const size_t piece = static_cast<size_t>(std::min<uint64_t>(len - body, kReadPieceBytes));
      record->resize(body + piece);
      const size_t got_piece = read_fully(record->data() + body, piece);
      body += got_piece;
      if (got_piece < piece) break;
    }
    unsigned char footer[4];
    size_t foot = body == len ? read_fully(footer, 4) : 0;
    offset_ = start + 12 + body + foot;
    if (body < len || foot < 4) {
      stop_ = true;
      corrupt("truncated record: expected " + std::to_string(len) + " data bytes + 4 CRC bytes, file ends after " +
                  std::to_string(body + foot),
              start);
      return false;
    }
    if (options_.verify_crc && crc32c::mask(crc32c::value(record->data(), len)) != get_u32(footer)) {
      corrupt("data CRC mismatch", start);
      ++index_;
      continue;  // framing is intact: the next record can still be read
    }
    ++index_;
    return true;
  }
  return false;
}

std::string frame_record(const std::string& data) {
  std::string out(data.size() + 16, '\0');
  put_u64(out.data(), data.size());
  put_u32(out.data() + 8, crc32c::mask(crc32c::value(out.data(), 8)));
  std::memcpy(out.data() + 12, data.data(), data.size());
  put_u32(out.data() + 12 + data.size(), crc32c::mask(crc32c::value(data.data(), data.size())));
  return out;
}

TFRecordWriter::TFRecordWriter(std::string path, Compression compression)
    : path_(std::move(path)), compression_(compression) {
  upload_ = !is_local_path(path_);
  if (upload_) {
    // The object is uploaded whole by close(); the records wait in a local temporary file.
    tmp_path_ = make_temporary_file("upload");
  } else {
    path_ = local_path(path_);
    tmp_path_ = path_ + ".tmp-" + std::to_string(::getpid());
  }
  if (compression_ == Compression::kGzip) {
    gzFile gz = gzopen(tmp_path_.c_str(), "wb6");
    if (!gz) throw Error(tmp_path_ + ": cannot create: " + std::strerror(errno));
    gzbuffer(gz, 1 << 18);
    gz_ = gz;
  } else {
    file_ = std::fopen(tmp_path_.c_str(), "wb");
    if (!file_) throw Error(tmp_path_ + ": cannot create: " + std::strerror(errno));
  }
}

TFRecordWriter::~TFRecordWriter() {
  if (gz_ || file_) {
    if (gz_) gzclose(static_cast<gzFile>(gz_));
    if (file_) std::fclose(file_);
    std::remove(tmp_path_.c_str());
  }
}

void TFRecordWriter::put(const void* data, size_t n) {
  if (gz_) {
    if (n && gzwrite(static_cast<gzFile>(gz_), data, static_cast<unsigned>(n)) != static_cast<int>(n))
      throw Error(tmp_path_ + ": write failed");
  } else if (n && std::fwrite(data, 1, n, file_) != n) {
    throw Error(tmp_path_ + ": write failed: " + std::strerror(errno));
  }
}

void TFRecordWriter::write(const void* data, size_t n) {
  char header[12];
  put_u64(header, n);
  put_u32(header + 8, crc32c::mask(crc32c::value(header, 8)));
  char footer[4];
  put_u32(footer, crc32c::mask(crc32c::value(data, n)));
  put(header, 12);
  put(data, n);
  put(footer, 4);
  ++count_;
}

void TFRecordWriter::close() {
  if (gz_) {
    gzFile gz = static_cast<gzFile>(gz_);
    gz_ = nullptr;
    if (gzclose(gz) != Z_OK) {
      std::remove(tmp_path_.c_str());
      throw Error(tmp_path_ + ": gzip close failed");
    }
    int fd = ::open(tmp_path_.c_str(), O_RDONLY);
    if (fd >= 0) {
      ::fsync(fd);
      ::close(fd);
    }
  } else if (file_) {
    bool ok = std::fflush(file_) == 0 && ::fsync(fileno(file_)) == 0;
    ok = std::fclose(file_) == 0 && ok;
    file_ = nullptr;
    if (!ok) {
      const int e = errno;
      std::remove(tmp_path_.c_str());
      throw Error(tmp_path_ + ": flush failed: " + std::strerror(e));
    }
  } else {
    return;
  }
  if (upload_) {
    std::string bytes;
    try {
      bytes = read_file(tmp_path_);
    } catch (...) {
      std::remove(tmp_path_.c_str());
      throw;
    }
    std::remove(tmp_path_.c_str());
    fs::write_file(path_, bytes);
    return;
  }
  if (std::rename(tmp_path_.c_str(), path_.c_str()) != 0)
    throw Error(path_ + ": rename failed: " + std::strerror(errno));
}

}  // namespace orchard

namespace orchard {

int64_t count_records_fast(const std::string& url, bool stop_at_damage) {
  if (!is_local_path(url)) {
    // No seeks on an object store: one request per record would cost more than reading the
    // file in blocks, which the reader does (CRCs of the data are not checked).
    TFRecordReader r(url, TFRecordReaderOptions{false, stop_at_damage});
    std::string rec;
    int64_t n = 0;
    while (r.next(&rec)) ++n;
    return n;
  }
  const std::string path = local_path(url);
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) throw DataError(path + ": cannot open: " + std::strerror(errno));
  unsigned char magic[2] = {0, 0};
  const bool gz = std::fread(magic, 1, 2, f) == 2 && magic[0] == 0x1f && magic[1] == 0x8b;
  if (gz) {
    std::fclose(f);
    TFRecordReader r(path, TFRecordReaderOptions{false, stop_at_damage});
    std::string rec;
    int64_t n = 0;
    while (r.next(&rec)) ++n;
    return n;
  }
  struct stat st {};
  if (::fstat(fileno(f), &st) != 0) {
    std::fclose(f);
    throw DataError(path + ": cannot stat: " + std::strerror(errno));
  }
  // All offsets are unsigned and compared before they are added, so no length field (up to
  // 2^64 - 1) can wrap them or make a signed sum overflow.
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  int64_t n = 0;
  uint64_t off = 0;
  std::string damage;
  while (off < size) {
    unsigned char header[12];
    if (size - off < 12) {
      damage = "truncated record header (" + std::to_string(size - off) + " of 12 bytes)";
      break;
    }
    if (::fseeko(f, static_cast<off_t>(off), SEEK_SET) != 0 || std::fread(header, 1, 12, f) != 12) {
      damage = "cannot read the record header";
      break;
    }
    if (crc32c::mask(crc32c::value(header, 8)) != get_u32(header + 8)) {
      damage = "length CRC mismatch (not a TFRecord file, or corrupt)";
      break;
    }
    const uint64_t len = get_u64(header);
    const uint64_t left = size - off - 12;
    if (len > left || left - len < 4) {
      damage = beyond_end(len, left);
      break;
    }
    off += 12 + len + 4;
    ++n;
  }
  std::fclose(f);
  if (!damage.empty() && !stop_at_damage) throw DataError(where(path, n, static_cast<int64_t>(off), damage));
  return n;
}

}  // namespace orchard
