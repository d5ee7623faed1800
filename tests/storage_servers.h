// Object-store servers on loopback for tests: npm s3rver (S3) and the Cloud Storage emulator of
// npm firebase-tools (GCS, through tests/npm/gcs_emulator.js), each started as a child process on a
// free port, waited for until it answers a listing, and stopped with its owner. The variables a
// child `orchard` needs to reach them come with each (`env()`).
//
// Header-only, for any test binary that links orchard_core. A missing node or npm package is a
// failure the test must report (`error()` says what is missing), never a skip: a skip would read
// as a pass. scripts/test.sh runs `npm ci` in tests/npm.
//
// s3rver 3.7.1 on Node 20 needs --openssl-legacy-provider (without it every listing with a
// continuation token answers 500); it checks no signatures. The emulator checks no credentials
// and creates a bucket on its first write.
//
// tests/core/s3_storage_test.cc and gcs_storage_test.cc use its socket helpers; they start their
// servers with options of their own (fault proxies, in-process clients).
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/test_util.h"
#include "orchard/core/filesystem.h"
#include "orchard/core/gcs_client.h"
#include "orchard/core/s3_client.h"

extern char** environ;

namespace orchard::test {

using EnvVars = std::vector<std::pair<std::string, std::string>>;

// A loopback TCP port nothing listens on (free when asked; a server started at once gets it).
inline int free_loopback_port() {
  const int s = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  ::getsockname(s, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(s);
  return ntohs(a.sin_port);
}

// A connected socket to 127.0.0.1:port, or -1.
inline int connect_loopback(int port) {
  const int s = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(s);
    return -1;
  }
  return s;
}

// Sends all of `data`; false when the peer is gone.
inline bool send_all(int fd, const std::string& data) {
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t w = ::send(fd, data.data() + done, data.size() - done, MSG_NOSIGNAL);
    if (w <= 0) return false;
    done += static_cast<size_t>(w);
  }
  return true;
}

// The program's path on $PATH, or "".
inline std::string which_program(const std::string& prog) {
  std::stringstream ss(std::getenv("PATH") ? std::getenv("PATH") : "");
  for (std::string dir; std::getline(ss, dir, ':');)
    if (::access((dir + "/" + prog).c_str(), X_OK) == 0) return dir + "/" + prog;
  return "";
}

// Sets the variables in this process (children started after inherit them).
inline void set_environment(const EnvVars& vars) {
  for (const auto& [k, v] : vars) ::setenv(k.c_str(), v.c_str(), 1);
}

// A server child process: started with argv (+ `extra_env` over this process's environment),
// stdout and stderr into `log`, killed when this object goes or when the test binary dies.
class ChildServer {
 public:
  ChildServer() = default;
  ChildServer(const ChildServer&) = delete;
  ChildServer& operator=(const ChildServer&) = delete;
  ~ChildServer() { stop(); }

  void start(const std::vector<std::string>& argv, const EnvVars& extra_env, const std::string& log) {
    log_ = log;
    // Everything the child needs is built here: between fork and exec only async-signal-safe calls.
    std::vector<std::string> env_s;
    for (char** e = environ; *e; ++e) {
      const std::string kv = *e;
      bool replaced = false;
      for (const auto& [k, v] : extra_env) replaced = replaced || kv.rfind(k + "=", 0) == 0;
      if (!replaced) env_s.push_back(kv);
    }
    for (const auto& [k, v] : extra_env) env_s.push_back(k + "=" + v);
    std::vector<char*> args, envp;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    for (auto& e : env_s) envp.push_back(e.data());
    envp.push_back(nullptr);
    const pid_t parent = ::getpid();
    pid_ = ::fork();
    if (pid_ == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlives the test binary
      if (::getppid() != parent) ::_exit(126);
      const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (fd >= 0) {
        ::dup2(fd, 1);
        ::dup2(fd, 2);
      }
      ::execve(args[0], args.data(), envp.data());
      ::_exit(127);
    }
  }
  // False once the child has exited.
  bool running() {
    if (pid_ <= 0) return false;
    int status;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return false;
    }
    return true;
  }
  void stop() {
    if (pid_ > 0) {
      ::kill(pid_, SIGTERM);
      ::waitpid(pid_, nullptr, 0);
      pid_ = -1;
    }
  }
  std::string log_text() const {
    std::ifstream in(log_);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  }

 private:
  pid_t pid_ = -1;
  std::string log_;
};

// Polls `ready` every 100 ms for up to 30 s (a loaded machine) while the child runs.
template <typename Ready>
bool wait_until_ready(ChildServer& child, int port, Ready&& ready) {
  for (int i = 0; i < 300; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    const int s = connect_loopback(port);
    if (s >= 0) {
      ::close(s);
      try {
        if (ready()) return true;
      } catch (const std::exception&) {
      }
    }
    if (!child.running()) return false;
  }
  return false;
}

// npm s3rver serving `bucket` from a private folder.
class S3rverProcess {
 public:
  static constexpr const char* kAccessKey = "S3RVER";  // the only key s3rver knows

  explicit S3rverProcess(std::string bucket) : bucket_(std::move(bucket)) {
    const std::string npm = ORCHARD_TEST_NPM_DIR;
    const std::string node = which_program("node");
    const std::string script = npm + "/node_modules/s3rver/bin/s3rver.js";
    if (node.empty() || ::access(script.c_str(), R_OK) != 0) {
      error_ = "node or " + script + " missing (scripts/test.sh runs npm ci in tests/npm)";
      return;
    }
    port_ = free_loopback_port();
    std::filesystem::create_directories(dir_.path() / "data");
    child_.start({node, "--openssl-legacy-provider", script, "-d", dir_.file("data"), "-a", "127.0.0.1", "-p",
                  std::to_string(port_), "--configure-bucket", bucket_},
                 {}, dir_.file("s3rver.log"));
    // The bucket is configured just after the port opens: ready once a listing answers.
    const bool up = wait_until_ready(child_, port_, [&] {
      s3::S3Options o = options();
      o.retry.max_attempts = 1;
      s3::Client(o).list(bucket_, "");
      return true;
    });
    if (!up) error_ = "s3rver did not start: " + child_.log_text();
  }

  const std::string& error() const { return error_; }  // "" when it runs
  int port() const { return port_; }
  const std::string& bucket() const { return bucket_; }
  std::string endpoint() const { return "http://127.0.0.1:" + std::to_string(port_); }
  // For a child orchard; `endpoint` replaces the server's (a proxy in front of it).
  EnvVars env(const std::string& endpoint = "") const {
    return {{"AWS_ACCESS_KEY_ID", kAccessKey},
            {"AWS_SECRET_ACCESS_KEY", kAccessKey},
            {"AWS_ENDPOINT_URL", endpoint.empty() ? this->endpoint() : endpoint},
            {"AWS_REGION", "us-east-1"}};
  }
  // For a client in this process.
  s3::S3Options options() const {
    s3::S3Options o;
    o.endpoint = endpoint();
    o.path_style = true;
    o.credentials.access_key_id = kAccessKey;
    o.credentials.secret_access_key = kAccessKey;
    o.credentials.source = "the test";
    o.retry.initial_backoff_seconds = 0.01;
    o.retry.max_backoff_seconds = 0.05;
    return o;
  }
  // The folder s3rver keeps its objects in (its own layout).
  std::string data_dir() const { return dir_.file("data"); }

 private:
  std::string bucket_;
  TempDir dir_;
  ChildServer child_;
  int port_ = 0;
  std::string error_;
};

// The Cloud Storage emulator of npm firebase-tools (tests/npm/gcs_emulator.js).
class GcsEmulatorProcess {
 public:
  GcsEmulatorProcess() {
    const std::string npm = ORCHARD_TEST_NPM_DIR;
    const std::string node = which_program("node");
    const std::string server = npm + "/node_modules/firebase-tools/lib/emulator/storage/server.js";
    if (node.empty() || ::access(server.c_str(), R_OK) != 0) {
      error_ = "node or " + server + " missing (scripts/test.sh runs npm ci in tests/npm)";
      return;
    }
    port_ = free_loopback_port();
    child_.start({node, npm + "/gcs_emulator.js", std::to_string(port_)}, {{"TMPDIR", dir_.str()}},
                 dir_.file("emulator.log"));
    const bool up = wait_until_ready(child_, port_, [&] {
      gcs::GcsOptions o = options();
      o.retry.max_attempts = 1;
      try {
        gcs::Client(o).list("probe", "");
      } catch (const fs::StorageError& e) {
        return e.http_status() == 404;  // it answers (no such bucket yet)
      }
      return true;
    });
    if (!up) error_ = "the GCS emulator did not start: " + child_.log_text();
  }

  const std::string& error() const { return error_; }  // "" when it runs
  int port() const { return port_; }
  std::string host() const { return "127.0.0.1:" + std::to_string(port_); }
  // For a child orchard: the emulator convention of Google's client libraries, no credentials.
  EnvVars env() const { return {{"STORAGE_EMULATOR_HOST", host()}}; }
  gcs::GcsOptions options() const {
    const std::string h = host();
    gcs::GcsOptions o = gcs::GcsOptions::from_environment([h](const std::string& name) -> std::optional<std::string> {
      if (name == "STORAGE_EMULATOR_HOST") return h;
      return std::nullopt;
    });
    o.retry.initial_backoff_seconds = 0.01;
    o.retry.max_backoff_seconds = 0.05;
    return o;
  }

 private:
  TempDir dir_;
  ChildServer child_;
  int port_ = 0;
  std::string error_;
};

}  // namespace orchard::test
