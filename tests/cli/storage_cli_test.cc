// Every command with its paths in object storage (issue 53), the binary run as a user runs it
// against real servers on loopback: npm s3rver for s3:// and the firebase-tools Cloud Storage
// emulator for gs:// (tests/storage_servers.h). Each orchard runs in its own empty working folder
// with its own TMPDIR, so nothing local is shared between jobs and nothing may be left there.
//   StorageData.*      orchard data fashion-mnist --out_dir s3://...: the shards and labels.txt are
//                      the bytes a local run writes, read back by the AWS SDK and the npm TFRecord
//                      peer.
//   StorageClassify.*  classify train with --data_dir and --model_dir on s3: SIGKILL after the first
//                      checkpoint + restart reaches the uninterrupted run's weights; --max_to_keep;
//                      events in the bucket; the same run through a fault-injecting proxy.
//   StorageDetect.*    detect train from a pipeline.config on gs (input_path "gs://...-of-00002",
//                      label map on gs) beside a separate --checkpoint_dir evaluation job.
//   StorageLaunch.*    orchard launch, two nodes of one process, model_dir on s3: one set of
//                      checkpoints, and the second node never writes to the bucket.
//   StorageErrors.*    a wrong bucket, a missing object, a malformed URL: one line naming the URL,
//                      exit 1, no local folder "s3:" or "gs:".
// Tiny runs: resnet_tiny at 28 px, 256 Fashion-MNIST images; SSD on 16 shapes images, 2 steps.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <torch/torch.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cli/cli_util.h"
#include "core/test_util.h"
#include "orchard/core/event_writer.h"
#include "orchard/core/files.h"
#include "orchard/core/filesystem.h"
#include "orchard/core/s3_sigv4.h"
#include "orchard/models/registry.h"
#include "orchard/train/checkpoint.h"
#include "storage_servers.h"

namespace orchard::cli {
namespace {

namespace stdfs = std::filesystem;
using nlohmann::json;
using test::EnvVars;
using test::TempDir;

const std::string kBucket = "orchard-e2e";
const std::string kS3 = "s3://" + kBucket + "/";
const std::string kGs = "gs://" + kBucket + "/";
const std::string kFashionDir = "/usr/share/datasets/fashion-mnist";
const std::string kNpmDir = ORCHARD_TEST_NPM_DIR;

// --- the servers, started once for the binary ------------------------------------------------------

class Servers : public ::testing::Environment {
 public:
  static inline test::S3rverProcess* s3 = nullptr;
  static inline test::GcsEmulatorProcess* gcs = nullptr;

  void SetUp() override {
    // Nothing of the machine's own configuration may reach the children.
    for (const char* v : {"AWS_PROFILE", "AWS_ENDPOINT_URL_S3", "AWS_SESSION_TOKEN", "S3_ENDPOINT", "S3_USE_HTTPS",
                          "GOOGLE_APPLICATION_CREDENTIALS"})
      ::unsetenv(v);
    ::setenv("OMP_NUM_THREADS", "1", 1);
    s3 = new test::S3rverProcess(kBucket);
    gcs = new test::GcsEmulatorProcess();
    // Children inherit them; this process's own s3:// and gs:// clients read them at first use.
    if (s3->error().empty()) test::set_environment(s3->env());
    if (gcs->error().empty()) test::set_environment(gcs->env());
  }
  void TearDown() override {
    delete s3;
    delete gcs;
  }
};

::testing::Environment* const kEnv = ::testing::AddGlobalTestEnvironment(new Servers());

// A missing server fails the test (scripts/test.sh installs them): a skip would read as a pass.
#define NEED_SERVERS()                                                         \
  do {                                                                         \
    if (!Servers::s3->error().empty()) GTEST_FAIL() << Servers::s3->error();   \
    if (!Servers::gcs->error().empty()) GTEST_FAIL() << Servers::gcs->error(); \
  } while (0)

// --- running orchard in a folder of its own ------------------------------------------------------

// A job's private local state: an empty working folder and TMPDIR.
struct Workspace {
  TempDir cwd, tmp;
  // Everything left in the working folder (should stay empty: every path is a URL).
  std::vector<std::string> cwd_entries() const {
    std::vector<std::string> out;
    for (const auto& e : stdfs::directory_iterator(cwd.path())) out.push_back(e.path().filename().string());
    return out;
  }
  std::vector<std::string> tmp_entries() const {
    std::vector<std::string> out;
    for (const auto& e : stdfs::directory_iterator(tmp.path())) out.push_back(e.path().filename().string());
    return out;
  }
};

// Starts ORCHARD_BIN in `ws` (its cwd and TMPDIR) with `env` over this process's environment.
pid_t spawn_in(const std::vector<std::string>& args, const Workspace& ws, const EnvVars& env, const std::string& out,
               const std::string& err) {
  std::vector<std::string> argv_s = {ORCHARD_BIN};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  EnvVars vars = env;
  vars.emplace_back("TMPDIR", ws.tmp.str());
  std::vector<std::string> env_s;
  for (char** e = environ; *e; ++e) {
    const std::string kv = *e;
    bool replaced = false;
    for (const auto& [k, v] : vars) replaced = replaced || kv.rfind(k + "=", 0) == 0;
    if (!replaced) env_s.push_back(kv);
  }
  for (const auto& [k, v] : vars) env_s.push_back(k + "=" + v);
  std::vector<char*> envp;
  for (auto& e : env_s) envp.push_back(e.data());
  envp.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addchdir_np(&fa, ws.cwd.str().c_str());
  posix_spawn_file_actions_addopen(&fa, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&fa, 2, err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&fa);
  EXPECT_EQ(rc, 0) << "cannot start " << ORCHARD_BIN;
  return pid;
}

// Logs of every run, kept for the length of the binary.
TempDir& logs() {
  static TempDir dir;
  return dir;
}

struct Started {
  pid_t pid;
  std::string out, err;
};

Started start(const std::vector<std::string>& args, const Workspace& ws, const EnvVars& env = {}) {
  static std::atomic<int> n{0};
  const int i = n++;
  Started s{-1, logs().file("run" + std::to_string(i) + ".out"), logs().file("run" + std::to_string(i) + ".err")};
  s.pid = spawn_in(args, ws, env, s.out, s.err);
  return s;
}

RunResult finish(const Started& s) { return wait_for(s.pid, s.out, s.err); }

RunResult run_in(const std::vector<std::string>& args, const Workspace& ws, const EnvVars& env = {}) {
  return finish(start(args, ws, env));
}

// --- the bucket, through Orchard's own clients in this process ---------------------------------------

// The names of the checkpoints directly in a model_dir ("ckpt-5.pt", ...), sorted by name.
std::vector<std::string> checkpoints_in(const std::string& model_dir) {
  std::vector<std::string> out;
  for (const auto& name : list_dir_names(model_dir))
    if (name.rfind("ckpt-", 0) == 0 && name.size() > 3 && name.substr(name.size() - 3) == ".pt") out.push_back(name);
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<std::string> event_files_in(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& path : list_dir(dir))
    if (base_name(path).rfind("events.out.tfevents.", 0) == 0) out.push_back(path);
  return out;
}

models::ResNet load_tiny(const std::string& ckpt, int64_t* step = nullptr) {
  models::ModelConfig c;
  c.arch = "resnet_tiny";
  c.num_classes = 10;
  auto m = models::build_resnet(c);
  train::RestoreOptions ro;
  ro.load_rng = false;
  ro.expect = {{"model", "resnet_tiny"}, {"num_classes", "10"}};
  auto [s, meta] = train::restore_checkpoint(ckpt, *m, nullptr, ro);
  if (step) *step = s;
  return m;
}

// The largest absolute difference over every parameter and buffer.
double max_diff(models::ResNet& a, models::ResNet& b) {
  double d = 0;
  auto pb = b->named_parameters();
  for (const auto& p : a->named_parameters()) d = std::max(d, (p.value() - pb[p.key()]).abs().max().item<double>());
  auto bb = b->named_buffers();
  for (const auto& p : a->named_buffers())
    d = std::max(d, (p.value().to(torch::kDouble) - bb[p.key()].to(torch::kDouble)).abs().max().item<double>());
  return d;
}

std::string run_node(const std::string& args) {
  const std::string node = test::which_program("node");
  EXPECT_FALSE(node.empty()) << "node not on PATH";
  FILE* p = ::popen((node + " " + args + " 2>&1").c_str(), "r");
  if (!p) return "";
  std::string out;
  char buf[65536];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  EXPECT_EQ(::pclose(p), 0) << out;
  return out;
}

// The lines of a run's stderr that are errors (spdlog's " E " level).
std::vector<std::string> error_lines(const std::string& err) {
  std::vector<std::string> out;
  std::istringstream in(err);
  for (std::string line; std::getline(in, line);)
    if (contains(line, " E ")) out.push_back(line);
  return out;
}

// --- one data set in the bucket, shared by the suites ---------------------------------------------

// orchard data fashion-mnist --out_dir s3://.../fm: 256 train images in 2 shards, 256 validation.
const std::string kData = kS3 + "fm";
const std::vector<std::string> kDataArgs = {"--limit", "256", "--num_shards", "2", "--num_validation_shards", "1"};

RunResult& data_run() {
  static RunResult r = [] {
    Workspace ws;
    std::vector<std::string> args = {"data", "fashion-mnist", "--out_dir", kData};
    args.insert(args.end(), kDataArgs.begin(), kDataArgs.end());
    RunResult res = run_in(args, ws);
    EXPECT_EQ(ws.cwd_entries(), std::vector<std::string>{});
    return res;
  }();
  return r;
}

#define NEED_DATA()                                                                      \
  do {                                                                                   \
    NEED_SERVERS();                                                                      \
    if (!stdfs::exists(kFashionDir + "/train-images-idx3-ubyte.gz"))                     \
      GTEST_FAIL() << kFashionDir << " missing (scripts/test.sh installs the data set)"; \
    ASSERT_EQ(data_run().rc, 0) << data_run().err;                                       \
  } while (0)

TEST(StorageData, FashionMnistShardsInTheBucketAreTheBytesOfALocalRun) {
  NEED_DATA();
  EXPECT_EQ(list_dir(kData),
            (std::vector<std::string>{kData + "/labels.txt", kData + "/train-00000-of-00002",
                                      kData + "/train-00001-of-00002", kData + "/validation-00000-of-00001"}));
  // The same converter onto the local disk: the objects hold exactly its files.
  Workspace ws;
  std::vector<std::string> args = {"data", "fashion-mnist", "--out_dir", "local"};
  args.insert(args.end(), kDataArgs.begin(), kDataArgs.end());
  auto r = run_in(args, ws);
  ASSERT_EQ(r.rc, 0) << r.err;
  const stdfs::path local = ws.cwd.path() / "local";
  for (const char* name : {"labels.txt", "train-00000-of-00002", "train-00001-of-00002", "validation-00000-of-00001"})
    EXPECT_TRUE(orchard::read_file(kData + "/" + name) == test::read_bytes((local / name).string())) << name;

  // An independent S3 client (the AWS SDK for JavaScript) reads a shard: same SHA-256.
  ASSERT_EQ(::access((kNpmDir + "/node_modules/@aws-sdk/client-s3").c_str(), R_OK), 0)
      << "@aws-sdk/client-s3 not installed in tests/npm (scripts/test.sh runs npm ci there)";
  const std::string out = run_node(kNpmDir + "/s3_cross_check.js " + Servers::s3->endpoint() + " " + kBucket +
                                   " fm/train-00001-of-00002 sdk/e2e-written-by-sdk");
  EXPECT_TRUE(contains(out, "sha256 " + s3::sha256_hex(test::read_bytes((local / "train-00001-of-00002").string()))))
      << out;

  // The npm TFRecord peer (its own framing, CRC-32C and protobuf code) reads the downloaded shards.
  int64_t records = 0;
  for (const char* name : {"train-00000-of-00002", "train-00001-of-00002"}) {
    const std::string copy = ws.tmp.file(name);
    {
      std::ofstream f(copy, std::ios::binary);
      f << orchard::read_file(kData + "/" + name);
    }
    const json doc = json::parse(run_node(kNpmDir + "/tfrecords_compat.js read " + copy));
    records += doc.at("count").get<int64_t>();
    for (const auto& rec : doc.at("records")) {
      EXPECT_TRUE(rec.contains("image/encoded")) << rec.dump().substr(0, 200);
      ASSERT_TRUE(rec.contains("image/class/label")) << rec.dump().substr(0, 200);
      const int64_t label = std::stoll(rec.at("image/class/label").at("values").at(0).dump());
      EXPECT_GE(label, 1);  // the ImageNet schema's 1-based classes (docs/data.md)
      EXPECT_LE(label, 10);
    }
  }
  EXPECT_EQ(records, 256);
}

// --- classify train on s3 ------------------------------------------------------------------------

// Every flag of the classification runs; only model_dir differs. 256 / 16 = 16 steps per epoch,
// 40 steps, a checkpoint every 5 steps (5 loops of 1 step), evaluation at steps 16, 32, 40.
std::vector<std::string> classify_args(const std::string& model_dir, int steps = 40) {
  return {"classify",
          "train",
          "--data_dir",
          kData,
          "--model_dir",
          model_dir,
          "--model",
          "resnet_tiny",
          "--image_size",
          "28",
          "--data_format",
          "channels_first",
          "--batch_size",
          "16",
          "--train_epochs",
          "3",
          "--train_steps",
          std::to_string(steps),
          "--steps_per_loop",
          "1",
          "--log_steps",
          "5",
          "--seed",
          "7",
          "--num_threads",
          "1",
          "--datasets_num_private_threads",
          "1",
          "--base_learning_rate",
          "1.6",
          "--warmup_epochs",
          "1",
          "--enable_checkpoint_and_export",
          "--enable_tensorboard",
          "--max_to_keep",
          "1"};
}

// Run A: uninterrupted, shared by the tests that compare against it.
const std::string kModelA = kS3 + "classify/a";

RunResult& run_a() {
  static RunResult r = [] {
    Workspace ws;
    RunResult res = run_in(classify_args(kModelA), ws);
    EXPECT_EQ(ws.cwd_entries(), std::vector<std::string>{});
    EXPECT_EQ(ws.tmp_entries(), std::vector<std::string>{}) << "temporaries left behind";
    return res;
  }();
  return r;
}

#define NEED_RUN_A()                         \
  do {                                       \
    NEED_DATA();                             \
    ASSERT_EQ(run_a().rc, 0) << run_a().err; \
  } while (0)

// --max_to_keep 1 leaves one checkpoint object; the state object names it; the event files are in
// the bucket and parse.
TEST(StorageClassify, CheckpointsAndEventsInTheBucket) {
  NEED_RUN_A();
  EXPECT_EQ(checkpoints_in(kModelA), std::vector<std::string>{"ckpt-40.pt"});
  EXPECT_EQ(train::CheckpointManager(kModelA).latest(), kModelA + "/ckpt-40.pt");
  EXPECT_TRUE(contains(orchard::read_file(kModelA + "/checkpoint"), "ckpt-40.pt"));
  int64_t step = 0;
  load_tiny(kModelA + "/ckpt-40.pt", &step);
  EXPECT_EQ(step, 40);

  const auto train_events = event_files_in(kModelA + "/train");
  ASSERT_EQ(train_events.size(), 1u) << list_dir_names(kModelA + "/train").size();
  std::set<int64_t> loss_steps;
  for (const auto& e : read_scalar_events(train_events[0]))
    if (e.tag == "loss") loss_steps.insert(e.step);
  ASSERT_FALSE(loss_steps.empty());
  EXPECT_EQ(*loss_steps.rbegin(), 40);
  const auto eval_events = event_files_in(kModelA + "/eval");
  ASSERT_EQ(eval_events.size(), 1u);
  std::set<int64_t> eval_steps;
  for (const auto& e : read_scalar_events(eval_events[0])) eval_steps.insert(e.step);
  EXPECT_EQ(eval_steps, (std::set<int64_t>{16, 32, 40}));
}

// SIGKILL once the first checkpoint is complete in the bucket (its state object written), then the
// same command: it resumes from the bucket and reaches run A's weights.
TEST(StorageClassify, KilledAndRestartedRunMatchesUninterrupted) {
  NEED_RUN_A();
  const std::string model_b = kS3 + "classify/b";
  const auto args = classify_args(model_b);
  Workspace ws;
  const Started s = start(args, ws);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  bool ready = false;
  while (std::chrono::steady_clock::now() < deadline) {
    if (file_exists(model_b + "/checkpoint")) {
      ready = true;
      break;
    }
    int status = 0;
    if (::waitpid(s.pid, &status, WNOHANG) == s.pid) break;  // ended by itself: the test below fails
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ::kill(s.pid, SIGKILL);
  auto killed = finish(s);
  ASSERT_TRUE(ready) << "no checkpoint appeared\n" << killed.err;
  ASSERT_TRUE(killed.signaled) << "the run finished before it could be killed (rc " << killed.rc << ")";
  const std::string latest = train::CheckpointManager(model_b).latest();
  ASSERT_FALSE(latest.empty());
  const int64_t killed_at = train::checkpoint_step(latest);
  ASSERT_LT(killed_at, 40);
  std::printf("killed after the checkpoint of step %lld appeared in the bucket\n", static_cast<long long>(killed_at));

  auto resumed = run_in(args, ws);
  ASSERT_EQ(resumed.rc, 0) << resumed.err;
  EXPECT_TRUE(contains(resumed.err, "resumed from")) << resumed.err;
  EXPECT_TRUE(contains(resumed.err, "at step " + std::to_string(killed_at))) << resumed.err;
  int64_t step_a = 0, step_b = 0;
  auto a = load_tiny(kModelA + "/ckpt-40.pt", &step_a);
  auto b = load_tiny(model_b + "/ckpt-40.pt", &step_b);
  EXPECT_EQ(step_b, 40);
  EXPECT_LT(max_diff(a, b), 1e-6) << "killed at step >= " << killed_at;
  EXPECT_EQ(checkpoints_in(model_b), std::vector<std::string>{"ckpt-40.pt"});
  EXPECT_EQ(ws.cwd_entries(), std::vector<std::string>{});
}

// --- a fault-injecting proxy in front of s3rver -------------------------------------------------

struct ProxyRequest {
  std::string method, target, head, body;
};

// A loopback HTTP/1.1 proxy to s3rver, a thread per connection, one request per connection (it
// answers "Connection: close"). `fault` sees each request with its 0-based number and returns
// what to do with it.
class FaultProxy {
 public:
  // kStall: the request is read and held unanswered until the proxy is destroyed.
  enum class Fault { kNone, k503, kCloseWithoutAnswer, kCutMidBody, kStall };
  using Policy = std::function<Fault(const ProxyRequest&, int n)>;

  FaultProxy(int upstream_port, Policy policy) : upstream_(upstream_port), policy_(std::move(policy)) {
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
    acceptor_ = std::thread([this] { accept_loop(); });
  }
  ~FaultProxy() {
    {
      std::lock_guard<std::mutex> lock(stall_mu_);
      stopping_ = true;
    }
    stall_cv_.notify_all();
    ::shutdown(fd_, SHUT_RDWR);
    ::close(fd_);
    acceptor_.join();
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& t : workers_) t.join();
  }
  std::string endpoint() const { return "http://127.0.0.1:" + std::to_string(port_); }
  int count(Fault f) const { return counts_[static_cast<int>(f)].load(); }
  // Requests by method ("GET", "PUT", ...).
  int requests(const std::string& method) {
    std::lock_guard<std::mutex> lock(mu_);
    int n = 0;
    for (const auto& m : methods_) n += m == method;
    return n;
  }

 private:
  static bool send_all(int fd, const std::string& data) { return test::send_all(fd, data); }
  static std::string header(const std::string& head, const std::string& name) {  // name lowercase
    std::istringstream in(head);
    for (std::string line; std::getline(in, line);) {
      const size_t c = line.find(':');
      if (c == std::string::npos) continue;
      std::string k = line.substr(0, c);
      for (char& ch : k) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
      if (k != name) continue;
      std::string v = line.substr(c + 1);
      while (!v.empty() && (v.back() == '\r' || v.back() == ' ')) v.pop_back();
      const size_t a = v.find_first_not_of(' ');
      return a == std::string::npos ? "" : v.substr(a);
    }
    return "";
  }
  void accept_loop() {
    for (;;) {
      const int c = ::accept(fd_, nullptr, nullptr);
      if (c < 0) return;
      std::lock_guard<std::mutex> lock(mu_);
      workers_.emplace_back([this, c] {
        serve(c);
        ::close(c);
      });
    }
  }
  void serve(int c) {
    ProxyRequest req;
    std::string buf;
    char tmp[65536];
    size_t head_end;
    while ((head_end = buf.find("\r\n\r\n")) == std::string::npos) {
      const ssize_t r = ::recv(c, tmp, sizeof tmp, 0);
      if (r <= 0) return;
      buf.append(tmp, static_cast<size_t>(r));
    }
    req.head = buf.substr(0, head_end + 4);
    std::istringstream first(req.head);
    first >> req.method >> req.target;
    const std::string cl = header(req.head, "content-length");
    const size_t want = cl.empty() ? 0 : std::stoul(cl);
    req.body = buf.substr(head_end + 4);
    while (req.body.size() < want) {
      const ssize_t r = ::recv(c, tmp, sizeof tmp, 0);
      if (r <= 0) return;
      req.body.append(tmp, static_cast<size_t>(r));
    }
    int n;
    {
      std::lock_guard<std::mutex> lock(mu_);
      n = static_cast<int>(methods_.size());
      methods_.push_back(req.method);
    }
    const Fault fault = policy_(req, n);
    if (fault == Fault::k503) {
      ++counts_[static_cast<int>(fault)];
      const std::string body =
          "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>SlowDown</Code><Message>injected</Message></Error>";
      send_all(c, "HTTP/1.1 503 Slow Down\r\nContent-Length: " + std::to_string(body.size()) +
                      "\r\nConnection: close\r\n\r\n" + body);
      return;
    }
    if (fault == Fault::kStall) {
      ++counts_[static_cast<int>(fault)];
      std::unique_lock<std::mutex> lock(stall_mu_);
      stall_cv_.wait(lock, [this] { return stopping_; });
      return;
    }
    if (fault == Fault::kCloseWithoutAnswer) {
      ++counts_[static_cast<int>(fault)];
      return;  // the request reached nobody; the connection closes
    }
    std::string out = forward(req);
    if (fault == Fault::kCutMidBody) {
      const size_t body_at = out.find("\r\n\r\n");
      if (body_at != std::string::npos && out.size() - (body_at + 4) >= 2) {
        ++counts_[static_cast<int>(fault)];
        out.resize(body_at + 4 + (out.size() - (body_at + 4)) / 2);  // half the body, then the drop
      }
    }
    send_all(c, out);
    ::shutdown(c, SHUT_WR);
  }
  std::string forward(const ProxyRequest& req) const {
    const int s = test::connect_loopback(upstream_);
    if (s < 0) return "HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
    std::string head = req.head;
    head.insert(head.size() - 2, "Connection: close\r\n");
    send_all(s, head + req.body);
    std::string out;
    char tmp[65536];
    for (ssize_t r; (r = ::recv(s, tmp, sizeof tmp, 0)) > 0;) out.append(tmp, static_cast<size_t>(r));
    ::close(s);
    return out;
  }

  int upstream_, fd_ = -1, port_ = 0;
  Policy policy_;
  std::thread acceptor_;
  std::mutex mu_;
  std::vector<std::thread> workers_;
  std::vector<std::string> methods_;
  std::atomic<int> counts_[5] = {};
  std::mutex stall_mu_;
  std::condition_variable stall_cv_;
  bool stopping_ = false;
};

// The same run as A with every request through the proxy: every 7th answered 503, every 4th GET of
// an object (not a listing) cut mid-body, the first upload of each checkpoint's state object and of
// two checkpoints dropped before any answer. Same final weights as A.
TEST(StorageClassify, FaultsOnTheWayToTheBucketDoNotChangeTheRun) {
  NEED_RUN_A();
  std::atomic<int> state_puts{0}, ckpt_puts{0}, object_gets{0};
  FaultProxy proxy(Servers::s3->port(), [&](const ProxyRequest& req, int n) {
    using F = FaultProxy::Fault;
    if (n % 7 == 3) return F::k503;
    if (req.method == "PUT" && contains(req.target, "/checkpoint") && !contains(req.target, "ckpt-") &&
        state_puts++ % 3 == 0)
      return F::kCloseWithoutAnswer;
    if (req.method == "PUT" && contains(req.target, "/ckpt-") && ckpt_puts++ < 2) return F::kCloseWithoutAnswer;
    if (req.method == "GET" && !contains(req.target, "list-type") && object_gets++ % 4 == 1) return F::kCutMidBody;
    return F::kNone;
  });
  const std::string model_f = kS3 + "classify/faults";
  Workspace ws;
  auto r = run_in(classify_args(model_f), ws, Servers::s3->env(proxy.endpoint()));
  ASSERT_EQ(r.rc, 0) << r.err;
  using F = FaultProxy::Fault;
  std::printf("through the proxy: %d requests; injected %d 503s, %d dropped before an answer, %d cut mid-body\n",
              proxy.requests("GET") + proxy.requests("PUT") + proxy.requests("HEAD") + proxy.requests("DELETE") +
                  proxy.requests("POST"),
              proxy.count(F::k503), proxy.count(F::kCloseWithoutAnswer), proxy.count(F::kCutMidBody));
  EXPECT_GE(proxy.count(F::k503), 3);
  EXPECT_GE(proxy.count(F::kCloseWithoutAnswer), 3);
  EXPECT_GE(proxy.count(F::kCutMidBody), 2);
  auto a = load_tiny(kModelA + "/ckpt-40.pt");
  int64_t step = 0;
  auto f = load_tiny(model_f + "/ckpt-40.pt", &step);
  EXPECT_EQ(step, 40);
  EXPECT_LT(max_diff(a, f), 1e-6);
  EXPECT_EQ(checkpoints_in(model_f), std::vector<std::string>{"ckpt-40.pt"});
  EXPECT_TRUE(contains(orchard::read_file(model_f + "/checkpoint"), "ckpt-40.pt"));
  EXPECT_EQ(ws.cwd_entries(), std::vector<std::string>{});
}

// A preempted VM: SIGTERM while the second checkpoint's upload hangs, SIGKILL a second later (the
// grace period over). The bucket still names the first checkpoint, whole, and the same command
// resumes from it to run A's weights.
TEST(StorageClassify, KilledDuringACheckpointUploadLeavesThePreviousOne) {
  NEED_RUN_A();
  std::atomic<int> ckpt_puts{0};
  std::atomic<bool> stalled{false};
  auto proxy = std::make_unique<FaultProxy>(Servers::s3->port(), [&](const ProxyRequest& req, int) {
    if (req.method == "PUT" && contains(req.target, "/ckpt-") && ckpt_puts++ == 1) {
      stalled = true;
      return FaultProxy::Fault::kStall;
    }
    return FaultProxy::Fault::kNone;
  });
  const std::string model = kS3 + "classify/preempted";
  const auto args = classify_args(model);
  Workspace ws;
  const Started s = start(args, ws, Servers::s3->env(proxy->endpoint()));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(90);
  while (!stalled && std::chrono::steady_clock::now() < deadline) {
    int status = 0;
    if (::waitpid(s.pid, &status, WNOHANG) == s.pid) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ::kill(s.pid, SIGTERM);
  std::this_thread::sleep_for(std::chrono::seconds(1));
  ::kill(s.pid, SIGKILL);
  auto killed = finish(s);
  ASSERT_TRUE(stalled.load()) << "the second checkpoint upload never started\n" << killed.err;
  ASSERT_TRUE(killed.signaled) << "exited by itself (rc " << killed.rc << ")\n" << killed.err;
  proxy.reset();  // releases the held request; the upload never reached s3rver

  const std::string state = orchard::read_file(model + "/checkpoint");
  const auto kept = checkpoints_in(model);
  ASSERT_EQ(kept.size(), 1u) << state;
  EXPECT_TRUE(contains(state, "model_checkpoint_path: \"" + kept[0] + "\"")) << state;
  int64_t first_step = 0;
  load_tiny(model + "/" + kept[0], &first_step);  // whole: it restores
  EXPECT_GT(first_step, 0);
  EXPECT_LT(first_step, 40);

  auto resumed = run_in(args, ws);
  ASSERT_EQ(resumed.rc, 0) << resumed.err;
  EXPECT_TRUE(contains(resumed.err, "at step " + std::to_string(first_step))) << resumed.err;
  auto a = load_tiny(kModelA + "/ckpt-40.pt");
  auto b = load_tiny(model + "/ckpt-40.pt");
  EXPECT_LT(max_diff(a, b), 1e-6);
  EXPECT_EQ(ws.cwd_entries(), std::vector<std::string>{});
}

// --- orchard launch with nothing shared but the bucket -----------------------------------------------

// Two nodes of one process each (ranks 0 and 1), each launcher in its own working folder and TMPDIR;
// node 1 reaches the bucket through a counting proxy. One set of checkpoints, written by rank 0
// only.
TEST(StorageLaunch, TwoNodesShareOnlyTheBucket) {
  NEED_DATA();
  FaultProxy counting(Servers::s3->port(), [](const ProxyRequest&, int) { return FaultProxy::Fault::kNone; });
  const std::string model = kS3 + "launch";
  const std::string port = std::to_string(test::free_loopback_port());
  auto args = [&](int node) {
    std::vector<std::string> a = {"launch",
                                  "--nnodes",
                                  "2",
                                  "--node_rank",
                                  std::to_string(node),
                                  "--nproc_per_node",
                                  "1",
                                  "--master_addr",
                                  "127.0.0.1",
                                  "--master_port",
                                  port,
                                  "--"};
    for (const auto& x : classify_args(model, 10)) a.push_back(x);
    a.insert(a.end(), {"--collective_timeout", "30"});
    return a;
  };
  Workspace ws0, ws1;
  const Started s0 = start(args(0), ws0);
  const Started s1 = start(args(1), ws1, Servers::s3->env(counting.endpoint()));
  auto r1 = finish(s1);
  auto r0 = finish(s0);
  ASSERT_EQ(r0.rc, 0) << r0.err;
  ASSERT_EQ(r1.rc, 0) << r1.err;
  EXPECT_TRUE(contains(r0.err, "rank 0 of 2 joined")) << r0.err;
  EXPECT_EQ(checkpoints_in(model), std::vector<std::string>{"ckpt-10.pt"});
  int64_t step = 0;
  load_tiny(model + "/ckpt-10.pt", &step);
  EXPECT_EQ(step, 10);
  EXPECT_EQ(event_files_in(model + "/train").size(), 1u);
  // Rank 1 read its data through the bucket and wrote nothing there.
  EXPECT_GT(counting.requests("GET"), 0);
  EXPECT_EQ(counting.requests("PUT"), 0);
  EXPECT_EQ(counting.requests("POST"), 0);
  EXPECT_EQ(counting.requests("DELETE"), 0);
  for (const Workspace* ws : {&ws0, &ws1}) {
    EXPECT_EQ(ws->cwd_entries(), std::vector<std::string>{});
    EXPECT_EQ(ws->tmp_entries(), std::vector<std::string>{}) << "temporaries left behind";
  }
}

// --- detect train from gs:// ------------------------------------------------------------------------

// orchard data shapes writes the records, label map and pipeline.config into the bucket; the config
// (batch 8, input_path "gs://.../train-?????-of-00002") goes back to the bucket; an evaluation job
// (--checkpoint_dir) is started before the training job and evaluates its checkpoint from the
// bucket, its events into another prefix.
TEST(StorageDetect, PipelineConfigOnGcsAndASeparateEvaluationJob) {
  NEED_SERVERS();
  const std::string data = kGs + "shapes";
  Workspace ws;
  auto r = run_in({"data", "shapes", "--task", "detection", "--out_dir", data, "--num_train", "16", "--num_validation",
                   "4", "--train_shards", "2"},
                  ws);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(list_dir(data), (std::vector<std::string>{data + "/label_map.pbtxt", data + "/pipeline.config",
                                                      data + "/train-00000-of-00002", data + "/train-00001-of-00002",
                                                      data + "/validation-00000-of-00001"}));
  std::string text = orchard::read_file(data + "/pipeline.config");
  auto replace = [&](const std::string& from, const std::string& to) {
    const size_t at = text.find(from);
    ASSERT_NE(at, std::string::npos) << from << " not in\n" << text;
    text.replace(at, from.size(), to);
  };
  replace("batch_size: 32", "batch_size: 8");
  const std::string any5(5, '?');  // "?????" (no trigraphs in literals)
  replace("input_path: \"" + data + "/train-" + any5 + "-of-" + any5 + "\"",
          "input_path: \"" + data + "/train-" + any5 + "-of-00002\"");
  EXPECT_TRUE(contains(text, "label_map_path: \"" + data + "/label_map.pbtxt\"")) << text;
  const std::string config = data + "/e2e.config";
  atomic_write_file(config, text);

  const std::string model = kGs + "detect/model", eval_dir = kGs + "detect/eval_job";
  Workspace eval_ws;
  const Started eval =
      start({"detect", "train", "--pipeline_config_path", config, "--checkpoint_dir", model, "--model_dir", eval_dir,
             "--num_train_steps", "2", "--eval_timeout", "120", "--eval_poll_secs", "0.2"},
            eval_ws);
  r = run_in({"detect", "train", "--pipeline_config_path", config, "--model_dir", model, "--num_train_steps", "2",
              "--mode=train"},
             ws);
  ASSERT_EQ(r.rc, 0) << r.err;
  auto e = finish(eval);
  ASSERT_EQ(e.rc, 0) << e.err;
  EXPECT_EQ(checkpoints_in(model), std::vector<std::string>{"ckpt-2.pt"});
  EXPECT_TRUE(contains(orchard::read_file(model + "/checkpoint"), "ckpt-2.pt"));
  EXPECT_EQ(event_files_in(model + "/train").size(), 1u);
  EXPECT_FALSE(dir_exists(model + "/eval")) << "--mode=train evaluated";

  EXPECT_TRUE(contains(e.err, "restored " + model + "/ckpt-2.pt")) << e.err;
  EXPECT_TRUE(contains(e.out, "DetectionBoxes_Precision/mAP")) << e.out << e.err;
  EXPECT_EQ(checkpoints_in(eval_dir), std::vector<std::string>{}) << "the evaluation job wrote checkpoints";
  const auto events = event_files_in(eval_dir + "/eval");
  ASSERT_EQ(events.size(), 1u);
  bool map_at_2 = false;
  for (const auto& ev : read_scalar_events(events[0]))
    map_at_2 = map_at_2 || (ev.tag == "DetectionBoxes_Precision/mAP" && ev.step == 2);
  EXPECT_TRUE(map_at_2);
  EXPECT_EQ(ws.cwd_entries(), std::vector<std::string>{});
  EXPECT_EQ(eval_ws.cwd_entries(), std::vector<std::string>{});
}

// --- errors ----------------------------------------------------------------------------------------

struct BadPath {
  std::vector<std::string> args;
  std::string url;  // the message names it
};

TEST(StorageErrors, OneLineNamingTheUrlAndNoLocalFolder) {
  NEED_DATA();
  const std::vector<BadPath> cases = {
      // A bucket that does not exist, read and written.
      {classify_args("s3://no-such-bucket/model", 2), "s3://no-such-bucket/"},
      {{"data", "fashion-mnist", "--out_dir", "s3://no-such-bucket/fm", "--limit", "16"}, "s3://no-such-bucket/fm/"},
      // A data_dir with nothing under it; a missing pipeline.config on gs.
      {[] {
         auto a = classify_args(kS3 + "err/model", 2);
         a[3] = kS3 + "no-such-data";
         return a;
       }(),
       kS3 + "no-such-data"},
      {{"detect", "train", "--pipeline_config_path", kGs + "missing/pipeline.config", "--model_dir", kGs + "err/det"},
       kGs + "missing/pipeline.config"},
      // A bucket the emulator does not have: it lists unknown buckets as empty (GCS answers 404),
      // so this is the message of a data_dir with nothing under it.
      {[] {
         auto a = classify_args(kGs + "err/model", 2);
         a[3] = "gs://no-such-bucket/fm";
         return a;
       }(),
       "gs://no-such-bucket/fm"},
      // An evaluation of a model_dir that holds nothing.
      {{"classify", "eval", "--data_dir", kData, "--model_dir", kS3 + "no-such-model"}, kS3 + "no-such-model"},
      // A scheme without "//": never a local folder "s3:".
      {[] {
         auto a = classify_args("s3:" + kBucket + "/model", 2);
         return a;
       }(),
       "s3:" + kBucket + "/model"},
  };
  for (const auto& c : cases) {
    Workspace ws;
    auto r = run_in(c.args, ws);
    EXPECT_EQ(r.rc, 1) << joined(c.args) << "\n" << r.err;
    const auto lines = error_lines(r.err);
    ASSERT_EQ(lines.size(), 1u) << joined(c.args) << "\n" << r.err;
    EXPECT_TRUE(contains(lines[0], c.url)) << "'" << c.url << "' not in: " << lines[0];
    EXPECT_FALSE(contains(r.err, "internal error")) << r.err;
    EXPECT_EQ(ws.cwd_entries(), std::vector<std::string>{}) << joined(c.args);
  }
}

// --- http(s):// (read-only public files) ---------------------------------------------------------

// A TensorFlow checkpoint served by Python's http.server (no Range support, no listing), named by
// its folder URL as users name the zoo's folders: the same variables and statistics as read from
// the disk.
TEST(StorageHttp, TensorFlowCheckpointFromAWebServer) {
  const std::string fixtures = std::string(ORCHARD_TEST_FIXTURES) + "/tf";
  const int port = test::free_loopback_port();
  const pid_t server = ::fork();
  if (server == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    std::freopen("/dev/null", "w", stdout);
    std::freopen("/dev/null", "w", stderr);
    const std::string p = std::to_string(port);
    ::execl("/usr/bin/python3", "python3", "-m", "http.server", p.c_str(), "--bind", "127.0.0.1", "--directory",
            fixtures.c_str(), static_cast<char*>(nullptr));
    std::_Exit(127);
  }
  bool up = false;
  for (int i = 0; i < 100 && !up; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    const int s = test::connect_loopback(port);
    if (s >= 0) {
      ::close(s);
      up = true;
    }
  }
  ASSERT_TRUE(up) << "python3 -m http.server did not start";
  const std::string url = "http://127.0.0.1:" + std::to_string(port) + "/estimator_ckpt/";
  Workspace ws;
  auto remote = run_in({"checkpoint", "inspect", "--stats", url}, ws);
  auto local = run_in({"checkpoint", "inspect", "--stats", fixtures + "/estimator_ckpt"}, ws);
  ::kill(server, SIGTERM);
  ::waitpid(server, nullptr, 0);
  ASSERT_EQ(remote.rc, 0) << remote.err;
  ASSERT_EQ(local.rc, 0) << local.err;
  const auto after_first_line = [](const std::string& s) { return s.substr(s.find('\n') + 1); };
  EXPECT_TRUE(contains(remote.out, url + "model.ckpt-1000 (V2 tensor bundle)")) << remote.out;
  EXPECT_GT(after_first_line(remote.out).size(), 1000u);
  EXPECT_EQ(after_first_line(remote.out), after_first_line(local.out));
  EXPECT_EQ(ws.cwd_entries(), std::vector<std::string>{});
}

}  // namespace
}  // namespace orchard::cli
