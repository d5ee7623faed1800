#include "fuzz_util.h"

#include <unistd.h>

#include <google/protobuf/stubs/logging.h>
#include <spdlog/spdlog.h>
#include <zlib.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>

#include "orchard/core/error.h"
#include "orchard/data/image.h"

namespace orchard::fuzz {
namespace {

// 16 megapixels (48 MiB of RGB): above any real training image (ImageNet and COCO average well
// under 1), small enough that decoding one under the sanitizers stays well within -timeout.
constexpr int64_t kMaxPixels = int64_t{16} << 20;

std::map<std::string, std::string>& scratch_files() {
  static auto* files = new std::map<std::string, std::string>();  // outlives static destructors
  return *files;
}

void remove_scratch_files() {
  std::error_code ignored;
  for (const auto& [name, path] : scratch_files()) std::filesystem::remove_all(path, ignored);
}

}  // namespace

const std::string& scratch_path(const std::string& name) {
  auto& files = scratch_files();
  auto it = files.find(name);
  if (it != files.end()) return it->second;
  if (files.empty()) std::atexit(remove_scratch_files);
  const char* tmp = std::getenv("TMPDIR");
  std::string dir = tmp && *tmp ? tmp : "/tmp";
  return files.emplace(name, dir + "/orchard-fuzz-" + std::to_string(::getpid()) + "-" + name).first->second;
}

void write_scratch(const std::string& path, const uint8_t* data, size_t size) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f || (size && std::fwrite(data, 1, size, f) != size) || std::fclose(f) != 0) {
    std::perror(path.c_str());
    std::abort();
  }
}

void quiet_logging() {
  spdlog::set_level(spdlog::level::off);
  // protobuf logs an error for every string field with invalid UTF-8 it parses (then fails the
  // parse, which the targets see): tens of thousands of lines a minute in example_fuzzer's log.
  google::protobuf::SetLogHandler(nullptr);
}

bool guards_lifted() {
  static const bool lifted = [] {
    const char* v = std::getenv("ORCHARD_FUZZ_UNGUARDED");
    return v && *v && std::string(v) != "0";
  }();
  return lifted;
}

bool skip_huge_image(const std::string& bytes) {
  if (guards_lifted()) return false;
  try {
    const data::ImageSize s = data::image_size(bytes, "fuzz input");
    return int64_t{s.height} * s.width > kMaxPixels;
  } catch (const Error&) {
    return false;  // not an image, or a broken header: the decoders must reject it cleanly
  }
}

bool skip_huge_record(const std::string& path) {
  if (guards_lifted()) return false;
  constexpr uint64_t kMaxRecordBytes = uint64_t{64} << 20;
  gzFile gz = gzopen(path.c_str(), "rb");  // reads plain files as they are, like the reader
  if (!gz) return false;
  bool huge = false;
  unsigned char header[12];
  while (gzread(gz, header, sizeof header) == static_cast<int>(sizeof header)) {
    uint64_t len = 0;
    for (int i = 7; i >= 0; --i) len = (len << 8) | header[i];
    if (len > kMaxRecordBytes) {
      huge = true;
      break;
    }
    if (gzseek(gz, static_cast<z_off_t>(len + 4), SEEK_CUR) < 0) break;
  }
  gzclose(gz);
  return huge;
}

}  // namespace orchard::fuzz
