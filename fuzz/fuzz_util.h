// Helpers shared by the fuzz targets (issue 31): a per-process scratch file for the APIs that
// read paths, quiet logging, and the guard that keeps a known, reported finding (decoders
// without a pixel limit) from ending every run before it explores anything else.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace orchard::fuzz {

// A path under $TMPDIR (default /tmp) unique to this process and `name` (a file or a directory
// the caller creates); removed, with anything in it, at exit.
// Targets rewrite the same file for every input instead of creating one per input.
const std::string& scratch_path(const std::string& name);

// Replaces the file's contents with [data, data + size). Aborts on an I/O error: that is a
// broken fuzzing environment, not a finding.
void write_scratch(const std::string& path, const uint8_t* data, size_t size);

// Turns spdlog and protobuf's logging off: warnings about odd configs and invalid UTF-8 would
// otherwise be printed for every input.
void quiet_logging();

// Known findings (fuzz/README.md) in code being rewritten elsewhere would end every run at the
// first input that hits them, so the targets skip such inputs and go on to find other bugs. Each
// guard below names its finding and goes once the code rejects those inputs itself.
// ORCHARD_FUZZ_UNGUARDED=1 in the environment lifts them all, to reproduce the findings.
bool guards_lifted();

// Finding image-1: a JPEG or PNG whose header claims more pixels than the decoders can be given
// without an out-of-memory report (they allocate whatever the header says; a pixel limit is being
// added to image.cc).
bool skip_huge_image(const std::string& bytes);

// Findings tfrecord-1..3: a TFRecord file whose framing claims a record over 64 MiB.
// TFRecordReader allocates the claimed length (up to 2 GiB) before it finds the file shorter;
// count_records_fast loops forever on a length of 2^64 - 16 and overflows a signed offset on one
// near 2^63. Walks the length headers of the plain or GZIP file at `path`, as the reader would.
bool skip_huge_record(const std::string& path);

}  // namespace orchard::fuzz
