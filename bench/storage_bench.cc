// Object-storage throughput (issue 53): TFRecord shards read front to back through fs::
// (SequentialReader / ShardPrefetcher, CRCs checked), and checkpoint-sized whole-object writes
// (fs::write_file), from any path the file system layer takes: a local folder, s3://, http://.
// Driver: bench/storage_read.sh (s3rver on loopback vs the local disk).
//
//   storage_bench make  --dir D --shards 8 --shard_mb 25       # TFRecord shards of random records
//   storage_bench copy  --from P1 P2 ... --to PREFIX           # fs::read_file + fs::write_file
//   storage_bench read  P1 P2 ... [--block_mb 8 --blocks 4 --no_next]
//   storage_bench write --path P --mb 100 [--part_mb 16 --concurrency 6]
//
// read and write take --rtt_ms R: s3:// requests then go through a proxy thread in this process
// that holds each request R ms before passing it on (a store R ms away; bandwidth unchanged).
// Each timed command prints one JSON line: bytes, seconds, mb_per_s, cpu_seconds (of the whole
// process, the proxy's threads included).
#include <CLI/CLI.hpp>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <nlohmann/json.hpp>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <iostream>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "bench_util.h"
#include "orchard/core/crc32c.h"
#include "orchard/core/error.h"
#include "orchard/core/filesystem.h"
#include "orchard/core/s3_filesystem.h"
#include "orchard/core/tfrecord.h"

namespace {

using orchard::bench::cpu_now;
using orchard::bench::wall_now;

std::string random_bytes(size_t n, std::mt19937_64& rng) {
  std::string s(n, '\0');
  for (size_t i = 0; i + 8 <= n; i += 8) {
    const uint64_t v = rng();
    std::memcpy(&s[i], &v, 8);
  }
  return s;
}

// A loopback TCP proxy to 127.0.0.1:target that delays each HTTP request by `rtt`: a chunk the
// client sends after the server has answered (or the connection's first) starts a request and
// waits `rtt` before it is forwarded; the rest of the request and the responses pass at once.
class DelayProxy {
 public:
  DelayProxy(int target, double rtt_s) : target_(target), rtt_(rtt_s) {
    listen_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(listen_, reinterpret_cast<sockaddr*>(&a), sizeof a);
    ::listen(listen_, 64);
    socklen_t len = sizeof a;
    ::getsockname(listen_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    accept_ = std::thread([this] { accept_loop(); });
  }
  ~DelayProxy() {
    ::shutdown(listen_, SHUT_RDWR);
    ::close(listen_);
    accept_.join();
    std::lock_guard<std::mutex> lock(mu_);
    for (int fd : fds_) ::shutdown(fd, SHUT_RDWR);
    for (std::thread& t : threads_) t.join();
    for (int fd : fds_) ::close(fd);
  }
  int port() const { return port_; }

 private:
  struct Conn {
    int client, server;
    std::atomic<bool> answered{true};  // the server has sent something since the client last did
  };
  void accept_loop() {
    for (;;) {
      const int c = ::accept(listen_, nullptr, nullptr);
      if (c < 0) return;
      const int s = ::socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_port = htons(static_cast<uint16_t>(target_));
      a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      if (::connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
        ::close(c);
        ::close(s);
        continue;
      }
      auto conn = std::make_shared<Conn>();
      conn->client = c;
      conn->server = s;
      std::lock_guard<std::mutex> lock(mu_);
      fds_.push_back(c);
      fds_.push_back(s);
      threads_.emplace_back([this, conn] { pump(conn, true); });
      threads_.emplace_back([this, conn] { pump(conn, false); });
    }
  }
  void pump(const std::shared_ptr<Conn>& conn, bool upstream) {
    const int from = upstream ? conn->client : conn->server, to = upstream ? conn->server : conn->client;
    std::string buf(1 << 16, '\0');
    for (;;) {
      const ssize_t n = ::recv(from, buf.data(), buf.size(), 0);
      if (n <= 0) break;
      if (upstream && conn->answered.exchange(false)) std::this_thread::sleep_for(std::chrono::duration<double>(rtt_));
      if (!upstream) conn->answered = true;
      for (ssize_t done = 0; done < n;) {
        const ssize_t w = ::send(to, buf.data() + done, static_cast<size_t>(n - done), MSG_NOSIGNAL);
        if (w <= 0) return;
        done += w;
      }
    }
    ::shutdown(to, SHUT_WR);
  }
  int target_;
  double rtt_;
  int listen_ = -1, port_ = 0;
  std::thread accept_;
  std::mutex mu_;
  std::vector<int> fds_;
  std::vector<std::thread> threads_;
};

// s3:// from the environment, optionally through a DelayProxy; the options are adjusted by `edit`.
std::unique_ptr<DelayProxy> setup_s3(double rtt_ms, const std::function<void(orchard::s3::S3Options&)>& edit) {
  orchard::s3::S3Options o = orchard::s3::S3Options::from_environment();
  std::unique_ptr<DelayProxy> proxy;
  if (rtt_ms > 0) {
    const size_t colon = o.endpoint.rfind(':');
    if (o.endpoint.rfind("http://127.0.0.1:", 0) != 0 || colon == std::string::npos)
      throw orchard::Error("--rtt_ms needs AWS_ENDPOINT_URL=http://127.0.0.1:PORT, not '" + o.endpoint + "'");
    proxy = std::make_unique<DelayProxy>(std::stoi(o.endpoint.substr(colon + 1)), rtt_ms / 1000);
    o.endpoint = "http://127.0.0.1:" + std::to_string(proxy->port());
  }
  edit(o);
  orchard::fs::register_file_system("s3", [o] { return std::make_unique<orchard::fs::S3FileSystem>(o); });
  return proxy;
}

void print(const std::string& what, uint64_t bytes, double seconds, double cpu, nlohmann::json extra = {}) {
  nlohmann::json j = {{"bench", what},
                      {"bytes", bytes},
                      {"seconds", seconds},
                      {"mb_per_s", static_cast<double>(bytes) / 1e6 / seconds},
                      {"cpu_seconds", cpu}};
  for (auto& [k, v] : extra.items()) j[k] = v;
  std::cout << j.dump() << std::endl;
}

// Reads every record of every shard (length, masked CRCs checked) in order.
void read_shards(const std::vector<std::string>& paths, orchard::fs::PrefetchOptions options, bool next,
                 double rtt_ms) {
  orchard::fs::ShardPrefetcher prefetcher(options);
  const double w0 = wall_now(), c0 = cpu_now();
  uint64_t bytes = 0, records = 0;
  std::string data;
  for (size_t i = 0; i < paths.size(); ++i) {
    orchard::fs::SequentialReader reader = prefetcher.open(paths[i], next && i + 1 < paths.size() ? paths[i + 1] : "");
    for (;;) {
      char head[12];
      const size_t got = reader.read(head, sizeof head);
      if (got == 0) break;
      if (got != sizeof head) throw orchard::Error(paths[i] + ": truncated record header");
      uint64_t len;
      uint32_t len_crc;
      std::memcpy(&len, head, 8);
      std::memcpy(&len_crc, head + 8, 4);
      if (orchard::crc32c::mask(orchard::crc32c::value(head, 8)) != len_crc)
        throw orchard::Error(paths[i] + ": bad length CRC");
      data.resize(len + 4);
      if (reader.read(data.data(), len + 4) != len + 4) throw orchard::Error(paths[i] + ": truncated record");
      uint32_t crc;
      std::memcpy(&crc, data.data() + len, 4);
      if (orchard::crc32c::mask(orchard::crc32c::value(data.data(), len)) != crc)
        throw orchard::Error(paths[i] + ": bad data CRC");
      bytes += len + 16;
      ++records;
    }
  }
  print("read", bytes, wall_now() - w0, cpu_now() - c0,
        {{"records", records},
         {"shards", paths.size()},
         {"block_mb", static_cast<double>(options.block_size) / (1 << 20)},
         {"blocks", options.blocks},
         {"next_shard_prefetch", next},
         {"rtt_ms", rtt_ms},
         {"scheme", orchard::fs::scheme_of(paths[0])}});
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Orchard object-storage throughput: TFRecord shard reads and checkpoint-sized writes through fs::"};
  app.require_subcommand(1);

  std::string dir;
  int shards = 8;
  double shard_mb = 25, record_kb = 100;
  auto* make = app.add_subcommand("make", "write TFRecord shards of random records to a local folder");
  make->add_option("--dir", dir)->required();
  make->add_option("--shards", shards);
  make->add_option("--shard_mb", shard_mb);
  make->add_option("--record_kb", record_kb);

  std::vector<std::string> from;
  std::string to;
  auto* copy = app.add_subcommand("copy", "copy files (whole reads and writes) to a folder or prefix");
  copy->add_option("--from", from)->required();
  copy->add_option("--to", to)->required();

  std::vector<std::string> paths;
  double block_mb = 8;
  int blocks = 4;
  bool no_next = false;
  auto* read = app.add_subcommand("read", "read TFRecord shards in order, CRCs checked");
  read->add_option("paths", paths)->required();
  read->add_option("--block_mb", block_mb);
  read->add_option("--blocks", blocks);
  read->add_flag("--no_next", no_next, "do not start the next shard before the current one ends");
  double rtt_ms = 0;
  read->add_option("--rtt_ms", rtt_ms, "s3: hold each request this long in a proxy (a distant store)");

  std::string path;
  double mb = 100, part_mb = 16;
  int concurrency = 6;
  auto* write = app.add_subcommand("write", "write one checkpoint-sized object of random bytes");
  write->add_option("--path", path)->required();
  write->add_option("--mb", mb);
  write->add_option("--part_mb", part_mb, "s3: multipart part size");
  write->add_option("--concurrency", concurrency, "s3: parts uploaded at once");
  write->add_option("--rtt_ms", rtt_ms, "s3: hold each request this long in a proxy (a distant store)");

  CLI11_PARSE(app, argc, argv);
  try {
    std::mt19937_64 rng(53);
    if (*make) {
      const size_t record = static_cast<size_t>(record_kb * 1024);
      const uint64_t per_shard = static_cast<uint64_t>(shard_mb * (1 << 20));
      for (int s = 0; s < shards; ++s) {
        char name[64];
        std::snprintf(name, sizeof name, "/train-%05d-of-%05d", s, shards);
        orchard::TFRecordWriter w(dir + name);
        for (uint64_t n = 0; n < per_shard; n += record + 16) w.write(random_bytes(record, rng));
        w.close();
      }
    } else if (*copy) {
      for (const std::string& f : from)
        orchard::fs::write_file(orchard::fs::join(to, f.substr(f.rfind('/') + 1)), orchard::fs::read_file(f));
    } else if (*read) {
      std::unique_ptr<DelayProxy> proxy;
      if (orchard::fs::scheme_of(paths[0]) == "s3") proxy = setup_s3(rtt_ms, [](orchard::s3::S3Options&) {});
      read_shards(paths, {static_cast<uint64_t>(block_mb * (1 << 20)), blocks}, !no_next, rtt_ms);
    } else if (*write) {
      std::unique_ptr<DelayProxy> proxy;
      if (orchard::fs::scheme_of(path) == "s3")
        proxy = setup_s3(rtt_ms, [&](orchard::s3::S3Options& o) {
          o.part_size = static_cast<uint64_t>(part_mb * (1 << 20));
          o.multipart_threshold = o.part_size;
          o.upload_concurrency = concurrency;
        });
      const std::string data = random_bytes(static_cast<size_t>(mb * (1 << 20)), rng);
      const double w0 = wall_now(), c0 = cpu_now();
      orchard::fs::write_file(path, data);
      print("write", data.size(), wall_now() - w0, cpu_now() - c0,
            {{"scheme", orchard::fs::scheme_of(path)},
             {"part_mb", part_mb},
             {"concurrency", concurrency},
             {"rtt_ms", rtt_ms}});
    }
  } catch (const std::exception& e) {
    std::cerr << "storage_bench: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
