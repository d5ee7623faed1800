#include "orchard/core/files.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "core/test_util.h"
#include "orchard/core/error.h"

namespace orchard {
namespace {

using test::TempDir;
using Files = std::vector<std::string>;

class FilePattern : public ::testing::Test {
 protected:
  void SetUp() override {
    // Created out of order so that any order in the result comes from sorting.
    for (const char* name : {"train-00003-of-00004", "train-00001-of-00004", "validation-00001-of-00002",
                             "train-00000-of-00004", "validation-00000-of-00002", "train-00002-of-00004", "b.txt",
                             "a.txt", "ab.txt", ".hidden", "train-00004-of-00004.tmp-123"})
      test::write_bytes(dir_.file(name), "x");
    std::filesystem::create_directory(dir_.path() / "subdir");
    test::write_bytes((dir_.path() / "subdir" / "inner").string(), "x");
  }
  std::string p(const std::string& name) const { return dir_.file(name); }

  TempDir dir_;
};

TEST_F(FilePattern, StarMatchesRegularFilesSorted) {
  EXPECT_EQ(expand_file_pattern(p("validation-*")),
            (Files{p("validation-00000-of-00002"), p("validation-00001-of-00002")}));
  EXPECT_EQ(expand_file_pattern(p("*.txt")), (Files{p("a.txt"), p("ab.txt"), p("b.txt")}));
  // A bare * skips the directory and dot files.
  const Files all = expand_file_pattern(p("*"));
  EXPECT_EQ(all.size(), 10u);
  EXPECT_TRUE(std::is_sorted(all.begin(), all.end()));
  for (const auto& f : all) EXPECT_EQ(f.find("subdir"), std::string::npos) << f;
}

TEST_F(FilePattern, QuestionMarkMatchesOneCharacter) {
  EXPECT_EQ(expand_file_pattern(p("?.txt")), (Files{p("a.txt"), p("b.txt")}));
}

TEST_F(FilePattern, ShardPattern) {
  // The .tmp-123 file has the same prefix but does not match. (The literal is split so that
  // "??-" is not read as a trigraph.)
  EXPECT_EQ(expand_file_pattern(p("train-?????"
                                  "-of-00004")),
            (Files{p("train-00000-of-00004"), p("train-00001-of-00004"), p("train-00002-of-00004"),
                   p("train-00003-of-00004")}));
}

TEST_F(FilePattern, BracketExpression) {
  EXPECT_EQ(expand_file_pattern(p("train-0000[13]-of-00004")),
            (Files{p("train-00001-of-00004"), p("train-00003-of-00004")}));
}

TEST_F(FilePattern, CommaListKeepsItemOrderAndSortsWithinItems) {
  EXPECT_EQ(
      expand_file_pattern(p("validation-*") + " , " + p("train-00001-of-00004") + "," + p("a.txt")),
      (Files{p("validation-00000-of-00002"), p("validation-00001-of-00002"), p("train-00001-of-00004"), p("a.txt")}));
}

TEST_F(FilePattern, DuplicatesAreRemoved) {
  EXPECT_EQ(
      expand_file_pattern(p("train-00002-of-00004") + "," + p("train-0000?-of-00004") + "," + p("train-*-of-00004")),
      (Files{p("train-00002-of-00004"), p("train-00000-of-00004"), p("train-00001-of-00004"),
             p("train-00003-of-00004")}));
}

TEST_F(FilePattern, DirectoryMeansItsRegularFiles) {
  const Files files = expand_file_pattern(dir_.str());
  EXPECT_EQ(files, expand_file_pattern(p("*")));
  EXPECT_EQ(expand_file_pattern(p("subdir")), Files{(dir_.path() / "subdir" / "inner").string()});
}

TEST_F(FilePattern, ImagesOnlyFiltersDirectoriesByExtension) {
  test::write_bytes(p("x.JPG"), "x");
  test::write_bytes(p("y.jpeg"), "x");
  test::write_bytes(p("z.png"), "x");
  EXPECT_EQ(expand_file_pattern(dir_.str(), /*images_only=*/true), (Files{p("x.JPG"), p("y.jpeg"), p("z.png")}));
  // Files named explicitly or by a glob stay whatever their name: a bad one is the decoder's error.
  EXPECT_EQ(expand_file_pattern(p("a.txt") + "," + p("?.png"), true), (Files{p("a.txt"), p("z.png")}));
  try {
    expand_file_pattern(p("subdir"), true);
    ADD_FAILURE() << "no error for a directory without images";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no .jpg, .jpeg or .png files in '" + p("subdir") + "'"), std::string::npos)
        << e.what();
  }
}

TEST_F(FilePattern, NoMatchNamesThePattern) {
  for (const std::string& pattern : {p("test-*"), p("nothing.txt"),
                                     p("train-?????"
                                       "-of-00008")}) {
    try {
      expand_file_pattern(pattern);
      ADD_FAILURE() << "no error for " << pattern;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(pattern), std::string::npos) << e.what();
    }
  }
  // In a list, the error names the item that matched nothing.
  try {
    expand_file_pattern(p("a.txt") + "," + p("zzz-*"));
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(p("zzz-*")), std::string::npos) << e.what();
  }
  EXPECT_THROW(expand_file_pattern(""), Error);
  EXPECT_THROW(expand_file_pattern(" , "), Error);
}

TEST(AtomicWriteFile, WritesReplacesAndLeavesNoTemporary) {
  TempDir dir;
  const std::string path = dir.file("checkpoint");
  atomic_write_file(path, "model_checkpoint_path: \"ckpt-1\"\n");
  EXPECT_EQ(read_file(path), "model_checkpoint_path: \"ckpt-1\"\n");
  const std::string big = test::random_bytes(1 << 20, 5);
  atomic_write_file(path, big);
  EXPECT_EQ(read_file(path), big);
  atomic_write_file(path, "");
  EXPECT_EQ(read_file(path), "");
  EXPECT_EQ(test::list_dir(dir.str()), Files{"checkpoint"});
}

TEST(AtomicWriteFile, MissingDirectoryIsAnError) {
  EXPECT_THROW(atomic_write_file("/nonexistent-orchard-dir/file", "x"), Error);
}

TEST(ReadFile, MissingFileNamesThePath) {
  TempDir dir;
  try {
    read_file(dir.file("nope"));
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(dir.file("nope")), std::string::npos) << e.what();
  }
}

TEST(EnsureWritableDir, CreatesParents) {
  TempDir dir;
  const std::string nested = dir.file("a/b/c");
  ensure_writable_dir(nested);
  EXPECT_TRUE(std::filesystem::is_directory(nested));
  ensure_writable_dir(nested);  // existing is fine
  test::write_bytes(dir.file("file"), "x");
  EXPECT_THROW(ensure_writable_dir(dir.file("file/sub")), Error);
}

}  // namespace
}  // namespace orchard
