// Captioning data (data/caption.h and the shapes / COCO captioning writers): tokenising,
// word counts and the vocabulary as im2txt builds them, SequenceExample records, the image
// preprocessing, and the synthetic captions.
#include "orchard/data/caption.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <set>

#include "core/test_util.h"
#include "orchard/core/error.h"
#include "orchard/core/files.h"
#include "orchard/data/image.h"
#include "orchard/data/preprocess.h"
#include "orchard/data/shapes.h"
#include "orchard/detect/dataset_tools/coco.h"
#include "orchard/proto/example.pb.h"

namespace orchard::data {
namespace {

using test::expect_data_error;
using test::read_records;
using test::TempDir;

using Words = std::vector<std::string>;

TEST(CaptionTokenize, LowercasesAndSplitsPunctuationAndClitics) {
  EXPECT_EQ(tokenize_caption("A man's Dog, running."), (Words{"a", "man", "'s", "dog", ",", "running", "."}));
  EXPECT_EQ(tokenize_caption("  Two  cats\tdon't sit (here)!"),
            (Words{"two", "cats", "do", "n't", "sit", "(", "here", ")", "!"}));
  EXPECT_EQ(tokenize_caption(""), Words{});
  EXPECT_EQ(caption_tokens("A cat."), (Words{"<S>", "a", "cat", ".", "</S>"}));
}

// im2txt's _create_vocab: Counter over the wrapped captions, count >= min_word_count, sorted by
// count (stable: ties keep their first appearance).
TEST(CaptionVocabulary, CountsInIm2txtOrder) {
  const std::vector<Words> captions = {caption_tokens("a dog runs"), caption_tokens("a cat sits"),
                                       caption_tokens("the dog sits"), caption_tokens("a dog")};
  const auto counts = count_words(captions, 2);
  std::vector<std::pair<std::string, int64_t>> got;
  for (const auto& c : counts) got.emplace_back(c.word, c.count);
  const std::vector<std::pair<std::string, int64_t>> want = {
      {"<S>", 4}, {"</S>", 4}, {"a", 3}, {"dog", 3}, {"sits", 2}};
  EXPECT_EQ(got, want);

  const Vocabulary vocab = vocabulary_from_counts(counts);
  EXPECT_EQ(vocab.size(), 6);  // + <UNK>
  EXPECT_EQ(vocab.start_id(), 0);
  EXPECT_EQ(vocab.end_id(), 1);
  EXPECT_EQ(vocab.unknown_id(), 5);
  EXPECT_EQ(vocab.id("dog"), 3);
  EXPECT_EQ(vocab.id("cat"), 5);  // seen once: <UNK>
  EXPECT_EQ(vocab.ids(caption_tokens("a cat sits")), (std::vector<int64_t>{0, 2, 5, 4, 1}));
  EXPECT_EQ(vocab.sentence({0, 2, 3, 4, 1}), "a dog sits");
  EXPECT_THROW(vocab.word(6), Error);
}

TEST(CaptionVocabulary, FileRoundTripAndErrors) {
  TempDir dir;
  const auto counts = count_words({caption_tokens("a b"), caption_tokens("a c")}, 1);
  write_word_counts(dir.file("word_counts.txt"), counts);
  EXPECT_EQ(read_file(dir.file("word_counts.txt")), "<S> 2\na 2\n</S> 2\nb 1\nc 1\n");
  const auto vocab = Vocabulary::load(dir.file("word_counts.txt"));
  EXPECT_EQ(vocab.size(), 6);
  EXPECT_EQ(vocab.word(1), "a");
  EXPECT_EQ(vocab.word(5), "<UNK>");
  // A file that already lists <UNK> keeps its id.
  atomic_write_file(dir.file("with_unk.txt"), "<S> 3\n</S> 3\n<UNK> 2\nx 1\n");
  EXPECT_EQ(Vocabulary::load(dir.file("with_unk.txt")).unknown_id(), 2);
  EXPECT_EQ(Vocabulary::load(dir.file("with_unk.txt")).size(), 4);

  atomic_write_file(dir.file("no_end.txt"), "<S> 3\na 2\n");
  expect_data_error([&] { Vocabulary::load(dir.file("no_end.txt")); }, {"no_end.txt", "</S>"});
  atomic_write_file(dir.file("empty.txt"), "\n");
  expect_data_error([&] { Vocabulary::load(dir.file("empty.txt")); }, {"empty.txt", "empty"});
  expect_data_error([&] { Vocabulary::load(dir.file("missing.txt")); }, {"missing.txt"});
}

TEST(CaptionExample, RoundTripsIm2txtSchema) {
  CaptionExample e;
  e.image_id = 123456789;
  e.encoded = "\xff\xd8jpeg-bytes";
  e.tokens = {"<S>", "a", "dog", "</S>"};
  e.ids = {0, 2, 3, 1};
  const std::string bytes = make_caption_example(e);
  // The exact schema im2txt's reader parses.
  tensorflow::SequenceExample seq;
  ASSERT_TRUE(seq.ParseFromString(bytes));
  EXPECT_EQ(seq.context().feature().at("image/image_id").int64_list().value(0), 123456789);
  EXPECT_EQ(seq.context().feature().at("image/data").bytes_list().value(0), e.encoded);
  const auto& ids = seq.feature_lists().feature_list().at("image/caption_ids");
  ASSERT_EQ(ids.feature_size(), 4);
  EXPECT_EQ(ids.feature(2).int64_list().value(0), 3);
  EXPECT_EQ(seq.feature_lists().feature_list().at("image/caption").feature(1).bytes_list().value(0), "a");
  EXPECT_EQ(make_caption_example(e), bytes);  // deterministic bytes

  const auto back = parse_caption_example(bytes, "f: record 7");
  EXPECT_EQ(back.image_id, e.image_id);
  EXPECT_EQ(back.encoded, e.encoded);
  EXPECT_EQ(back.tokens, e.tokens);
  EXPECT_EQ(back.ids, e.ids);
}

TEST(CaptionExample, BadRecordsNameTheRecordAndFeature) {
  CaptionExample e;
  e.encoded = "x";
  e.ids = {0};
  expect_data_error([&] { parse_caption_example(make_caption_example(e), "f: record 3"); },
                    {"f: record 3", "image/caption_ids", "at least"});
  tensorflow::SequenceExample seq;
  (*seq.mutable_context()->mutable_feature())["image/data"].mutable_bytes_list()->add_value("x");
  expect_data_error([&] { parse_caption_example(seq.SerializeAsString(), "f: record 4"); },
                    {"f: record 4", "image/caption_ids"});
  auto& list = (*seq.mutable_feature_lists()->mutable_feature_list())["image/caption_ids"];
  list.add_feature()->mutable_float_list()->add_value(1.0f);
  expect_data_error([&] { parse_caption_example(seq.SerializeAsString(), "f: record 5"); },
                    {"f: record 5", "image/caption_ids", "int64"});
  tensorflow::SequenceExample no_image;
  (*no_image.mutable_feature_lists()->mutable_feature_list())["image/caption_ids"];
  expect_data_error([&] { parse_caption_example(no_image.SerializeAsString(), "f: record 6"); },
                    {"f: record 6", "image/data"});
  expect_data_error([&] { parse_caption_example("\x0a\xff", "f: record 8"); }, {"f: record 8"});
}

TEST(CaptionPairs, ShuffleIsASeededPermutation) {
  const auto a = shuffled_caption_pairs({5, 0, 3}, 42);
  ASSERT_EQ(a.size(), 8u);
  std::set<std::pair<size_t, size_t>> seen(a.begin(), a.end());
  EXPECT_EQ(seen.size(), 8u);
  EXPECT_EQ(seen.count({1, 0}), 0u);
  EXPECT_EQ(seen.count({0, 4}), 1u);
  EXPECT_EQ(seen.count({2, 2}), 1u);
  EXPECT_EQ(shuffled_caption_pairs({5, 0, 3}, 42), a);
  EXPECT_NE(shuffled_caption_pairs({5, 0, 3}, 43), a);
}

Image solid(int h, int w, uint8_t r, uint8_t g, uint8_t b) {
  Image im;
  im.height = h;
  im.width = w;
  for (int i = 0; i < h * w; ++i) im.pixels.insert(im.pixels.end(), {r, g, b});
  return im;
}

TEST(CaptionPreprocess, EvalIsTheScaledCentralCrop) {
  // Left half black, right half white: the central crop of the resized image keeps the split in
  // the middle, scaled to [-1, 1].
  Image im = solid(40, 40, 0, 0, 0);
  for (int y = 0; y < 40; ++y)
    for (int x = 20; x < 40; ++x)
      for (int c = 0; c < 3; ++c) im.pixels[(y * 40 + x) * 3 + c] = 255;
  CaptionImageOptions o;
  o.image_size = 16;
  o.resize_size = 20;
  std::vector<float> out(3 * 16 * 16);
  std::mt19937_64 rng(1);
  preprocess_caption_image(encode_png(im), o, false, rng, out.data(), "x");
  EXPECT_FLOAT_EQ(out[0], -1.0f);  // top-left: black
  EXPECT_FLOAT_EQ(out[15], 1.0f);  // top-right: white
  EXPECT_FLOAT_EQ(out[2 * 256 + 5 * 16 + 2], -1.0f);
  EXPECT_FLOAT_EQ(out[2 * 256 + 5 * 16 + 13], 1.0f);
  // Deterministic and RNG-free.
  std::vector<float> again(out.size());
  std::mt19937_64 other(99);
  preprocess_caption_image(encode_png(im), o, false, other, again.data(), "x");
  EXPECT_EQ(out, again);
}

TEST(CaptionPreprocess, TrainingCropsFlipsAndDistortsWithinRange) {
  Image im = solid(32, 32, 200, 40, 40);
  for (int y = 0; y < 32; ++y)
    for (int x = 0; x < 8; ++x) im.pixels[(y * 32 + x) * 3 + 2] = 250;  // a left stripe
  CaptionImageOptions o;
  o.image_size = 16;
  o.resize_size = 20;
  const std::string png = encode_png(im);
  std::set<std::vector<float>> distinct;
  int flipped = 0;
  for (uint64_t seed = 0; seed < 16; ++seed) {
    std::vector<float> out(3 * 16 * 16);
    std::mt19937_64 rng(seed);
    preprocess_caption_image(png, o, true, rng, out.data(), "x");
    for (float v : out) ASSERT_TRUE(v >= -1.0f && v <= 1.0f) << v;
    // The stripe's blue sits on the left unless flipped.
    flipped += out[2 * 256 + 8 * 16 + 15] > out[2 * 256 + 8 * 16 + 0];
    distinct.insert(out);
  }
  EXPECT_EQ(distinct.size(), 16u);
  EXPECT_GT(flipped, 2);
  EXPECT_LT(flipped, 14);
}

TEST(CaptionPreprocess, ColourDistortionKeepsGreyGreyAndRedRed) {
  std::mt19937_64 rng(3);
  for (int order = 0; order < 2; ++order)
    for (int trial = 0; trial < 20; ++trial) {
      // Grey has no saturation to scale and no hue to shift; brightness and (per-channel mean)
      // contrast keep an all-grey image grey.
      std::vector<float> grey = {0.5f, 0.5f, 0.5f, 0.3f, 0.3f, 0.3f};
      distort_colors(grey.data(), 1, 2, order, rng);
      for (int p = 0; p < 2; ++p) {
        EXPECT_NEAR(grey[3 * p], grey[3 * p + 1], 1e-5);
        EXPECT_NEAR(grey[3 * p + 1], grey[3 * p + 2], 1e-5);
      }
      // A hue shift of at most 0.032 (11.5 degrees) leaves red the strongest channel.
      std::vector<float> red = {0.8f, 0.1f, 0.1f};
      distort_colors(red.data(), 1, 1, order, rng);
      EXPECT_GE(red[0], red[1]);
      EXPECT_GE(red[0], red[2]);
      for (float v : grey) EXPECT_TRUE(v >= 0.0f && v <= 1.0f);
      for (float v : red) EXPECT_TRUE(v >= 0.0f && v <= 1.0f);
    }
}

Scene two(int k0, int c0, Box b0, int k1, int c1, Box b1) {
  Scene s;
  s.objects.push_back({k0, c0, b0.ymin, b0.xmin, b0.ymax, b0.xmax});
  s.objects.push_back({k1, c1, b1.ymin, b1.xmin, b1.ymax, b1.xmax});
  return s;
}

TEST(ShapesCaptions, DescribeOneObjectOrTheRelationOfTwo) {
  Scene one;
  one.objects.push_back({0, 0, 0.1f, 0.1f, 0.4f, 0.4f});
  EXPECT_EQ(shapes_captions(one), (Words{"a red circle", "there is a red circle", "a single red circle",
                                         "a red circle on a grey background", "one red circle"}));
  // Second object lower: the first is above it, whatever the drawing order.
  const Box top{0.0f, 0.3f, 0.3f, 0.6f}, bottom{0.6f, 0.4f, 0.9f, 0.7f};
  const Words vertical = {"a blue square above a green triangle", "a green triangle below a blue square",
                          "a blue square and a green triangle", "there is a blue square above a green triangle",
                          "a blue square over a green triangle"};
  EXPECT_EQ(shapes_captions(two(1, 2, top, 2, 1, bottom)), vertical);
  EXPECT_EQ(shapes_captions(two(2, 1, bottom, 1, 2, top)), vertical);
  // Side by side: left first, but only flip-invariant words.
  const Box left{0.3f, 0.0f, 0.6f, 0.3f}, right{0.35f, 0.6f, 0.65f, 0.9f};
  const auto horizontal = shapes_captions(two(0, 0, right, 1, 1, left));
  EXPECT_EQ(horizontal[0], "a green square next to a red circle");
  for (const auto& c : horizontal) {
    EXPECT_EQ(c.find("left"), std::string::npos);
    EXPECT_EQ(c.find("right"), std::string::npos);
  }
  Scene three = two(0, 0, top, 1, 1, bottom);
  three.objects.push_back(three.objects[0]);
  EXPECT_THROW(shapes_captions(three), Error);
}

TEST(ShapesCaptions, DatasetHasFiveRecordsPerImageAndAVocabulary) {
  TempDir dir;
  ShapesOptions o;
  o.out_dir = dir.str();
  o.task = "captioning";
  o.num_train = 12;
  o.num_validation = 4;
  o.train_shards = 2;
  o.seed = 3;
  write_shapes_dataset(o);
  const auto vocab = Vocabulary::load(dir.file("word_counts.txt"));
  EXPECT_EQ(vocab.start_id(), 1);  // "a" is the most frequent word
  std::map<int64_t, int> per_image;
  std::vector<std::string> records;
  for (const auto& name : {"train-00000-of-00002", "train-00001-of-00002"})
    for (auto& r : read_records(dir.file(name))) records.push_back(r);
  ASSERT_EQ(records.size(), 60u);
  std::vector<int64_t> order;
  for (size_t i = 0; i < records.size(); ++i) {
    const auto e = parse_caption_example(records[i], "r");
    ++per_image[e.image_id];
    order.push_back(e.image_id);
    ASSERT_EQ(e.ids.size(), e.tokens.size());
    EXPECT_EQ(e.ids, vocab.ids(e.tokens));
    EXPECT_EQ(e.tokens.front(), "<S>");
    EXPECT_EQ(e.tokens.back(), "</S>");
    const auto size = image_size(e.encoded, "r");
    EXPECT_EQ(size.height, 64);
  }
  EXPECT_EQ(per_image.size(), 12u);
  for (const auto& [id, n] : per_image) {
    EXPECT_GE(id, 1);
    EXPECT_LE(id, 12);
    EXPECT_EQ(n, 5);
  }
  EXPECT_FALSE(std::is_sorted(order.begin(), order.end()));  // shuffled pairs
  EXPECT_EQ(read_records(dir.file("validation-00000-of-00001")).size(), 20u);
}

TEST(CocoCaptions, ConvertsCaptionsJsonWithItsOwnOrAGivenVocabulary) {
  TempDir dir;
  atomic_write_file(dir.file("a.jpg"), encode_jpeg(solid(8, 10, 1, 2, 3)));
  atomic_write_file(dir.file("b.png"), encode_png(solid(6, 6, 9, 9, 9)));
  atomic_write_file(dir.file("captions.json"), R"({"images": [{"id": 7, "file_name": "a.jpg"},
      {"id": 9, "file_name": "b.png"}, {"id": 11, "file_name": "none.jpg"}],
    "annotations": [{"id": 1, "image_id": 7, "caption": "A dog."}, {"id": 2, "image_id": 9, "caption": "a Cat"},
                    {"id": 3, "image_id": 7, "caption": "a dog runs"}]})");
  CocoCaptionOptions o;
  o.annotations = dir.file("captions.json");
  o.image_dir = dir.str();
  o.out_dir = dir.file("out");
  o.num_shards = 1;
  o.min_word_count = 2;
  const auto r = convert_coco_captions(o);
  EXPECT_EQ(r.images, 2);  // image 11 has no caption
  EXPECT_EQ(r.captions, 3);
  EXPECT_EQ(read_file(dir.file("out/word_counts.txt")), "<S> 3\na 3\n</S> 3\ndog 2\n");
  EXPECT_EQ(r.unknown_words, 3);  // ".", "cat", "runs"
  std::multiset<std::string> texts;
  for (const auto& rec : read_records(dir.file("out/train-00000-of-00001"))) {
    const auto e = parse_caption_example(rec, "r");
    std::string t = std::to_string(e.image_id) + ":";
    for (const auto& w : e.tokens) t += " " + w;
    texts.insert(t);
    EXPECT_EQ(e.encoded, read_file(dir.file(e.image_id == 7 ? "a.jpg" : "b.png")));
  }
  EXPECT_EQ(texts, (std::multiset<std::string>{"7: <S> a dog . </S>", "9: <S> a cat </S>", "7: <S> a dog runs </S>"}));

  o.vocab_file = dir.file("out/word_counts.txt");
  o.out_dir = dir.file("val");
  o.prefix = "validation";
  const auto v = convert_coco_captions(o);
  EXPECT_EQ(v.vocab_size, 5);
  EXPECT_FALSE(std::filesystem::exists(dir.file("val/word_counts.txt")));

  atomic_write_file(dir.file("instances.json"), R"({"images": [], "annotations": [{"id": 1, "image_id": 7}]})");
  o.annotations = dir.file("instances.json");
  expect_data_error([&] { convert_coco_captions(o); }, {"instances.json", "caption"});
}

}  // namespace
}  // namespace orchard::data
