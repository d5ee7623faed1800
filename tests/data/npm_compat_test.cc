// Compatibility with an independent TFRecord + tf.train.Example implementation: the npm
// package @roboflow/tfrecords (its own CRC-32C, framing and google-protobuf code), driven
// by tests/npm/tfrecords_compat.js. scripts/test.sh installs it with
//   npm ci --prefix tests/npm
// and these tests skip, saying why, when node or that install is missing.
// tests/fixtures/roboflow_examples.tfrecord is a file the package wrote
// (`node tests/npm/tfrecords_compat.js write ...`), so one direction is checked even without node.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "core/test_util.h"
#include "orchard/core/tfrecord.h"
#include "orchard/data/example.h"

namespace orchard::data {
namespace {

using test::read_records;

using json = nlohmann::json;
using test::TempDir;
namespace stdfs = std::filesystem;

const std::string kNpmDir = ORCHARD_TEST_NPM_DIR;
const std::string kScript = kNpmDir + "/tfrecords_compat.js";

// The records that `tfrecords_compat.js write` produces (documented in that script).
void expect_npm_records(const std::vector<std::string>& records) {
  ASSERT_EQ(records.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    SCOPED_TRACE(::testing::Message() << "record " << i);
    const ExampleView ex(records[static_cast<size_t>(i)], "npm record " + std::to_string(i));
    EXPECT_EQ(ex.features().feature_size(), 4);
    EXPECT_EQ(ex.bytes("name"), "record-" + std::to_string(i));
    EXPECT_EQ(ex.bytes("blob"), std::string({static_cast<char>(i), '\0', '\xff', '\x80', '\n', '\r'}));
    EXPECT_EQ(ex.int64s("ids"), (std::vector<int64_t>{i, -7, int64_t{1} << 40}));
    const auto score = ex.floats("score");
    ASSERT_EQ(score.size(), 3u);
    EXPECT_FLOAT_EQ(score[0], 0.5f * static_cast<float>(i));
    EXPECT_FLOAT_EQ(score[1], -1.25f);
    EXPECT_FLOAT_EQ(score[2], 3.0f);
    EXPECT_NO_THROW(record_to_json(records[static_cast<size_t>(i)]));
  }
}

// Why the Node.js peer cannot run, or "" if it can.
std::string node_unavailable(std::string* node) {
  const char* path = std::getenv("PATH");
  std::stringstream ss(path ? path : "");
  std::string dir;
  node->clear();
  while (std::getline(ss, dir, ':')) {
    const std::string candidate = (dir.empty() ? "." : dir) + "/node";
    if (::access(candidate.c_str(), X_OK) == 0) {
      *node = candidate;
      break;
    }
  }
  if (node->empty()) return "node is not on PATH";
  if (!stdfs::exists(kNpmDir + "/node_modules/@roboflow/tfrecords/package.json"))
    return kNpmDir + "/node_modules has no @roboflow/tfrecords (run: npm ci --prefix tests/npm)";
  return "";
}

// Runs the compat script; returns its stdout and fails the test on a non-zero exit.
std::string run_script(const std::string& node, const std::string& mode, const std::string& file, const TempDir& dir) {
  const std::string err = dir.file("node.stderr");
  const std::string cmd = "'" + node + "' '" + kScript + "' " + mode + " '" + file + "' 2>'" + err + "'";
  FILE* p = ::popen(cmd.c_str(), "r");
  EXPECT_NE(p, nullptr) << cmd;
  if (!p) return "";
  std::string out;
  char buf[65536];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int status = ::pclose(p);
  EXPECT_EQ(status, 0) << cmd << "\nstderr:\n" << test::read_bytes(err);
  return out;
}

TEST(NpmCompat, ReadsTheCommittedFixtureWrittenByTheNpmPackage) {
  expect_npm_records(read_records(std::string(ORCHARD_TEST_FIXTURES) + "/roboflow_examples.tfrecord"));
}

TEST(NpmCompat, OrchardReadsWhatTheNpmPackageWrites) {
  std::string node;
  if (const std::string why = node_unavailable(&node); !why.empty()) GTEST_SKIP() << why;
  TempDir dir;
  const std::string path = dir.file("from_npm.tfrecord");
  run_script(node, "write", path, dir);
  expect_npm_records(read_records(path));
}

TEST(NpmCompat, TheNpmPackageReadsWhatOrchardWrites) {
  std::string node;
  if (const std::string why = node_unavailable(&node); !why.empty()) GTEST_SKIP() << why;
  TempDir dir;
  const std::string path = dir.file("from_orchard.tfrecord");

  std::string all_bytes;
  for (int b = 0; b < 256; ++b) all_bytes += static_cast<char>(b);
  const std::string big = test::random_bytes(100000, 9);  // > 64 KiB: multi-byte lengths
  const std::vector<int64_t> ints = {-1, -(int64_t{1} << 40), 123456789012, 0};
  const std::vector<float> floats = {0.1f, -0.5f, 1e-3f, 65504.0f};
  {
    TFRecordWriter w(path);
    for (int k = 0; k < 4; ++k) {
      tensorflow::Example ex;
      auto* f = ex.mutable_features();
      set_bytes(f, "text", "orchard-" + std::to_string(k));
      set_bytes(f, "blob", all_bytes.substr(static_cast<size_t>(k)) + all_bytes.substr(0, static_cast<size_t>(k)));
      set_int64s(f, "image/class/label", {k + 1});
      set_int64s(f, "ints", ints);
      set_floats(f, "floats", floats);
      if (k == 0) set_int64s(f, "none", {});
      if (k == 3) set_bytes(f, "big", big);
      w.write(ex.SerializeAsString());
    }
    w.close();
  }

  const json j = json::parse(run_script(node, "read", path, dir));
  ASSERT_EQ(j.at("count"), 4);
  const json& recs = j.at("records");
  ASSERT_EQ(recs.size(), 4u);
  for (int k = 0; k < 4; ++k) {
    SCOPED_TRACE(::testing::Message() << "record " << k);
    const json& r = recs.at(static_cast<size_t>(k));
    EXPECT_EQ(r.size(), 5u + (k == 0 || k == 3));
    EXPECT_EQ(r.at("text").at("kind"), "bytes");
    EXPECT_EQ(r.at("text").at("values"), json::array({test::to_hex("orchard-" + std::to_string(k))}));
    EXPECT_EQ(r.at("blob").at("values").at(0).get<std::string>(),
              test::to_hex(all_bytes.substr(static_cast<size_t>(k)) + all_bytes.substr(0, static_cast<size_t>(k))));
    EXPECT_EQ(r.at("image/class/label").at("kind"), "int64");
    EXPECT_EQ(r.at("image/class/label").at("values"), json::array({k + 1}));
    EXPECT_EQ(r.at("ints").at("values").get<std::vector<int64_t>>(), ints);
    EXPECT_EQ(r.at("floats").at("kind"), "float");
    const auto got = r.at("floats").at("values").get<std::vector<double>>();
    ASSERT_EQ(got.size(), floats.size());
    for (size_t i = 0; i < floats.size(); ++i) EXPECT_FLOAT_EQ(static_cast<float>(got[i]), floats[i]);
    if (k == 0) {
      EXPECT_EQ(r.at("none"), json({{"kind", "int64"}, {"values", json::array()}}));
    }
    if (k == 3) {
      EXPECT_EQ(r.at("big").at("values").at(0).get<std::string>(), test::to_hex(big));
    }
  }
}

}  // namespace
}  // namespace orchard::data
