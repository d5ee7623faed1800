#include "orchard/data/example.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "core/test_util.h"
#include "orchard/core/error.h"

namespace orchard::data {
namespace {

using json = nlohmann::json;

const std::string kSource = "train-00003-of-00008: record 17";

tensorflow::Example sample_example() {
  tensorflow::Example ex;
  auto* f = ex.mutable_features();
  set_bytes(f, "image/encoded", std::string("\xff\xd8\x00\x01", 4));
  set_bytes(f, "image/format", "JPEG");
  set_int64s(f, "image/class/label", {7});
  set_int64s(f, "ids", {-3, 0, int64_t{1} << 40});
  set_floats(f, "image/object/bbox/xmin", {0.25f, 0.5f});
  set_floats(f, "score", {0.75f});
  set_int64s(f, "empty_ints", {});
  (*f->mutable_feature())["no_kind"];  // a Feature with no list set
  return ex;
}

using test::expect_data_error;

TEST(ExampleView, TypedAccess) {
  const ExampleView ex(sample_example().SerializeAsString(), kSource);
  EXPECT_EQ(ex.source(), kSource);
  EXPECT_TRUE(ex.has("image/format"));
  EXPECT_FALSE(ex.has("image/class/text"));
  EXPECT_EQ(ex.bytes("image/encoded"), std::string("\xff\xd8\x00\x01", 4));
  EXPECT_EQ(ex.bytes("image/format"), "JPEG");
  EXPECT_EQ(ex.int64("image/class/label"), 7);
  EXPECT_EQ(ex.int64("ids"), -3);  // the first value
  EXPECT_FLOAT_EQ(ex.float32("score"), 0.75f);
  EXPECT_EQ(ex.int64s("ids"), (std::vector<int64_t>{-3, 0, int64_t{1} << 40}));
  EXPECT_EQ(ex.floats("image/object/bbox/xmin"), (std::vector<float>{0.25f, 0.5f}));
  EXPECT_EQ(ex.bytes_list("image/format"), std::vector<std::string>{"JPEG"});
  EXPECT_TRUE(ex.int64s("empty_ints").empty());
  EXPECT_EQ(ex.features().feature_size(), 8);
}

TEST(ExampleView, BuildersReplaceValues) {
  tensorflow::Example ex;
  set_int64s(ex.mutable_features(), "k", {1, 2});
  set_int64s(ex.mutable_features(), "k", {3});
  set_bytes(ex.mutable_features(), "b", "x");
  set_bytes(ex.mutable_features(), "b", "y");
  const ExampleView view(ex.features(), kSource);
  EXPECT_EQ(view.int64s("k"), std::vector<int64_t>{3});
  EXPECT_EQ(view.bytes_list("b"), std::vector<std::string>{"y"});
}

TEST(ExampleView, MissingRequiredFeatureNamesFeatureAndSource) {
  const ExampleView ex(sample_example().SerializeAsString(), kSource);
  expect_data_error([&] { ex.int64("image/class/text"); }, {kSource, "image/class/text", "missing"});
  expect_data_error([&] { ex.bytes("nope"); }, {kSource, "nope"});
  expect_data_error([&] { ex.float32("nope"); }, {kSource, "nope"});
}

TEST(ExampleView, MistypedFeatureNamesBothKinds) {
  const ExampleView ex(sample_example().SerializeAsString(), kSource);
  expect_data_error([&] { ex.int64("image/format"); }, {kSource, "image/format", "bytes_list", "int64_list"});
  expect_data_error([&] { ex.bytes("score"); }, {"score", "float_list", "bytes_list"});
  expect_data_error([&] { ex.floats("ids"); }, {"ids", "int64_list", "float_list"});
  expect_data_error([&] { ex.bytes_list("ids"); }, {"ids", "int64_list", "bytes_list"});
}

TEST(ExampleView, OptionalListsAreEmptyWhenMissing) {
  const ExampleView ex(sample_example().SerializeAsString(), kSource);
  EXPECT_TRUE(ex.floats("image/object/bbox/ymin").empty());
  EXPECT_TRUE(ex.int64s("nope").empty());
  EXPECT_TRUE(ex.bytes_list("nope").empty());
}

TEST(ExampleView, EmptyRequiredFeatureIsAnError) {
  const ExampleView ex(sample_example().SerializeAsString(), kSource);
  expect_data_error([&] { ex.int64("empty_ints"); }, {kSource, "empty_ints", "empty"});
  expect_data_error([&] { ex.bytes("no_kind"); }, {"no_kind"});
}

TEST(ExampleView, GarbageIsADataErrorNamingTheSource) {
  expect_data_error([] { ExampleView ex(std::string("\xff\xff\xff\xff", 4), kSource); }, {kSource});
}

// Protobuf wire helpers, written out by hand so the next test does not depend on the
// protobuf library's own encoder.
std::string varint(uint64_t v) {
  std::string s;
  while (v >= 0x80) {
    s += static_cast<char>((v & 0x7f) | 0x80);
    v >>= 7;
  }
  return s + static_cast<char>(v);
}
std::string field_bytes(int field, const std::string& payload) {
  return varint(static_cast<uint64_t>(field) << 3 | 2) + varint(payload.size()) + payload;
}
std::string field_varint(int field, uint64_t v) { return varint(static_cast<uint64_t>(field) << 3 | 0) + varint(v); }
std::string field_fixed32(int field, const char* le4) {
  return varint(static_cast<uint64_t>(field) << 3 | 5) + std::string(le4, 4);
}
std::string map_entry(const std::string& key, const std::string& feature) {
  return field_bytes(1, field_bytes(1, key) + field_bytes(2, feature));
}

TEST(ExampleView, AcceptsUnpackedAndPackedRepeatedScalars) {
  // Int64List{value: 5, value: 7} unpacked, and {value: 300, 1} packed.
  const std::string unpacked_ints = field_bytes(3, field_varint(1, 5) + field_varint(1, 7));
  const std::string packed_ints = field_bytes(3, field_bytes(1, varint(300) + varint(1)));
  // FloatList{1.5, -2.0}: 1.5f = 0x3fc00000, -2.0f = 0xc0000000 (little-endian).
  const std::string unpacked_floats =
      field_bytes(2, field_fixed32(1, "\x00\x00\xc0\x3f") + field_fixed32(1, "\x00\x00\x00\xc0"));
  const std::string packed_floats = field_bytes(2, field_bytes(1, std::string("\x00\x00\xc0\x3f\x00\x00\x00\xc0", 8)));
  const std::string bytes_feature = field_bytes(1, field_bytes(1, "ab") + field_bytes(1, ""));
  const std::string features = map_entry("ui", unpacked_ints) + map_entry("pi", packed_ints) +
                               map_entry("uf", unpacked_floats) + map_entry("pf", packed_floats) +
                               map_entry("b", bytes_feature);
  const std::string example = field_bytes(1, features);

  const ExampleView ex(example, kSource);
  EXPECT_EQ(ex.int64s("ui"), (std::vector<int64_t>{5, 7}));
  EXPECT_EQ(ex.int64s("pi"), (std::vector<int64_t>{300, 1}));
  EXPECT_EQ(ex.floats("uf"), (std::vector<float>{1.5f, -2.0f}));
  EXPECT_EQ(ex.floats("pf"), (std::vector<float>{1.5f, -2.0f}));
  EXPECT_EQ(ex.bytes_list("b"), (std::vector<std::string>{"ab", ""}));
}

TEST(RecordToJson, Example) {
  const json j = json::parse(record_to_json(sample_example().SerializeAsString()));
  const json& f = j.at("features");
  EXPECT_EQ(f.at("image/format"), json({{"bytes_list", {"JPEG"}}}));
  EXPECT_EQ(f.at("image/class/label"), json({{"int64_list", {7}}}));
  EXPECT_EQ(f.at("ids").at("int64_list").at(2).get<int64_t>(), int64_t{1} << 40);
  EXPECT_FLOAT_EQ(f.at("score").at("float_list").at(0).get<float>(), 0.75f);
  // Binary bytes are shown by length and hex prefix.
  const json& enc = f.at("image/encoded").at("bytes_list").at(0);
  EXPECT_EQ(enc.at("bytes"), 4);
  EXPECT_EQ(enc.at("hex_prefix"), "ffd80001");
  EXPECT_TRUE(f.at("no_kind").is_null());
}

TEST(RecordToJson, FeaturesAreSortedByKey) {
  const std::string s = features_to_json(sample_example().features());
  EXPECT_LT(s.find("\"empty_ints\""), s.find("\"ids\""));
  EXPECT_LT(s.find("\"ids\""), s.find("\"image/class/label\""));
  EXPECT_LT(s.find("\"image/object/bbox/xmin\""), s.find("\"score\""));
}

TEST(RecordToJson, SequenceExampleRoundTrip) {
  // An im2txt record: context image/image_id + image/data, per-step caption tokens and ids.
  tensorflow::SequenceExample seq;
  set_int64s(seq.mutable_context(), "image/image_id", {139});
  set_bytes(seq.mutable_context(), "image/data", std::string("\xff\xd8\xff\xe0", 4));
  const std::vector<std::string> words = {"<S>", "a", "cat", "</S>"};
  const std::vector<int64_t> ids = {1, 4, 250, 2};
  auto& lists = *seq.mutable_feature_lists()->mutable_feature_list();
  for (size_t i = 0; i < words.size(); ++i) {
    lists["image/caption"].add_feature()->mutable_bytes_list()->add_value(words[i]);
    lists["image/caption_ids"].add_feature()->mutable_int64_list()->add_value(ids[i]);
  }
  const std::string serialized = seq.SerializeAsString();

  const json j = json::parse(record_to_json(serialized));
  EXPECT_EQ(j.at("context").at("image/image_id"), json({{"int64_list", {139}}}));
  EXPECT_EQ(j.at("context").at("image/data").at("bytes_list").at(0).at("bytes"), 4);
  const json& caption = j.at("feature_lists").at("image/caption");
  const json& caption_ids = j.at("feature_lists").at("image/caption_ids");
  ASSERT_EQ(caption.size(), words.size());
  ASSERT_EQ(caption_ids.size(), ids.size());
  for (size_t i = 0; i < words.size(); ++i) {
    EXPECT_EQ(caption.at(i), json({{"bytes_list", {words[i]}}}));
    EXPECT_EQ(caption_ids.at(i), json({{"int64_list", {ids[i]}}}));
  }

  // And the proto itself survives serialization; its context reads through ExampleView.
  tensorflow::SequenceExample back;
  ASSERT_TRUE(back.ParseFromString(serialized));
  const ExampleView context(back.context(), "captions: record 0");
  EXPECT_EQ(context.int64("image/image_id"), 139);
  EXPECT_EQ(back.feature_lists().feature_list().at("image/caption").feature(2).bytes_list().value(0), "cat");
}

TEST(RecordToJson, GarbageIsADataError) { EXPECT_THROW(record_to_json(std::string("\xff\xff\xff\xff", 4)), DataError); }

}  // namespace
}  // namespace orchard::data
