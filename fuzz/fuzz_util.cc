#include "fuzz_util.h"

#include <google/protobuf/stubs/logging.h>
#include <spdlog/spdlog.h>
#include <unistd.h>
#include <zlib.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>

#include "orchard/core/error.h"
#include "orchard/data/image.h"

namespace orchard::fuzz {
namespace {

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

}  // namespace orchard::fuzz
