// The scheme registry and the local file system behind core/filesystem.h.
#include "orchard/core/filesystem.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <thread>

#include "core/test_util.h"

namespace orchard::fs {
namespace {

TEST(FileSystem, SchemeOf) {
  EXPECT_EQ(scheme_of("/tmp/x"), "");
  EXPECT_EQ(scheme_of("rel/a:b"), "");
  EXPECT_EQ(scheme_of("a:b"), "");  // a local name with a colon
  EXPECT_EQ(scheme_of("s3://b/k"), "s3");
  EXPECT_EQ(scheme_of("GS://b/k"), "gs");
  EXPECT_EQ(scheme_of("file:///tmp"), "file");
  EXPECT_THROW(scheme_of("gs:/bucket/x"),
               Error);  // a mistyped URL is never a local folder
  EXPECT_THROW(scheme_of("s3:bucket"), Error);
}

TEST(FileSystem, UnknownSchemeIsAnErrorNamingIt) {
  test::TempDir dir;
  const auto cwd = std::filesystem::current_path();
  std::filesystem::current_path(dir.path());
  try {
    write_file("hdfs://namenode/model/ckpt", "x");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("hdfs://namenode/model/ckpt"), std::string::npos) << msg;
    EXPECT_NE(msg.find("\"hdfs://\""), std::string::npos) << msg;
    EXPECT_NE(msg.find("gs://"), std::string::npos) << msg;  // what is known
    EXPECT_NE(msg.find("s3://"), std::string::npos) << msg;
  }
  EXPECT_THROW(read_file("az://container/x"), Error);
  EXPECT_THROW(glob("hdfs://namenode/train-*"), Error);
  EXPECT_FALSE(std::filesystem::exists(dir.path() / "hdfs:"));
  std::filesystem::current_path(cwd);
}

TEST(FileSystem, ObjectStoresAreRegistered) {
  const auto schemes = registered_schemes();
  EXPECT_NE(std::find(schemes.begin(), schemes.end(), "gs"), schemes.end());
  EXPECT_NE(std::find(schemes.begin(), schemes.end(), "s3"), schemes.end());
}

TEST(FileSystem, LocalRoundTrip) {
  test::TempDir dir;
  const std::string path = join(dir.str(), "a/b/c.bin");
  std::string data(100000, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 7 + 3);
  write_file(path, data);  // creates a/ and a/b/
  EXPECT_EQ(read_file(path), data);
  EXPECT_EQ(read_file("file://" + path), data);
  ASSERT_TRUE(stat(path));
  EXPECT_EQ(stat(path)->size, 100000);
  EXPECT_EQ(read_range(path, 99990, 100), data.substr(99990));
  EXPECT_EQ(read_range(path, 100000, 5), "");
  EXPECT_EQ(read_range(path, 5, 3), data.substr(5, 3));
  // No temporary file is left beside it.
  EXPECT_EQ(list_prefix(join(dir.str(), "a/b/")), std::vector<std::string>{path});
  remove(path);
  EXPECT_FALSE(exists(path));
  EXPECT_NO_THROW(remove(path));
  EXPECT_THROW(read_file(path), StorageError);
}

TEST(FileSystem, LocalGlobAndPrefix) {
  test::TempDir dir;
  for (const char* name : {"train-00000-of-00003", "train-00001-of-00003", "train-00002-of-00003", "trainer.txt",
                           "val-00000-of-00001", "sub/train-00009-of-00003"})
    write_file(join(dir.str(), name), name);
  const std::string d = dir.str() + "/";
  EXPECT_EQ(
      glob(d + "train-?????"
               "-of-00003"),
      (std::vector<std::string>{d + "train-00000-of-00003", d + "train-00001-of-00003", d + "train-00002-of-00003"}));
  EXPECT_EQ(glob(d + "train-0000[02]-of-*"),
            (std::vector<std::string>{d + "train-00000-of-00003", d + "train-00002-of-00003"}));
  EXPECT_EQ(glob(d + "*/train-*"), std::vector<std::string>{d + "sub/train-00009-of-00003"});
  EXPECT_EQ(glob(d + "train*").size(), 4u);  // '*' does not cross '/'
  EXPECT_EQ(glob(d + "val-00000-of-00001"), std::vector<std::string>{d + "val-00000-of-00001"});
  EXPECT_TRUE(glob(d + "missing").empty());
  EXPECT_EQ(list_prefix(d + "tr").size(), 4u);
  EXPECT_EQ(list_prefix(d).size(), 6u);
  EXPECT_EQ(glob("file://" + d + "val-*"), std::vector<std::string>{"file://" + d + "val-00000-of-00001"});
}

TEST(FileSystem, SequentialReaderReadsInBlocks) {
  test::TempDir dir;
  std::string data(1000, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i);
  write_file(dir.file("x"), data);
  SequentialReader reader(dir.file("x"), 64);
  std::string got;
  char buf[100];
  for (size_t n; (n = reader.read(buf, sizeof buf)) > 0;) got.append(buf, n);
  EXPECT_EQ(got, data);
  EXPECT_EQ(reader.position(), 1000u);
}

class CountingFs : public FileSystem {
 public:
  int reads = 0;
  std::string read_file(const std::string&) override { return ""; }
  std::string read_range(const std::string&, uint64_t offset, uint64_t n) override {
    ++reads;
    const std::string all = "0123456789";
    return offset >= all.size() ? "" : all.substr(offset, n);
  }
  void write_file(const std::string&, const std::string&) override {}
  std::optional<FileStat> stat(const std::string&) override { return FileStat{10}; }
  std::vector<std::string> list_prefix(const std::string&) override { return {}; }
  void remove(const std::string&) override {}
};

TEST(FileSystem, RegisteredSchemeIsUsed) {
  auto* counting = new CountingFs();
  register_file_system("mem", [counting] { return std::unique_ptr<FileSystem>(counting); });
  SequentialReader reader("mem://x", PrefetchOptions{4, 1});  // one block at a time: in order
  EXPECT_TRUE(reader.prefetching());                          // not the local disk
  char buf[20];
  EXPECT_EQ(reader.read(buf, sizeof buf), 10u);
  EXPECT_EQ(std::string(buf, 10), "0123456789");
  EXPECT_EQ(counting->reads,
            3);  // 4 + 4 + 2 bytes: the short block ends the file
  const auto schemes = registered_schemes();
  EXPECT_NE(std::find(schemes.begin(), schemes.end(), "mem"), schemes.end());
  EXPECT_NE(std::find(schemes.begin(), schemes.end(), "s3"), schemes.end());
  EXPECT_NE(std::find(schemes.begin(), schemes.end(), "http"), schemes.end());
  EXPECT_NE(std::find(schemes.begin(), schemes.end(), "https"), schemes.end());
}

TEST(FileSystem, LocalSequentialReaderHasNoThreads) {
  test::TempDir dir;
  write_file(dir.file("x"), "abc");
  EXPECT_FALSE(SequentialReader(dir.file("x")).prefetching());
  EXPECT_FALSE(SequentialReader("file://" + dir.file("x"), PrefetchOptions{}).prefetching());
  ShardPrefetcher prefetcher;
  prefetcher.start(dir.file("x"));
  EXPECT_TRUE(prefetcher.started().empty());
  SequentialReader r = prefetcher.open(dir.file("x"));
  EXPECT_FALSE(r.prefetching());
  char buf[8];
  EXPECT_EQ(r.read(buf, sizeof buf), 3u);
}

// An in-memory remote file system: optional latency per ranged read, a failure
// from some offset on, and counts of the reads and of those running at once.
class SlowMemFs : public FileSystem {
 public:
  std::map<std::string, std::string> files;
  std::chrono::milliseconds latency{0};
  uint64_t fail_from = UINT64_MAX;  // read_range at or past this offset throws
  std::atomic<int> reads{0}, in_flight{0}, max_in_flight{0};
  std::mutex mu;
  std::vector<std::pair<std::string, uint64_t>> log;  // (path, offset) of every read, in order

  std::string read_file(const std::string& path) override { return files.at(path); }
  std::string read_range(const std::string& path, uint64_t offset, uint64_t n) override {
    ++reads;
    const int now = ++in_flight;
    for (int m = max_in_flight; now > m && !max_in_flight.compare_exchange_weak(m, now);) {
    }
    {
      std::lock_guard<std::mutex> lock(mu);
      log.emplace_back(path, offset);
    }
    std::this_thread::sleep_for(latency);
    --in_flight;
    if (offset >= fail_from) throw StorageError(path + ": injected failure at " + std::to_string(offset), 500);
    const std::string& all = files.at(path);
    return offset >= all.size() ? "" : all.substr(offset, n);
  }
  void write_file(const std::string& path, const std::string& contents) override { files[path] = contents; }
  std::optional<FileStat> stat(const std::string& path) override {
    return FileStat{static_cast<int64_t>(files.at(path).size())};
  }
  std::vector<std::string> list_prefix(const std::string&) override { return {}; }
  void remove(const std::string&) override {}
};

SlowMemFs* use_slow_mem() {
  auto* fs = new SlowMemFs();
  register_file_system("slowmem", [fs] { return std::unique_ptr<FileSystem>(fs); });
  return fs;
}

std::string bytes(size_t n, unsigned seed) {
  std::string s(n, '\0');
  uint32_t x = seed * 2654435761u + 7;
  for (size_t i = 0; i < n; ++i) {
    x = x * 1664525u + 1013904223u;
    s[i] = static_cast<char>(x >> 24);
  }
  return s;
}

std::string read_all(SequentialReader& r, size_t chunk) {
  std::string got, buf(chunk, '\0');
  for (size_t n; (n = r.read(buf.data(), chunk)) > 0;) got.append(buf.data(), n);
  return got;
}

TEST(Prefetch, SameBytesForEveryBlockSizeAndFileSize) {
  SlowMemFs* fs = use_slow_mem();
  for (size_t size : {0, 1, 63, 64, 65, 1000, 4096, 4103}) {
    const std::string path = "slowmem://f" + std::to_string(size);
    fs->files[path] = bytes(size, static_cast<unsigned>(size));
    for (uint64_t block : {1, 7, 64, 100, 1000, 4096, 5000})
      for (int blocks : {1, 2, 4, 7})
        for (size_t chunk : {1, 13, 64, 5000}) {
          if (block == 1 && size > 1000 && chunk < 64) continue;  // slow, adds nothing
          const int before = fs->reads;
          SequentialReader reader(path, PrefetchOptions{block, blocks});
          ASSERT_TRUE(reader.prefetching());
          const std::string got = read_all(reader, chunk);
          ASSERT_TRUE(got == fs->files[path])
              << "size " << size << " block " << block << " blocks " << blocks << " chunk " << chunk;
          EXPECT_EQ(reader.position(), size);
          char c;
          EXPECT_EQ(reader.read(&c, 1), 0u);  // stays at the end
          // Every block once, the one that ends the file (short or empty), and at most
          // blocks-1 requests past it.
          const int needed = static_cast<int>(size / block) + 1;
          const int reads = fs->reads - before;
          EXPECT_GE(reads, needed);
          EXPECT_LE(reads, needed + blocks - 1) << "size " << size << " block " << block << " blocks " << blocks;
        }
  }
}

TEST(Prefetch, KeepsBlocksInFlightAndNoMoreThanAsked) {
  SlowMemFs* fs = use_slow_mem();
  fs->latency = std::chrono::milliseconds(30);
  fs->files["slowmem://shard"] = bytes(16 * 1000 + 5, 1);
  SequentialReader reader("slowmem://shard", PrefetchOptions{1000, 4});
  EXPECT_TRUE(read_all(reader, 300) == fs->files["slowmem://shard"]);
  EXPECT_GE(fs->max_in_flight.load(), 2);  // reads overlap (4 on an idle machine)
  EXPECT_LE(fs->max_in_flight.load(), 4);  // never more than asked: the memory bound
  // In order: every block's read starts no later than the block 4 places after it.
  std::map<uint64_t, size_t> order;
  for (size_t i = 0; i < fs->log.size(); ++i) order.emplace(fs->log[i].second, i);
  for (uint64_t off = 0; off + 4000 <= 16000; off += 1000) EXPECT_LT(order[off], order[off + 4000]);
}

TEST(Prefetch, AFailedBlockReachesTheConsumerAtItsOffset) {
  SlowMemFs* fs = use_slow_mem();
  fs->files["slowmem://bad"] = bytes(10000, 2);
  fs->fail_from = 3000;
  SequentialReader reader("slowmem://bad", PrefetchOptions{1000, 3});
  std::string got(3000, '\0');
  EXPECT_EQ(reader.read(got.data(), 3000), 3000u);  // the blocks before the failure
  EXPECT_TRUE(got == fs->files["slowmem://bad"].substr(0, 3000));
  char c;
  try {
    reader.read(&c, 1);
    ADD_FAILURE() << "no error";
  } catch (const StorageError& e) {
    EXPECT_NE(std::string(e.what()).find("injected failure at 3000"), std::string::npos) << e.what();
  }
  EXPECT_THROW(reader.read(&c, 1), StorageError);  // and again
}

TEST(Prefetch, AReaderDestroyedMidFileStopsItsThreads) {
  SlowMemFs* fs = use_slow_mem();
  fs->latency = std::chrono::milliseconds(50);
  fs->files["slowmem://big"] = bytes(100 * 1000, 3);
  {
    SequentialReader reader("slowmem://big", PrefetchOptions{1000, 4});
    char buf[1500];
    EXPECT_EQ(reader.read(buf, sizeof buf), sizeof buf);
  }  // the destructor waits for the reads running (no cancellation in this file system)
  EXPECT_EQ(fs->in_flight.load(), 0);
  const int reads = fs->reads;
  EXPECT_LE(reads, 6);  // 2 blocks consumed + the window; not the whole file
  std::this_thread::sleep_for(std::chrono::milliseconds(150));
  EXPECT_EQ(fs->reads.load(), reads);  // nothing runs after the destructor
  // Destroyed before reading anything, and while its first reads run.
  for (int i = 0; i < 20; ++i) SequentialReader early("slowmem://big", PrefetchOptions{1000, 4});
  EXPECT_EQ(fs->in_flight.load(), 0);
}

TEST(Prefetch, ShardPrefetcherStartsTheNextShardBeforeTheCurrentEnds) {
  SlowMemFs* fs = use_slow_mem();
  fs->latency = std::chrono::milliseconds(5);
  std::vector<std::string> shards;
  for (int i = 0; i < 3; ++i) {
    shards.push_back("slowmem://shard-" + std::to_string(i));
    fs->files[shards.back()] = bytes(5000 + 777 * i, 10 + i);
  }
  ShardPrefetcher prefetcher(PrefetchOptions{1000, 3});
  for (size_t i = 0; i < shards.size(); ++i) {
    const std::string next = i + 1 < shards.size() ? shards[i + 1] : "";
    size_t next_reads_at_open = 0;
    SequentialReader reader = prefetcher.open(shards[i], next);
    EXPECT_TRUE(read_all(reader, 700) == fs->files[shards[i]]) << shards[i];
    if (!next.empty()) {
      // The end was found before read() returned 0; the callback runs on a fetch thread.
      for (int t = 0; t < 200 && prefetcher.started().empty(); ++t)
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      EXPECT_EQ(prefetcher.started(), std::vector<std::string>{next});
      // Its fetch threads exist now; wait (up to 2 s) for the first of them to send a read.
      for (int t = 0; t < 400 && next_reads_at_open == 0; ++t) {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
        std::lock_guard<std::mutex> lock(fs->mu);
        for (const auto& [path, offset] : fs->log) next_reads_at_open += path == next;
      }
      EXPECT_GE(next_reads_at_open, 1u);  // requested before the consumer opened it
    }
  }
  EXPECT_TRUE(prefetcher.started().empty());  // every started shard was taken over by open()
  // Each shard's blocks were read once: a started shard is adopted, not read again.
  std::map<std::pair<std::string, uint64_t>, int> count;
  for (const auto& e : fs->log) ++count[e];
  for (const auto& [k, n] : count) EXPECT_EQ(n, 1) << k.first << " @" << k.second;
}

TEST(Prefetch, StartedFilesAreBoundedAndMayOutliveNothing) {
  SlowMemFs* fs = use_slow_mem();
  fs->latency = std::chrono::milliseconds(20);
  for (const char* name : {"slowmem://a", "slowmem://b", "slowmem://c"}) fs->files[name] = bytes(50000, 4);
  std::optional<SequentialReader> survivor;
  {
    ShardPrefetcher prefetcher(PrefetchOptions{1000, 2}, /*max_started=*/2);
    prefetcher.start("slowmem://a");
    prefetcher.start("slowmem://b");
    prefetcher.start("slowmem://a");  // already started: nothing new
    prefetcher.start("slowmem://c");  // drops the oldest, a
    EXPECT_EQ(prefetcher.started(), (std::vector<std::string>{"slowmem://b", "slowmem://c"}));
    survivor.emplace(prefetcher.open("slowmem://b", "slowmem://c"));
  }  // the prefetcher goes first: its started file c is dropped; b's reader lives on
  EXPECT_TRUE(read_all(*survivor, 4096) == fs->files["slowmem://b"]);  // its end starts nothing
  survivor.reset();
  EXPECT_EQ(fs->in_flight.load(), 0);
}
}  // namespace
}  // namespace orchard::fs
