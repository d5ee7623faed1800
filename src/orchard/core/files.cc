#include "orchard/core/files.h"

#include <fcntl.h>
#include <glob.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "orchard/core/error.h"
#include "orchard/core/filesystem.h"

namespace stdfs = std::filesystem;

namespace orchard {
namespace {

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\n");
  if (b == std::string::npos) return "";
  size_t e = s.find_last_not_of(" \t\n");
  return s.substr(b, e - b + 1);
}

bool has_image_extension(const stdfs::path& path) {
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
    if (!is_local_path(item)) {
      // An object store: a folder is a prefix, a glob is matched against a prefix listing.
      if (!orchard::fs::has_glob(item) && !orchard::fs::exists(item) && dir_exists(item)) {
        for (auto& f : list_dir(item))
          if (base_name(f)[0] != '.' && (!images_only || has_image_extension(base_name(f)))) matched.push_back(f);
      } else {
        matched = orchard::fs::glob(item);
      }
    } else if (stdfs::is_directory(local_path(item), ec)) {
      for (const auto& e : stdfs::directory_iterator(local_path(item), ec))
        if (e.is_regular_file() && e.path().filename().string()[0] != '.' &&
            (!images_only || has_image_extension(e.path())))
          matched.push_back(e.path().string());
    } else {
      glob_t g{};
      int rc = ::glob(local_path(item).c_str(), GLOB_NOSORT, nullptr, &g);
      if (rc == 0)
        for (size_t i = 0; i < g.gl_pathc; ++i)
          if (stdfs::is_regular_file(g.gl_pathv[i], ec)) matched.emplace_back(g.gl_pathv[i]);
      globfree(&g);
    }
    if (matched.empty())
      throw Error(images_only && dir_exists(item) ? "no .jpg, .jpeg or .png files in '" + item + "'"
                                                  : "no files match '" + item + "'");
    std::sort(matched.begin(), matched.end());
    for (auto& m : matched)
      if (seen.insert(m).second) out.push_back(std::move(m));
  }
  if (!any_item) throw Error("empty file pattern");
  return out;
}

void atomic_write_file(const std::string& url, const std::string& contents) {
  if (!is_local_path(url)) {
    orchard::fs::write_file(url, contents);
    return;
  }
  const std::string path = local_path(url);
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
  std::string dir = stdfs::path(path).parent_path().string();
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

std::string read_file(const std::string& path) {
  if (!is_local_path(path)) return orchard::fs::read_file(path);
  return read_whole(local_path(path));
}

bool is_local_path(const std::string& path) {
  const std::string scheme = orchard::fs::scheme_of(path);
  return scheme.empty() || scheme == "file";
}

std::string local_path(const std::string& path) {
  if (path.rfind("file://", 0) == 0) return path.substr(7);
  return path;
}

std::string join_path(const std::string& dir, const std::string& name) { return orchard::fs::join(dir, name); }

std::string base_name(const std::string& path) {
  std::string p = path;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  const size_t slash = p.rfind('/');
  return slash == std::string::npos ? p : p.substr(slash + 1);
}

std::string parent_path(const std::string& path) {
  std::string p = path;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  const size_t slash = p.rfind('/');
  if (slash == std::string::npos) return "";
  if (slash == 0) return "/";
  const std::string parent = p.substr(0, slash);
  // "s3://bucket" keeps its scheme's "//".
  if (!parent.empty() && parent.back() == '/' && parent.size() >= 2 && parent[parent.size() - 2] == ':') return p;
  return parent;
}

bool file_exists(const std::string& path) {
  if (!is_local_path(path)) return orchard::fs::exists(path);
  std::error_code ec;
  return stdfs::is_regular_file(local_path(path), ec);
}

namespace {
std::string as_prefix(const std::string& dir) { return dir.empty() || dir.back() == '/' ? dir : dir + "/"; }
}  // namespace

bool dir_exists(const std::string& path) {
  if (!is_local_path(path)) {
    if (!orchard::fs::file_system_for(path).has_listing()) return false;  // files only: no folders
    return !orchard::fs::list_prefix(as_prefix(path)).empty();
  }
  std::error_code ec;
  return stdfs::is_directory(local_path(path), ec);
}

std::vector<std::string> list_dir(const std::string& dir) {
  std::vector<std::string> out;
  if (!is_local_path(dir)) {
    const std::string prefix = as_prefix(dir);
    for (auto& f : orchard::fs::list_prefix(prefix))
      if (f.find('/', prefix.size()) == std::string::npos) out.push_back(std::move(f));
    return out;
  }
  std::error_code ec;
  for (const auto& e : stdfs::directory_iterator(local_path(dir), ec))
    if (e.is_regular_file(ec)) out.push_back(e.path().string());
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<std::string> list_dir_names(const std::string& dir) {
  std::set<std::string> names;
  if (!is_local_path(dir)) {
    const std::string prefix = as_prefix(dir);
    for (const auto& f : orchard::fs::list_prefix(prefix)) {
      const std::string rest = f.substr(prefix.size());
      names.insert(rest.substr(0, rest.find('/')));
    }
  } else {
    std::error_code ec;
    for (const auto& e : stdfs::directory_iterator(local_path(dir), ec)) names.insert(e.path().filename().string());
  }
  return {names.begin(), names.end()};
}

void remove_file(const std::string& path) {
  if (!is_local_path(path)) return orchard::fs::remove(path);
  std::error_code ec;
  stdfs::remove(local_path(path), ec);
}

int remove_tree(const std::string& dir) {
  if (!is_local_path(dir)) {
    int n = 0;
    for (const auto& f : orchard::fs::list_prefix(as_prefix(dir))) {
      orchard::fs::remove(f);
      ++n;
    }
    if (orchard::fs::exists(dir)) {  // a file rather than a folder
      orchard::fs::remove(dir);
      ++n;
    }
    return n;
  }
  std::error_code ec;
  return static_cast<int>(stdfs::remove_all(local_path(dir), ec));
}

std::string make_temporary_file(const std::string& what) {
  const char* tmpdir = std::getenv("TMPDIR");
  std::string name = std::string(tmpdir && *tmpdir ? tmpdir : "/tmp") + "/orchard-" + what + "-XXXXXX";
  const int fd = ::mkstemp(name.data());
  if (fd < 0) throw Error(name + ": cannot create a temporary file: " + std::strerror(errno));
  ::close(fd);
  return name;
}

LocalCopy::LocalCopy(const std::string& path) {
  if (is_local_path(path)) {
    local_ = local_path(path);
    return;
  }
  const std::string bytes = orchard::fs::read_file(path);
  local_ = make_temporary_file("download");
  temporary_ = true;
  try {
    atomic_write_file(local_, bytes);
  } catch (...) {
    ::unlink(local_.c_str());
    throw;
  }
}

LocalCopy::~LocalCopy() {
  if (temporary_) ::unlink(local_.c_str());
}

void ensure_writable_dir(const std::string& url) {
  if (!is_local_path(url)) return;
  const std::string dir = local_path(url);
  std::error_code ec;
  stdfs::create_directories(dir, ec);
  if (ec) throw Error(dir + ": cannot create directory: " + ec.message());
  if (::access(dir.c_str(), W_OK) != 0) throw Error(dir + ": directory is not writable");
}

void check_dir_can_be_written(const std::string& url) {
  if (!is_local_path(url)) {
    orchard::fs::file_system_for(url);  // an unknown scheme fails here; the bucket at the first write
    return;
  }
  const std::string dir = local_path(url);
  std::error_code ec;
  stdfs::path p = stdfs::absolute(dir, ec);
  if (ec) throw Error(dir + ": " + ec.message());
  while (!stdfs::exists(p, ec) && p.has_parent_path() && p.parent_path() != p) p = p.parent_path();
  if (!stdfs::is_directory(p, ec))
    throw Error(dir + ": cannot create directory: " + p.string() + " is not a directory");
  if (::access(p.c_str(), W_OK) != 0)
    throw Error(dir + (p == stdfs::absolute(dir, ec)
                           ? ": directory is not writable"
                           : ": cannot create directory: " + p.string() + " is not writable"));
}

}  // namespace orchard
