// TensorFlow checkpoints: the table format byte for byte, V2 bundles and V1 TensorSlice files
// written by TensorFlow itself (tests/fixtures/tf/README.md), Orchard's writer, and damage.
#include "orchard/core/tf_checkpoint.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "orchard/core/crc32c.h"
#include "orchard/core/tf_table.h"
#include "orchard/proto/tensorflow/checkpoint.pb.h"
#include "test_util.h"

namespace orchard {
namespace {

namespace stdfs = std::filesystem;
using test::from_hex;
using test::read_bytes;
using test::TempDir;
using test::to_hex;
using test::write_bytes;

const stdfs::path kTf = stdfs::path(ORCHARD_TEST_FIXTURES) / "tf";

float scalar(const tf::CheckpointReader& r, const std::string& name) {
  const auto v = r.read(name).floats();
  EXPECT_EQ(v.size(), 1u) << name;
  return v.empty() ? NAN : v[0];
}

std::string pod(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4);
}

// Two entries, as TensorFlow's TableBuilder lays them out (LevelDB's format):
TEST(TfTable, GoldenBytesFieldByField) {
  const std::string golden =
      from_hex(std::string(
                   // data block at offset 0, 19 bytes:
                   "00"
                   "01"
                   "01"
                   "61"
                   "78"  // shared 0, non_shared 1, value_len 1, key "a", value "x"
                   "00"
                   "01"
                   "02"
                   "62"
                   "797a"  // shared 0, non_shared 1, value_len 2, key "b", value "yz"
                   "00000000"
                   "01000000"  // restart offsets [0], 1 restart (fixed32 LE)
                   "00"
                   "f74d63d4"  // trailer: type 0 (raw), masked CRC-32C of block + type byte
                   // metaindex block at offset 24, 8 bytes: empty (restart [0], count 1)
                   "00000000"
                   "01000000"
                   "00"
                   "c0f2a1b0"
                   // index block at offset 37, 14 bytes, one entry per data block (restart interval 1):
                   "00"
                   "01"
                   "02"
                   "63"
                   "0013"  // key "c" (the short successor of "b"), handle {offset 0, size 19}
                   "00000000"
                   "01000000"
                   "00"
                   "ca0794de"
                   // footer, 48 bytes: metaindex handle {24, 8}, index handle {37, 14} (varints), zero
                   // padding to 40 bytes, magic 0xdb4775248b80fb57 (fixed64 LE)
                   "1808"
                   "250e") +
               std::string(2 * 36, '0') + "57fb808b247547db");
  ASSERT_EQ(golden.size(), 104u);
  const tf::TableEntries entries{{"a", "x"}, {"b", "yz"}};
  EXPECT_EQ(to_hex(tf::build_table(entries)), to_hex(golden));
  EXPECT_EQ(tf::parse_table(golden, "golden"), entries);
}

TEST(TfTable, ManyBlocksAndRestartsRoundTrip) {
  tf::TableEntries entries;
  for (int i = 0; i < 3000; ++i) {
    char key[32];
    std::snprintf(key, sizeof key, "scope/layer_%04d/weights", i);
    entries.emplace_back(key, std::string(static_cast<size_t>(i % 50), static_cast<char>('a' + i % 26)));
  }
  // Small blocks: many data blocks, shortened separators in the index. (Snappy blocks, type
  // 1, are read from TensorFlow's own files: TfCheckpointReal.V2SnappyIndexTf1Names.)
  const std::string bytes = tf::build_table(entries, 512);
  EXPECT_EQ(tf::parse_table(bytes, "t"), entries);
  EXPECT_EQ(tf::parse_table(tf::build_table(entries), "t"), entries);
}

TEST(TfTable, DamageIsNamed) {
  const tf::TableEntries entries{{"a", "x"}, {"b", "yz"}};
  std::string bytes = tf::build_table(entries);
  std::string flipped = bytes;
  flipped[4] ^= 1;  // a byte of the data block
  test::expect_data_error([&] { tf::parse_table(flipped, "f.index"); }, {"f.index", "offset 0", "checksum"});
  test::expect_data_error([&] { tf::parse_table(bytes.substr(0, 60), "f.index"); }, {"f.index", "magic"});
  test::expect_data_error([&] { tf::parse_table(bytes.substr(0, 20), "f.index"); }, {"f.index", "48-byte footer"});
  // A footer pointing past the end.
  std::string far = bytes;
  far[far.size() - 46] = 0x7f;  // the index handle's offset
  test::expect_data_error([&] { tf::parse_table(far, "f.index"); }, {"f.index", "past the end"});
}

// ---- real files written by TensorFlow ----

TEST(TfCheckpointReal, V2SnappyIndexTf1Names) {
  const tf::CheckpointReader r((kTf / "half_plus_two_cpu" / "variables").string());
  EXPECT_EQ(r.version(), 2);
  std::vector<std::string> names;
  for (const auto& v : r.variables()) {
    names.push_back(v.name);
    EXPECT_EQ(v.dtype, tf::kFloat);
    EXPECT_TRUE(v.shape.empty());
  }
  EXPECT_EQ(names, (std::vector<std::string>{"a", "a2", "b", "c", "c2"}));
  EXPECT_EQ(scalar(r, "a"), 0.5f);
  EXPECT_EQ(scalar(r, "b"), 2.0f);
  EXPECT_EQ(scalar(r, "c"), 3.0f);
}

TEST(TfCheckpointReal, Tf2ObjectGraphAndStringTensor) {
  // A directory holding one *.index (a SavedModel's variables/ folder) names that prefix.
  const tf::CheckpointReader r((kTf / "half_plus_two_tf2").string());
  const auto* graph = r.find("_CHECKPOINTABLE_OBJECT_GRAPH");
  ASSERT_NE(graph, nullptr);
  EXPECT_EQ(graph->dtype, tf::kString);
  const tf::Tensor t = r.read("_CHECKPOINTABLE_OBJECT_GRAPH");  // its lengths' and bytes' CRCs checked
  ASSERT_EQ(t.strings.size(), 1u);
  tensorflow::TrackableObjectGraph parsed;
  EXPECT_TRUE(parsed.ParseFromString(t.strings[0]));
  const auto tracked = r.tracked_variables();
  ASSERT_EQ(tracked.size(), 3u);
  EXPECT_EQ(tracked[0].key, "a/.ATTRIBUTES/VARIABLE_VALUE");
  EXPECT_EQ(tracked[0].path, "a");
  EXPECT_EQ(tracked[0].full_name, "a");
  EXPECT_EQ(scalar(r, "b/.ATTRIBUTES/VARIABLE_VALUE"), 2.0f);
}

TEST(TfCheckpointReal, V2UncompressedConvKernels) {
  const tf::CheckpointReader r((kTf / "half_plus_two_mkl" / "variables.index").string());  // a file names its prefix
  const auto* k = r.find("conv2d_1/kernel");
  ASSERT_NE(k, nullptr);
  EXPECT_EQ(k->shape, (std::vector<int64_t>{1, 1, 1, 1}));
  EXPECT_NEAR(scalar(r, "conv2d_1/kernel"), -1.04511f, 1e-5);
  EXPECT_EQ(r.variables().size(), 9u);
}

TEST(TfCheckpointReal, V1TensorSliceFile) {
  const tf::CheckpointReader r((kTf / "half_plus_two_v1" / "export-00000-of-00001").string());
  EXPECT_EQ(r.version(), 1);
  ASSERT_EQ(r.variables().size(), 2u);
  EXPECT_EQ(scalar(r, "a"), 0.5f);
  EXPECT_EQ(scalar(r, "b"), 2.0f);
}

TEST(TfCheckpointReal, EstimatorDirectoryCheckpointStateAndInt64) {
  // The directory's `checkpoint` file names model.ckpt-1000.
  const tf::CheckpointReader r((kTf / "estimator_ckpt").string());
  EXPECT_EQ(stdfs::path(r.prefix()).filename(), "model.ckpt-1000");
  EXPECT_EQ(r.variables().size(), 60u);
  const auto* step = r.find("global_step");
  ASSERT_NE(step, nullptr);
  EXPECT_EQ(step->dtype, tf::kInt64);
  const tf::Tensor s = r.read("global_step");
  int64_t value = 0;
  std::memcpy(&value, s.data.data(), 8);
  EXPECT_EQ(value, 1000);
  const auto* k = r.find("dnn/hiddenlayer_1/kernel");
  ASSERT_NE(k, nullptr);
  EXPECT_EQ(k->shape, (std::vector<int64_t>{100, 70}));
  EXPECT_EQ(r.read("dnn/hiddenlayer_1/kernel").floats().size(), 7000u);  // CRC-checked
  // Every variable reads (each CRC matches).
  for (const auto& v : r.variables()) EXPECT_NO_THROW(r.read(v.name)) << v.name;
}

// A `checkpoint` file written by TensorFlow on Windows names its checkpoint with backslashes
// (seen in a real downloaded model: "/tmp/speech_commands_train\\conv.ckpt-18000"); a
// downloaded directory still opens, at the file of that name beside it.
TEST(TfCheckpointDirectory, WindowsPathsInTheCheckpointFile) {
  for (const std::string named :
       {"/tmp/speech_commands_train\\model.ckpt-1000", "C:\\Users\\me\\run\\model.ckpt-1000"}) {
    TempDir dir;
    for (const auto& e : stdfs::directory_iterator(kTf / "estimator_ckpt"))
      if (e.path().filename().string().rfind("model.ckpt-1000", 0) == 0)
        stdfs::copy_file(e.path(), dir.file(e.path().filename().string()));
    std::string text;  // a text proto: each backslash escaped, as TensorFlow writes it
    for (char c : named) text += c == '\\' ? std::string("\\\\") : std::string(1, c);
    write_bytes(dir.file("checkpoint"), "model_checkpoint_path: \"" + text + "\"\n");
    const tf::CheckpointReader r(dir.path().string());
    EXPECT_EQ(stdfs::path(r.prefix()).filename(), "model.ckpt-1000") << named;
  }
}

TEST(TfCheckpointReal, ZooIndexWithoutItsDataShard) {
  // list_variables needs only the index: names, dtypes and shapes of the OD API zoo's model.
  const tf::CheckpointReader r((kTf / "ssd_mobilenet_v2_coco_2018_03_29" / "model.ckpt").string());
  EXPECT_EQ(r.variables().size(), 345u);
  const auto* w = r.find("FeatureExtractor/MobilenetV2/expanded_conv_3/depthwise/depthwise_weights");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->shape, (std::vector<int64_t>{3, 3, 144, 1}));
  // Reading a value needs the shard: the error names it and the variable.
  test::expect_data_error([&] { r.read("BoxPredictor_0/ClassPredictor/biases"); },
                          {"model.ckpt.data-00000-of-00001", "BoxPredictor_0/ClassPredictor/biases", "cannot open"});
}

// Orchard's writer gives TensorFlow's bytes: re-writing the variables of a checkpoint TF wrote
// reproduces its .index and its data shard exactly.
TEST(TfBundleWriter, ReproducesTensorFlowsFilesByteForByte) {
  // 9 variables (TF2 Keras names); 60 (an Estimator's: key prefix compression, restarts).
  for (const char* name : {"half_plus_two_mkl/variables", "estimator_ckpt/model.ckpt-1000"}) {
    SCOPED_TRACE(name);
    const std::string tf_prefix = (kTf / name).string();
    const tf::CheckpointReader theirs(tf_prefix);
    TempDir dir;
    tf::BundleWriter w(dir.file("ours"));
    for (const auto& v : theirs.variables()) w.add(v.name, v.dtype, v.shape, theirs.read(v.name).data);
    w.finish();
    EXPECT_EQ(to_hex(read_bytes(dir.file("ours.index"))), to_hex(read_bytes(tf_prefix + ".index")));
    EXPECT_EQ(read_bytes(dir.file("ours.data-00000-of-00001")), read_bytes(tf_prefix + ".data-00000-of-00001"));
  }
}

TEST(TfBundleWriter, RoundTripEveryDtype) {
  TempDir dir;
  const std::string prefix = dir.file("sub/model.ckpt-7");
  tf::BundleWriter w(prefix);
  const std::vector<float> f{1.5f, -2.25f, 3e-8f, 1e30f, 0.f, -0.f};
  w.add("w/kernel", tf::kFloat, {2, 3}, pod(f));
  const int64_t step = 7;
  w.add("global_step", tf::kInt64, {}, std::string(reinterpret_cast<const char*>(&step), 8));
  const uint16_t half[] = {0x3c00, 0xc000, 0x0001, 0x7bff};  // 1, -2, 2^-24, 65504
  w.add("h", tf::kHalf, {4}, std::string(reinterpret_cast<const char*>(half), 8));
  const uint16_t bf16[] = {0x3f80, 0xc040};  // 1, -3
  w.add("b", tf::kBFloat16, {2}, std::string(reinterpret_cast<const char*>(bf16), 4));
  const int32_t ints[] = {-1, 7};
  w.add("i", tf::kInt32, {2}, std::string(reinterpret_cast<const char*>(ints), 8));
  w.add_string("s", std::string("tf.train.Checkpoint\0bytes", 25));
  w.finish();

  const tf::CheckpointReader r(prefix);
  ASSERT_EQ(r.variables().size(), 6u);
  EXPECT_EQ(r.read("w/kernel").data, pod(f));
  EXPECT_EQ(r.find("w/kernel")->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(r.read("h").floats(), (std::vector<float>{1.f, -2.f, 5.9604645e-8f, 65504.f}));
  EXPECT_EQ(r.read("b").floats(), (std::vector<float>{1.f, -3.f}));
  EXPECT_EQ(r.read("i").floats(), (std::vector<float>{-1.f, 7.f}));
  EXPECT_EQ(scalar(r, "global_step"), 7.f);
  EXPECT_EQ(r.read("s").strings, (std::vector<std::string>{std::string("tf.train.Checkpoint\0bytes", 25)}));
  // Named by one of its files, or by a directory whose `checkpoint` file names it.
  EXPECT_EQ(tf::resolve_checkpoint(prefix + ".data-00000-of-00001"), prefix);
  write_bytes(dir.file("sub/checkpoint"), "model_checkpoint_path: \"/elsewhere/gone/model.ckpt-7\"\n");
  EXPECT_EQ(tf::resolve_checkpoint(dir.file("sub")), prefix);  // a stale absolute path: its name here
  EXPECT_TRUE(tf::is_tensorflow_checkpoint(dir.file("sub")));
}

TEST(TfBundleWriter, CorruptAndTruncatedDataNameFileAndVariable) {
  TempDir dir;
  const std::string prefix = dir.file("m");
  tf::BundleWriter w(prefix);
  w.add("first", tf::kFloat, {2}, pod({1.f, 2.f}));
  w.add("second", tf::kFloat, {3}, pod({3.f, 4.f, 5.f}));
  w.finish();
  const std::string data_file = prefix + ".data-00000-of-00001";
  std::string data = read_bytes(data_file);
  data[9] ^= 0x40;  // in "second"
  write_bytes(data_file, data);
  const tf::CheckpointReader r(prefix);
  EXPECT_NO_THROW(r.read("first"));
  test::expect_data_error([&] { r.read("second"); }, {data_file, "'second'", "checksum mismatch"});
  write_bytes(data_file, data.substr(0, 12));
  test::expect_data_error([&] { r.read("second"); }, {data_file, "'second'", "past the end", "truncated"});
  // A truncated index fails when opened, naming it.
  const std::string index = read_bytes(prefix + ".index");
  write_bytes(prefix + ".index", index.substr(0, index.size() - 10));
  test::expect_data_error([&] { tf::CheckpointReader bad(prefix); }, {prefix + ".index"});
  EXPECT_THROW(tf::CheckpointReader(dir.file("nothing-here")), Error);
}

// A V1 file with one tensor in two slices (as a partitioned Saver writes), built from the
// schema: the reader assembles them.
TEST(TfCheckpointV1, SlicesAreAssembled) {
  tensorflow::SavedTensorSlices meta;
  auto* t = meta.mutable_meta()->add_tensor();
  t->set_name("w");
  t->set_type(tensorflow::DT_FLOAT);
  t->mutable_shape()->add_dim()->set_size(3);
  t->mutable_shape()->add_dim()->set_size(2);
  tf::TableEntries entries{{"", meta.SerializeAsString()}};
  // Rows 0-1 and row 2 (columns: the whole dimension, extent without a length).
  const std::vector<std::pair<int64_t, int64_t>> rows{{0, 2}, {2, 1}};
  for (size_t k = 0; k < rows.size(); ++k) {
    tensorflow::SavedTensorSlices s;
    auto* d = s.mutable_data();
    d->set_name("w");
    auto* e = d->mutable_slice()->add_extent();
    e->set_start(rows[k].first);
    e->set_length(rows[k].second);
    d->mutable_slice()->add_extent();
    for (int64_t i = 0; i < rows[k].second * 2; ++i) d->mutable_data()->add_float_val(10.f * (rows[k].first * 2 + i));
    entries.emplace_back(std::string("w") + static_cast<char>('0' + k), s.SerializeAsString());
  }
  TempDir dir;
  write_bytes(dir.file("model.ckpt"), tf::build_table(entries));
  const tf::CheckpointReader r(dir.file("model.ckpt"));
  EXPECT_EQ(r.version(), 1);
  EXPECT_EQ(r.read("w").floats(), (std::vector<float>{0, 10, 20, 30, 40, 50}));
  EXPECT_TRUE(tf::is_tensorflow_checkpoint(dir.file("model.ckpt")));
  write_bytes(dir.file("not.ckpt"), std::string(100, 'x'));
  EXPECT_FALSE(tf::is_tensorflow_checkpoint(dir.file("not.ckpt")));
}

// Slice keys (EncodeTensorNameSlice) byte by byte: OrderedCode's 0, the name ended by 00 01,
// the rank as an unsigned number (byte count, bytes), each start and length as a signed number
// (a header of L bits, ones for positive values, then the two's complement in 7L bits).
TEST(TfSliceKey, OrderedCodeBytes) {
  EXPECT_EQ(to_hex(tf::tensor_slice_key("w", {0, 2}, {-1, 3})),
            "00"      // OrderedCode number 0: no bytes
            "770001"  // "w", terminator
            "0102"    // rank 2: one byte, 02
            "80"
            "7f"  // start 0; length -1 (the whole dimension)
            "82"
            "83");  // start 2; length 3
  EXPECT_EQ(to_hex(tf::tensor_slice_key(std::string("a\xff"
                                                    "\0"
                                                    "b",
                                                    4),
                                        {}, {})),
            std::string("00") +
                "61ff0000ff62"
                "0001"
                "00");
  EXPECT_EQ(to_hex(tf::tensor_slice_key("v", {100, 8192}, {-100, int64_t{1} << 62})),
            std::string("00"
                        "760001"
                        "0102") +
                "c064"                  // 100: two bytes, header 110
                "3f9c"                  // -100: 0xff9c, header bits cleared
                "e02000"                // 8192 = 2^13 needs three bytes (13 value bits + sign > 2 * 7 - 1)
                "ffc04000000000000000"  // 2^62: ten bytes, header of ten ones
  );
  // OrderedCode's signed numbers at the length boundaries, as TensorFlow's C++ OrderedCode
  // writes them (the vectors another implementation's tests took from it).
  const std::vector<std::pair<int64_t, std::string>> signed_numbers{{INT64_MIN, "003f8000000000000000"},
                                                                    {int64_t{INT32_MIN} - 1, "077fffffff"},
                                                                    {INT32_MIN, "0780000000"},
                                                                    {-65, "3fbf"},
                                                                    {-64, "40"},
                                                                    {-1, "7f"},
                                                                    {0, "80"},
                                                                    {63, "bf"},
                                                                    {64, "c040"},
                                                                    {INT32_MAX, "f87fffffff"},
                                                                    {int64_t{INT32_MAX} + 1, "f880000000"},
                                                                    {INT64_MAX - 1, "ffc07ffffffffffffffe"},
                                                                    {INT64_MAX, "ffc07fffffffffffffff"}};
  for (const auto& [value, hex] : signed_numbers)
    EXPECT_EQ(to_hex(tf::tensor_slice_key("", {value}, {0})),
              "00"
              "0001"
              "0101" +
                  hex + "80")
        << value;
  // TensorFlow's own V1 file keys its scalars' slices so.
  const auto table = tf::read_table((kTf / "half_plus_two_v1" / "export-00000-of-00001").string());
  ASSERT_EQ(table.size(), 3u);
  EXPECT_EQ(to_hex(table[1].first), to_hex(tf::tensor_slice_key("a", {}, {})));
  EXPECT_EQ(to_hex(table[2].first), to_hex(tf::tensor_slice_key("b", {}, {})));
}

// A partitioned variable (tf.compat.v1 PartitionedVariable, saved by tf.train.Saver): the
// writer lays it out as BundleWriter::AddSlice, the reader assembles it.
TEST(TfBundlePartitioned, SlicesAreAssembledAndChecked) {
  TempDir dir;
  std::vector<float> w(5 * 4);
  for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(i);
  const auto rows = [&](int64_t from, int64_t n) {
    return pod(std::vector<float>(w.begin() + from * 4, w.begin() + (from + n) * 4));
  };
  {
    tf::BundleWriter out(dir.file("model.ckpt"));
    out.add_slice("emb", tf::kFloat, {5, 4}, {0, 0}, {3, -1}, rows(0, 3));  // rows 0-2, every column
    out.add_slice("emb", tf::kFloat, {5, 4}, {3, 0}, {2, 4}, rows(3, 2));   // rows 3-4, columns given
    out.add("bias", tf::kFloat, {2}, pod({1, 2}));
    out.finish();
  }
  const tf::CheckpointReader r(dir.file("model.ckpt"));
  ASSERT_EQ(r.variables().size(), 2u);  // the slices are not variables of their own
  EXPECT_EQ(r.variables()[1].name, "emb");
  EXPECT_EQ(r.variables()[1].shape, (std::vector<int64_t>{5, 4}));
  EXPECT_EQ(r.read("emb").floats(), w);
  const auto index = tf::read_table(dir.file("model.ckpt.index"));
  ASSERT_EQ(index.size(), 5u);  // header, two slices (keys starting 00, first), bias, emb
  EXPECT_EQ(index[1].first, tf::tensor_slice_key("emb", {0, 0}, {3, -1}));
  tensorflow::BundleEntryProto full;
  ASSERT_TRUE(full.ParseFromString(index[4].second));
  ASSERT_EQ(full.slices_size(), 2);
  EXPECT_FALSE(full.slices(0).extent(1).has_length());  // the whole dimension: an empty extent
  EXPECT_EQ(full.slices(1).extent(0).start(), 3);

  // A gap, an overlap hiding a gap, a slice listed without its entry, damaged bytes.
  const auto expect_error = [&](const std::string& prefix, const std::string& what) {
    try {
      tf::CheckpointReader(prefix).read("emb");
      ADD_FAILURE() << "no error for " << what;
    } catch (const DataError& e) {
      EXPECT_NE(std::string(e.what()).find("'emb'"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  {
    tf::BundleWriter out(dir.file("gap/model.ckpt"));
    out.add_slice("emb", tf::kFloat, {5, 4}, {0, 0}, {3, -1}, rows(0, 3));
    out.finish();
  }
  expect_error(dir.file("gap/model.ckpt"), "slices hold 12 of its 20 values");
  {
    tf::BundleWriter out(dir.file("overlap/model.ckpt"));
    out.add_slice("emb", tf::kFloat, {5, 4}, {0, 0}, {3, -1}, rows(0, 3));
    out.add_slice("emb", tf::kFloat, {5, 4}, {2, 0}, {2, -1}, rows(2, 2));  // row 2 twice, row 4 never
    out.finish();
  }
  expect_error(dir.file("overlap/model.ckpt"), "two slices overlap");
  {
    auto index = tf::read_table(dir.file("model.ckpt.index"));
    index.erase(index.begin() + 2);  // the second slice's entry
    write_bytes(dir.file("model.ckpt.index"), tf::build_table(index));
  }
  expect_error(dir.file("model.ckpt"), "the slice at [3, 0] of [2, 4] is listed but has no entry");
  {
    tf::BundleWriter out(dir.file("model.ckpt"));
    out.add_slice("emb", tf::kFloat, {5, 4}, {0, 0}, {3, -1}, rows(0, 3));
    out.add_slice("emb", tf::kFloat, {5, 4}, {3, 0}, {2, 4}, rows(3, 2));
    out.finish();
    std::string data = read_bytes(dir.file("model.ckpt.data-00000-of-00001"));
    data[50] ^= 1;
    write_bytes(dir.file("model.ckpt.data-00000-of-00001"), data);
  }
  expect_error(dir.file("model.ckpt"), "checksum mismatch");
  EXPECT_THROW(tf::BundleWriter(dir.file("x")).add_slice("emb", tf::kFloat, {5, 4}, {4, 0}, {2, -1}, rows(0, 2)),
               Error);
}

}  // namespace
}  // namespace orchard
