// The s3:// file system against a real S3 server on loopback (npm s3rver,
// started by this binary), through a fault-injecting proxy, and against fake
// servers for the failures a real server does not produce on demand (503, a
// connection dropped mid-body, 403).
//
// s3rver 3.7.1 on Node 20 is started with --openssl-legacy-provider (without it
// every listing with a continuation token answers 500). It does not verify
// signatures (tests/core/ s3_sigv4_test.cc checks the signing against AWS's
// vectors) and answers suffix ranges wrongly (Orchard never sends them).
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>

#include "core/test_util.h"
#include "orchard/core/event_writer.h"
#include "orchard/core/files.h"
#include "orchard/core/filesystem.h"
#include "orchard/core/http_filesystem.h"
#include "orchard/core/s3_client.h"
#include "orchard/core/s3_filesystem.h"
#include "orchard/core/s3_sigv4.h"
#include "storage_servers.h"

namespace orchard::fs {
namespace {

const std::string kNpmDir = ORCHARD_TEST_NPM_DIR;
const std::string kBucket = "orchard-test";

using test::send_all;

// --- s3rver, started once for the binary
// ----------------------------------------------

class S3rver : public ::testing::Environment {
 public:
  static inline int port = 0;
  static inline std::string unavailable;  // why it could not start, "" when it runs

  void SetUp() override {
    const std::string node = test::which_program("node");
    const std::string script = kNpmDir + "/node_modules/s3rver/bin/s3rver.js";
    if (node.empty() || ::access(script.c_str(), R_OK) != 0) {
      unavailable = "node or " + script + " missing (scripts/test.sh runs npm ci in tests/npm)";
      return;
    }
    port = test::free_loopback_port();
    const std::string log = dir_.file("s3rver.log");
    std::filesystem::create_directories(dir_.path() / "data");
    pid_ = ::fork();
    if (pid_ == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlives the test binary
      std::freopen(log.c_str(), "w", stdout);
      std::freopen(log.c_str(), "a", stderr);
      const std::string p = std::to_string(port), d = dir_.file("data");
      ::execl(node.c_str(), node.c_str(), "--openssl-legacy-provider", script.c_str(), "-d", d.c_str(), "-a",
              "127.0.0.1", "-p", p.c_str(), "--configure-bucket", kBucket.c_str(), static_cast<char*>(nullptr));
      std::_Exit(127);
    }
    for (int i = 0; i < 300; ++i) {  // up to 30 s on a loaded machine
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      const int s = test::connect_loopback(port);
      if (s >= 0) {
        ::close(s);
        // The bucket is configured just after the port opens: wait until a
        // listing answers.
        s3::S3Options o = options();
        o.retry.max_attempts = 1;
        try {
          s3::Client(o).list(kBucket, "");
          return;
        } catch (const std::exception&) {
        }
      }
      int status;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) break;
    }
    std::ifstream in(log);
    std::stringstream text;
    text << in.rdbuf();
    unavailable = "s3rver did not start: " + text.str();
  }
  void TearDown() override {
    if (pid_ > 0) {
      ::kill(pid_, SIGTERM);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  static s3::S3Options options() {
    s3::S3Options o;
    o.endpoint = "http://127.0.0.1:" + std::to_string(port);
    o.path_style = true;
    o.credentials.access_key_id = "S3RVER";
    o.credentials.secret_access_key = "S3RVER";
    o.credentials.source = "the test";
    o.retry.initial_backoff_seconds = 0.01;
    o.retry.max_backoff_seconds = 0.05;
    return o;
  }

 private:
  test::TempDir dir_;
  pid_t pid_ = -1;
};

::testing::Environment* const kEnv = ::testing::AddGlobalTestEnvironment(new S3rver());

// A missing server fails the test (scripts/test.sh installs it): a skip would read as a pass.
#define NEED_S3RVER() \
  if (!S3rver::unavailable.empty()) GTEST_FAIL() << S3rver::unavailable

std::string pattern_bytes(size_t n, unsigned seed) {
  std::string s(n, '\0');
  uint32_t x = seed * 2654435761u + 1;
  for (size_t i = 0; i < n; ++i) {
    x = x * 1664525u + 1013904223u;
    s[i] = static_cast<char>(x >> 24);
  }
  return s;
}

// Registers s3:// with these options for the test's duration.
S3FileSystem* use_s3(const s3::S3Options& o) {
  auto* fs = new S3FileSystem(o);
  register_file_system("s3", [fs] { return std::unique_ptr<FileSystem>(fs); });
  return fs;
}

const std::string kRoot = "s3://" + kBucket + "/";
std::string local_copy_path;

// s3rver answers a PUT before its file is written out (its store resolves on the MD5 stream's end,
// not the file's): a whole read, which the client checks against the ETag and repeats until the
// bytes match, waits for the object before the ranged or foreign reads that cannot check it.
void settle(const std::string& path) { read_file(path); }

TEST(S3, WriteReadStatRemove) {
  NEED_S3RVER();
  use_s3(S3rver::options());
  const std::string path = kRoot + "rt/model dir/ckpt-1.pt";  // a space: encoded in the URL
  const std::string data = pattern_bytes(70000, 1);
  EXPECT_FALSE(exists(path));
  write_file(path, data);
  EXPECT_EQ(read_file(path), data);
  ASSERT_TRUE(stat(path));
  EXPECT_EQ(stat(path)->size, 70000);
  write_file(path, "replaced");
  EXPECT_EQ(read_file(path), "replaced");
  write_file(kRoot + "rt/empty", "");
  EXPECT_EQ(read_file(kRoot + "rt/empty"), "");
  remove(path);
  EXPECT_FALSE(exists(path));
  try {
    read_file(path);
    ADD_FAILURE() << "no error";
  } catch (const StorageError& e) {
    EXPECT_EQ(e.http_status(), 404);
    EXPECT_EQ(e.code(), "NoSuchKey");
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW(remove(path));  // removing what is gone is not an error
}

TEST(S3, ListFollowsContinuationTokensAndGlobs) {
  NEED_S3RVER();
  s3::S3Options o = S3rver::options();
  o.max_keys = 3;  // 10 keys under list/ take 4 pages
  S3FileSystem* s3fs = use_s3(o);
  std::vector<std::string> want;
  for (int i = 0; i < 8; ++i) {
    char name[64];
    std::snprintf(name, sizeof name, "list/train-%05d-of-00008", i);
    want.push_back(kRoot + name);
    write_file(kRoot + name, name);
  }
  write_file(kRoot + "list/sub/x", "x");
  write_file(kRoot + "list/val-00000-of-00001", "v");
  write_file(kRoot + "listx", "not under list/");
  want.push_back(kRoot + "list/sub/x");
  want.push_back(kRoot + "list/val-00000-of-00001");
  std::sort(want.begin(), want.end());
  const int64_t before = s3fs->client().requests_sent();
  EXPECT_EQ(list_prefix(kRoot + "list/"), want);
  EXPECT_EQ(s3fs->client().requests_sent() - before, 4);
  const std::string shards = kRoot +
                             "list/train-?????"
                             "-of-00008";  // two literals: "??-" would be a trigraph
  EXPECT_EQ(glob(shards).size(), 8u);
  EXPECT_EQ(glob(kRoot + "list/train-0000[3-5]-of-*"),
            (std::vector<std::string>{kRoot + "list/train-00003-of-00008", kRoot + "list/train-00004-of-00008",
                                      kRoot + "list/train-00005-of-00008"}));
  EXPECT_EQ(glob(kRoot + "list/*").size(),
            9u);  // not list/sub/x: '*' stops at '/'
  EXPECT_EQ(glob(kRoot + "list/*/x"), std::vector<std::string>{kRoot + "list/sub/x"});
  EXPECT_EQ(glob(kRoot + "list/val-00000-of-00001"), std::vector<std::string>{kRoot + "list/val-00000-of-00001"});
  EXPECT_TRUE(glob(kRoot + "list/none-*").empty());
  EXPECT_EQ(list_prefix(kRoot + "list").size(),
            11u);  // a plain prefix: listx too
}

// What the commands use (core/files.h, TFRecords, event files) on an s3:// path.
TEST(S3Paths, FolderHelpersOnPrefixes) {
  NEED_S3RVER();
  use_s3(S3rver::options());
  const std::string dir = kRoot + "paths/model";
  EXPECT_FALSE(orchard::dir_exists(dir));
  EXPECT_NO_THROW(orchard::ensure_writable_dir(dir));  // nothing to create on an object store
  orchard::atomic_write_file(orchard::join_path(dir, "ckpt-1.pt"), "one");
  orchard::atomic_write_file(orchard::join_path(dir, "checkpoint"), "state");
  orchard::atomic_write_file(orchard::join_path(dir, "train/events.out.tfevents.1"), "ev");
  orchard::atomic_write_file(kRoot + "paths/model-other/x", "not in dir");
  EXPECT_TRUE(orchard::dir_exists(dir));
  EXPECT_TRUE(orchard::dir_exists(dir + "/"));
  EXPECT_TRUE(orchard::file_exists(dir + "/ckpt-1.pt"));
  EXPECT_FALSE(orchard::file_exists(dir + "/train"));  // a prefix is not a file
  EXPECT_EQ(orchard::list_dir(dir), (std::vector<std::string>{dir + "/checkpoint", dir + "/ckpt-1.pt"}));
  EXPECT_EQ(orchard::list_dir_names(dir), (std::vector<std::string>{"checkpoint", "ckpt-1.pt", "train"}));
  EXPECT_EQ(orchard::base_name(dir + "/ckpt-1.pt"), "ckpt-1.pt");
  EXPECT_EQ(orchard::parent_path(dir + "/ckpt-1.pt"), dir);
  EXPECT_EQ(orchard::parent_path(kRoot + "x"), "s3://" + kBucket);
  EXPECT_EQ(orchard::read_file(dir + "/checkpoint"), "state");
  EXPECT_EQ(orchard::expand_file_pattern(dir), orchard::list_dir(dir));  // a folder: its files
  EXPECT_EQ(orchard::expand_file_pattern(dir + "/ckpt-*"), std::vector<std::string>{dir + "/ckpt-1.pt"});
  {
    const orchard::LocalCopy copy(dir + "/ckpt-1.pt");
    EXPECT_EQ(copy.path().rfind("s3:", 0), std::string::npos);
    EXPECT_EQ(test::read_bytes(copy.path()), "one");
    local_copy_path = copy.path();
  }
  EXPECT_FALSE(std::filesystem::exists(local_copy_path)) << "the download outlived its LocalCopy";
  EXPECT_EQ(orchard::remove_tree(orchard::join_path(dir, "train")), 1);
  EXPECT_EQ(orchard::remove_tree(dir), 2);
  EXPECT_FALSE(orchard::dir_exists(dir));
  EXPECT_TRUE(orchard::file_exists(kRoot + "paths/model-other/x"));  // a sibling prefix is kept
}

TEST(S3Paths, TfRecordsPlainAndGzipRoundTrip) {
  NEED_S3RVER();
  use_s3(S3rver::options());
  std::vector<std::string> records;
  // ~9 MB: more than one 8 MiB block, so records and the gzip stream straddle ranged reads.
  for (int i = 0; i < 300; ++i) records.push_back(pattern_bytes(static_cast<size_t>(100 + i * 200), i));
  for (const auto compression : {orchard::Compression::kNone, orchard::Compression::kGzip}) {
    const std::string path =
        kRoot + (compression == orchard::Compression::kGzip ? "tfr/data.tfrecord.gz" : "tfr/data.tfrecord");
    orchard::TFRecordWriter w(path, compression);
    for (const auto& r : records) w.write(r);
    EXPECT_FALSE(exists(path)) << "visible before close()";
    w.close();
    settle(path);
    orchard::TFRecordReader reader(path);
    std::string rec;
    size_t n = 0;
    while (reader.next(&rec)) {
      ASSERT_LT(n, records.size());
      EXPECT_EQ(rec, records[n]) << "record " << n;
      ++n;
    }
    EXPECT_EQ(n, records.size());
    EXPECT_EQ(orchard::count_records_fast(path), static_cast<int64_t>(records.size()));
  }
  // A truncated object: the reader's error names the URL; the count can stop at the damage.
  const std::string whole = read_file(kRoot + "tfr/data.tfrecord");
  write_file(kRoot + "tfr/cut.tfrecord", whole.substr(0, whole.size() - 50));
  settle(kRoot + "tfr/cut.tfrecord");
  test::expect_data_error([&] { orchard::count_records_fast(kRoot + "tfr/cut.tfrecord"); },
                          {kRoot + "tfr/cut.tfrecord", "truncated"});
  EXPECT_EQ(orchard::count_records_fast(kRoot + "tfr/cut.tfrecord", /*stop_at_damage=*/true),
            static_cast<int64_t>(records.size()) - 1);
}

TEST(S3Paths, EventFilesAreUploadedOnFlushAfterTheInterval) {
  NEED_S3RVER();
  use_s3(S3rver::options());
  std::string path;
  {
    orchard::EventWriter quick(kRoot + "events/quick", /*upload_interval_s=*/0);
    path = quick.path();
    EXPECT_EQ(path.rfind(kRoot + "events/quick/events.out.tfevents.", 0), 0u) << path;
    quick.scalar("loss", 1.5, 1);
    quick.flush();
    settle(path);
    // Readable from the bucket while the writer is open.
    const auto events = orchard::read_scalar_events(path);
    ASSERT_EQ(events.size(), 1u);
    EXPECT_EQ(events[0].tag, "loss");
  }
  {
    orchard::EventWriter slow(kRoot + "events/slow", /*upload_interval_s=*/3600);
    const std::string slow_path = slow.path();
    slow.scalar("loss", 2.5, 1);
    slow.flush();
    settle(slow_path);  // created (file_version only) when the writer opened
    EXPECT_TRUE(orchard::read_scalar_events(slow_path).empty()) << "uploaded before the interval";
    path = slow_path;
  }
  settle(path);
  EXPECT_EQ(orchard::read_scalar_events(path).size(), 1u) << "the destructor uploads the rest";
}

TEST(S3, RangedReadsAndSequentialReader) {
  NEED_S3RVER();
  S3FileSystem* s3fs = use_s3(S3rver::options());
  const std::string path = kRoot + "range/blob";
  const std::string data = pattern_bytes(1000, 2);
  write_file(path, data);
  settle(path);
  EXPECT_EQ(read_range(path, 0, 10), data.substr(0, 10));
  EXPECT_EQ(read_range(path, 500, 1), data.substr(500, 1));
  EXPECT_EQ(read_range(path, 990, 100), data.substr(990));  // short at the end
  EXPECT_EQ(read_range(path, 1000, 5), "");                 // at the end
  EXPECT_EQ(read_range(path, 5000, 5), "");                 // past it (416)
  const int64_t before = s3fs->client().requests_sent();
  SequentialReader reader(path, PrefetchOptions{64, 1});  // one block at a time: a known count
  std::string got;
  char buf[100];
  for (size_t n; (n = reader.read(buf, sizeof buf)) > 0;) got.append(buf, n);
  EXPECT_EQ(got, data);
  EXPECT_EQ(s3fs->client().requests_sent() - before,
            16);  // 15 full blocks + a short one
}

TEST(S3, MultipartUpload) {
  NEED_S3RVER();
  s3::S3Options o = S3rver::options();
  o.part_size = 5u << 20;
  o.multipart_threshold = 6u << 20;
  S3FileSystem* s3fs = use_s3(o);
  const std::string path = kRoot + "multipart/ckpt-100.pt";
  const std::string data = pattern_bytes((12u << 20) + 12345, 3);
  const int64_t before = s3fs->client().requests_sent();
  write_file(path, data);
  EXPECT_EQ(s3fs->client().requests_sent() - before,
            5);  // start, 3 parts, complete
  EXPECT_EQ(stat(path)->size, static_cast<int64_t>(data.size()));
  EXPECT_TRUE(read_file(path) == data);
  EXPECT_TRUE(read_range(path, (5u << 20) - 3, 6) == data.substr((5u << 20) - 3, 6));  // across a part boundary
}

TEST(S3, EndpointFromTensorFlowVariables) {
  NEED_S3RVER();
  ::setenv("S3_ENDPOINT", ("127.0.0.1:" + std::to_string(S3rver::port)).c_str(), 1);
  ::setenv("S3_USE_HTTPS", "0", 1);
  ::setenv("AWS_ACCESS_KEY_ID", "S3RVER", 1);
  ::setenv("AWS_SECRET_ACCESS_KEY", "S3RVER", 1);
  ::unsetenv("AWS_ENDPOINT_URL");
  ::unsetenv("AWS_ENDPOINT_URL_S3");
  const s3::S3Options o = s3::S3Options::from_environment();
  ::unsetenv("S3_ENDPOINT");
  ::unsetenv("S3_USE_HTTPS");
  ::unsetenv("AWS_ACCESS_KEY_ID");
  ::unsetenv("AWS_SECRET_ACCESS_KEY");
  EXPECT_EQ(o.endpoint, "http://127.0.0.1:" + std::to_string(S3rver::port));
  EXPECT_TRUE(o.path_style);
  EXPECT_TRUE(o.verify_tls);
  use_s3(o);
  write_file(kRoot + "env/x", "through S3_ENDPOINT");
  EXPECT_EQ(read_file(kRoot + "env/x"), "through S3_ENDPOINT");
}

// An independent client reads what Orchard wrote, and writes what Orchard
// reads.
TEST(S3, AwsSdkCrossCheck) {
  NEED_S3RVER();
  const std::string node = test::which_program("node");
  if (::access((kNpmDir + "/node_modules/@aws-sdk/client-s3").c_str(), R_OK) != 0)
    GTEST_FAIL() << "@aws-sdk/client-s3 not installed in tests/npm (scripts/test.sh runs npm ci there)";
  use_s3(S3rver::options());
  const std::string data = pattern_bytes(300000, 4);
  write_file(kRoot + "sdk/from-orchard", data);
  settle(kRoot + "sdk/from-orchard");
  const std::string cmd = node + " " + kNpmDir + "/s3_cross_check.js http://127.0.0.1:" + std::to_string(S3rver::port) +
                          " " + kBucket + " sdk/from-orchard sdk/from-sdk 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  ASSERT_EQ(::pclose(p), 0) << out;
  // The script prints the SHA-256 of the object it read, then writes "written
  // by the AWS SDK".
  EXPECT_NE(out.find("sha256 " + s3::sha256_hex(data)), std::string::npos) << out;
  EXPECT_EQ(read_file(kRoot + "sdk/from-sdk"), "written by the AWS SDK");
  EXPECT_EQ(list_prefix(kRoot + "sdk/").size(), 2u);
}

// --- fake servers and a fault-injecting proxy
// ------------------------------------------

struct HttpRequest {
  std::string method, target, head, body;
  std::string header(const std::string& name) const {  // name lowercase
    std::istringstream in(head);
    for (std::string line; std::getline(in, line);) {
      const size_t c = line.find(':');
      if (c == std::string::npos) continue;
      std::string k = line.substr(0, c);
      for (char& ch : k) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
      if (k == name) {
        std::string v = line.substr(c + 1);
        while (!v.empty() && (v.back() == '\r' || v.back() == ' ')) v.pop_back();
        return v.substr(v.find_first_not_of(' '));
      }
    }
    return "";
  }
};

// A loopback HTTP server: one request per connection, answered with what
// `handler` returns (raw bytes; the connection is closed after them, so a
// response may be cut short on purpose). Connections are served one after
// another on one thread, or with `concurrent` each on its own thread; either
// way the server records the most requests it had open at once.
class FakeServer {
 public:
  using Handler = std::function<std::string(const HttpRequest&,
                                            int n)>;  // n: 0-based request count
  explicit FakeServer(Handler handler, bool concurrent = false)
      : handler_(std::move(handler)), concurrent_(concurrent) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    ::setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a);
    ::listen(fd_, 64);
    socklen_t len = sizeof a;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] { serve(); });
  }
  ~FakeServer() {
    stop_ = true;
    ::shutdown(fd_, SHUT_RDWR);
    ::close(fd_);
    thread_.join();
    std::lock_guard<std::mutex> lock(mu_);
    for (std::thread& t : connections_) t.join();
  }
  int port() const { return port_; }
  std::vector<HttpRequest> requests() {
    std::lock_guard<std::mutex> lock(mu_);
    return requests_;
  }
  int max_in_flight() const { return max_in_flight_; }

 private:
  void serve() {
    while (!stop_) {
      const int c = ::accept(fd_, nullptr, nullptr);
      if (c < 0) break;
      if (concurrent_) {
        std::lock_guard<std::mutex> lock(mu_);
        connections_.emplace_back([this, c] { handle(c); });
      } else {
        handle(c);
      }
    }
  }
  void handle(int c) {
    HttpRequest req;
    std::string buf;
    char tmp[65536];
    size_t head_end;
    while ((head_end = buf.find("\r\n\r\n")) == std::string::npos) {
      const ssize_t r = ::recv(c, tmp, sizeof tmp, 0);
      if (r <= 0) break;
      buf.append(tmp, static_cast<size_t>(r));
    }
    if (head_end == std::string::npos) {
      ::close(c);
      return;
    }
    req.head = buf.substr(0, head_end + 4);
    std::istringstream first(req.head);
    first >> req.method >> req.target;
    const std::string cl = req.header("content-length");
    const size_t want = cl.empty() ? 0 : std::stoul(cl);
    req.body = buf.substr(head_end + 4);
    while (req.body.size() < want) {
      const ssize_t r = ::recv(c, tmp, sizeof tmp, 0);
      if (r <= 0) break;
      req.body.append(tmp, static_cast<size_t>(r));
    }
    int n;
    {
      std::lock_guard<std::mutex> lock(mu_);
      requests_.push_back(req);
      n = static_cast<int>(requests_.size()) - 1;
    }
    const int now = ++in_flight_;
    for (int m = max_in_flight_; now > m && !max_in_flight_.compare_exchange_weak(m, now);) {
    }
    const std::string out = handler_(req, n);
    --in_flight_;
    send_all(c, out);
    ::shutdown(c, SHUT_WR);
    ::close(c);
  }
  Handler handler_;
  bool concurrent_;
  int fd_ = -1, port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> in_flight_{0}, max_in_flight_{0};
  std::thread thread_;
  std::mutex mu_;
  std::vector<std::thread> connections_;
  std::vector<HttpRequest> requests_;
};

std::string response(int status, const std::string& reason, const std::string& body,
                     const std::string& extra_headers = "") {
  return "HTTP/1.1 " + std::to_string(status) + " " + reason + "\r\nContent-Length: " + std::to_string(body.size()) +
         "\r\nConnection: close\r\n" + extra_headers + "\r\n" + body;
}

std::string error_xml(const std::string& code, const std::string& message) {
  return "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>" + code + "</Code><Message>" + message +
         "</Message></Error>";
}

// Forwards a request to s3rver on a fresh connection and returns its whole
// response.
std::string forward(const HttpRequest& req) {
  const int s = test::connect_loopback(S3rver::port);
  if (s < 0) return response(502, "Bad Gateway", "");
  std::string head = req.head;
  head.insert(head.size() - 2, "Connection: close\r\n");
  send_all(s, head + req.body);
  std::string out;
  char tmp[65536];
  for (ssize_t r; (r = ::recv(s, tmp, sizeof tmp, 0)) > 0;) out.append(tmp, static_cast<size_t>(r));
  ::close(s);
  return out;
}

s3::S3Options fake_options(int port) {
  s3::S3Options o;
  o.endpoint = "http://127.0.0.1:" + std::to_string(port);
  o.path_style = true;
  o.credentials.access_key_id = "AKIDFAKE";
  o.credentials.secret_access_key = "SECRET-must-not-leak";
  o.credentials.session_token = "TOKEN-must-not-leak";
  o.credentials.source =
      "environment variables "
      "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY/AWS_SESSION_TOKEN";
  o.credentials.looked_at = {"environment variables AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY"};
  o.retry.initial_backoff_seconds = 0.01;
  o.retry.max_backoff_seconds = 0.05;
  return o;
}

TEST(S3Faults, A503IsRetried) {
  FakeServer server([](const HttpRequest&, int n) {
    if (n == 0) return response(503, "Slow Down", error_xml("SlowDown", "Please reduce your request rate."));
    return response(200, "OK", "hello");
  });
  s3::Client client(fake_options(server.port()));
  EXPECT_EQ(client.get("b", "k"), "hello");
  ASSERT_EQ(server.requests().size(), 2u);
  const HttpRequest r = server.requests()[0];  // a copy: requests() returns one
  EXPECT_EQ(r.target, "/b/k");
  EXPECT_NE(r.header("authorization").find("Credential=AKIDFAKE/"), std::string::npos);
  EXPECT_EQ(r.header("x-amz-content-sha256"), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(r.header("x-amz-security-token"), "TOKEN-must-not-leak");
}

TEST(S3Faults, ADroppedDownloadResumesFromTheLastByte) {
  const std::string data = pattern_bytes(200000, 5);
  FakeServer server([&](const HttpRequest& req, int n) {
    if (n == 0) {  // the headers promise 200000 bytes; 80000 come, then the
                   // connection closes
      const std::string full = response(200, "OK", data, "ETag: \"v1\"\r\n");
      return full.substr(0, full.size() - data.size() + 80000);
    }
    if (req.header("range") != "bytes=80000-") return response(400, "Bad Request", error_xml("Unexpected", "range"));
    return response(206, "Partial Content", data.substr(80000),
                    "ETag: \"v1\"\r\nContent-Range: bytes 80000-199999/200000\r\n");
  });
  s3::Client client(fake_options(server.port()));
  EXPECT_TRUE(client.get("b", "shard") == data);
  ASSERT_EQ(server.requests().size(), 2u);
  EXPECT_EQ(server.requests()[1].header("range"), "bytes=80000-");
  EXPECT_EQ(server.requests()[1].header("if-match"), "\"v1\"");
}

// A whole read whose bytes do not match the object's ETag (MD5 of a single-part object) is read
// again: s3rver's early answer to a PUT, a proxy cutting a body at a clean boundary.
TEST(S3Faults, ABodyThatDoesNotMatchItsEtagIsReadAgain) {
  // MD5("hello") = 5d41402abc4b2a76b9719d911017c592.
  FakeServer server([](const HttpRequest&, int n) {
    const std::string etag = "ETag: \"5d41402abc4b2a76b9719d911017c592\"\r\n";
    return n == 0 ? response(200, "OK", "hel", etag) : response(200, "OK", "hello", etag);
  });
  s3::Client client(fake_options(server.port()));
  EXPECT_EQ(client.get("b", "k"), "hello");
  EXPECT_EQ(server.requests().size(), 2u);
}

TEST(S3Faults, ForbiddenIsOneLineNamingTheCredentialsAndNeverTheSecret) {
  FakeServer server(
      [](const HttpRequest&, int) { return response(403, "Forbidden", error_xml("AccessDenied", "Access Denied")); });
  s3::Client client(fake_options(server.port()));
  try {
    client.get("bucket", "model/ckpt-1.pt");
    ADD_FAILURE() << "no error";
  } catch (const StorageError& e) {
    const std::string msg = e.what();
    EXPECT_EQ(e.http_status(), 403);
    EXPECT_EQ(e.code(), "AccessDenied");
    for (const std::string& part :
         {std::string("s3://bucket/model/ckpt-1.pt"), std::string("read"),
          "http://127.0.0.1:" + std::to_string(server.port()) + "/bucket/model/ckpt-1.pt", std::string("HTTP 403"),
          std::string("AccessDenied"), std::string("credentials from environment variables AWS_ACCESS_KEY_ID")})
      EXPECT_NE(msg.find(part), std::string::npos) << "'" << part << "' not in: " << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    EXPECT_EQ(msg.find("SECRET-must-not-leak"), std::string::npos) << msg;
    EXPECT_EQ(msg.find("TOKEN-must-not-leak"), std::string::npos) << msg;
  }
  EXPECT_EQ(server.requests().size(), 1u);  // a 403 is not retried
}

TEST(S3Faults, RetriesAreBounded) {
  FakeServer server([](const HttpRequest&, int) { return response(500, "Internal Server Error", ""); });
  s3::S3Options o = fake_options(server.port());
  o.retry.max_attempts = 3;
  s3::Client client(o);
  try {
    client.head("b", "k");
    ADD_FAILURE() << "no error";
  } catch (const StorageError& e) {
    EXPECT_NE(std::string(e.what()).find("gave up after 3 attempts"), std::string::npos) << e.what();
  }
  EXPECT_EQ(server.requests().size(), 3u);
}

// Orchard -> proxy -> s3rver: a multipart part answered 503 once, a part's
// connection dropped before any response, a listing page 503 once, and a
// download cut mid-body all end with the same objects as without faults.
TEST(S3Faults, ThroughAFaultInjectingProxyToS3rver) {
  NEED_S3RVER();
  std::atomic<int> part2_seen{0}, part3_seen{0}, list_seen{0}, get_seen{0};
  FakeServer proxy([&](const HttpRequest& req, int) -> std::string {
    if (req.method == "PUT" && req.target.find("partNumber=2") != std::string::npos && part2_seen++ == 0)
      return response(503, "Slow Down", error_xml("SlowDown", "slow down"));
    if (req.method == "PUT" && req.target.find("partNumber=3") != std::string::npos && part3_seen++ == 0)
      return "";  // the connection closes with no response
    if (req.method == "GET" && req.target.find("continuation-token") != std::string::npos && list_seen++ == 0)
      return response(503, "Slow Down", "");
    std::string out = forward(req);
    if (req.method == "GET" && req.target.find("/big") != std::string::npos && req.header("range").empty() &&
        get_seen++ == 0)
      return out.substr(0, out.size() / 2);  // half the body, then the connection drops
    return out;
  });
  s3::S3Options o = S3rver::options();  // s3rver knows only its own access key id
  o.endpoint = "http://127.0.0.1:" + std::to_string(proxy.port());
  o.part_size = 5u << 20;
  o.multipart_threshold = 6u << 20;
  o.max_keys = 2;
  use_s3(o);
  const std::string data = pattern_bytes((11u << 20) + 7, 6);
  write_file(kRoot + "proxy/big", data);
  write_file(kRoot + "proxy/small", "small");
  write_file(kRoot + "proxy/small2", "small2");
  EXPECT_EQ(part2_seen.load(), 2);
  EXPECT_EQ(part3_seen.load(), 2);
  // 2 pages; the second's first try is a 503.
  EXPECT_EQ(list_prefix(kRoot + "proxy/"),
            (std::vector<std::string>{kRoot + "proxy/big", kRoot + "proxy/small", kRoot + "proxy/small2"}));
  EXPECT_EQ(list_seen.load(), 2);
  EXPECT_TRUE(read_file(kRoot + "proxy/big") == data);
  EXPECT_EQ(get_seen.load(), 1);
  // What s3rver holds, read without the proxy.
  s3::Client direct(S3rver::options());
  EXPECT_TRUE(direct.get(kBucket, "proxy/big") == data);
}

// --- parallel multipart uploads --------------------------------------------------------------

// Orchard -> proxy (a thread per connection) -> s3rver. Each part's PUT is held 150 ms in the
// proxy, so parts sent together are seen together; part 2's first try is a 503.
TEST(S3Faults, PartsAreUploadedInParallelAndRetriedOnTheirOwn) {
  NEED_S3RVER();
  std::atomic<int> part2_seen{0}, parts_in_flight{0}, max_parts_in_flight{0};
  FakeServer proxy(
      [&](const HttpRequest& req, int) -> std::string {
        if (req.method != "PUT" || req.target.find("partNumber=") == std::string::npos) return forward(req);
        const int now = ++parts_in_flight;
        for (int m = max_parts_in_flight; now > m && !max_parts_in_flight.compare_exchange_weak(m, now);) {
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(150));
        std::string out = req.target.find("partNumber=2&") != std::string::npos && part2_seen++ == 0
                              ? response(503, "Slow Down", error_xml("SlowDown", "slow down"))
                              : forward(req);
        --parts_in_flight;
        return out;
      },
      /*concurrent=*/true);
  s3::S3Options o = S3rver::options();
  o.endpoint = "http://127.0.0.1:" + std::to_string(proxy.port());
  o.part_size = 5u << 20;
  o.multipart_threshold = 6u << 20;
  o.upload_concurrency = 4;
  S3FileSystem* s3fs = use_s3(o);
  const std::string data = pattern_bytes((20u << 20) + 1234, 7);  // 5 parts, the last one short
  const int64_t before = s3fs->client().requests_sent();
  write_file(kRoot + "parallel/ckpt", data);
  EXPECT_EQ(s3fs->client().requests_sent() - before, 8);  // start, 5 parts, part 2 again, complete
  EXPECT_EQ(part2_seen.load(), 2);
  EXPECT_GE(max_parts_in_flight.load(), 2);  // parts really were in flight together
  EXPECT_LE(max_parts_in_flight.load(), 4);  // and never more than upload_concurrency
  s3::Client direct(S3rver::options());
  EXPECT_TRUE(direct.get(kBucket, "parallel/ckpt") == data);

  // The control: with one part at a time the proxy sees one at a time.
  max_parts_in_flight = 0;
  o.upload_concurrency = 1;
  use_s3(o);
  write_file(kRoot + "parallel/ckpt-sequential", data);
  EXPECT_EQ(max_parts_in_flight.load(), 1);
  EXPECT_TRUE(direct.get(kBucket, "parallel/ckpt-sequential") == data);
}

TEST(S3Faults, APartThatFailsForGoodAbortsTheUpload) {
  NEED_S3RVER();
  FakeServer proxy(
      [&](const HttpRequest& req, int) -> std::string {
        if (req.method == "PUT" && req.target.find("partNumber=3&") != std::string::npos)
          return response(403, "Forbidden", error_xml("AccessDenied", "no part 3 for you"));
        return forward(req);
      },
      /*concurrent=*/true);
  s3::S3Options o = S3rver::options();
  o.endpoint = "http://127.0.0.1:" + std::to_string(proxy.port());
  o.part_size = 5u << 20;
  o.multipart_threshold = 6u << 20;
  o.upload_concurrency = 3;
  use_s3(o);
  try {
    write_file(kRoot + "parallel/aborted", pattern_bytes((25u << 20) + 1, 8));
    ADD_FAILURE() << "no error";
  } catch (const StorageError& e) {
    EXPECT_EQ(e.code(), "AccessDenied");
    EXPECT_NE(std::string(e.what()).find("upload part 3"), std::string::npos) << e.what();
  }
  int aborts = 0, completes = 0;
  for (const HttpRequest& r : proxy.requests()) {
    aborts += r.method == "DELETE" && r.target.find("uploadId=") != std::string::npos;
    completes += r.method == "POST" && r.target.find("uploadId=") != std::string::npos;
  }
  EXPECT_EQ(aborts, 1);
  EXPECT_EQ(completes, 0);
  EXPECT_FALSE(s3::Client(S3rver::options()).head(kBucket, "parallel/aborted"));
}

// --- prefetching reads -------------------------------------------------------------------------

std::string read_all(SequentialReader& reader, size_t chunk) {
  std::string got, buf(chunk, '\0');
  for (size_t n; (n = reader.read(buf.data(), chunk)) > 0;) got.append(buf.data(), n);
  return got;
}

TEST(S3, PrefetchingReaderGivesTheObjectForEveryBlockSize) {
  NEED_S3RVER();
  use_s3(S3rver::options());
  const std::string path = kRoot + "prefetch/shard";
  const std::string data = pattern_bytes((1u << 20) + 123, 9);
  write_file(path, data);
  settle(path);
  for (uint64_t block : {4096ull, 65536ull, 300001ull, 1ull << 20, (1ull << 20) + 123, 2ull << 20})
    for (int blocks : {1, 3, 6})
      for (size_t chunk : {size_t{70000}, size_t{4096 * 3}}) {
        SequentialReader reader(path, PrefetchOptions{block, blocks});
        EXPECT_TRUE(reader.prefetching());
        EXPECT_TRUE(read_all(reader, chunk) == data) << "block " << block << " blocks " << blocks;
      }
  SequentialReader empty(kRoot + "prefetch/missing-is-an-error", PrefetchOptions{4096, 2});
  char c;
  EXPECT_THROW(empty.read(&c, 1), StorageError);
}

// Ranged GETs through a proxy that answers some 503 and cuts some bodies short: the client's
// retries mend each block, the reader gives the object, and several blocks were in flight.
TEST(S3Faults, PrefetchThroughAFaultInjectingProxy) {
  NEED_S3RVER();
  use_s3(S3rver::options());
  const std::string data = pattern_bytes((1u << 20) + 4321, 10);
  write_file(kRoot + "prefetch/faulty", data);
  settle(kRoot + "prefetch/faulty");
  std::atomic<int> ranged{0}, failed{0}, cut{0};
  FakeServer proxy(
      [&](const HttpRequest& req, int) -> std::string {
        if (req.header("range").empty()) return forward(req);
        const int k = ranged++;
        std::this_thread::sleep_for(std::chrono::milliseconds(20));  // a round trip
        if (k % 5 == 1) {
          ++failed;
          return response(503, "Slow Down", error_xml("SlowDown", "slow down"));
        }
        std::string out = forward(req);
        if (k % 7 == 3 && out.size() > 60000) {  // a full block, not a 416 past the end
          ++cut;
          return out.substr(0, out.size() - 30000);  // the connection drops mid-body
        }
        return out;
      },
      /*concurrent=*/true);
  s3::S3Options o = S3rver::options();
  o.endpoint = "http://127.0.0.1:" + std::to_string(proxy.port());
  use_s3(o);
  SequentialReader reader(kRoot + "prefetch/faulty", PrefetchOptions{65536, 4});
  EXPECT_TRUE(read_all(reader, 100000) == data);
  EXPECT_GE(failed.load(), 3);
  EXPECT_GE(cut.load(), 2);
  EXPECT_GE(proxy.max_in_flight(), 2);
  EXPECT_LE(proxy.max_in_flight(), 4);
}

// A reader destroyed while its block requests hang returns at once: the requests are cancelled
// (http::CancelScope), not waited for.
TEST(S3Faults, AReaderDestroyedMidFileCancelsItsRequests) {
  const std::string data = pattern_bytes(100000, 11);
  std::atomic<bool> release{false};
  FakeServer server(
      [&](const HttpRequest& req, int) -> std::string {
        if (req.header("range") == "bytes=0-999")
          return response(206, "Partial Content", data.substr(0, 1000), "Content-Range: bytes 0-999/100000\r\n");
        for (int i = 0; i < 2000 && !release; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
        return response(503, "Slow Down", "");
      },
      /*concurrent=*/true);
  s3::S3Options o = fake_options(server.port());
  o.retry.max_attempts = 1;  // without cancellation the destructor would wait one 20 s request
  use_s3(o);
  const auto start = std::chrono::steady_clock::now();
  {
    SequentialReader reader("s3://b/hanging", PrefetchOptions{1000, 4});
    std::string got(500, '\0');
    EXPECT_EQ(reader.read(got.data(), 500), 500u);
    EXPECT_TRUE(got == data.substr(0, 500));
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // the other blocks' GETs are waiting
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, 3.0);  // without cancellation: 20 s
  release = true;
  EXPECT_GE(server.requests().size(), 2u);
}

TEST(S3, ShardPrefetcherReadsShardAfterShard) {
  NEED_S3RVER();
  S3FileSystem* s3fs = use_s3(S3rver::options());
  std::vector<std::string> shards;
  for (int i = 0; i < 3; ++i) {
    shards.push_back(kRoot + "prefetch/train-0000" + std::to_string(i) + "-of-00003");
    write_file(shards.back(), pattern_bytes(300000 + 1000 * i, 20 + i));
    settle(shards.back());
  }
  ShardPrefetcher prefetcher(PrefetchOptions{65536, 3});
  for (size_t i = 0; i < shards.size(); ++i) {
    const std::string next = i + 1 < shards.size() ? shards[i + 1] : "";
    SequentialReader reader = prefetcher.open(shards[i], next);
    EXPECT_TRUE(read_all(reader, 50000) == pattern_bytes(300000 + 1000 * i, 20 + static_cast<unsigned>(i)));
    if (next.empty()) continue;
    for (int t = 0; t < 400 && prefetcher.started().empty(); ++t)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    EXPECT_EQ(prefetcher.started(), std::vector<std::string>{next});  // begun before it is opened
  }
  EXPECT_TRUE(prefetcher.started().empty());
  EXPECT_GT(s3fs->client().requests_sent(), 0);
}

// --- http(s):// ---------------------------------------------------------------------------------

// A static file server: `ranges` false answers every GET 200 with the whole body (as Python's
// http.server does); `head` false refuses HEAD with 405.
FakeServer::Handler static_files(std::map<std::string, std::string> files, bool ranges, bool head) {
  return [files = std::move(files), ranges, head](const HttpRequest& req, int) -> std::string {
    if (req.target == "/moved") return response(302, "Found", "", "Location: /data\r\n");
    auto it = files.find(req.target);
    if (it == files.end()) return response(404, "Not Found", "no such file");
    const std::string& body = it->second;
    if (req.method == "HEAD") {
      if (!head) return response(405, "Method Not Allowed", "");
      return "HTTP/1.1 200 OK\r\nContent-Length: " + std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n";
    }
    const std::string range = req.header("range");
    if (!ranges || range.empty()) return response(200, "OK", body, "ETag: \"e1\"\r\n");
    unsigned long long a = 0, b = ~0ull;
    if (std::sscanf(range.c_str(), "bytes=%llu-%llu", &a, &b) < 1) return response(400, "Bad Request", "");
    if (a >= body.size())
      return response(416, "Range Not Satisfiable", "",
                      "Content-Range: bytes */" + std::to_string(body.size()) + "\r\n");
    b = std::min<unsigned long long>(b, body.size() - 1);
    return response(206, "Partial Content", body.substr(a, b - a + 1),
                    "ETag: \"e1\"\r\nContent-Range: bytes " + std::to_string(a) + "-" + std::to_string(b) + "/" +
                        std::to_string(body.size()) + "\r\n");
  };
}

HttpFileSystem* use_http() {
  HttpOptions o;
  o.retry.initial_backoff_seconds = 0.01;
  o.retry.max_backoff_seconds = 0.05;
  auto* fs = new HttpFileSystem(o);
  register_file_system("http", [fs] { return std::unique_ptr<FileSystem>(fs); });
  return fs;
}

void expect_http_reads(const std::string& url, const std::string& data) {
  EXPECT_TRUE(read_file(url) == data);
  EXPECT_TRUE(read_range(url, 0, 10) == data.substr(0, 10));
  EXPECT_TRUE(read_range(url, 12345, 1000) == data.substr(12345, 1000));
  EXPECT_TRUE(read_range(url, data.size() - 5, 100) == data.substr(data.size() - 5));  // short at the end
  EXPECT_EQ(read_range(url, data.size(), 5), "");
  EXPECT_EQ(read_range(url, data.size() + 100, 5), "");
  ASSERT_TRUE(stat(url));
  EXPECT_EQ(stat(url)->size, static_cast<int64_t>(data.size()));
  for (uint64_t block : {1000ull, 65536ull, 1ull << 20}) {
    SequentialReader reader(url, PrefetchOptions{block, 4});
    EXPECT_TRUE(read_all(reader, 30000) == data) << url << " block " << block;
  }
}

TEST(Http, ReadsRangesAndStatsFromAServerWithRanges) {
  const std::string data = pattern_bytes(200000, 12);
  FakeServer server(static_files({{"/data", data}}, /*ranges=*/true, /*head=*/true), /*concurrent=*/true);
  use_http();
  const std::string base = "http://127.0.0.1:" + std::to_string(server.port());
  expect_http_reads(base + "/data", data);
  EXPECT_TRUE(read_range(base + "/moved", 5, 10) == data.substr(5, 10));  // a redirect is followed
  bool ranged_206 = false;
  for (const HttpRequest& r : server.requests()) ranged_206 |= r.header("range") == "bytes=12345-13344";
  EXPECT_TRUE(ranged_206);
  EXPECT_FALSE(stat(base + "/missing"));
  EXPECT_FALSE(exists(base + "/missing"));
  try {
    read_file(base + "/missing");
    ADD_FAILURE() << "no error";
  } catch (const StorageError& e) {
    EXPECT_EQ(e.http_status(), 404);
    EXPECT_NE(std::string(e.what()).find(base + "/missing: read (GET) failed: HTTP 404"), std::string::npos)
        << e.what();
  }
  EXPECT_NO_THROW(file_system_for("https://example.com/x"));  // https is registered too (no request here)
}

TEST(Http, AServerThatIgnoresRangeStillGivesTheRightBytes) {
  const std::string data = pattern_bytes(300000, 13);
  FakeServer server(static_files({{"/data", data}, {"/other", "other"}}, /*ranges=*/false, /*head=*/false),
                    /*concurrent=*/true);
  HttpFileSystem* fs = use_http();
  const std::string base = "http://127.0.0.1:" + std::to_string(server.port());
  expect_http_reads(base + "/data", data);  // stat falls back to GET when HEAD is refused
  EXPECT_EQ(read_range(base + "/other", 1, 3), "the");
  // A block reader over a fresh URL downloads the whole body a few times at most (the blocks in
  // flight before the first whole body arrives), not once per block (300 blocks of 1000).
  const int64_t before = fs->requests_sent();
  SequentialReader reader(base + "/data", PrefetchOptions{1000, 4});
  EXPECT_TRUE(read_all(reader, 4096) == data);
  EXPECT_LE(fs->requests_sent() - before, 8);
}

TEST(Http, RetriesAndResumesABrokenDownload) {
  const std::string data = pattern_bytes(150000, 14);
  FakeServer server([&](const HttpRequest& req, int n) -> std::string {
    if (n == 0) return response(503, "Service Unavailable", "");
    if (n == 1) {  // promises the whole body, sends 60000 bytes, drops the connection
      const std::string full = response(200, "OK", data, "ETag: \"v7\"\r\n");
      return full.substr(0, full.size() - data.size() + 60000);
    }
    if (req.header("range") != "bytes=60000-" || req.header("if-range") != "\"v7\"")
      return response(400, "Bad Request", "unexpected " + req.header("range"));
    return response(206, "Partial Content", data.substr(60000),
                    "ETag: \"v7\"\r\nContent-Range: bytes 60000-149999/150000\r\n");
  });
  use_http();
  EXPECT_TRUE(read_file("http://127.0.0.1:" + std::to_string(server.port()) + "/ckpt") == data);
  EXPECT_EQ(server.requests().size(), 3u);
}

TEST(Http, IsReadOnlyAndHasNoListing) {
  FakeServer server(static_files({{"/data", "x"}}, true, true));
  use_http();
  const std::string base = "http://127.0.0.1:" + std::to_string(server.port());
  auto expect_error = [](const std::function<void()>& f, const std::string& part) {
    try {
      f();
      ADD_FAILURE() << "no error, expected: " << part;
    } catch (const StorageError& e) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
  };
  expect_error([&] { write_file(base + "/data", "y"); }, base + "/data: write: http(s):// is read-only");
  expect_error([&] { remove(base + "/data"); }, "http(s):// is read-only");
  expect_error([&] { list_prefix(base + "/"); }, "http(s):// has no listing");
  expect_error([&] { glob(base + "/da*"); }, "has no listing");
  EXPECT_EQ(glob(base + "/data"), std::vector<std::string>{base + "/data"});  // no wildcard: a HEAD
  EXPECT_EQ(server.requests().size(), 1u);  // nothing was sent for the refused operations
}

// Python's http.server: no Range support, HEAD with Content-Length.
TEST(Http, AgainstPythonHttpServer) {
  const std::string python = test::which_program("python3");
  if (python.empty()) GTEST_SKIP() << "python3 not on PATH";
  test::TempDir dir;
  const std::string data = pattern_bytes(250000, 15);
  write_file(dir.file("model.ckpt.data-00000-of-00001"), data);
  const int port = test::free_loopback_port();
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    std::freopen("/dev/null", "w", stderr);
    const std::string p = std::to_string(port), d = dir.str();
    ::execl(python.c_str(), python.c_str(), "-m", "http.server", p.c_str(), "--bind", "127.0.0.1", "--directory",
            d.c_str(), static_cast<char*>(nullptr));
    std::_Exit(127);
  }
  bool up = false;
  for (int i = 0; i < 100 && !up; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    const int s = test::connect_loopback(port);
    if ((up = s >= 0)) ::close(s);
  }
  ASSERT_TRUE(up) << "python3 -m http.server did not start";
  use_http();
  const std::string base = "http://127.0.0.1:" + std::to_string(port);
  expect_http_reads(base + "/model.ckpt.data-00000-of-00001", data);
  EXPECT_FALSE(exists(base + "/model.ckpt.index"));
  ::kill(pid, SIGTERM);
  ::waitpid(pid, nullptr, 0);
}

}  // namespace
}  // namespace orchard::fs
