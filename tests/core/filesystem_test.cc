// The scheme registry and the local file system behind core/filesystem.h.
#include "orchard/core/filesystem.h"

#include <gtest/gtest.h>

#include <algorithm>

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
      glob(d + "train-?????-of-00003"),
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
  SequentialReader reader("mem://x", 4);
  char buf[20];
  EXPECT_EQ(reader.read(buf, sizeof buf), 10u);
  EXPECT_EQ(std::string(buf, 10), "0123456789");
  EXPECT_EQ(counting->reads,
            3);  // 4 + 4 + 2 bytes: the short block ends the file
  const auto schemes = registered_schemes();
  EXPECT_NE(std::find(schemes.begin(), schemes.end(), "mem"), schemes.end());
  EXPECT_NE(std::find(schemes.begin(), schemes.end(), "s3"), schemes.end());
}

}  // namespace
}  // namespace orchard::fs
