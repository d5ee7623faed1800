#include "orchard/core/tfrecord.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <zlib.h>

#include <string>
#include <vector>

#include "core/test_util.h"
#include "orchard/core/error.h"

namespace orchard {
namespace {

using test::from_hex;
using test::read_bytes;
using test::TempDir;
using test::write_bytes;

// Golden framings worked out independently of the code under test (little-endian length,
// masked CRC-32C of the 8 length bytes, data, masked CRC-32C of the data), with a bitwise
// CRC-32C in Python.
const char* kHelloFramed =
    "0500000000000000"
    "eab2043e"
    "68656c6c6f"
    "bb1f1c19";
const char* kEmptyFramed =
    "0000000000000000"
    "29039807"
    "d8ea82a2";

std::vector<std::string> sample_records() {
  return {"first", "", std::string(1, '\0'), test::random_bytes(1000, 1), test::random_bytes(70000, 2), "last"};
}

void write_records(const std::string& path, const std::vector<std::string>& records,
                   Compression compression = Compression::kNone) {
  TFRecordWriter w(path, compression);
  for (const auto& r : records) w.write(r);
  EXPECT_EQ(w.records_written(), static_cast<int64_t>(records.size()));
  w.close();
}

std::vector<std::string> read_all(const std::string& path, TFRecordReaderOptions options = {}) {
  TFRecordReader r(path, options);
  std::vector<std::string> out;
  std::string rec;
  while (r.next(&rec)) out.push_back(rec);
  return out;
}

using test::expect_data_error;

TEST(TFRecord, FrameRecordMatchesGoldenBytes) {
  EXPECT_EQ(test::to_hex(frame_record("hello")), kHelloFramed);
  EXPECT_EQ(test::to_hex(frame_record("")), kEmptyFramed);
}

TEST(TFRecord, WriterProducesGoldenFile) {
  TempDir dir;
  write_records(dir.file("golden.tfrecord"), {"hello", ""});
  EXPECT_EQ(test::to_hex(read_bytes(dir.file("golden.tfrecord"))), std::string(kHelloFramed) + kEmptyFramed);
}

TEST(TFRecord, ReaderReadsHandBuiltFile) {
  TempDir dir;
  write_bytes(dir.file("hand.tfrecord"), from_hex(std::string(kEmptyFramed) + kHelloFramed));
  EXPECT_EQ(read_all(dir.file("hand.tfrecord")), (std::vector<std::string>{"", "hello"}));
}

TEST(TFRecord, PlainRoundTripTracksOffsetAndCount) {
  TempDir dir;
  const auto records = sample_records();
  const std::string path = dir.file("plain.tfrecord");
  write_records(path, records);

  uint64_t expected_size = 0;
  for (const auto& r : records) expected_size += r.size() + 16;
  EXPECT_EQ(read_bytes(path).size(), expected_size);

  TFRecordReader r(path);
  EXPECT_EQ(r.path(), path);
  EXPECT_EQ(r.records_read(), 0);
  EXPECT_EQ(r.offset(), 0u);
  std::string rec;
  uint64_t offset = 0;
  for (size_t i = 0; i < records.size(); ++i) {
    ASSERT_TRUE(r.next(&rec)) << "record " << i;
    EXPECT_EQ(rec, records[i]) << "record " << i;
    offset += records[i].size() + 16;
    EXPECT_EQ(r.records_read(), static_cast<int64_t>(i + 1));
    EXPECT_EQ(r.offset(), offset);
  }
  EXPECT_FALSE(r.next(&rec));
  EXPECT_FALSE(r.next(&rec));  // stays at the end
  EXPECT_EQ(r.records_read(), static_cast<int64_t>(records.size()));
  EXPECT_EQ(r.skipped(), 0);
}

TEST(TFRecord, GzipRoundTrip) {
  TempDir dir;
  const auto records = sample_records();
  const std::string path = dir.file("z.tfrecord.gz");
  write_records(path, records, Compression::kGzip);
  const std::string raw = read_bytes(path);
  ASSERT_GE(raw.size(), 2u);
  EXPECT_EQ(static_cast<unsigned char>(raw[0]), 0x1f);  // gzip magic
  EXPECT_EQ(static_cast<unsigned char>(raw[1]), 0x8b);

  TFRecordReader r(path);
  std::string rec;
  uint64_t offset = 0;
  for (const auto& expected : records) {
    ASSERT_TRUE(r.next(&rec));
    EXPECT_EQ(rec, expected);
    offset += expected.size() + 16;
    EXPECT_EQ(r.offset(), offset);  // offsets count uncompressed bytes
  }
  EXPECT_FALSE(r.next(&rec));
}

TEST(TFRecord, GzipFileDecompressesToPlainFraming) {
  TempDir dir;
  write_records(dir.file("z"), {"hello", ""}, Compression::kGzip);
  write_records(dir.file("p"), {"hello", ""});
  EXPECT_EQ(test::to_hex(read_bytes(dir.file("p"))), std::string(kHelloFramed) + kEmptyFramed);
  EXPECT_EQ(read_all(dir.file("z")), read_all(dir.file("p")));
}

TEST(TFRecord, ParseCompression) {
  EXPECT_EQ(parse_compression(""), Compression::kNone);
  EXPECT_EQ(parse_compression("NONE"), Compression::kNone);
  EXPECT_EQ(parse_compression("GZIP"), Compression::kGzip);
  EXPECT_THROW(parse_compression("ZSTD"), Error);
}

// Three records "aaaa", "bbbb", "cccc": record i starts at byte 20 * i.
std::string three_records(const TempDir& dir) {
  const std::string path = dir.file("three.tfrecord");
  write_records(path, {"aaaa", "bbbb", "cccc"});
  return path;
}

TEST(TFRecord, DataCrcMismatchNamesFileRecordAndOffset) {
  TempDir dir;
  const std::string path = three_records(dir);
  std::string bytes = read_bytes(path);
  bytes[20 + 12 + 1] ^= 0x01;  // a data byte of record 1
  write_bytes(path, bytes);

  TFRecordReader r(path);
  std::string rec;
  ASSERT_TRUE(r.next(&rec));
  EXPECT_EQ(rec, "aaaa");
  expect_data_error([&] { r.next(&rec); }, {path, "record 1", "offset 20", "CRC"});
}

TEST(TFRecord, SkipCorruptRecordsSkipsBadDataAndReadsTheNext) {
  TempDir dir;
  const std::string path = three_records(dir);
  std::string bytes = read_bytes(path);
  bytes[20 + 12 + 1] ^= 0x01;
  write_bytes(path, bytes);

  TFRecordReaderOptions opt;
  opt.skip_corrupt_records = true;
  TFRecordReader r(path, opt);
  std::string rec;
  ASSERT_TRUE(r.next(&rec));
  EXPECT_EQ(rec, "aaaa");
  ASSERT_TRUE(r.next(&rec));
  EXPECT_EQ(rec, "cccc");
  EXPECT_FALSE(r.next(&rec));
  EXPECT_EQ(r.skipped(), 1);
  EXPECT_EQ(r.offset(), 60u);
}

TEST(TFRecord, CorruptDataCrcIsIgnoredWithoutVerification) {
  TempDir dir;
  const std::string path = three_records(dir);
  std::string bytes = read_bytes(path);
  bytes[20 + 12 + 1] ^= 0x01;  // 'b' -> 'c'
  write_bytes(path, bytes);
  TFRecordReaderOptions opt;
  opt.verify_crc = false;
  EXPECT_EQ(read_all(path, opt), (std::vector<std::string>{"aaaa", "bcbb", "cccc"}));
}

TEST(TFRecord, LengthCrcMismatchStopsTheFile) {
  TempDir dir;
  const std::string path = three_records(dir);
  std::string bytes = read_bytes(path);
  bytes[20 + 9] ^= 0x40;  // the length CRC of record 1
  write_bytes(path, bytes);
  expect_data_error([&] { read_all(path); }, {path, "record 1", "offset 20", "length"});

  TFRecordReaderOptions opt;
  opt.skip_corrupt_records = true;
  TFRecordReader r(path, opt);
  std::string rec;
  ASSERT_TRUE(r.next(&rec));
  EXPECT_EQ(rec, "aaaa");
  EXPECT_FALSE(r.next(&rec));  // framing after a bad length cannot be trusted
  EXPECT_EQ(r.skipped(), 1);
}

TEST(TFRecord, TruncatedFilesAreDataErrors) {
  TempDir dir;
  const std::string full = read_bytes(three_records(dir));
  struct Case {
    const char* name;
    size_t keep;  // bytes kept
  } cases[] = {
      {"header_only", 20 + 12},       // record 1: header, no data
      {"partial_data", 20 + 12 + 2},  // record 1: 2 of 4 data bytes
      {"no_data_crc", 20 + 12 + 4},   // record 1: data but no CRC
      {"partial_header", 20 + 5},     // record 1: 5 of 12 header bytes
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string path = dir.file(c.name);
    write_bytes(path, full.substr(0, c.keep));
    TFRecordReader r(path);
    std::string rec;
    ASSERT_TRUE(r.next(&rec));
    EXPECT_EQ(rec, "aaaa");
    expect_data_error([&] { r.next(&rec); }, {path, "record 1", "truncated"});

    TFRecordReaderOptions opt;
    opt.skip_corrupt_records = true;
    TFRecordReader skipping(path, opt);
    ASSERT_TRUE(skipping.next(&rec));
    EXPECT_FALSE(skipping.next(&rec));
    EXPECT_EQ(skipping.skipped(), 1);
  }
}

TEST(TFRecord, TruncatedGzipIsADataError) {
  TempDir dir;
  const std::string path = dir.file("z");
  write_records(path, {test::random_bytes(50000, 3), test::random_bytes(50000, 4)}, Compression::kGzip);
  const std::string bytes = read_bytes(path);
  write_bytes(path, bytes.substr(0, bytes.size() / 2));
  expect_data_error([&] { read_all(path); }, {path});
}

TEST(TFRecord, TextFileIsNotATFRecord) {
  TempDir dir;
  const std::string path = dir.file("notes.txt");
  write_bytes(path, "This is a plain text file.\nIt has a few lines but no TFRecord framing at all.\n");
  expect_data_error([&] { read_all(path); }, {path, "not a TFRecord"});
  write_bytes(path, "hi\n");  // shorter than one header
  expect_data_error([&] { read_all(path); }, {path});
}

TEST(TFRecord, EmptyFileHasNoRecords) {
  TempDir dir;
  write_bytes(dir.file("empty"), "");
  EXPECT_TRUE(read_all(dir.file("empty")).empty());
}

TEST(TFRecord, MissingFileNamesThePath) {
  TempDir dir;
  const std::string path = dir.file("missing.tfrecord");
  expect_data_error([&] { TFRecordReader r(path); }, {path});
}

TEST(TFRecord, CountRecordsFast) {
  TempDir dir;
  const auto records = sample_records();
  write_records(dir.file("plain"), records);
  write_records(dir.file("gz"), records, Compression::kGzip);
  EXPECT_EQ(count_records_fast(dir.file("plain")), static_cast<int64_t>(records.size()));
  EXPECT_EQ(count_records_fast(dir.file("gz")), static_cast<int64_t>(records.size()));
  write_bytes(dir.file("empty"), "");
  EXPECT_EQ(count_records_fast(dir.file("empty")), 0);

  const std::string full = read_bytes(three_records(dir));
  write_bytes(dir.file("cut"), full.substr(0, 20 + 12 + 2));
  expect_data_error([&] { count_records_fast(dir.file("cut")); }, {dir.file("cut"), "truncated"});
  write_bytes(dir.file("cut_header"), full.substr(0, 20 + 5));
  expect_data_error([&] { count_records_fast(dir.file("cut_header")); }, {dir.file("cut_header")});
  write_bytes(dir.file("text"), "This is a plain text file, not a TFRecord file at all.\n");
  expect_data_error([&] { count_records_fast(dir.file("text")); }, {dir.file("text")});
  expect_data_error([&] { count_records_fast(dir.file("missing")); }, {dir.file("missing")});
}

// A record header whose length field is `len` with a valid length CRC (what a damaged or
// hostile file can hold: the CRC covers only the 8 length bytes).
std::string header_claiming(uint64_t len) {
  std::string framed = frame_record("");
  for (int i = 0; i < 8; ++i) framed[i] = static_cast<char>((len >> (8 * i)) & 0xff);
  return framed.substr(0, 8) + frame_record(framed.substr(0, 8)).substr(12 + 8, 4) + "data";
}

// Peak resident memory of this process in MiB (Linux reports ru_maxrss in KiB).
long peak_rss_mib() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss / 1024;
}

// Length fields near 2^64 wrapped the counter's offset (an endless loop in `train`), near 2^63
// overflowed a signed sum, and up to 2^31 were allocated in full before a byte was read. Each
// is now an error naming file, record and offset, before any allocation.
TEST(TFRecord, LengthFieldsPastTheEndOfTheFileAreErrorsBeforeAllocation) {
  TempDir dir;
  const std::string good = frame_record("aaaa");  // 20 bytes: the bad header is record 1 at offset 20
  const long rss_before = peak_rss_mib();
  for (const uint64_t len : {~uint64_t{0}, ~uint64_t{0} - 15, uint64_t{1} << 63, (uint64_t{1} << 63) - 1,
                             (uint64_t{1} << 31) - 1, uint64_t{1} << 31, uint64_t{1000}}) {
    SCOPED_TRACE(len);
    const std::string path = dir.file("bad");
    write_bytes(path, good + header_claiming(len));
    expect_data_error([&] { count_records_fast(path); }, {path, "record 1", "byte offset 20", "truncated"});
    expect_data_error([&] { read_all(path); }, {path, "record 1", "byte offset 20"});
    TFRecordReaderOptions skip;
    skip.skip_corrupt_records = true;
    TFRecordReader r(path, skip);
    std::string rec;
    ASSERT_TRUE(r.next(&rec));
    EXPECT_FALSE(r.next(&rec));
    EXPECT_EQ(r.skipped(), 1);

    // The same bytes gzip-compressed: the size is unknown, so the reader reads in pieces.
    const std::string gz = dir.file("bad.gz");
    gzFile out = gzopen(gz.c_str(), "wb");
    ASSERT_NE(out, nullptr);
    const std::string bytes = good + header_claiming(len);
    ASSERT_EQ(gzwrite(out, bytes.data(), static_cast<unsigned>(bytes.size())), static_cast<int>(bytes.size()));
    gzclose(out);
    expect_data_error([&] { read_all(gz); }, {gz, "record 1", "byte offset 20"});
    expect_data_error([&] { count_records_fast(gz); }, {gz, "record 1"});
  }
  EXPECT_LT(peak_rss_mib() - rss_before, 256) << "a length field was allocated in full";
}

TEST(TFRecordWriter, NothingUnderTheFinalNameWithoutClose) {
  TempDir dir;
  const std::string path = dir.file("out.tfrecord");
  {
    TFRecordWriter w(path);
    w.write("one");
    w.write("two");
  }  // destroyed without close()
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_TRUE(test::list_dir(dir.str()).empty()) << "temporary file left behind";

  {
    TFRecordWriter w(path, Compression::kGzip);
    w.write("one");
  }
  EXPECT_TRUE(test::list_dir(dir.str()).empty());
}

TEST(TFRecordWriter, ReplacesAnExistingFileOnlyOnClose) {
  TempDir dir;
  const std::string path = dir.file("out.tfrecord");
  write_bytes(path, "old contents");
  TFRecordWriter w(path);
  w.write("new");
  EXPECT_EQ(read_bytes(path), "old contents");
  w.close();
  EXPECT_EQ(read_all(path), std::vector<std::string>{"new"});
  EXPECT_EQ(test::list_dir(dir.str()), std::vector<std::string>{"out.tfrecord"});
  w.close();  // a second close is harmless
  EXPECT_EQ(read_all(path), std::vector<std::string>{"new"});
}

TEST(TFRecordWriter, UnwritableDirectoryIsAnError) {
  EXPECT_THROW(TFRecordWriter("/nonexistent-orchard-dir/x.tfrecord"), Error);
}

}  // namespace
}  // namespace orchard
