#include "orchard/core/filesystem.h"

#include <fcntl.h>
#include <fnmatch.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <filesystem>
#include <map>
#include <mutex>
#include <thread>

#include "orchard/core/files.h"
#include "orchard/core/gcs_filesystem.h"
#include "orchard/core/http.h"
#include "orchard/core/http_filesystem.h"
#include "orchard/core/s3_filesystem.h"

namespace orchard::fs {
namespace stdfs = std::filesystem;

namespace {

// file:///x -> /x; plain paths unchanged.
std::string local_path(const std::string& path) {
  if (path.rfind("file://", 0) == 0) return path.substr(7);
  return path;
}

class LocalFileSystem : public FileSystem {
 public:
  std::string read_file(const std::string& path) override {
    const std::string p = local_path(path);
    std::error_code ec;
    if (!stdfs::is_regular_file(p, ec)) throw StorageError(path + ": read: no such file");
    return read_range(path, 0, UINT64_MAX);
  }

  std::string read_range(const std::string& path, uint64_t offset, uint64_t n) override {
    const std::string p = local_path(path);
    const int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw StorageError(path + ": read: " + std::strerror(errno));
    std::string out;
    char buf[1 << 16];
    uint64_t pos = offset;
    while (out.size() < n) {
      const size_t want = static_cast<size_t>(std::min<uint64_t>(sizeof buf, n - out.size()));
      const ssize_t r = ::pread(fd, buf, want, static_cast<off_t>(pos));
      if (r < 0) {
        if (errno == EINTR) continue;
        const int e = errno;
        ::close(fd);
        throw StorageError(path + ": read at offset " + std::to_string(pos) + ": " + std::strerror(e));
      }
      if (r == 0) break;
      out.append(buf, static_cast<size_t>(r));
      pos += static_cast<uint64_t>(r);
    }
    ::close(fd);
    return out;
  }

  void write_file(const std::string& path, const std::string& contents) override {
    const stdfs::path p = local_path(path);
    std::error_code ec;
    if (p.has_parent_path()) stdfs::create_directories(p.parent_path(), ec);
    atomic_write_file(p.string(), contents);
  }

  std::optional<FileStat> stat(const std::string& path) override {
    std::error_code ec;
    const std::string p = local_path(path);
    if (!stdfs::is_regular_file(p, ec)) return std::nullopt;
    const auto size = stdfs::file_size(p, ec);
    if (ec) return std::nullopt;
    return FileStat{static_cast<int64_t>(size)};
  }

  std::vector<std::string> list_prefix(const std::string& prefix) override {
    const bool file_url = prefix.rfind("file://", 0) == 0;
    const std::string p = local_path(prefix);
    // The folder that holds every path starting with the prefix.
    const size_t slash = p.rfind('/');
    const std::string dir = slash == std::string::npos ? "." : (slash == 0 ? "/" : p.substr(0, slash));
    std::vector<std::string> out;
    std::error_code ec;
    if (!stdfs::is_directory(dir, ec)) return out;
    for (auto it = stdfs::recursive_directory_iterator(dir, stdfs::directory_options::skip_permission_denied, ec);
         !ec && it != stdfs::recursive_directory_iterator(); it.increment(ec)) {
      std::string name = it->path().string();
      if (slash == std::string::npos && name.rfind("./", 0) == 0) name = name.substr(2);
      // A folder that cannot hold a match is not descended into.
      if (it->is_directory(ec)) {
        const std::string with_slash = name + "/";
        if (with_slash.compare(0, std::min(with_slash.size(), p.size()), p, 0, std::min(with_slash.size(), p.size())) !=
            0)
          it.disable_recursion_pending();
        continue;
      }
      if (!it->is_regular_file(ec)) continue;
      if (name.rfind(p, 0) == 0) out.push_back(file_url ? "file://" + name : name);
    }
    std::sort(out.begin(), out.end());
    return out;
  }

  void remove(const std::string& path) override {
    const std::string p = local_path(path);
    if (::unlink(p.c_str()) != 0 && errno != ENOENT) throw StorageError(path + ": remove: " + std::strerror(errno));
  }

  bool is_local() const override { return true; }
};

struct Registry {
  std::mutex mu;
  std::map<std::string, Factory> factories;
  std::map<std::string, std::unique_ptr<FileSystem>> instances;
};

// The built-in file systems, registered explicitly on first use (no static
// initialisers, which static libraries drop). A read-only http(s) file system
// registers here.
void register_builtins(Registry& r) {
  r.factories[""] = [] { return std::make_unique<LocalFileSystem>(); };
  r.factories["file"] = r.factories[""];
  r.factories["s3"] = [] { return std::make_unique<S3FileSystem>(s3::S3Options::from_environment()); };
  r.factories["gs"] = [] { return std::make_unique<GcsFileSystem>(gcs::GcsOptions::from_environment()); };
  r.factories["http"] = [] { return std::make_unique<HttpFileSystem>(HttpOptions{}); };
  r.factories["https"] = r.factories["http"];
}

Registry& registry() {
  static Registry* r = [] {
    auto* reg = new Registry();
    register_builtins(*reg);
    return reg;
  }();
  return *r;
}

bool is_scheme_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '+' || c == '-' || c == '.'; }

}  // namespace

std::string scheme_of(const std::string& path) {
  const size_t colon = path.find(':');
  if (colon == std::string::npos || colon == 0 || !std::isalpha(static_cast<unsigned char>(path[0]))) return "";
  for (size_t i = 0; i < colon; ++i)
    if (!is_scheme_char(path[i])) return "";
  std::string scheme = path.substr(0, colon);
  for (char& c : scheme) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (path.compare(colon, 3, "://") == 0) return scheme;
  static const char* object_stores[] = {"s3", "gs", "http", "https", "file", "hdfs", "az", "abfs"};
  for (const char* known : object_stores)
    if (scheme == known)
      throw Error(path + ": a " + scheme + " URL needs \"" + scheme + "://\" (e.g. " + scheme +
                  "://bucket/path); not taken as a local path");
  return "";  // "a:b" is a local file name
}

void register_file_system(const std::string& scheme, Factory factory) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.factories[scheme] = std::move(factory);
  r.instances.erase(scheme);
}

std::vector<std::string> registered_schemes() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  std::vector<std::string> out;
  for (const auto& [k, v] : r.factories)
    if (!k.empty()) out.push_back(k);
  return out;
}

FileSystem& file_system_for(const std::string& path) {
  const std::string scheme = scheme_of(path);
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto inst = r.instances.find(scheme);
  if (inst != r.instances.end()) return *inst->second;
  auto f = r.factories.find(scheme);
  if (f == r.factories.end()) {
    std::string known;
    for (const auto& [k, v] : r.factories)
      if (!k.empty()) known += (known.empty() ? "" : ", ") + k + "://";
    throw Error(path + ": no file system for the scheme \"" + scheme + "://\" (known: " + known + " and local paths)");
  }
  // Created before it is stored: a factory that throws (a malformed credentials file) leaves no
  // empty slot behind.
  std::unique_ptr<FileSystem> created = f->second();
  auto& slot = r.instances[scheme];
  slot = std::move(created);
  return *slot;
}

std::string read_file(const std::string& path) { return file_system_for(path).read_file(path); }
std::string read_range(const std::string& path, uint64_t offset, uint64_t n) {
  return file_system_for(path).read_range(path, offset, n);
}
void write_file(const std::string& path, const std::string& contents) {
  file_system_for(path).write_file(path, contents);
}
std::optional<FileStat> stat(const std::string& path) { return file_system_for(path).stat(path); }
bool exists(const std::string& path) { return stat(path).has_value(); }
std::vector<std::string> list_prefix(const std::string& prefix) { return file_system_for(prefix).list_prefix(prefix); }
void remove(const std::string& path) { file_system_for(path).remove(path); }

bool has_glob(const std::string& pattern) { return pattern.find_first_of("*?[") != std::string::npos; }

std::vector<std::string> glob(const std::string& pattern) {
  if (!has_glob(pattern)) {
    if (exists(pattern)) return {pattern};
    return {};
  }
  const std::string prefix = pattern.substr(0, pattern.find_first_of("*?["));
  std::vector<std::string> out;
  for (const std::string& path : list_prefix(prefix))
    if (::fnmatch(pattern.c_str(), path.c_str(), FNM_PATHNAME) == 0) out.push_back(path);
  std::sort(out.begin(), out.end());
  return out;
}

std::string join(const std::string& dir, const std::string& name) {
  if (dir.empty()) return name;
  if (dir.back() == '/') return dir + name;
  return dir + "/" + name;
}

// --- PrefetchingReader ---------------------------------------------------------------------
//
// The window is a deque of blocks in file order; its front holds position_.
// Fetch threads claim the first unclaimed block, fetch it without the lock,
// and store it; the consumer waits for the front, copies out of it without the
// lock (only the consumer pops the front, and a done block is never touched by
// a fetcher again; deque push_back/pop_front keep references to the other
// elements valid), and pops it when consumed, which lets one more block be
// scheduled. So at most `blocks` blocks exist at once.

struct PrefetchingReader::Block {
  uint64_t offset = 0;
  std::string data;
  bool claimed = false, done = false;
  std::exception_ptr error;
};

struct PrefetchingReader::State {
  std::mutex mu;
  std::condition_variable work_cv;   // fetchers: a block to claim, or stop
  std::condition_variable ready_cv;  // consumer: a block done
  std::deque<Block> window;
  uint64_t next_offset = 0;   // of the next block to schedule
  uint64_t end = UINT64_MAX;  // the file's size, once a short block found it
  bool stop = false;
  std::atomic<bool> cancel{false};
  std::function<void()> on_end;
  bool on_end_done = false;
  int64_t requests = 0;
  std::vector<std::thread> threads;
};

PrefetchingReader::PrefetchingReader(std::string path, PrefetchOptions options)
    : path_(std::move(path)), fs_(&file_system_for(path_)), options_(options), state_(std::make_unique<State>()) {
  options_.block_size = std::max<uint64_t>(options_.block_size, 1);
  options_.blocks = std::max(options_.blocks, 1);
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    schedule();
  }
  try {
    for (int i = 0; i < options_.blocks; ++i) state_->threads.emplace_back([this] { fetch_loop(); });
  } catch (...) {
    if (state_->threads.empty()) throw;  // the threads started share the blocks
  }
}

PrefetchingReader::~PrefetchingReader() {
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->stop = true;
    state_->cancel = true;
  }
  state_->work_cv.notify_all();
  for (std::thread& t : state_->threads) t.join();
}

void PrefetchingReader::schedule() {
  State& st = *state_;
  while (st.window.size() < static_cast<size_t>(options_.blocks) && st.next_offset < st.end) {
    st.window.push_back(Block{});
    st.window.back().offset = st.next_offset;
    st.next_offset += options_.block_size;
  }
}

void PrefetchingReader::fetch_loop() {
  State& st = *state_;
  http::CancelScope cancel_scope(&st.cancel);  // the destructor abandons in-flight requests
  for (;;) {
    Block* block = nullptr;
    {
      std::unique_lock<std::mutex> lock(st.mu);
      st.work_cv.wait(lock, [&] {
        if (st.stop) return true;
        for (Block& b : st.window)
          if (!b.claimed) return true;
        return false;
      });
      if (st.stop) return;
      for (Block& b : st.window)
        if (!b.claimed) {
          block = &b;
          break;
        }
      block->claimed = true;
      ++st.requests;
    }
    std::string data;
    std::exception_ptr error;
    try {
      data = fs_->read_range(path_, block->offset, options_.block_size);
    } catch (...) {
      error = std::current_exception();
    }
    std::function<void()> call;
    {
      std::lock_guard<std::mutex> lock(st.mu);
      if (!error && data.size() < options_.block_size && block->offset + data.size() < st.end) {
        st.end = block->offset + data.size();
        if (st.on_end && !st.on_end_done) {
          st.on_end_done = true;
          call = std::move(st.on_end);
        }
      }
      block->data = std::move(data);
      block->error = error;
      block->done = true;
    }
    st.ready_cv.notify_all();
    if (call) call();
  }
}

void PrefetchingReader::on_end_found(std::function<void()> f) {
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    if (state_->on_end_done) return;
    if (state_->end == UINT64_MAX) {
      state_->on_end = std::move(f);
      return;
    }
    state_->on_end_done = true;
  }
  f();
}

int64_t PrefetchingReader::requests() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->requests;
}

size_t PrefetchingReader::read(char* out, size_t n) {
  State& st = *state_;
  size_t done = 0;
  while (done < n) {
    std::unique_lock<std::mutex> lock(st.mu);
    if (st.window.empty()) break;  // nothing scheduled: at the end
    Block& front = st.window.front();
    st.ready_cv.wait(lock, [&] { return front.done; });
    if (front.error) std::rethrow_exception(front.error);
    const uint64_t in_block = position_ - front.offset;
    if (in_block >= front.data.size()) {
      if (front.data.size() < options_.block_size) break;  // the file's last block, consumed
      st.window.pop_front();
      schedule();
      lock.unlock();
      st.work_cv.notify_all();
      continue;
    }
    lock.unlock();
    const size_t take = static_cast<size_t>(std::min<uint64_t>(n - done, front.data.size() - in_block));
    std::memcpy(out + done, front.data.data() + in_block, take);
    done += take;
    position_ += take;
  }
  return done;
}

// --- SequentialReader ----------------------------------------------------------------------

SequentialReader::SequentialReader(std::string path, uint64_t block_size)
    : SequentialReader(std::move(path), PrefetchOptions{block_size, PrefetchOptions{}.blocks}) {}

SequentialReader::SequentialReader(std::string path, PrefetchOptions options)
    : path_(std::move(path)), fs_(&file_system_for(path_)), block_size_(std::max<uint64_t>(options.block_size, 1)) {
  if (!fs_->is_local()) prefetching_ = std::make_unique<PrefetchingReader>(path_, options);
}

SequentialReader::SequentialReader(std::unique_ptr<PrefetchingReader> prefetching)
    : path_(prefetching->path()), prefetching_(std::move(prefetching)) {}

SequentialReader::~SequentialReader() = default;
SequentialReader::SequentialReader(SequentialReader&&) noexcept = default;
SequentialReader& SequentialReader::operator=(SequentialReader&&) noexcept = default;

size_t SequentialReader::read(char* out, size_t n) {
  if (prefetching_) return prefetching_->read(out, n);
  size_t done = 0;
  while (done < n) {
    const uint64_t in_block = position_ - block_start_;
    if (in_block >= block_.size()) {
      if (eof_) break;
      block_start_ = position_;
      block_ = fs_->read_range(path_, position_, block_size_);
      if (block_.size() < block_size_) eof_ = true;
      if (block_.empty()) break;
      continue;
    }
    const size_t take = static_cast<size_t>(std::min<uint64_t>(n - done, block_.size() - in_block));
    std::memcpy(out + done, block_.data() + in_block, take);
    done += take;
    position_ += take;
  }
  return done;
}

// --- ShardPrefetcher -----------------------------------------------------------------------
//
// The readers' end-found callbacks hold a weak_ptr to Shared, so a reader that
// outlives its prefetcher starts nothing. Readers are destroyed outside the
// mutex: a reader's destructor joins threads whose callbacks take it.

struct ShardPrefetcher::Shared {
  PrefetchOptions options;
  size_t max_started = 2;
  mutable std::mutex mu;
  std::deque<std::unique_ptr<PrefetchingReader>> started;  // oldest first

  void start(const std::string& path) {
    if (file_system_for(path).is_local()) return;
    {
      std::lock_guard<std::mutex> lock(mu);
      for (const auto& r : started)
        if (r->path() == path) return;
    }
    auto reader = std::make_unique<PrefetchingReader>(path, options);
    std::unique_ptr<PrefetchingReader> dropped;
    {
      std::lock_guard<std::mutex> lock(mu);
      for (const auto& r : started)
        if (r->path() == path) return;  // started meanwhile; `reader` is dropped
      started.push_back(std::move(reader));
      if (started.size() > max_started) {
        dropped = std::move(started.front());
        started.pop_front();
      }
    }
  }

  std::unique_ptr<PrefetchingReader> take(const std::string& path) {
    std::lock_guard<std::mutex> lock(mu);
    for (auto it = started.begin(); it != started.end(); ++it)
      if ((*it)->path() == path) {
        auto r = std::move(*it);
        started.erase(it);
        return r;
      }
    return nullptr;
  }
};

ShardPrefetcher::ShardPrefetcher(PrefetchOptions options, int max_started) : shared_(std::make_shared<Shared>()) {
  shared_->options = options;
  shared_->max_started = static_cast<size_t>(std::max(max_started, 1));
}

ShardPrefetcher::~ShardPrefetcher() {
  std::deque<std::unique_ptr<PrefetchingReader>> started;
  {
    std::lock_guard<std::mutex> lock(shared_->mu);
    started.swap(shared_->started);
  }
}

SequentialReader ShardPrefetcher::open(const std::string& path, const std::string& next) {
  if (file_system_for(path).is_local()) return SequentialReader(path, shared_->options);
  std::unique_ptr<PrefetchingReader> reader = shared_->take(path);
  if (!reader) reader = std::make_unique<PrefetchingReader>(path, shared_->options);
  if (!next.empty()) {
    std::weak_ptr<Shared> weak = shared_;
    reader->on_end_found([weak, next] {
      if (auto shared = weak.lock()) {
        try {
          shared->start(next);
        } catch (const std::exception&) {
          // A bad next path fails when it is opened, on the consumer's thread.
        }
      }
    });
  }
  return SequentialReader(std::move(reader));
}

void ShardPrefetcher::start(const std::string& path) { shared_->start(path); }

std::vector<std::string> ShardPrefetcher::started() const {
  std::lock_guard<std::mutex> lock(shared_->mu);
  std::vector<std::string> out;
  for (const auto& r : shared_->started) out.push_back(r->path());
  return out;
}

}  // namespace orchard::fs
