// Regression tests for what tfrecord_fuzzer found (fuzz/README.md, issue 31). The reproducers
// are files under tests/fixtures/fuzz/tfrecord/.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <filesystem>
#include <string>
#include <utility>

#include "core/test_util.h"
#include "orchard/core/crc32c.h"
#include "orchard/core/error.h"
#include "orchard/core/tfrecord.h"

namespace orchard {
namespace {

const std::filesystem::path kFuzzFixtures = std::filesystem::path(ORCHARD_TEST_FIXTURES) / "fuzz" / "tfrecord";

int64_t peak_rss_bytes() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return int64_t{usage.ru_maxrss} * 1024;
}

// Finding tfrecord-1: a 53-byte file whose first header claims a 2,013,528,064-byte record
// (fixtures/fuzz/tfrecord/oom-huge-record-length.tfrecord, found with verify_crc = false, which
// checks no CRC), and the same header with a valid length CRC, which any reader accepts.
// TFRecordReader::next() resizes the record to the claimed length before reading it, so every
// reader of such a shard allocates and zero-fills up to 2 GiB before it finds the file too short.
// It must fail as a truncated record without holding more memory than the file has bytes.
// (It held 2 GiB of peak RSS before the reader bounded records by the file size and read
// compressed ones in pieces.)
TEST(FuzzRegression, HugeClaimedRecordLengthFailsWithoutAllocatingIt) {
  const std::string found = (kFuzzFixtures / "oom-huge-record-length.tfrecord").string();
  test::TempDir dir;
  const std::string framed = dir.file("framed.tfrecord");
  std::string bytes = test::read_bytes(found);
  const uint32_t length_crc = crc32c::mask(crc32c::value(bytes.data(), 8));
  for (int i = 0; i < 4; ++i) bytes[8 + i] = static_cast<char>((length_crc >> (8 * i)) & 0xff);
  test::write_bytes(framed, bytes);

  const int64_t before = peak_rss_bytes();
  for (const auto& [path, options] : {std::pair{found, TFRecordReaderOptions{false, false}},
                                      std::pair{framed, TFRecordReaderOptions{}}}) {
    TFRecordReader reader(path, options);
    std::string record;
    test::expect_data_error([&] { reader.next(&record); }, {"truncated record", "2013528064"});
  }
  EXPECT_LT(peak_rss_bytes() - before, int64_t{64} << 20);
}

// Finding tfrecord-2: a 16-byte file whose header (valid length CRC) claims 2^64 - 16 bytes.
// count_records_fast() adds 12 + len + 4 to its offset, which wraps to 0: it reads the same
// header forever. Finding tfrecord-3: a valid record, then a header claiming 2^63 - 17 bytes:
// the offset addition overflows a signed long (undefined behaviour, reported by UBSan). Both must
// be DataErrors (a truncated record), as TFRecordReader already reports them.
// (The first never returned before the counter compared lengths with the bytes left.)
TEST(FuzzRegression, CountRecordsFastRejectsLengthsPastTheEndOfTheFile) {
  for (const char* name : {"hang-count-length-2p64-16.tfrecord", "ub-count-offset-overflow.tfrecord"}) {
    SCOPED_TRACE(name);
    const std::string path = (kFuzzFixtures / name).string();
    test::expect_data_error([&] { count_records_fast(path); }, {name, "truncated record"});
    TFRecordReader reader(path);
    std::string record;
    test::expect_data_error([&] { while (reader.next(&record)) {} }, {name, "implausible record length"});
  }
}

}  // namespace
}  // namespace orchard
