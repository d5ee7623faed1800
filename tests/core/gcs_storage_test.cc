// The gs:// file system against the Cloud Storage emulator from npm firebase-tools (started by this
// binary through tests/npm/gcs_emulator.js), through a fault-injecting proxy, and against fake
// servers for what the emulator does not do: token endpoints, the metadata server, 403s, 503s.
//
// The emulator (firebase-tools 15.37.0) is not faithful in ways that matter here, each tested
// another way:
//   - it finalizes a resumable upload at its first PUT, whatever Content-Range says, and never
//     answers 308: multi-chunk uploads go through a proxy that keeps the session's chunks, answers
//     308 with the persisted Range as GCS does (also to `bytes */N` status queries), and hands the
//     assembled object to the emulator in one PUT when the last chunk arrives;
//   - it never forgets a session (GCS answers 404/410 for an expired one): a fake server does;
//   - it ignores preconditions (ifGenerationMatch): a resumed download is checked for the
//     parameter in its URL, not for the 412 GCS would send;
//   - it checks no credentials (its GCS routes use its admin layer): OAuth runs against fake
//     token, metadata and storage servers that check the Authorization header.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <nlohmann/json.hpp>
#include <openssl/bio.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rsa.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>

#include "core/test_util.h"
#include "orchard/core/crc32c.h"
#include "orchard/core/filesystem.h"
#include "orchard/core/gcs_client.h"
#include "orchard/core/gcs_filesystem.h"
#include "storage_servers.h"

namespace orchard::fs {
namespace {

using json = nlohmann::json;

const std::string kNpmDir = ORCHARD_TEST_NPM_DIR;
const std::string kBucket = "orchard-test";
const std::string kRoot = "gs://" + kBucket + "/";

using test::send_all;

std::string pattern_bytes(size_t n, unsigned seed) {
  std::string s(n, '\0');
  uint32_t x = seed * 2654435761u + 1;
  for (size_t i = 0; i < n; ++i) {
    x = x * 1664525u + 1013904223u;
    s[i] = static_cast<char>(x >> 24);
  }
  return s;
}

std::string sha256_hex(const std::string& data) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_Digest(data.data(), data.size(), md, &n, EVP_sha256(), nullptr);
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (unsigned int i = 0; i < n; ++i) out += {hex[md[i] >> 4], hex[md[i] & 15]};
  return out;
}

gcs::Env env_of(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](const std::string& name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

void fast_retries(gcs::GcsOptions& o) {
  o.retry.initial_backoff_seconds = 0.01;
  o.retry.max_backoff_seconds = 0.05;
}

// --- the emulator, started once for the binary -----------------------------------------------------

class Emulator : public ::testing::Environment {
 public:
  static inline int port = 0;
  static inline std::string unavailable;  // why it could not start, "" when it runs

  void SetUp() override {
    const std::string node = test::which_program("node");
    const std::string script = kNpmDir + "/gcs_emulator.js";
    const std::string server = kNpmDir + "/node_modules/firebase-tools/lib/emulator/storage/server.js";
    if (node.empty() || ::access(server.c_str(), R_OK) != 0) {
      unavailable = "node or " + server + " missing (scripts/test.sh runs npm ci in tests/npm)";
      return;
    }
    port = test::free_loopback_port();
    const std::string log = dir_.file("emulator.log");
    pid_ = ::fork();
    if (pid_ == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlives the test binary
      std::freopen(log.c_str(), "w", stdout);
      std::freopen(log.c_str(), "a", stderr);
      ::setenv("TMPDIR", dir_.str().c_str(), 1);
      const std::string p = std::to_string(port);
      ::execl(node.c_str(), node.c_str(), script.c_str(), p.c_str(), static_cast<char*>(nullptr));
      std::_Exit(127);
    }
    for (int i = 0; i < 300; ++i) {  // up to 30 s on a loaded machine
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      const int s = test::connect_loopback(port);
      if (s >= 0) {
        ::close(s);
        gcs::GcsOptions o = options();
        o.retry.max_attempts = 1;
        try {
          gcs::Client(o).list(kBucket, "");
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
    unavailable = "the GCS emulator did not start: " + text.str();
  }
  void TearDown() override {
    if (pid_ > 0) {
      ::kill(pid_, SIGTERM);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  // As STORAGE_EMULATOR_HOST gives them, without touching the process's environment.
  static gcs::GcsOptions options(int at_port = 0) {
    gcs::GcsOptions o = gcs::GcsOptions::from_environment(
        env_of({{"STORAGE_EMULATOR_HOST", "127.0.0.1:" + std::to_string(at_port ? at_port : port)}}));
    fast_retries(o);
    return o;
  }

 private:
  test::TempDir dir_;
  pid_t pid_ = -1;
};

::testing::Environment* const kEnv = ::testing::AddGlobalTestEnvironment(new Emulator());

// A missing emulator fails the test (scripts/test.sh installs it): a skip would read as a pass.
#define NEED_EMULATOR() \
  if (!Emulator::unavailable.empty()) GTEST_FAIL() << Emulator::unavailable

// Registers gs:// with these options for the test's duration.
GcsFileSystem* use_gcs(const gcs::GcsOptions& o) {
  auto* fs = new GcsFileSystem(o);
  register_file_system("gs", [fs] { return std::unique_ptr<FileSystem>(fs); });
  return fs;
}

// --- fake servers and a proxy ----------------------------------------------------------------------

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
        const size_t a = v.find_first_not_of(' ');
        return a == std::string::npos ? "" : v.substr(a);
      }
    }
    return "";
  }
};

// A loopback HTTP server on its own thread: one request per connection, answered with what
// `handler` returns (raw bytes; the connection closes after them, so a response may be cut short on
// purpose).
class FakeServer {
 public:
  using Handler = std::function<std::string(const HttpRequest&,
                                            int n)>;  // n: 0-based request count
  explicit FakeServer(Handler handler) : handler_(std::move(handler)) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    ::setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a);
    ::listen(fd_, 16);
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
  }
  int port() const { return port_; }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  std::vector<HttpRequest> requests() {
    std::lock_guard<std::mutex> lock(mu_);
    return requests_;
  }

 private:
  void serve() {
    while (!stop_) {
      const int c = ::accept(fd_, nullptr, nullptr);
      if (c < 0) break;
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
        continue;
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
      send_all(c, handler_(req, n));
      ::shutdown(c, SHUT_WR);
      ::close(c);
    }
  }
  Handler handler_;
  int fd_ = -1, port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  std::mutex mu_;
  std::vector<HttpRequest> requests_;
};

std::string response(int status, const std::string& reason, const std::string& body,
                     const std::string& extra_headers = "") {
  return "HTTP/1.1 " + std::to_string(status) + " " + reason + "\r\nContent-Length: " + std::to_string(body.size()) +
         "\r\nConnection: close\r\n" + extra_headers + "\r\n" + body;
}

std::string error_json(int code, const std::string& reason, const std::string& message) {
  return json{
      {"error", {{"code", code}, {"message", message}, {"errors", {{{"reason", reason}, {"message", message}}}}}}}
      .dump();
}

// Sends raw bytes to the emulator on a fresh connection and returns its whole response.
std::string to_emulator(const std::string& raw) {
  const int s = test::connect_loopback(Emulator::port);
  if (s < 0) return response(502, "Bad Gateway", "");
  send_all(s, raw);
  std::string out;
  char tmp[65536];
  for (ssize_t r; (r = ::recv(s, tmp, sizeof tmp, 0)) > 0;) out.append(tmp, static_cast<size_t>(r));
  ::close(s);
  return out;
}

std::string forward(const HttpRequest& req) {
  std::string head = req.head;
  head.insert(head.size() - 2, "Connection: close\r\n");
  return to_emulator(head + req.body);
}

std::string query_param(const std::string& target, const std::string& name) {
  const size_t q = target.find('?');
  if (q == std::string::npos) return "";
  std::stringstream ss(target.substr(q + 1));
  for (std::string kv; std::getline(ss, kv, '&');)
    if (kv.rfind(name + "=", 0) == 0) return kv.substr(name.size() + 1);
  return "";
}

// Between the client and the emulator: keeps each resumable session's bytes and answers its chunks
// and status queries with 308 + "Range: bytes=0-N" as GCS does; when the last byte arrives, the
// emulator gets the whole object in one PUT. Anything else is forwarded as is.
class ResumableProxy {
 public:
  // Called for each chunk PUT (not status queries) before it is taken; an answer is sent instead of
  // the proxy's own (a fault: "" closes the connection with no answer). `persist` false drops the
  // chunk's bytes.
  using Fault = std::function<std::optional<std::string>(const HttpRequest&, int chunk, bool* persist)>;
  explicit ResumableProxy(Fault fault = nullptr)
      : fault_(std::move(fault)), server_([this](const HttpRequest& r, int) { return handle(r); }) {}
  int port() const { return server_.port(); }
  std::vector<HttpRequest> requests() { return server_.requests(); }

 private:
  std::string handle(const HttpRequest& req) {
    const std::string id = query_param(req.target, "upload_id");
    if (req.method != "PUT" || id.empty()) return forward(req);
    const std::string range = req.header("content-range");  // "bytes a-b/N" or "bytes */N"
    const size_t slash = range.find('/');
    const uint64_t total = std::stoull(range.substr(slash + 1));
    std::string& have = sessions_[id];
    if (range.compare(6, 1, "*") != 0) {
      bool persist = true;
      const int chunk = chunks_++;
      if (fault_) {
        const std::optional<std::string> answer = fault_(req, chunk, &persist);
        if (answer) {
          if (persist) take(have, range, req.body);
          return *answer;
        }
      }
      take(have, range, req.body);
    }
    if (have.size() < total)
      return response(308, "Resume Incomplete", "",
                      have.empty() ? "" : "Range: bytes=0-" + std::to_string(have.size() - 1) + "\r\n");
    // Complete: the emulator stores it (and finalizes the session) in one PUT.
    if (done_.count(id)) return done_[id];
    std::string head = "PUT " + req.target + " HTTP/1.1\r\nHost: 127.0.0.1:" + std::to_string(port()) +
                       "\r\nContent-Type: application/octet-stream\r\nContent-Length: " + std::to_string(have.size()) +
                       "\r\nConnection: close\r\n\r\n";
    return done_[id] = to_emulator(head + have);
  }
  static void take(std::string& have, const std::string& range, const std::string& body) {
    const uint64_t first = std::stoull(range.substr(6));
    if (first == have.size()) have += body;  // a chunk from elsewhere is refused, as GCS would
  }

  Fault fault_;
  std::map<std::string, std::string> sessions_, done_;
  int chunks_ = 0;
  FakeServer server_;
};

// --- against the emulator --------------------------------------------------------------------------

TEST(Gcs, EmulatorHostMeansThatEndpointAndNoCredentials) {
  for (const std::string host : {"127.0.0.1:9199", "http://127.0.0.1:9199", "http://127.0.0.1:9199/"}) {
    const gcs::GcsOptions o = gcs::GcsOptions::from_environment(
        env_of({{"STORAGE_EMULATOR_HOST", host}, {"GOOGLE_APPLICATION_CREDENTIALS", "/nonexistent.json"}}));
    EXPECT_EQ(o.endpoint, "http://127.0.0.1:9199");
    EXPECT_EQ(o.credentials.kind, gcs::Credentials::Kind::kNone);
  }
  EXPECT_EQ(gcs::GcsOptions::from_environment(env_of({{"HOME", "/nonexistent"}})).endpoint,
            "https://storage.googleapis.com");
}

TEST(Gcs, WriteReadStatRemove) {
  NEED_EMULATOR();
  use_gcs(Emulator::options());
  const std::string path = kRoot + "rt/model dir/ckpt-1.pt";  // '/' -> %2F, ' ' -> %20
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
  EXPECT_EQ(stat(kRoot + "rt/empty")->size, 0);
  remove(path);
  EXPECT_FALSE(exists(path));
  try {
    read_file(path);
    ADD_FAILURE() << "no error";
  } catch (const StorageError& e) {
    EXPECT_EQ(e.http_status(), 404);
    EXPECT_EQ(e.code(), "notFound");
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW(remove(path));                  // removing what is gone is not an error
  EXPECT_THROW(read_file(kRoot + "rt/"), Error);  // a folder, not an object
}

TEST(Gcs, ListFollowsPageTokensAndGlobs) {
  NEED_EMULATOR();
  gcs::GcsOptions o = Emulator::options();
  o.max_results = 3;  // 8 objects under list/ take 3 pages
  GcsFileSystem* gfs = use_gcs(o);
  std::vector<std::string> want;
  for (const std::string name :
       {"list/train-00000-of-00002", "list/train-00001-of-00002", "list/train-00002-of-00003",
        "list/val-00000-of-00001", "list/sub/train-00000-of-00002", "list/a", "list/b", "list/c"}) {
    write_file(kRoot + name, name);
    want.push_back(kRoot + name);
  }
  write_file(kRoot + "listx", "not under list/");
  std::sort(want.begin(), want.end());
  const int64_t before = gfs->client().requests_sent();
  EXPECT_EQ(list_prefix(kRoot + "list/"), want);
  EXPECT_EQ(gfs->client().requests_sent() - before, 3);
  EXPECT_EQ(glob(kRoot + "list/train-?????"
                         "-of-00002"),
            (std::vector<std::string>{kRoot + "list/train-00000-of-00002", kRoot + "list/train-00001-of-00002"}));
  EXPECT_EQ(glob(kRoot + "list/*/train-*"), std::vector<std::string>{kRoot + "list/sub/train-00000-of-00002"});
  EXPECT_EQ(glob(kRoot + "list/*").size(),
            7u);  // not list/sub/...: '*' stops at '/'
  EXPECT_EQ(glob(kRoot + "list/a"), std::vector<std::string>{kRoot + "list/a"});
  EXPECT_TRUE(glob(kRoot + "list/none-*").empty());
  EXPECT_EQ(list_prefix(kRoot + "list").size(),
            9u);  // a plain prefix: listx too
}

TEST(Gcs, RangedReadsAndSequentialReader) {
  NEED_EMULATOR();
  GcsFileSystem* gfs = use_gcs(Emulator::options());
  const std::string path = kRoot + "range/blob";
  const std::string data = pattern_bytes(1000, 2);
  write_file(path, data);
  EXPECT_EQ(read_range(path, 0, 10), data.substr(0, 10));
  EXPECT_EQ(read_range(path, 500, 1), data.substr(500, 1));
  EXPECT_EQ(read_range(path, 990, 100), data.substr(990));  // short at the end
  EXPECT_EQ(read_range(path, 1000, 5), "");                 // at the end (416)
  EXPECT_EQ(read_range(path, 5000, 5), "");                 // past it
  const int64_t before = gfs->client().requests_sent();
  SequentialReader reader(path, PrefetchOptions{64, 1});  // one block at a time: a known count
  std::string got;
  char buf[100];
  for (size_t n; (n = reader.read(buf, sizeof buf)) > 0;) got.append(buf, n);
  EXPECT_EQ(got, data);
  EXPECT_EQ(gfs->client().requests_sent() - before, 16);  // 15 full blocks + a short one
}

// One chunk holds the whole object: the emulator's own resumable path (start, one PUT).
TEST(Gcs, ResumableUploadInOneChunk) {
  NEED_EMULATOR();
  gcs::GcsOptions o = Emulator::options();
  o.resumable_threshold = 256u << 10;
  o.chunk_size = 2u << 20;
  GcsFileSystem* gfs = use_gcs(o);
  const std::string path = kRoot + "resumable/one-chunk";
  const std::string data = pattern_bytes((1u << 20) + 5, 3);
  const int64_t before = gfs->client().requests_sent();
  write_file(path, data);
  EXPECT_EQ(gfs->client().requests_sent() - before, 2);
  EXPECT_EQ(stat(path)->size, static_cast<int64_t>(data.size()));
  EXPECT_TRUE(read_file(path) == data);
}

// Several chunks, GCS's 308 protocol played by the proxy; the second chunk is answered 429 once,
// the third is persisted but its answer lost (the connection closes): each time the client asks the
// upload's status (`bytes */N`) and goes on from what was persisted.
TEST(Gcs, ResumableUploadInChunksWithFaults) {
  NEED_EMULATOR();
  // Chunk PUTs in the order sent: 0, 1 (429, dropped), 1 again, 2 (persisted, answer lost), 3, 4.
  ResumableProxy lossy([](const HttpRequest&, int chunk, bool* persist) -> std::optional<std::string> {
    if (chunk == 1) {
      *persist = false;
      return response(429, "Too Many Requests", error_json(429, "rateLimitExceeded", "slow down"));
    }
    if (chunk == 3) return std::string();  // the bytes are kept, the connection closes unanswered
    return std::nullopt;
  });
  gcs::GcsOptions o = Emulator::options(lossy.port());
  o.resumable_threshold = 256u << 10;
  o.chunk_size = 256u << 10;
  use_gcs(o);
  const std::string path = kRoot + "resumable/chunks";
  const std::string data = pattern_bytes((1u << 20) + 1000, 4);  // 5 chunks, the last short
  write_file(path, data);
  std::vector<std::string> ranges;
  for (const HttpRequest& r : lossy.requests())
    if (r.method == "PUT") ranges.push_back(r.header("content-range"));
  const std::string n = "/" + std::to_string(data.size());
  EXPECT_EQ(ranges,
            (std::vector<std::string>{"bytes 0-262143" + n, "bytes 262144-524287" + n, "bytes */" + n.substr(1),
                                      "bytes 262144-524287" + n, "bytes 524288-786431" + n, "bytes */" + n.substr(1),
                                      "bytes 786432-1048575" + n, "bytes 1048576-1049575" + n}));
  // What the emulator holds, read without the proxy.
  gcs::Client direct(Emulator::options());
  EXPECT_TRUE(direct.get(kBucket, "resumable/chunks") == data);
  EXPECT_EQ(direct.stat(kBucket, "resumable/chunks")->size, data.size());
}

// An independent client reads what Orchard wrote, and writes what Orchard reads.
TEST(Gcs, GoogleCloudStorageNodeClientCrossCheck) {
  NEED_EMULATOR();
  const std::string node = test::which_program("node");
  if (::access((kNpmDir + "/node_modules/@google-cloud/storage").c_str(), R_OK) != 0)
    GTEST_FAIL() << "@google-cloud/storage not installed in tests/npm "
                    "(scripts/test.sh runs npm ci there)";
  gcs::GcsOptions o = Emulator::options();
  o.resumable_threshold = 256u << 10;
  o.chunk_size = 1u << 20;
  use_gcs(o);
  const std::string data = pattern_bytes(300000, 5);  // a resumable upload
  write_file(kRoot + "node/from orchard", data);
  const std::string cmd = node + " " + kNpmDir +
                          "/gcs_cross_check.js http://127.0.0.1:" + std::to_string(Emulator::port) + " " + kBucket +
                          " 'node/from orchard' node/from-node 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  ASSERT_EQ(::pclose(p), 0) << out;
  EXPECT_NE(out.find("sha256 " + sha256_hex(data)), std::string::npos) << out;
  std::string want(600000, '\0');
  for (size_t i = 0; i < want.size(); ++i) want[i] = static_cast<char>((i * 7 + 3) & 255);
  EXPECT_TRUE(read_file(kRoot + "node/from-node") == want);
  EXPECT_EQ(read_range(kRoot + "node/from-node", 599990, 100), want.substr(599990));
  EXPECT_EQ(list_prefix(kRoot + "node/").size(), 2u);
}

// --- faults ----------------------------------------------------------------------------------------

gcs::GcsOptions fake_options(const FakeServer& server) {
  gcs::GcsOptions o = gcs::GcsOptions::from_environment(env_of({{"STORAGE_EMULATOR_HOST", server.url()}}));
  fast_retries(o);
  return o;
}

TEST(GcsFaults, A503IsRetried) {
  FakeServer server([](const HttpRequest&, int n) {
    if (n == 0) return response(503, "Service Unavailable", error_json(503, "backendError", "try again"));
    return response(200, "OK", "hello");
  });
  gcs::Client client(fake_options(server));
  EXPECT_EQ(client.get("b", "dir/k"), "hello");
  const auto reqs = server.requests();
  ASSERT_EQ(reqs.size(), 2u);
  const HttpRequest& r = reqs[0];
  EXPECT_EQ(r.target, "/storage/v1/b/b/o/dir%2Fk?alt=media");
  EXPECT_EQ(r.header("authorization"), "");  // an emulator gets no credentials
}

// Orchard -> proxy -> emulator: the first download's body is cut in half; the client resumes with a
// Range from the last byte received, pinned to the generation it began on.
TEST(GcsFaults, ADroppedDownloadResumesWithRange) {
  NEED_EMULATOR();
  std::atomic<int> gets{0};
  FakeServer proxy([&](const HttpRequest& req, int) -> std::string {
    std::string out = forward(req);
    if (req.method == "GET" && req.target.find("alt=media") != std::string::npos && gets++ == 0)
      return out.substr(0, out.size() - 100000);  // the headers promise 200000 bytes
    return out;
  });
  gcs::Client direct(Emulator::options());
  const std::string data = pattern_bytes(200000, 6);
  direct.put(kBucket, "drop/shard", data);
  const int64_t generation = direct.stat(kBucket, "drop/shard")->generation;
  gcs::Client client(fake_options(proxy));
  EXPECT_TRUE(client.get(kBucket, "drop/shard") == data);
  const auto reqs = proxy.requests();
  ASSERT_EQ(reqs.size(), 2u);
  EXPECT_EQ(reqs[0].header("range"), "");
  EXPECT_EQ(reqs[1].header("range"), "bytes=100000-");
  // The emulator ignores preconditions; GCS would answer 412 had the object changed.
  EXPECT_EQ(query_param(reqs[1].target, "ifGenerationMatch"), std::to_string(generation));
}

// A body that does not match the x-goog-hash crc32c is read again.
TEST(GcsFaults, ABodyThatDoesNotMatchItsCrc32cIsReadAgain) {
  // CRC-32C("hello") = 0x9a71bb4c, base64 of its big-endian bytes "mnG7TA==" (the emulator's).
  FakeServer server([](const HttpRequest&, int n) {
    const std::string hash =
        "x-goog-hash: crc32c=mnG7TA==\r\nx-goog-hash: "
        "md5=XUFAKrxLKna5cZ2REBfFkg==\r\n";
    return response(200, "OK", n == 0 ? "hellx" : "hello", hash);
  });
  EXPECT_EQ(crc32c::value("hello", 5), 0x9a71bb4cu);
  gcs::Client client(fake_options(server));
  EXPECT_EQ(client.get("b", "k"), "hello");
  EXPECT_EQ(server.requests().size(), 2u);
}

TEST(GcsFaults, RetriesAreBounded) {
  FakeServer server([](const HttpRequest&, int) { return response(500, "Internal Server Error", ""); });
  gcs::GcsOptions o = fake_options(server);
  o.retry.max_attempts = 3;
  gcs::Client client(o);
  try {
    client.stat("b", "k");
    ADD_FAILURE() << "no error";
  } catch (const StorageError& e) {
    EXPECT_NE(std::string(e.what()).find("gave up after 3 attempts"), std::string::npos) << e.what();
    EXPECT_EQ(e.http_status(), 500);
  }
  EXPECT_EQ(server.requests().size(), 3u);
}

// A session GCS forgot (404: expired) starts the upload again.
TEST(GcsFaults, ALostUploadSessionStartsAgain) {
  int port = 0;
  std::atomic<int> sessions{0};
  const std::string data = pattern_bytes(300000, 7);
  FakeServer server([&](const HttpRequest& req, int) -> std::string {
    if (req.method == "POST")
      return response(200, "OK", "",
                      "Location: http://127.0.0.1:" + std::to_string(port) +
                          "/upload/storage/v1/b/b/o?uploadType=resumable&upload_id=s" + std::to_string(sessions++) +
                          "\r\n");
    if (query_param(req.target, "upload_id") == "s0")
      return response(404, "Not Found", error_json(404, "notFound", "No such upload"));
    if (req.body != data) return response(400, "Bad Request", "");
    return response(200, "OK", json{{"name", "k"}, {"size", std::to_string(data.size())}}.dump());
  });
  port = server.port();
  gcs::GcsOptions o = fake_options(server);
  o.resumable_threshold = 256u << 10;
  o.chunk_size = 1u << 20;
  gcs::Client client(o);
  client.put("b", "k", data);
  const auto reqs = server.requests();
  ASSERT_EQ(reqs.size(), 4u);  // start, PUT (404), start, PUT
  EXPECT_EQ(reqs[0].method, "POST");
  EXPECT_EQ(query_param(reqs[0].target, "uploadType"), "resumable");
  EXPECT_EQ(query_param(reqs[0].target, "name"), "k");
  EXPECT_EQ(reqs[0].header("x-upload-content-length"), "300000");
  EXPECT_EQ(reqs[3].header("content-range"), "bytes 0-299999/300000");
}

// A media upload whose stored size differs from what was sent is an error, not a silent loss.
TEST(GcsFaults, AnUploadIsCheckedAgainstTheStoredObject) {
  FakeServer server([](const HttpRequest&, int) { return response(200, "OK", R"({"name":"k","size":"3"})"); });
  gcs::GcsOptions o = fake_options(server);
  o.retry.max_attempts = 2;
  gcs::Client client(o);
  try {
    client.put("b", "k", "hello");
    ADD_FAILURE() << "no error";
  } catch (const StorageError& e) {
    EXPECT_NE(std::string(e.what()).find("stored 3 bytes of 5"), std::string::npos) << e.what();
  }
  EXPECT_EQ(server.requests().size(), 2u);
  EXPECT_EQ(server.requests()[0].target, "/upload/storage/v1/b/b/o?uploadType=media&name=k");
}

// --- credentials -----------------------------------------------------------------------------------

std::string base64url_decode(std::string s) {
  for (char& c : s) c = c == '-' ? '+' : c == '_' ? '/' : c;
  while (s.size() % 4) s += '=';
  std::string out(s.size() / 4 * 3, '\0');
  const int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(s.data()), static_cast<int>(s.size()));
  out.resize(static_cast<size_t>(std::max(n, 0)));
  while (!s.empty() && s.back() == '=') {
    s.pop_back();
    out.pop_back();
  }
  return out;
}

// A fresh 2048-bit RSA key: its private half as PKCS#8 PEM (as in a service-account file) and its
// public half as PEM.
struct TestKey {
  std::string private_pem, public_pem;
  TestKey() {
    EVP_PKEY* key = EVP_RSA_gen(2048);
    BIO* priv = BIO_new(BIO_s_mem());
    BIO* pub = BIO_new(BIO_s_mem());
    PEM_write_bio_PrivateKey(priv, key, nullptr, nullptr, 0, nullptr, nullptr);
    PEM_write_bio_PUBKEY(pub, key);
    char* p = nullptr;
    long n = BIO_get_mem_data(priv, &p);
    private_pem.assign(p, static_cast<size_t>(n));
    n = BIO_get_mem_data(pub, &p);
    public_pem.assign(p, static_cast<size_t>(n));
    BIO_free(priv);
    BIO_free(pub);
    EVP_PKEY_free(key);
  }
  bool verify(const std::string& signed_part, const std::string& signature) const {
    BIO* b = BIO_new_mem_buf(public_pem.data(), static_cast<int>(public_pem.size()));
    EVP_PKEY* key = PEM_read_bio_PUBKEY(b, nullptr, nullptr, nullptr);
    EVP_MD_CTX* ctx = EVP_MD_CTX_new();
    const bool ok =
        EVP_DigestVerifyInit(ctx, nullptr, EVP_sha256(), nullptr, key) == 1 &&
        EVP_DigestVerify(ctx, reinterpret_cast<const unsigned char*>(signature.data()), signature.size(),
                         reinterpret_cast<const unsigned char*>(signed_part.data()), signed_part.size()) == 1;
    EVP_MD_CTX_free(ctx);
    EVP_PKEY_free(key);
    BIO_free(b);
    return ok;
  }
};

const TestKey& test_key() {
  static const TestKey* key = new TestKey();
  return *key;
}

// The middle of the PEM body: a piece of the key no message may contain.
std::string key_piece() {
  const std::string& pem = test_key().private_pem;
  return pem.substr(pem.size() / 2, 40);
}

std::string write_service_account(const test::TempDir& dir, const std::string& token_uri) {
  const std::string path = dir.file("sa.json");
  std::ofstream(path) << json{
      {"type", "service_account"},
      {"project_id", "orchard-test"},
      {"private_key_id", "key-id-1"},
      {"private_key", test_key().private_pem},
      {"client_email", "trainer@orchard-test.iam.gserviceaccount.com"},
      {"client_id", "1234"},
      {"token_uri",
       token_uri}}.dump(2);
  return path;
}

std::map<std::string, std::string> parse_form(const std::string& body) {
  std::map<std::string, std::string> out;
  std::stringstream ss(body);
  for (std::string kv; std::getline(ss, kv, '&');) {
    const size_t eq = kv.find('=');
    std::string v = kv.substr(eq + 1), decoded;
    for (size_t i = 0; i < v.size(); ++i) {
      if (v[i] == '%' && i + 2 < v.size()) {
        decoded += static_cast<char>(std::stoi(v.substr(i + 1, 2), nullptr, 16));
        i += 2;
      } else {
        decoded += v[i] == '+' ? ' ' : v[i];
      }
    }
    out[kv.substr(0, eq)] = decoded;
  }
  return out;
}

TEST(GcsAuth, ServiceAccountJwtIsSignedWithTheKey) {
  gcs::Credentials c;
  c.kind = gcs::Credentials::Kind::kServiceAccount;
  c.client_email = "trainer@orchard-test.iam.gserviceaccount.com";
  c.private_key_id = "key-id-1";
  c.private_key = test_key().private_pem;
  c.token_uri = "https://oauth2.googleapis.com/token";
  const std::string jwt = gcs::service_account_jwt(c, 1700000000);
  const size_t d1 = jwt.find('.'), d2 = jwt.rfind('.');
  ASSERT_NE(d1, d2);
  const json header = json::parse(base64url_decode(jwt.substr(0, d1)));
  const json claims = json::parse(base64url_decode(jwt.substr(d1 + 1, d2 - d1 - 1)));
  EXPECT_EQ(header, (json{{"alg", "RS256"}, {"typ", "JWT"}, {"kid", "key-id-1"}}));
  EXPECT_EQ(claims, (json{{"iss", "trainer@orchard-test.iam.gserviceaccount.com"},
                          {"scope", "https://www.googleapis.com/auth/devstorage.read_write"},
                          {"aud", "https://oauth2.googleapis.com/token"},
                          {"iat", 1700000000},
                          {"exp", 1700003600}}));
  EXPECT_EQ(jwt.find('='), std::string::npos);  // base64url without padding
  const std::string signature = base64url_decode(jwt.substr(d2 + 1));
  EXPECT_EQ(signature.size(), 256u);
  EXPECT_TRUE(test_key().verify(jwt.substr(0, d2), signature));
  EXPECT_FALSE(test_key().verify(jwt.substr(0, d2) + "x", signature));
  c.private_key = "-----BEGIN PRIVATE KEY-----\nnot a key\n-----END PRIVATE KEY-----\n";
  EXPECT_THROW(gcs::service_account_jwt(c, 1700000000), StorageError);
}

// GOOGLE_APPLICATION_CREDENTIALS names a service-account file whose token_uri is a local server:
// the JWT-bearer grant is exchanged for a token, which storage requests then carry, and which is
// cached.
TEST(GcsAuth, ServiceAccountTokenExchange) {
  test::TempDir dir;
  std::string token_url;
  FakeServer token_server([&](const HttpRequest& req, int) {
    const auto form = parse_form(req.body);
    const std::string& jwt = form.count("assertion") ? form.at("assertion") : "";
    const size_t d2 = jwt.rfind('.');
    const bool ok =
        req.method == "POST" && req.header("content-type") == "application/x-www-form-urlencoded" &&
        form.count("grant_type") && form.at("grant_type") == "urn:ietf:params:oauth:grant-type:jwt-bearer" &&
        d2 != std::string::npos && test_key().verify(jwt.substr(0, d2), base64url_decode(jwt.substr(d2 + 1))) &&
        json::parse(base64url_decode(jwt.substr(jwt.find('.') + 1, d2 - jwt.find('.') - 1)))["aud"] == token_url;
    if (!ok) return response(400, "Bad Request", R"({"error":"invalid_grant","error_description":"bad assertion"})");
    return response(200, "OK", R"({"access_token":"ya29.sa-token","expires_in":3599,"token_type":"Bearer"})",
                    "Content-Type: application/json\r\n");
  });
  token_url = token_server.url() + "/token";
  FakeServer storage([](const HttpRequest& req, int) {
    if (req.header("authorization") != "Bearer ya29.sa-token") return response(401, "Unauthorized", "");
    return response(200, "OK", R"({"name":"k","size":"5","generation":"7"})");
  });
  const std::string file = write_service_account(dir, token_url);
  gcs::GcsOptions o = gcs::GcsOptions::from_environment(env_of({{"GOOGLE_APPLICATION_CREDENTIALS", file}}));
  EXPECT_EQ(o.credentials.kind, gcs::Credentials::Kind::kServiceAccount);
  EXPECT_NE(o.credentials.source.find(file), std::string::npos) << o.credentials.source;
  o.endpoint = storage.url();
  fast_retries(o);
  gcs::Client client(o);
  EXPECT_EQ(client.stat("b", "k")->size, 5u);
  EXPECT_EQ(client.stat("b", "k")->generation, 7);
  EXPECT_EQ(token_server.requests().size(), 1u);  // cached
  EXPECT_EQ(storage.requests().size(), 2u);
}

// gcloud's application-default login (CLOUDSDK_CONFIG) is an authorized_user: a refresh_token
// grant.
TEST(GcsAuth, AuthorizedUserRefreshToken) {
  test::TempDir dir;
  FakeServer token_server([](const HttpRequest& req, int) {
    const auto form = parse_form(req.body);
    const bool ok = form.count("grant_type") && form.at("grant_type") == "refresh_token" &&
                    form.at("client_id") == "client-1.apps.googleusercontent.com" &&
                    form.at("client_secret") == "SECRET-must-not-leak" &&
                    form.at("refresh_token") == "1//REFRESH-must-not-leak";
    if (!ok) return response(400, "Bad Request", R"({"error":"invalid_request"})");
    return response(200, "OK", R"({"access_token":"ya29.user-token","expires_in":1})");
  });
  FakeServer storage([](const HttpRequest& req, int) {
    if (req.header("authorization") != "Bearer ya29.user-token") return response(401, "Unauthorized", "");
    return response(200, "OK", "bytes");
  });
  std::ofstream(dir.file("application_default_credentials.json")) << json{
      {"type", "authorized_user"},
      {"client_id", "client-1.apps.googleusercontent.com"},
      {"client_secret", "SECRET-must-not-leak"},
      {"refresh_token", "1//REFRESH-must-not-leak"},
      {"token_uri", token_server.url() + "/token"}}.dump();
  gcs::GcsOptions o = gcs::GcsOptions::from_environment(env_of({{"CLOUDSDK_CONFIG", dir.str()}, {"HOME", "/nowhere"}}));
  EXPECT_EQ(o.credentials.kind, gcs::Credentials::Kind::kAuthorizedUser);
  EXPECT_EQ(o.credentials.looked_at.size(), 2u);
  o.endpoint = storage.url();
  fast_retries(o);
  gcs::Client client(o);
  EXPECT_EQ(client.get("b", "k"), "bytes");
  EXPECT_EQ(token_server.requests().size(), 1u);
  // expires_in 1: fetched again at half its life.
  std::this_thread::sleep_for(std::chrono::milliseconds(600));
  EXPECT_EQ(client.get("b", "k"), "bytes");
  EXPECT_EQ(token_server.requests().size(), 2u);
}

// Neither file: the metadata server, here at GCE_METADATA_HOST.
TEST(GcsAuth, MetadataServer) {
  test::TempDir empty;
  FakeServer metadata([](const HttpRequest& req, int) {
    if (req.header("metadata-flavor") != "Google" ||
        req.target != "/computeMetadata/v1/instance/service-accounts/default/token")
      return response(403, "Forbidden", "");
    return response(200, "OK", R"({"access_token":"ya29.gce-token","expires_in":3599,"token_type":"Bearer"})");
  });
  FakeServer storage([](const HttpRequest& req, int) {
    if (req.header("authorization") != "Bearer ya29.gce-token") return response(401, "Unauthorized", "");
    return response(200, "OK", R"({"kind":"storage#objects","items":[{"name":"d/a","size":"3"}]})");
  });
  gcs::GcsOptions o = gcs::GcsOptions::from_environment(env_of(
      {{"CLOUDSDK_CONFIG", empty.str()}, {"GCE_METADATA_HOST", "127.0.0.1:" + std::to_string(metadata.port())}}));
  ASSERT_EQ(o.credentials.kind, gcs::Credentials::Kind::kMetadataServer);
  EXPECT_EQ(o.credentials.looked_at.size(), 3u);
  o.endpoint = storage.url();
  fast_retries(o);
  gcs::Client client(o);
  const auto listed = client.list("b", "d/");
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_EQ(listed[0].name, "d/a");
  EXPECT_EQ(listed[0].size, 3u);
  EXPECT_EQ(metadata.requests().size(), 1u);
}

// No file and no metadata server (off Google Cloud): the error lists every place looked at.
TEST(GcsAuth, NoCredentialsAnywhereNamesThePlacesLookedAt) {
  test::TempDir empty;
  const int closed = test::free_loopback_port();
  gcs::GcsOptions o = gcs::GcsOptions::from_environment(
      env_of({{"CLOUDSDK_CONFIG", empty.str()}, {"GCE_METADATA_HOST", "127.0.0.1:" + std::to_string(closed)}}));
  o.endpoint = "http://127.0.0.1:" + std::to_string(closed);
  fast_retries(o);
  gcs::Client client(o);
  try {
    client.stat("b", "k");
    ADD_FAILURE() << "no error";
  } catch (const StorageError& e) {
    const std::string msg = e.what();
    for (const std::string& part :
         {std::string("GOOGLE_APPLICATION_CREDENTIALS"), empty.str() + "/application_default_credentials.json",
          "the GCE metadata server 127.0.0.1:" + std::to_string(closed)})
      EXPECT_NE(msg.find(part), std::string::npos) << "'" << part << "' not in: " << msg;
  }
}

TEST(GcsAuth, AMissingCredentialsFileIsAnErrorNamingIt) {
  try {
    gcs::find_credentials(env_of({{"GOOGLE_APPLICATION_CREDENTIALS", "/nonexistent/key.json"}}));
    ADD_FAILURE() << "no error";
  } catch (const StorageError& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/key.json"), std::string::npos) << e.what();
  }
}

// 403 from storage: one line naming the object, the operation, the URL, the status and reason,
// where the credentials came from and where the chain looked; never the key or the token.
TEST(GcsAuth, ForbiddenNamesTheCredentialsAndNeverTheSecrets) {
  test::TempDir dir;
  FakeServer token_server([](const HttpRequest&, int) {
    return response(200, "OK", R"({"access_token":"ya29.TOKEN-must-not-leak","expires_in":3599})");
  });
  FakeServer storage([](const HttpRequest&, int) {
    return response(403, "Forbidden",
                    error_json(403, "forbidden",
                               "trainer@orchard-test.iam.gserviceaccount.com "
                               "does not have storage.objects.get access"));
  });
  const std::string file = write_service_account(dir, token_server.url() + "/token");
  gcs::GcsOptions o = gcs::GcsOptions::from_environment(env_of({{"GOOGLE_APPLICATION_CREDENTIALS", file}}));
  o.endpoint = storage.url();
  fast_retries(o);
  gcs::Client client(o);
  try {
    client.get("bucket", "model/ckpt-1.pt");
    ADD_FAILURE() << "no error";
  } catch (const StorageError& e) {
    const std::string msg = e.what();
    EXPECT_EQ(e.http_status(), 403);
    EXPECT_EQ(e.code(), "forbidden");
    for (const std::string& part :
         {std::string("gs://bucket/model/ckpt-1.pt"), std::string("read"),
          storage.url() + "/storage/v1/b/bucket/o/model%2Fckpt-1.pt?alt=media", std::string("HTTP 403 forbidden"),
          "credentials from service account "
          "trainer@orchard-test.iam.gserviceaccount.com in " +
              file,
          std::string("looked at: GOOGLE_APPLICATION_CREDENTIALS=") + file})
      EXPECT_NE(msg.find(part), std::string::npos) << "'" << part << "' not in: " << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    EXPECT_EQ(msg.find("TOKEN-must-not-leak"), std::string::npos) << msg;
    EXPECT_EQ(msg.find(key_piece()), std::string::npos) << msg;
    EXPECT_EQ(msg.find("PRIVATE KEY"), std::string::npos) << msg;
  }
  EXPECT_EQ(storage.requests().size(), 1u);  // a 403 is not retried
}

// A token endpoint that refuses the refresh token: the message names the source and the endpoint's
// reason, never the refresh token or client secret.
TEST(GcsAuth, ARefusedTokenNeverShowsTheRefreshToken) {
  test::TempDir dir;
  FakeServer token_server([](const HttpRequest&, int) {
    return response(400, "Bad Request",
                    R"({"error":"invalid_grant","error_description":"Token has been expired or revoked."})");
  });
  std::ofstream(dir.file("application_default_credentials.json")) << json{
      {"type", "authorized_user"},
      {"client_id", "c"},
      {"client_secret", "SECRET-must-not-leak"},
      {"refresh_token", "1//REFRESH-must-not-leak"},
      {"token_uri", token_server.url() + "/token"}}.dump();
  gcs::GcsOptions o = gcs::GcsOptions::from_environment(env_of({{"CLOUDSDK_CONFIG", dir.str()}}));
  o.endpoint = "http://127.0.0.1:1";
  fast_retries(o);
  gcs::Client client(o);
  try {
    client.get("b", "k");
    ADD_FAILURE() << "no error";
  } catch (const StorageError& e) {
    const std::string msg = e.what();
    EXPECT_EQ(e.code(), "invalid_grant");
    EXPECT_NE(msg.find("invalid_grant (Token has been expired or revoked.)"), std::string::npos) << msg;
    EXPECT_NE(msg.find(dir.file("application_default_credentials.json")), std::string::npos) << msg;
    EXPECT_EQ(msg.find("REFRESH-must-not-leak"), std::string::npos) << msg;
    EXPECT_EQ(msg.find("SECRET-must-not-leak"), std::string::npos) << msg;
  }
}

}  // namespace
}  // namespace orchard::fs
