// Regression tests for what tfrecord_fuzzer found (fuzz/README.md, issue 31). The reproducers
// are files under tests/fixtures/fuzz/tfrecord/.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <string>
#include <utility>

#include "core/test_util.h"
#include "orchard/core/crc32c.h"
#include "orchard/core/error.h"
#include "orchard/core/tf_checkpoint.h"
#include "orchard/core/tf_table.h"
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
  for (const auto& [path, options] :
       {std::pair{found, TFRecordReaderOptions{false, false}}, std::pair{framed, TFRecordReaderOptions{}}}) {
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
    test::expect_data_error(
        [&] {
          while (reader.next(&record)) {
          }
        },
        {name, "implausible record length"});
  }
}

// What tf_checkpoint_fuzzer's author found by reading tf_table.cc / tf_checkpoint.cc against the
// harness (tests/fixtures/fuzz/tf_checkpoint/; input: a uint32 LE header whose low 24 bits are
// the index part's length, then the index part, then the data part):
//   asan-v1-duplicate-tensor-name: V1 metadata listing 'a' twice (float [1] and [64]): a 4-byte
//     buffer written with 256 bytes (heap overflow). Now: "lists variable 'a' twice".
//   oom-v1-huge-shape: V1 metadata claiming 10^9 floats: a 4 GB allocation before any slice was
//     seen. Now: slices must cover the tensor before anything is allocated.
//   oom-snappy-block-claims-2gb: a 9-byte snappy block claiming 2^31 bytes: allocated by
//     snappy::Uncompress. Now: a claim over 64x the block is refused.
//   stack-overflow-object-graph-chain-20000: a TF2 object graph that is a 20,000-node chain:
//     the recursive walk overflowed the stack. Now: an explicit stack (paths capped at 64 MiB).
//   slow-index-repeats-block-4000x64k: an index naming one 64 KB block 4,000 times: quadratic
//     work. Now: blocks must follow one another, so the work is bounded by the file.
// Each must fail with an orchard::Error naming the damage (the chain reads), quickly and without
// a large allocation.
TEST(FuzzRegression, TensorFlowCheckpointFindings) {
  const auto dir = std::filesystem::path(ORCHARD_TEST_FIXTURES) / "fuzz" / "tf_checkpoint";
  const std::pair<const char*, const char*> findings[] = {
      {"asan-v1-duplicate-tensor-name.bin", "lists variable 'a' twice"},
      {"oom-v1-huge-shape.bin", "its slices hold"},
      {"oom-snappy-block-claims-2gb.bin", "does not decompress"},
      {"stack-overflow-object-graph-chain-20000.bin", nullptr},  // a valid (odd) graph: it reads
      {"slow-index-repeats-block-4000x64k.bin", "out of order"}};
  for (const auto& [name, expected] : findings) {
    SCOPED_TRACE(name);
    const std::string input = test::read_bytes((dir / name).string());
    ASSERT_GE(input.size(), 4u);
    uint32_t header;
    std::memcpy(&header, input.data(), 4);
    const size_t index_size = std::min<size_t>(header & 0xffffff, input.size() - 4);
    test::TempDir tmp;
    test::write_bytes(tmp.file("m.index"), input.substr(4, index_size));
    test::write_bytes(tmp.file("m.data-00000-of-00001"), input.substr(4 + index_size));
    test::write_bytes(tmp.file("v1.ckpt"), input.substr(4, index_size));
    const int64_t before = peak_rss_bytes();
    const auto start = std::chrono::steady_clock::now();
    std::string errors;
    auto exercise = [&](const std::string& path) {
      try {
        const tf::CheckpointReader r(path);
        for (const auto& v : r.variables()) r.read(v.name);
        r.tracked_variables();
      } catch (const Error& e) {
        errors += std::string(e.what()) + "\n";
      }
    };
    try {
      tf::parse_table(input, name);
    } catch (const Error&) {
    }
    exercise(tmp.file("m"));
    exercise(tmp.file("v1.ckpt"));
    if (expected) {
      EXPECT_NE(errors.find(expected), std::string::npos) << errors;
    }
    EXPECT_LT(peak_rss_bytes() - before, int64_t{256} << 20);
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  }
}

}  // namespace
}  // namespace orchard
