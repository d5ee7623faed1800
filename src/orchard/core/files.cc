#include "orchard/core/files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <glob.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "orchard/core/error.h"

namespace fs = std::filesystem;

namespace orchard {
namespace {

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\n");
  if (b == std::string::npos) return "";
  size_t e = s.find_last_not_of(" \t\n");
  return s.substr(b, e - b + 1);
}

bool has_image_extension(const fs::path& path) {
  std::string ext = path.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return std::tolower(c); });
  return ext == ".jpg" || ext == ".jpeg" || ext == ".png";
}

}  // namespace

std::vector<std::string> expand_file_pattern(const std::string& pattern, bool images_only) {
  std::vector<std::string> out;
  std::set<std::string> seen;
  std::stringstream ss(pattern);
  std::string item;
  bool any_item = false;
  while (std::getline(ss, item, ',')) {
    item = trim(item);
    if (item.empty()) continue;
    any_item = true;
    std::vector<std::string> matched;
    std::error_code ec;
    if (fs::is_directory(item, ec)) {
      for (const auto& e : fs::directory_iterator(item, ec))
        if (e.is_regular_file() && e.path().filename().string()[0] != '.' &&
            (!images_only || has_image_extension(e.path())))
          matched.push_back(e.path().string());
    } else {
      glob_t g{};
      int rc = ::glob(item.c_str(), GLOB_NOSORT, nullptr, &g);
      if (rc == 0)
        for (size_t i = 0; i < g.gl_pathc; ++i)
          if (fs::is_regular_file(g.gl_pathv[i], ec)) matched.emplace_back(g.gl_pathv[i]);
      globfree(&g);
    }
    if (matched.empty())
      throw Error(images_only && fs::is_directory(item, ec) ? "no .jpg, .jpeg or .png files in '" + item + "'"
                                                           : "no files match '" + item + "'");
    std::sort(matched.begin(), matched.end());
    for (auto& m : matched)
      if (seen.insert(m).second) out.push_back(std::move(m));
  }
  if (!any_item) throw Error("empty file pattern");
  return out;
}

void atomic_write_file(const std::string& path, const std::string& contents) {
  const std::string tmp = path + ".tmp-" + std::to_string(::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) throw Error(tmp + ": cannot create: " + std::strerror(errno));
  size_t done = 0;
  while (done < contents.size()) {
    ssize_t w = ::write(fd, contents.data() + done, contents.size() - done);
    if (w < 0) {
      if (errno == EINTR) continue;
      int e = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      throw Error(tmp + ": write failed: " + std::strerror(e));
    }
    done += static_cast<size_t>(w);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    ::unlink(tmp.c_str());
    throw Error(tmp + ": fsync failed: " + std::strerror(errno));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    ::unlink(tmp.c_str());
    throw Error(path + ": rename failed: " + std::strerror(errno));
  }
  // Make the rename itself durable.
  std::string dir = fs::path(path).parent_path().string();
  int dfd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

namespace {
// The whole file in one allocation of its size (a stream copy of a 100 MB checkpoint takes
// ~1 s in doublings and copies here), reading on until the end if it grew meanwhile.
std::string read_whole(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Error(path + ": cannot open: " + std::strerror(errno));
  struct stat st {};
  std::string bytes;
  if (::fstat(fd, &st) == 0 && st.st_size > 0) bytes.resize(static_cast<size_t>(st.st_size));
  size_t used = 0;
  while (true) {
    if (used == bytes.size()) bytes.resize(std::max<size_t>(bytes.size() * 2, 1 << 16));
    const ssize_t n = ::read(fd, &bytes[used], bytes.size() - used);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      throw Error(path + ": cannot read: " + std::strerror(err));
    }
    if (n == 0) break;
    used += static_cast<size_t>(n);
  }
  ::close(fd);
  bytes.resize(used);
  return bytes;
}
}  // namespace

std::string read_file(const std::string& path) { return read_whole(path); }

void ensure_writable_dir(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw Error(dir + ": cannot create directory: " + ec.message());
  if (::access(dir.c_str(), W_OK) != 0) throw Error(dir + ": directory is not writable");
}

void check_dir_can_be_written(const std::string& dir) {
  std::error_code ec;
  fs::path p = fs::absolute(dir, ec);
  if (ec) throw Error(dir + ": " + ec.message());
  while (!fs::exists(p, ec) && p.has_parent_path() && p.parent_path() != p) p = p.parent_path();
  if (!fs::is_directory(p, ec))
    throw Error(dir + ": cannot create directory: " + p.string() + " is not a directory");
  if (::access(p.c_str(), W_OK) != 0)
    throw Error(dir + (p == fs::absolute(dir, ec) ? ": directory is not writable" : ": cannot create directory: " +
                                                                                     p.string() + " is not writable"));
}

}  // namespace orchard
