// TFRecord reading and counting (issue 31): the input is a whole file. It is read record by
// record with and without skip_corrupt_records, and counted with count_records_fast; the
// reader and the counter must agree on a file both accept. Plain files and GZIP files (the
// reader detects the gzip magic) both arrive here: the seed corpus has both.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "fuzz_util.h"
#include "orchard/core/error.h"
#include "orchard/core/tfrecord.h"

namespace {

// Reads every record; returns the count, or -1 when the reader threw a DataError.
int64_t read_all(const std::string& path, orchard::TFRecordReaderOptions options) {
  try {
    orchard::TFRecordReader reader(path, options);
    std::string record;
    int64_t n = 0;
    while (reader.next(&record)) {
      ++n;
      if (reader.records_read() < n) std::abort();  // the record index counts every record returned
    }
    if (reader.next(&record)) std::abort();  // the end of a file stays the end
    return n;
  } catch (const orchard::Error&) {
    return -1;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = orchard::fuzz::scratch_path("tfrecord");
  orchard::fuzz::write_scratch(path, data, size);

  int64_t counted = -1;
  try {
    counted = orchard::count_records_fast(path);
  } catch (const orchard::Error&) {
  }
  const int64_t strict = read_all(path, {});
  const int64_t skipping = read_all(path, {true, true});
  read_all(path, {false, false});
  // A file the strict reader reads completely is well framed: skipping finds the same records,
  // and the fast count (plain files walk the same length headers) agrees.
  if (strict >= 0 && (skipping != strict || counted != strict)) {
    std::fprintf(stderr, "records: strict read %lld, skipping read %lld, count_records_fast %lld\n",
                 static_cast<long long>(strict), static_cast<long long>(skipping), static_cast<long long>(counted));
    std::abort();
  }
  return 0;
}
